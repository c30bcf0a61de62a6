//! `docs/configuration.md`, written from the clap definitions of `turnstile serve`, so that the
//! reference says what the binary does: a setting's flag, variable, file key, default and help
//! come from the same attribute its `--help` does. A unit test fails when the file in `docs/`
//! differs from what this writes (`TURNSTILE_BLESS=1` rewrites it).

use std::fmt::Write;

use clap::{Arg, Args, Command};

use super::{ServeArgs, ServeSettings};

const HEADER: &str = "\
# Configuration

Every setting of `turnstile serve`. This page is written from the command's own definitions
(`host/src/config/reference.rs`; a test fails when it is stale), so it says what `--help` says.

Each setting has three names, one rule for all: the flag `--some-flag`, the environment variable
`TURNSTILE_SOME_FLAG`, and the key `some-flag` in a `--config` TOML file. A repeatable flag takes
a comma-separated variable and an array in the file. Precedence: command line > environment >
config file > default; `turnstile serve --print-config` prints what applies, as a file. A config
file may also hold `[plugin.<name>]` tables, handed to that plugin at `init`
(`TURNSTILE_PLUGIN_<NAME>_<KEY>` wins over them; see [plugins.md](plugins.md)).

One more flag belongs to every command: `--log-format text|json` (`TURNSTILE_LOG_FORMAT`, key
`log-format`), how log lines on stderr are written; which lines, `RUST_LOG` (default `info`).
";

/// The whole page.
pub fn markdown() -> String {
    let command = ServeArgs::augment_args(Command::new("serve"));
    let file_keys: Vec<String> = ServeSettings::augment_args(Command::new("settings"))
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect();
    let mut page = HEADER.to_owned();
    for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
        let Some(long) = arg.get_long() else {
            continue;
        };
        // Writing to a String cannot fail.
        let _ = write!(page, "\n## `--{long}{}`\n\n", value_of(arg));
        let mut names = Vec::new();
        if let Some(env) = arg.get_env() {
            names.push(format!("`{}`", env.to_string_lossy()));
        }
        if file_keys.iter().any(|key| key == long) {
            names.push(format!("key `{long}`"));
        } else {
            names.push("not in a config file".to_owned());
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|value| format!("`{}`", value.to_string_lossy()))
            .collect();
        if !defaults.is_empty() {
            names.push(format!("default {}", defaults.join(", ")));
        }
        let _ = writeln!(page, "{}\n", names.join(" · "));
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let help = help.trim();
        // clap drops the full stop of a one-paragraph help; a reference page keeps it.
        let stop = if help.ends_with(['.', ')', ':']) {
            ""
        } else {
            "."
        };
        let _ = writeln!(page, "{help}{stop}");
    }
    page
}

/// ` VALUE` after a flag that takes one (`text|json` for a choice), nothing for a switch.
fn value_of(arg: &Arg) -> String {
    if !arg.get_action().takes_values() {
        return String::new();
    }
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| value.get_name().to_owned())
        .collect();
    // A switch that also takes `--flag=false` from the environment has `true`/`false` as its
    // values: it reads as a switch.
    if choices == ["true", "false"] {
        return String::new();
    }
    if !choices.is_empty() {
        return format!(" {}", choices.join("|"));
    }
    match arg.get_value_names() {
        Some(names) => format!(
            " {}",
            names
                .iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        None => format!(" {}", arg.get_id().as_str().to_uppercase()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn docs_configuration_md_is_what_the_flags_say() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
        let written = markdown();
        if std::env::var_os("TURNSTILE_BLESS").is_some() {
            std::fs::write(&path, &written).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == written,
            "docs/configuration.md is stale: run `TURNSTILE_BLESS=1 cargo test -p turnstile --lib \
             config::reference` and commit it"
        );
    }

    #[test]
    fn every_visible_flag_has_a_section_with_its_variable() {
        let page = markdown();
        for arg in ServeArgs::augment_args(Command::new("serve")).get_arguments() {
            if arg.is_hide_set() {
                continue;
            }
            let long = arg.get_long().unwrap();
            assert!(page.contains(&format!("## `--{long}")), "--{long}");
            if let Some(env) = arg.get_env() {
                assert!(page.contains(&*env.to_string_lossy()), "{env:?}");
            }
        }
        assert!(page.contains("key `plugins`"));
        assert!(page.contains("## `--config FILE`\n\n`TURNSTILE_CONFIG` · not in a config file"));
    }
}
