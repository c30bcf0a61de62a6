//! [`UpstreamFile`]: a `NAME.upstream.toml` file, read and checked.
//!
//! It owns the file's shape (the field names are fixed: other tools write these files) and the
//! checks that need nothing but the file: one transport, paths resolved from the file's own
//! folder, a binding's keys. Whether a binding names a tool the upstream has, and whether its
//! states fit the machine, are asked later (`bindings.rs`, the catalog). Every error names the
//! file, the key and the problem.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;
use serde_json::Value;

/// The suffix that makes a file in the plugin directory an upstream.
pub const SUFFIX: &str = ".upstream.toml";

/// A checked upstream file.
#[derive(Debug, Clone)]
pub struct UpstreamFile {
    /// The prefix of every tool it offers: `NAME.<upstream tool name>`.
    pub name: String,
    pub transport: Transport,
    pub sessions: Sessions,
    /// The machine (XState v5 JSON), read from the file `machine` names.
    pub machine: Value,
    /// What becomes of upstream tools no `[tools.NAME]` names.
    pub unlisted: Unlisted,
    pub tools: BTreeMap<String, ToolBinding>,
    /// `[prompts.NAME]`, by the upstream's prompt name.
    pub prompts: BTreeMap<String, PrimitiveBinding>,
    /// `[resources."URI or template"]`, by the upstream's URI or URI template.
    pub resources: BTreeMap<String, PrimitiveBinding>,
    /// How long a call sent upstream may wait for its answer (`call_timeout_s`, default 60).
    pub call_timeout: Duration,
}

/// How the upstream is reached.
#[derive(Debug, Clone)]
pub enum Transport {
    /// A process started with `program args…`, speaking MCP on its stdin and stdout.
    Stdio {
        program: PathBuf,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        /// The folder the process starts in: the file's own.
        dir: PathBuf,
    },
    /// A Streamable HTTP endpoint.
    Http {
        url: String,
        /// Sent as `Authorization: Bearer …`, read from `token_file` at load.
        token: Option<String>,
        headers: BTreeMap<String, String>,
    },
}

/// Whose upstream session a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    /// One upstream connection (stdio: one process) for every instance.
    Shared,
    /// One upstream session (stdio: one process) per instance.
    PerInstance {
        /// Closed after this long without calls (`idle_s`, default 300).
        idle: Duration,
        /// At most this many open at once (`max_sessions`, default 256).
        max: usize,
    },
}

/// `unlisted`: what becomes of an upstream tool no binding names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Unlisted {
    /// Offered, bound to no state (always listed, callable without an instance).
    #[default]
    Ungated,
    /// Never listed, never called.
    Hidden,
}

/// `[tools.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolBinding {
    /// Listed (2025 sessions) and callable only in these states; none: in every state.
    #[serde(default)]
    pub states: Vec<String>,
    /// Fired when the upstream answers without `isError`.
    pub fires: Option<String>,
    /// Fired when the upstream answers `isError`.
    pub on_error: Option<String>,
    /// Never listed, never called.
    #[serde(default)]
    pub hidden: bool,
    /// Replaces the upstream's description.
    pub description: Option<String>,
    /// Shown while the instance is in the machine's initial state.
    pub compact_description: Option<String>,
    /// A person confirms each call first, as in a library's binding.
    pub confirm: Option<turnstile_plugin_abi::manifest::ConfirmManifest>,
    /// The tool only reads (the `readOnlyHint` annotation).
    pub read_only: Option<bool>,
    /// Its calls run as MCP tasks on Turnstile's side (`"optional"` or `"required"`): the
    /// upstream gets a plain `tools/call`, and `notifications/cancelled` when the task is
    /// cancelled. (An upstream's own `execution.taskSupport` cannot be read: rmcp 3.11's client
    /// model has no field for it.)
    pub task: Option<turnstile_plugin_abi::TaskSupport>,
    /// Fired when such a task is cancelled by its client, as in a library's binding.
    pub on_cancel: Option<String>,
}

/// `[prompts.NAME]` or `[resources."URI or template"]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrimitiveBinding {
    /// Listed (2025 sessions) and readable only in these states; none: in every state.
    #[serde(default)]
    pub states: Vec<String>,
    /// Never listed, never read.
    #[serde(default)]
    pub hidden: bool,
}

/// The file as written (serde's view; [`UpstreamFile::parse`] checks the rest).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    command: Option<Vec<String>>,
    url: Option<String>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    session: SessionKind,
    idle_s: Option<u64>,
    max_sessions: Option<usize>,
    machine: PathBuf,
    #[serde(default)]
    unlisted: Unlisted,
    call_timeout_s: Option<u64>,
    #[serde(default)]
    tools: BTreeMap<String, ToolBinding>,
    #[serde(default)]
    prompts: BTreeMap<String, PrimitiveBinding>,
    #[serde(default)]
    resources: BTreeMap<String, PrimitiveBinding>,
}

#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum SessionKind {
    #[default]
    Shared,
    PerInstance,
}

impl UpstreamFile {
    /// Reads and checks the file at `path`, and gives its text with it (a reload compares it);
    /// the error is one line naming the file.
    pub fn read(path: &Path) -> Result<(UpstreamFile, String), String> {
        let text =
            std::fs::read_to_string(path).map_err(|err| format!("cannot read the file: {err}"))?;
        // Relative paths resolve from the folder of the real file, so a symlink in the plugin
        // directory to a file kept beside its server works.
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let dir = real.parent().unwrap_or(Path::new(".")).to_owned();
        let file = UpstreamFile::parse(&dir, &text)?;
        Ok((file, text))
    }

    /// Checks `text`, resolving relative paths from `dir`.
    pub fn parse(dir: &Path, text: &str) -> Result<UpstreamFile, String> {
        let raw: Raw = toml::from_str(text).map_err(|err| {
            // toml's message spans lines (the excerpt of the file); one line reads better in a log.
            err.to_string()
                .lines()
                .filter(|line| !line.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })?;
        let name = raw.name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!(
                "name: {:?} is not a name (no spaces, not empty)",
                raw.name
            ));
        }
        let transport = match (raw.command, raw.url) {
            (Some(_), Some(_)) => {
                return Err("command and url: give one, not both".into());
            }
            (None, None) => {
                return Err(
                    "command or url: one is needed (a stdio command or an HTTP URL)".into(),
                );
            }
            (Some(command), None) => {
                if raw.token_file.is_some() || !raw.headers.is_empty() {
                    return Err("token_file and headers are for an url upstream".into());
                }
                let Some((program, args)) = command.split_first() else {
                    return Err("command: empty (the program and its arguments)".into());
                };
                Transport::Stdio {
                    program: resolve_program(dir, program),
                    args: args.to_vec(),
                    env: raw.env,
                    dir: dir.to_owned(),
                }
            }
            (None, Some(url)) => {
                if !raw.env.is_empty() {
                    return Err("env: only for a command (stdio) upstream".into());
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("url: {url:?} is not an http:// or https:// URL"));
                }
                let token = match raw.token_file {
                    Some(file) => {
                        let file = dir.join(file);
                        let token = std::fs::read_to_string(&file).map_err(|err| {
                            format!("token_file: cannot read {}: {err}", file.display())
                        })?;
                        Some(token.trim().to_owned())
                    }
                    None => None,
                };
                Transport::Http {
                    url,
                    token,
                    headers: raw.headers,
                }
            }
        };
        let sessions = match raw.session {
            SessionKind::Shared => {
                if raw.idle_s.is_some() || raw.max_sessions.is_some() {
                    return Err("idle_s and max_sessions are for session = \"per-instance\"".into());
                }
                Sessions::Shared
            }
            SessionKind::PerInstance => Sessions::PerInstance {
                idle: Duration::from_secs(raw.idle_s.unwrap_or(300).max(1)),
                max: match raw.max_sessions.unwrap_or(256) {
                    0 => return Err("max_sessions: must be at least 1".into()),
                    max => max,
                },
            },
        };
        let machine_path = dir.join(&raw.machine);
        let machine_text = std::fs::read_to_string(&machine_path)
            .map_err(|err| format!("machine: cannot read {}: {err}", machine_path.display()))?;
        let machine: Value = serde_json::from_str(&machine_text)
            .map_err(|err| format!("machine: {} is not JSON: {err}", machine_path.display()))?;
        if !machine.get("id").is_some_and(Value::is_string) {
            return Err(format!(
                "machine: {} has no \"id\" (the workflow's name)",
                machine_path.display()
            ));
        }
        for (tool, binding) in &raw.tools {
            if binding.hidden
                && (!binding.states.is_empty()
                    || binding.fires.is_some()
                    || binding.on_error.is_some()
                    || binding.task.is_some()
                    || binding.on_cancel.is_some())
            {
                return Err(format!(
                    "tools.{tool}: a hidden tool is never called; states, fires, on_error, task \
                     and on_cancel make no sense with hidden = true"
                ));
            }
        }
        let call_timeout = match raw.call_timeout_s {
            Some(0) => return Err("call_timeout_s: must be at least 1".into()),
            Some(seconds) => Duration::from_secs(seconds),
            None => Duration::from_secs(60),
        };
        Ok(UpstreamFile {
            name: name.to_owned(),
            transport,
            sessions,
            machine,
            unlisted: raw.unlisted,
            tools: raw.tools,
            prompts: raw.prompts,
            resources: raw.resources,
            call_timeout,
        })
    }

    /// The machine's `id`, the workflow the bound tools belong to.
    pub fn workflow(&self) -> &str {
        self.machine
            .get("id")
            .and_then(Value::as_str)
            .expect("checked by parse")
    }
}

/// Whether `path` names an upstream file.
pub fn is_upstream_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(SUFFIX) && name.len() > SUFFIX.len())
}

/// A program named with a path (`server.py`'s interpreter in `.venv/bin/python`, `./server`)
/// resolves from the file's folder; a bare name (`python3`, `npx`) is looked up on `PATH`.
fn resolve_program(dir: &Path, program: &str) -> PathBuf {
    let path = Path::new(program);
    if path.is_relative() && path.components().count() > 1 {
        dir.join(path)
    } else {
        path.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<UpstreamFile, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.json"),
            r#"{"id":"desk","initial":"new","states":{"new":{}}}"#,
        )
        .unwrap();
        UpstreamFile::parse(dir.path(), text)
    }

    #[test]
    fn a_stdio_file_resolves_its_paths_from_its_folder() {
        let file = parse(
            r#"
            name = "desk"
            command = [".venv/bin/python", "server.py"]
            machine = "m.json"
            session = "per-instance"
            [tools.open]
            states = ["new"]
            fires = "OPEN"
            "#,
        )
        .unwrap();
        let Transport::Stdio { program, args, .. } = &file.transport else {
            panic!("stdio expected");
        };
        assert!(program.ends_with(".venv/bin/python") && program.is_absolute());
        assert_eq!(args, &["server.py"]);
        assert_eq!(file.workflow(), "desk");
        assert!(matches!(
            file.sessions,
            Sessions::PerInstance { max: 256, .. }
        ));
        assert_eq!(file.tools["open"].fires.as_deref(), Some("OPEN"));
    }

    #[test]
    fn each_mistake_names_its_key() {
        let cases = [
            ("name = \"d\"\nmachine = \"m.json\"", "command or url"),
            (
                "name = \"d\"\ncommand = [\"x\"]\nurl = \"http://h\"\nmachine = \"m.json\"",
                "command and url",
            ),
            (
                "name = \"d\"\ncommand = [\"x\"]\nmachine = \"m.json\"\nsession = \"each\"",
                "session",
            ),
            (
                "name = \"d\"\ncommand = [\"x\"]\nmachine = \"nope.json\"",
                "machine: cannot read",
            ),
            (
                "name = \"d\"\ncommand = [\"x\"]\nmachine = \"m.json\"\n[tools.a]\nstate = [\"new\"]",
                "state",
            ),
            (
                "name = \"d\"\ncommand = [\"x\"]\nmachine = \"m.json\"\n[tools.a]\nhidden = true\nfires = \"X\"",
                "tools.a",
            ),
            (
                "name = \"d\"\nurl = \"ftp://h\"\nmachine = \"m.json\"",
                "url:",
            ),
            (
                "name = \"d\"\ncommand = [\"x\"]\nmachine = \"m.json\"\nidle_s = 5",
                "idle_s",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_suffix_makes_an_upstream() {
        assert!(is_upstream_name(Path::new("/p/tickets.upstream.toml")));
        assert!(!is_upstream_name(Path::new("/p/.upstream.toml")));
        assert!(!is_upstream_name(Path::new("/p/tickets.toml")));
    }
}
