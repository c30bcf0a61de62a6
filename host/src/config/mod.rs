//! `turnstile serve`'s configuration in one place: every setting from the command line, the
//! `TURNSTILE_*` environment, a TOML file (`--config FILE`) or its default, in that order of
//! precedence; and `--print-config`, the effective settings as a TOML file.
//!
//! Naming, one rule for every setting: the flag `--some-flag`, the variable
//! `TURNSTILE_SOME_FLAG` and the key `some-flag` (a repeatable flag takes a comma-separated
//! variable and an array in the file). The file may also hold `[plugin.<name>]` tables, handed
//! to plugins at `init` (see `plugin::config`; `TURNSTILE_PLUGIN_<NAME>_<KEY>` wins over them).
//!
//! It must not start anything: it turns arguments into [`crate::commands::serve::ServeOptions`].
//!
//! # Layout
//!
//! - [`ServeSettings`] (`settings.rs`): the settings, their flags, variables and keys, and what
//!   they mean for the server.
//! - `file.rs`: reading and checking the file.
//! - [`Resolved`] (`layers.rs`): the layers merged, with where each value came from.
//! - `print.rs`: `--print-config`.
//! - `reference.rs`: `docs/configuration.md`, written from the flags.

mod file;
mod layers;
mod print;
pub mod reference;
mod settings;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use clap::{ArgMatches, Args};

pub use self::{
    layers::{Origin, Resolved},
    settings::ServeSettings,
};
use crate::logs::LogFormat;

/// `turnstile serve`'s arguments: its settings, and where else to find them.
#[derive(Args, Debug, Clone)]
#[command(after_help = "\
Every flag can also be set in the environment (`--some-flag` is TURNSTILE_SOME_FLAG; a repeatable \
flag takes a comma-separated list) or in a --config file (key `some-flag`; a repeatable flag \
takes an array). Precedence: command line > environment > config file > default. \
--print-config shows what applies.")]
pub struct ServeArgs {
    /// Read settings from this TOML file (keys named like the flags, plus `[plugin.<name>]`
    /// tables for plugins); the command line and the environment override it.
    #[arg(long, env = "TURNSTILE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings as TOML, usable as a --config file (secrets shown as
    /// `***`), and exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(flatten)]
    pub settings: ServeSettings,
}

impl ServeArgs {
    /// Merges the layers: `matches` are `serve`'s (they say whether a value came from the
    /// command line, the environment or clap's default), `log_format` the global flag's value.
    pub fn resolve(
        self,
        matches: &ArgMatches,
        log_format: LogFormat,
    ) -> Result<Resolved, ConfigError> {
        let mut settings = self.settings;
        settings.log_format = log_format;
        let file = self
            .config
            .map(|path| file::ConfigFile::read(&path))
            .transpose()?;
        Resolved::merge(settings, matches, file)
    }
}

/// Why `serve` cannot start with these settings. Each names the file, key or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, a wrong type (the message has the line and column).
    #[error("config file {}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// The settings, merged, do not go together (a conflict, a missing setting); the message
    /// says where each value came from.
    #[error("{0}")]
    Settings(String),
    /// A value the TOML form cannot hold (a path that is not UTF-8, say).
    #[error("cannot combine the settings with the config file: {0}")]
    NotToml(String),
}
