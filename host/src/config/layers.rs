//! [`Resolved`]: the layers merged, command line > environment > config file > default.
//!
//! clap gives the first, second and last (with `ArgMatches::value_source` saying which one each
//! value came from); a file's value replaces a value only clap's default gave. The merge goes
//! through the TOML form of [`ServeSettings`], key by key, so it needs no list of fields.

use std::{collections::BTreeMap, fmt, iter, path::PathBuf};

use clap::{ArgMatches, Args, parser::ValueSource};

use super::{ConfigError, ServeSettings, file::ConfigFile, settings::Problem};
use crate::{
    commands::serve::ServeOptions,
    logs::{LogFormat, OtlpOptions},
    plugin::PluginConfigs,
};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    CommandLine,
    /// This variable.
    Environment(String),
    /// This config file.
    File(PathBuf),
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::CommandLine => write!(f, "command line"),
            Origin::Environment(variable) => write!(f, "environment, {variable}"),
            Origin::File(path) => write!(f, "config file {}", path.display()),
            Origin::Default => write!(f, "default"),
        }
    }
}

/// One setting's names: its key (the long flag), clap's id, its variable.
pub(super) struct Key {
    pub name: String,
    pub id: String,
    pub env: Option<String>,
}

/// Every setting's names, in the order of `--help`, then `log-format` (a global flag).
pub(super) fn keys() -> Vec<Key> {
    let command = ServeSettings::augment_args(clap::Command::new("serve"));
    let keys: Vec<Key> = command
        .get_arguments()
        .map(|arg| Key {
            // Every setting is a long flag: `tests.rs` checks it.
            name: arg.get_long().unwrap_or_default().to_owned(),
            id: arg.get_id().to_string(),
            env: arg.get_env().map(|env| env.to_string_lossy().into_owned()),
        })
        .collect();
    keys.into_iter()
        .chain(iter::once(Key {
            name: "log-format".into(),
            id: "log_format".into(),
            env: Some("TURNSTILE_LOG_FORMAT".into()),
        }))
        .collect()
}

/// The settings `serve` runs with, and where each came from.
#[derive(Debug)]
pub struct Resolved {
    pub settings: ServeSettings,
    /// The config file's plugin tables.
    pub plugins: PluginConfigs,
    /// The config file, if any.
    pub file: Option<PathBuf>,
    origins: BTreeMap<String, Origin>,
}

impl Resolved {
    /// `settings` as clap parsed them (`matches`), with `file` under the command line and the
    /// environment; checked.
    pub(super) fn merge(
        mut settings: ServeSettings,
        matches: &ArgMatches,
        file: Option<ConfigFile>,
    ) -> Result<Resolved, ConfigError> {
        let keys = keys();
        let origins: BTreeMap<String, Origin> = keys
            .iter()
            .map(|key| {
                // `log_format` is the global flag's: a command without it has no such id.
                let defined = matches.ids().any(|id| id.as_str() == key.id);
                let origin = match defined.then(|| matches.value_source(&key.id)).flatten() {
                    Some(ValueSource::CommandLine) => Origin::CommandLine,
                    Some(ValueSource::EnvVariable) => {
                        Origin::Environment(key.env.clone().unwrap_or_default())
                    }
                    _ => match &file {
                        Some(file) if file.keys.contains(&key.name) => {
                            Origin::File(file.path.clone())
                        }
                        _ => Origin::Default,
                    },
                };
                (key.name.clone(), origin)
            })
            .collect();
        let mut plugins = PluginConfigs::default();
        let path = file.as_ref().map(|file| file.path.clone());
        if let Some(file) = file {
            let not_toml = |e: &dyn fmt::Display| ConfigError::NotToml(e.to_string());
            let mut merged = toml::Table::try_from(&settings).map_err(|e| not_toml(&e))?;
            let from_file = toml::Table::try_from(&file.settings).map_err(|e| not_toml(&e))?;
            for (key, origin) in &origins {
                if let (Origin::File(_), Some(value)) = (origin, from_file.get(key)) {
                    merged.insert(key.clone(), value.clone());
                }
            }
            settings = merged.try_into().map_err(|e| not_toml(&e))?;
            plugins = file.plugins;
        }
        let resolved = Resolved {
            settings,
            plugins,
            file: path,
            origins,
        };
        resolved
            .settings
            .check()
            .map_err(|problem| ConfigError::Settings(resolved.describe(&problem)))?;
        Ok(resolved)
    }

    /// Where the setting `key` came from.
    pub fn origin(&self, key: &str) -> &Origin {
        self.origins.get(key).unwrap_or(&Origin::Default)
    }

    pub fn log_format(&self) -> LogFormat {
        self.settings.log_format
    }

    /// Where traces go, if anywhere (`--otlp-endpoint`).
    pub fn otlp(&self) -> Option<OtlpOptions> {
        self.settings
            .otlp_endpoint
            .as_ref()
            .map(|endpoint| OtlpOptions {
                endpoint: endpoint.clone(),
                sample_ratio: self.settings.otlp_sample_ratio,
            })
    }

    /// What the server runs with.
    pub fn into_options(self) -> ServeOptions {
        self.settings.into_options(self.plugins)
    }

    /// `problem`, naming where each value involved came from.
    fn describe(&self, problem: &Problem) -> String {
        let from = |key: &str| format!("`{key}` ({})", self.origin(key));
        match problem {
            Problem::Missing(key) => format!(
                "no `{key}` given: pass --{key}, set TURNSTILE_{}, or put `{key} = …` in a \
                 --config file",
                key.to_uppercase().replace('-', "_")
            ),
            Problem::Conflict(a, b) => {
                format!("{} and {} cannot be used together", from(a), from(b))
            }
            Problem::Needs(a, b) => format!("{} needs `{b}` too", from(a)),
            Problem::Empty(key) => format!("{} is empty: give it a value", from(key)),
            Problem::OutOfRange(key, range) => format!("{} must be {range}", from(key)),
        }
    }
}
