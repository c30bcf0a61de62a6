//! `turnstile new-upstream NAME -- COMMAND…` (or `--url URL`): a first gate for an MCP server
//! that exists already. It connects to the server, lists its tools, and writes
//! `NAME.upstream.toml` and `NAME.machine.json`: a machine of one state that offers every tool,
//! each tool bound to it with its own `[tools.…]` table, for the user to split into the real
//! steps. Nothing is overwritten: both files must not exist.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::plugin::{UpstreamTransport, list_upstream_tools};

/// Writes the gate for the upstream `name` into `dir` (default: the current directory).
/// `command` is the stdio server's command line, `url` the Streamable HTTP endpoint; one of them.
pub fn run(
    name: &str,
    dir: Option<&Path>,
    command: &[String],
    url: Option<&str>,
) -> anyhow::Result<ExitCode> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!(
            "{name:?}: a name is letters, digits and `_` (it starts every tool's name: {name}.TOOL)"
        );
    }
    let dir = dir.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let file = dir.join(format!("{name}.upstream.toml"));
    let machine = dir.join(format!("{name}.machine.json"));
    for path in [&file, &machine] {
        if path.exists() {
            bail!("{} exists already: nothing was written", path.display());
        }
    }
    let (transport, how) = match (command.split_first(), url) {
        (Some(_), Some(_)) => bail!("give a command (after --) or --url, not both"),
        (None, None) => bail!("give the server's command after --, or its --url"),
        (Some((program, args)), None) => {
            // The file's paths resolve from its own folder: a path that names a file from here
            // is written out whole, so the server starts wherever the file is put.
            let program = absolute_if_file(program);
            let args: Vec<String> = args.iter().map(|arg| absolute_if_file(arg)).collect();
            let line = std::iter::once(&program)
                .chain(&args)
                .map(|part| toml_string(part))
                .collect::<Vec<_>>()
                .join(", ");
            let transport = UpstreamTransport::Stdio {
                program: PathBuf::from(&program),
                args,
                env: BTreeMap::new(),
                dir: std::env::current_dir().context("the current directory")?,
            };
            (transport, format!("command = [{line}]"))
        }
        (None, Some(url)) => (
            UpstreamTransport::Http {
                url: url.to_owned(),
                token: None,
                headers: BTreeMap::new(),
            },
            format!("url = {}", toml_string(url)),
        ),
    };
    let (version, tools) = list_upstream_tools(name, &transport)
        .map_err(|reason| anyhow::anyhow!("cannot list the server's tools: {reason}"))?;
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|tool| tool.get("name").and_then(Value::as_str))
        .collect();
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    fs::write(&machine, machine_json(name))
        .with_context(|| format!("cannot write {}", machine.display()))?;
    fs::write(&file, upstream_toml(name, &how, &version, &names))
        .with_context(|| format!("cannot write {}", file.display()))?;
    println!(
        "wrote {} and {}: {} tools, all offered in the one state `ready`.\n\
         Next: split `ready` into the real steps in {}, bind each tool's states (and the event \
         it fires) in its [tools.…] table, then `turnstile check --plugins {}` and \
         `turnstile serve --plugins {}`.",
        file.display(),
        machine.display(),
        names.len(),
        machine.display(),
        dir.display(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The machine of one state, `ready`.
fn machine_json(name: &str) -> String {
    let machine = json!({
        "id": name,
        "initial": "ready",
        "states": {"ready": {}},
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&machine).expect("a JSON value")
    )
}

/// The upstream file: the transport line `how`, and one table per tool.
fn upstream_toml(name: &str, how: &str, version: &str, tools: &[&str]) -> String {
    let mut text = format!(
        "# The MCP server {name} (version {version}), gated by Turnstile: its tools are offered \
         as {name}.TOOL,\n# each only in the states its table names. Written by `turnstile \
         new-upstream`; split the machine\n# ({name}.machine.json) into the real steps and bind \
         each tool below.\n\nname = {}\n{how}\nsession = \"shared\"            # or \
         \"per-instance\": one upstream session per instance\nmachine = {}\nunlisted = \
         \"ungated\"          # tools the server adds later: offered in every state (\"hidden\": \
         not at all)\n",
        toml_string(name),
        toml_string(&format!("{name}.machine.json")),
    );
    for tool in tools {
        text.push_str(&format!(
            "\n[tools.{}]\nstates = [\"ready\"]\n# fires = \"EVENT\"               # the event a \
             successful call fires\n",
            toml_key(tool)
        ));
    }
    text
}

/// `part` made absolute when it names a file that exists from the current directory.
fn absolute_if_file(part: &str) -> String {
    let path = Path::new(part);
    if path.is_relative()
        && path.is_file()
        && let Ok(absolute) = fs::canonicalize(path)
    {
        return absolute.display().to_string();
    }
    part.to_owned()
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// `key` as a TOML key: bare when it may be.
fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_files_read_back_as_an_upstream_of_one_state() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("desk.machine.json"), machine_json("desk")).unwrap();
        let text = upstream_toml(
            "desk",
            "command = [\"python3\", \"s.py\"]",
            "1.0",
            &["open", "odd.name"],
        );
        let table: toml::Table = text.parse().unwrap();
        assert_eq!(table["name"].as_str(), Some("desk"));
        assert_eq!(
            table["tools"]["odd.name"]["states"][0].as_str(),
            Some("ready")
        );
        let machine: Value = serde_json::from_str(
            &fs::read_to_string(dir.path().join("desk.machine.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(machine["initial"], "ready");
    }
}
