//! A plugin's configuration (ABI 1.1), handed to its `init`.
//!
//! It comes from the environment: `TURNSTILE_PLUGIN_<NAME>_<KEY>=value` gives the plugin named
//! `<NAME>` the string `value` under the key `<key>` (lower-cased). `<NAME>` is the plugin's short
//! name from its file, upper-cased with `-` as `_`: `libturnstile_plugin_payment.so` is `PAYMENT`,
//! `libacme_crm.so` is `ACME_CRM` (the file name is what an operator sees before the plugin is
//! loaded; its manifest is read only after `init`). Values may be secrets: nothing here logs them.

use std::path::Path;

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
    stem.replace('-', "_").to_uppercase()
}

/// The configuration `vars` give the plugin in `path`, as a JSON object; `None` when no
/// variable names it.
pub fn from_vars(path: &Path, vars: impl IntoIterator<Item = (String, String)>) -> Option<Value> {
    let prefix = format!("{PREFIX}{}_", short_name(path));
    let config: Map<String, Value> = vars
        .into_iter()
        .filter_map(|(name, value)| {
            let key = name.strip_prefix(&prefix)?;
            (!key.is_empty()).then(|| (key.to_lowercase(), Value::String(value)))
        })
        .collect();
    (!config.is_empty()).then_some(Value::Object(config))
}

/// [`from_vars`] with this process's environment.
pub fn from_env(path: &Path) -> Option<Value> {
    from_vars(path, std::env::vars())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_file_and_keys_from_the_variables() {
        assert_eq!(
            short_name(Path::new("/p/libturnstile_plugin_payment.so")),
            "PAYMENT"
        );
        assert_eq!(short_name(Path::new("libacme-crm.so")), "ACME_CRM");
        let vars = [
            ("TURNSTILE_PLUGIN_PAYMENT_API_KEY", "s3cret"),
            ("TURNSTILE_PLUGIN_PAYMENT_CURRENCY", "EUR"),
            ("TURNSTILE_PLUGIN_PAYMENTS_OTHER", "no"),
            ("TURNSTILE_PLUGIN_INVOICE_X", "no"),
            ("TURNSTILE_PLUGIN_PAYMENT_", "no"),
        ]
        .map(|(name, value)| (name.to_string(), value.to_string()));
        let config = from_vars(Path::new("libturnstile_plugin_payment.so"), vars.clone());
        assert_eq!(
            config,
            Some(serde_json::json!({"api_key": "s3cret", "currency": "EUR"}))
        );
        assert_eq!(from_vars(Path::new("libother.so"), vars), None);
    }
}
