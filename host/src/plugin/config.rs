//! A plugin's configuration (ABI 1.1), handed to its `init`.
//!
//! Two sources, merged key by key, the environment winning:
//!
//! - the server's config file: its `[plugin.<name>]` table ([`PluginConfigs`], read by
//!   `crate::config`; values keep their JSON type);
//! - the environment: `TURNSTILE_PLUGIN_<NAME>_<KEY>=value` gives the plugin named `<NAME>` the
//!   string `value` under the key `<key>` (lower-cased).
//!
//! `<NAME>` is the plugin's short name from its file, upper-cased with `-` as `_`:
//! `libturnstile_plugin_payment.so` is `PAYMENT`, `libacme_crm.so` is `ACME_CRM` (the file name
//! is what an operator sees before the plugin is loaded; its manifest is read only after `init`).
//! A file's table name is compared the same way, so `[plugin.acme-crm]` is `ACME_CRM` too.
//! Values may be secrets: nothing here logs them, and `Debug` shows keys only.

use std::{collections::BTreeMap, fmt, path::Path};

use serde_json::{Map, Value};

/// The prefix of every plugin configuration variable.
const PREFIX: &str = "TURNSTILE_PLUGIN_";

/// The short name of the plugin in `path`, as its variables spell it.
pub fn short_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = stem.strip_prefix("lib").unwrap_or(&stem);
    let stem = stem.strip_prefix("turnstile_plugin_").unwrap_or(stem);
    normalize(stem)
}

/// A plugin name as written (a file stem, a table name) in the form variables use.
fn normalize(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// The variables among `vars` that configure the plugin short-named `name`: `(key, variable,
/// value)`, the key lower-cased.
pub fn variables(
    name: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String, String)> {
    let prefix = format!("{PREFIX}{name}_");
    vars.into_iter()
        .filter_map(|(variable, value)| {
            let key = variable.strip_prefix(&prefix)?.to_lowercase();
            (!key.is_empty()).then_some((key, variable, value))
        })
        .collect()
}

/// The configuration `vars` give the plugin in `path`, as a JSON object; `None` when no
/// variable names it.
pub fn from_vars(path: &Path, vars: impl IntoIterator<Item = (String, String)>) -> Option<Value> {
    PluginConfigs::default().merged(&short_name(path), vars)
}

/// [`from_vars`] with this process's environment.
pub fn from_env(path: &Path) -> Option<Value> {
    from_vars(path, std::env::vars())
}

/// The configuration tables a config file gives plugins, by short name; the environment's
/// variables join them when a plugin is loaded ([`PluginConfigs::for_plugin`]). Read once at
/// start: a plugin loaded later (hot plugins) gets the same tables.
#[derive(Clone, Default, PartialEq)]
pub struct PluginConfigs {
    tables: BTreeMap<String, Map<String, Value>>,
}

/// Two tables of one config file name the same plugin (`[plugin.acme-crm]` and
/// `[plugin.acme_crm]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tables `plugin.{first}` and `plugin.{second}` configure the same plugin")]
pub struct SameName {
    pub first: String,
    pub second: String,
}

impl PluginConfigs {
    /// The tables named as written in the file.
    pub fn new(
        tables: impl IntoIterator<Item = (String, Map<String, Value>)>,
    ) -> Result<PluginConfigs, SameName> {
        let mut written: BTreeMap<String, String> = BTreeMap::new();
        let mut by_name = BTreeMap::new();
        for (name, table) in tables {
            let short = normalize(&name);
            if let Some(first) = written.insert(short.clone(), name.clone()) {
                return Err(SameName {
                    first,
                    second: name,
                });
            }
            by_name.insert(short, table);
        }
        Ok(PluginConfigs { tables: by_name })
    }

    /// The short names the file configures.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(String::as_str)
    }

    /// The file's table for the plugin short-named `name`.
    pub fn table(&self, name: &str) -> Option<&Map<String, Value>> {
        self.tables.get(name)
    }

    /// The configuration of the plugin in `path`: its table, with this process's environment
    /// over it; `None` when neither names it.
    pub fn for_plugin(&self, path: &Path) -> Option<Value> {
        self.merged(&short_name(path), std::env::vars())
    }

    /// The table of the plugin short-named `name` with `vars` over it.
    fn merged(
        &self,
        name: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Option<Value> {
        let mut config = self.tables.get(name).cloned().unwrap_or_default();
        for (key, _, value) in variables(name, vars) {
            config.insert(key, Value::String(value));
        }
        (!config.is_empty()).then_some(Value::Object(config))
    }
}

/// Keys only: the values may be secrets.
impl fmt::Debug for PluginConfigs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.tables
                    .iter()
                    .map(|(name, table)| (name, table.keys().collect::<Vec<_>>())),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn names_come_from_the_file_and_keys_from_the_variables() {
        assert_eq!(
            short_name(Path::new("/p/libturnstile_plugin_payment.so")),
            "PAYMENT"
        );
        assert_eq!(short_name(Path::new("libacme-crm.so")), "ACME_CRM");
        let vars = vars(&[
            ("TURNSTILE_PLUGIN_PAYMENT_API_KEY", "s3cret"),
            ("TURNSTILE_PLUGIN_PAYMENT_CURRENCY", "EUR"),
            ("TURNSTILE_PLUGIN_PAYMENTS_OTHER", "no"),
            ("TURNSTILE_PLUGIN_INVOICE_X", "no"),
            ("TURNSTILE_PLUGIN_PAYMENT_", "no"),
        ]);
        let config = from_vars(Path::new("libturnstile_plugin_payment.so"), vars.clone());
        assert_eq!(
            config,
            Some(json!({"api_key": "s3cret", "currency": "EUR"}))
        );
        assert_eq!(from_vars(Path::new("libother.so"), vars), None);
    }

    #[test]
    fn the_environment_overrides_the_file_key_by_key() {
        let table = |value: Value| value.as_object().unwrap().clone();
        let configs = PluginConfigs::new([
            (
                "acme-crm".to_string(),
                table(json!({"api_key": "from-file", "retries": 3, "region": "eu"})),
            ),
            ("invoice".to_string(), table(json!({"x": true}))),
        ])
        .unwrap();
        let vars = vars(&[("TURNSTILE_PLUGIN_ACME_CRM_API_KEY", "from-env")]);
        assert_eq!(
            configs.merged(&short_name(Path::new("libacme-crm.so")), vars.clone()),
            Some(json!({"api_key": "from-env", "retries": 3, "region": "eu"}))
        );
        assert_eq!(
            configs.merged("INVOICE", vars.clone()),
            Some(json!({"x": true}))
        );
        assert_eq!(configs.merged("PAYMENT", vars), None);
        assert!(
            !format!("{configs:?}").contains("from-file"),
            "Debug shows keys only: {configs:?}"
        );
    }

    #[test]
    fn two_tables_for_one_plugin_are_refused() {
        let error = PluginConfigs::new([
            ("acme-crm".to_string(), Map::new()),
            ("acme_crm".to_string(), Map::new()),
        ])
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the tables `plugin.acme-crm` and `plugin.acme_crm` configure the same plugin"
        );
    }
}
