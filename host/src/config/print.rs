//! `turnstile serve --print-config`: the effective settings as a TOML file, one key per line
//! with where its value came from, secrets redacted.
//!
//! Redacted: passwords in URLs (`store::redact`: the store, the OAuth URLs, the public URL),
//! and every value of a plugin's configuration (the host cannot tell which are secrets). The
//! auth token file is a path, printed as one; its contents are never read here.

use std::{collections::BTreeMap, fmt::Write};

use super::{ConfigError, Origin, Resolved, layers::keys};
use crate::{
    plugin::{self, config::short_name},
    store::redact,
};

/// What a redacted value prints as.
const REDACTED: &str = "***";

const HEADER: &str = "\
# The settings `turnstile serve` runs with (command line > environment > config file > default),
# a comment naming the source of each value not at its default. Usable as a --config file;
# secrets are shown as ***.
";

impl Resolved {
    /// The settings as a TOML file (see the module docs).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        let not_toml = |e: &dyn std::fmt::Display| ConfigError::NotToml(e.to_string());
        let mut shown = self.settings.clone();
        for url in [
            &mut shown.store,
            &mut shown.oauth_issuer,
            &mut shown.oauth_jwks,
            &mut shown.public_url,
        ] {
            *url = url.as_deref().map(redact);
        }
        let values = toml::Table::try_from(&shown).map_err(|e| not_toml(&e))?;
        let mut out = HEADER.to_owned();
        for key in keys() {
            match values.get(&key.name) {
                Some(value) => {
                    out.push_str(&line(&key.name, value.clone(), self.origin(&key.name))?);
                }
                None => {
                    // Writing to a String cannot fail.
                    let _ = writeln!(out, "# {}: not set", key.name);
                }
            }
        }
        for (name, entries) in self.plugin_tables() {
            let name = name.to_lowercase();
            let header = if is_bare_key(&name) {
                name
            } else {
                toml::Value::String(name).to_string()
            };
            let _ = write!(out, "\n[plugin.{header}]\n");
            for (key, origin) in entries {
                out.push_str(&line(&key, toml::Value::String(REDACTED.into()), &origin)?);
            }
        }
        Ok(out)
    }

    /// The keys of each plugin's configuration, by short name, and where each comes from:
    /// the config file's tables, and the variables of the libraries in the plugin directory
    /// (a variable wins, as when the plugin is loaded).
    fn plugin_tables(&self) -> BTreeMap<String, BTreeMap<String, Origin>> {
        let mut tables: BTreeMap<String, BTreeMap<String, Origin>> = BTreeMap::new();
        let file = self.file.clone().unwrap_or_default();
        for name in self.plugins.names() {
            let keys = self.plugins.table(name).into_iter().flat_map(|t| t.keys());
            tables
                .entry(name.to_owned())
                .or_default()
                .extend(keys.map(|key| (key.clone(), Origin::File(file.clone()))));
        }
        let libraries = self
            .settings
            .plugins
            .as_deref()
            .map(|dir| plugin::library_files(dir).0)
            .unwrap_or_default();
        for library in libraries {
            let name = short_name(&library);
            for (key, variable, _) in plugin::config::variables(&name, std::env::vars()) {
                tables
                    .entry(name.clone())
                    .or_default()
                    .insert(key, Origin::Environment(variable));
            }
        }
        tables
    }
}

/// `key = value`, with `origin` as a comment unless it is the default.
fn line(key: &str, value: toml::Value, origin: &Origin) -> Result<String, ConfigError> {
    let mut one = toml::Table::new();
    one.insert(key.to_owned(), value);
    let text = toml::to_string(&one).map_err(|e| ConfigError::NotToml(e.to_string()))?;
    let text = text.trim_end();
    Ok(match origin {
        Origin::Default => format!("{text}\n"),
        origin => format!("{text}  # {origin}\n"),
    })
}

/// Whether `name` may stand unquoted as a TOML key.
fn is_bare_key(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
