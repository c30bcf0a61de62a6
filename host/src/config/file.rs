//! Reading `--config FILE`: TOML whose keys are [`ServeSettings`]' (checked by serde, so an
//! unknown key or a wrong type is refused with its line), and `[plugin.<name>]` tables.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use super::{ConfigError, ServeSettings};
use crate::plugin::PluginConfigs;

/// A config file, read and checked.
pub struct ConfigFile {
    pub path: PathBuf,
    /// The setting keys the file names (not `plugin`): only these override a default.
    pub keys: BTreeSet<String>,
    /// The file's settings; those it does not name hold fillers (see [`ServeSettings`]).
    pub settings: ServeSettings,
    /// Its `[plugin.<name>]` tables.
    pub plugins: PluginConfigs,
}

impl ConfigFile {
    pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ConfigFile::parse(path, &text)
    }

    /// Checks `text`, read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message: message.trim_end().to_owned(),
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| invalid(e.to_string()))?;
        // `plugins` is the directory (`--plugins`); the tables are `plugin.<name>`, like the
        // variables `TURNSTILE_PLUGIN_<NAME>_*`. Said here, as serde would only say "expected
        // a path".
        if let Some(toml::Value::Table(tables)) = table.get("plugins") {
            let name = tables.keys().next().map_or("<name>", String::as_str);
            return Err(invalid(format!(
                "`plugins` is the plugin directory (a string, like --plugins); a plugin's \
                 configuration goes in a `[plugin.{name}]` table"
            )));
        }
        let settings: ServeSettings =
            toml::from_str(text).map_err(|e: toml::de::Error| invalid(e.to_string()))?;
        let plugins = PluginConfigs::new(
            settings
                .plugin
                .0
                .iter()
                .map(|(name, table)| (name.clone(), json_object(table))),
        )
        .map_err(|e| invalid(e.to_string()))?;
        Ok(ConfigFile {
            path: path.to_owned(),
            keys: table
                .keys()
                .filter(|key| *key != "plugin")
                .cloned()
                .collect(),
            settings,
            plugins,
        })
    }
}

/// A TOML table as the JSON object a plugin's `init` reads (dates and times become strings).
fn json_object(table: &toml::Table) -> Map<String, Value> {
    table
        .iter()
        .map(|(key, value)| (key.clone(), json(value)))
        .collect()
}

fn json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(text) => Value::String(text.clone()),
        toml::Value::Integer(n) => Value::from(*n),
        // JSON has no NaN or infinity: those become null.
        toml::Value::Float(x) => {
            serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(when) => Value::String(when.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        toml::Value::Table(table) => Value::Object(json_object(table)),
    }
}
