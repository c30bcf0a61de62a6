//! Upstreams: MCP servers of other languages made plugins by a `NAME.upstream.toml` file. The
//! example ticket desk (`plugins/tickets/`, Python SDK) and its TypeScript twin
//! (`tests/upstream/ts/`), as the tests run them:
//!
//! - [`UpstreamToml`]: the example's own upstream file, parsed, pointed at the desk as a test
//!   runs it (the Python of the `mcp1` virtual environment, a call log), and adjusted per test;
//! - [`UpstreamDir`]: a private plugin directory the files are written into (and replaced in,
//!   and removed from, as a deploy does);
//! - [`CallLog`]: the desk's own record of the calls it received (`TICKETS_CALL_LOG`): what
//!   reached the upstream, whatever Turnstile says;
//! - [`HttpDesk`]: the desk served over Streamable HTTP by a child process, Python or
//!   TypeScript, killed on drop;
//! - [`kill9`]: SIGKILL to an upstream process, by the pid its results carry.
//!
//! The TypeScript desk needs `npm ci` in `tests/upstream/ts` (its `node_modules` is not in git):
//! the first test to need it runs it, once per machine (serialized across test processes by a
//! file lock), and a failure fails the test with npm's own output. Nothing here skips.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock, mpsc},
    time::Duration,
};

use serde_json::Value;
use tempfile::TempDir;

use super::{
    PluginDir, eventually_blocking,
    python::{Output, Sdk, python, run_with_timeout},
    target_dir,
};

/// The example upstream's folder, `plugins/tickets/`.
pub fn tickets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/tickets")
        .canonicalize()
        .expect("plugins/tickets exists")
}

/// The TypeScript desk's folder, `tests/upstream/ts/`.
pub fn ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/upstream/ts")
        .canonicalize()
        .expect("tests/upstream/ts exists")
}

/// An upstream file, as a TOML table: the example's (`plugins/tickets/tickets.upstream.toml`,
/// with its bindings as shipped) made to run where a test runs, then adjusted by the test.
#[derive(Clone)]
pub struct UpstreamToml(toml::Table);

impl UpstreamToml {
    /// The example's file as shipped, with its machine named by absolute path (the file is
    /// written elsewhere than the example's folder).
    pub fn example() -> UpstreamToml {
        let path = tickets_dir().join("tickets.upstream.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut table: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{} is not TOML: {e}", path.display()));
        let machine = table["machine"].as_str().expect("machine = \"...\"");
        let machine = tickets_dir().join(machine);
        table.insert("machine".into(), path_value(&machine));
        UpstreamToml(table)
    }

    /// The example over stdio: the desk started with the `mcp1` virtual environment's Python,
    /// logging the calls it receives to `calls`.
    pub fn stdio(calls: &CallLog) -> UpstreamToml {
        let server = tickets_dir().join("server.py");
        let command = toml::Value::Array(vec![path_value(&python(Sdk::Mcp1)), path_value(&server)]);
        let mut env = toml::Table::new();
        env.insert("TICKETS_CALL_LOG".into(), path_value(calls.path()));
        UpstreamToml::example()
            .set("command", command)
            .set("env", toml::Value::Table(env))
    }

    /// The example over Streamable HTTP, at `url` (instead of its `command`).
    pub fn http(url: &str) -> UpstreamToml {
        let mut file = UpstreamToml::example();
        file.0.remove("command");
        file.set("url", url)
    }

    /// Sets the top-level `key`.
    pub fn set(mut self, key: &str, value: impl Into<toml::Value>) -> UpstreamToml {
        self.0.insert(key.into(), value.into());
        self
    }

    /// Replaces `[tools.TOOL]` with `binding` (TOML text: `states = ["open"]\nfires = "X"`).
    pub fn bind(mut self, tool: &str, binding: &str) -> UpstreamToml {
        let binding: toml::Table = binding
            .parse()
            .unwrap_or_else(|e| panic!("[tools.{tool}] {binding:?} is not TOML: {e}"));
        self.tools()
            .insert(tool.into(), toml::Value::Table(binding));
        self
    }

    fn tools(&mut self) -> &mut toml::Table {
        self.0
            .get_mut("tools")
            .and_then(toml::Value::as_table_mut)
            .expect("the example has [tools.*]")
    }

    /// The file's text.
    pub fn text(&self) -> String {
        toml::to_string(&self.0).expect("a TOML table prints")
    }
}

fn path_value(path: &Path) -> toml::Value {
    toml::Value::String(path.to_str().expect("a UTF-8 path").to_owned())
}

/// A private plugin directory for upstream files, and the call log of the desks they start.
pub struct UpstreamDir {
    plugins: PluginDir,
    pub calls: CallLog,
}

impl UpstreamDir {
    /// An empty plugin directory.
    pub fn empty() -> UpstreamDir {
        UpstreamDir {
            plugins: PluginDir::with(&[]),
            calls: CallLog::new(),
        }
    }

    /// A plugin directory holding the example over stdio as `tickets.upstream.toml`, adjusted
    /// by `adjust`.
    pub fn stdio(adjust: impl FnOnce(UpstreamToml) -> UpstreamToml) -> UpstreamDir {
        let dir = UpstreamDir::empty();
        let file = adjust(UpstreamToml::stdio(&dir.calls));
        dir.write("tickets.upstream.toml", &file);
        dir
    }

    pub fn path(&self) -> &Path {
        self.plugins.path()
    }

    /// The path of the file `name` in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// Writes `file` as `name`, the safe way (docs/plugins.md): written elsewhere, then renamed
    /// in, so a running server never reads half a file.
    pub fn write(&self, name: &str, file: &UpstreamToml) {
        self.write_text(name, &file.text());
    }

    /// Writes `text` as `name`: written beside it under a name no loader reads, then renamed
    /// over it.
    pub fn write_text(&self, name: &str, text: &str) {
        let staged = self.path().join(format!(".{name}.new"));
        std::fs::write(&staged, text).expect("write the upstream file");
        std::fs::rename(&staged, self.file(name)).expect("rename into the plugin directory");
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.file(name)).expect("remove the upstream file");
    }
}

/// The desk's record of the `tools/call`s it received (`TICKETS_CALL_LOG`): one JSON line per
/// call, `{"tool", "arguments", "meta", "pid"}`, written when the request arrives, before the
/// tool runs. In a directory of its own, outside any plugin directory, removed with the last
/// clone.
#[derive(Clone)]
pub struct CallLog {
    _dir: Arc<TempDir>,
    path: PathBuf,
}

impl CallLog {
    pub fn new() -> CallLog {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("calls.jsonl");
        CallLog {
            _dir: Arc::new(dir),
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every call received so far, in order.
    pub fn entries(&self) -> Vec<Value> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => panic!("read {}: {e}", self.path.display()),
        };
        text.lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"))
            })
            .collect()
    }

    /// The tools called so far (the upstream's names), in order.
    pub fn tools(&self) -> Vec<String> {
        self.entries()
            .iter()
            .map(|entry| entry["tool"].as_str().expect("a tool name").to_owned())
            .collect()
    }

    /// The calls of `tool` received so far.
    pub fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|entry| entry["tool"] == tool)
            .collect()
    }

    /// The tools whose calls the upstream was told to cancel (`notifications/cancelled`), in
    /// order.
    pub fn cancelled(&self) -> Vec<String> {
        self.entries()
            .into_iter()
            .filter_map(|entry| entry["cancelled"].as_str().map(str::to_owned))
            .collect()
    }

    /// Waits until the upstream received a call of `tool` (at most 10 s); that call.
    pub fn wait_for(&self, tool: &str) -> Value {
        eventually_blocking(
            &format!("the upstream never received a call of {tool}"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                self.calls_of(tool)
                    .pop()
                    .ok_or_else(|| format!("{:?}", self.tools()))
            },
        )
    }
}

impl Default for CallLog {
    fn default() -> Self {
        CallLog::new()
    }
}

/// The desk served over Streamable HTTP by a child process (Python or TypeScript); killed on
/// drop.
pub struct HttpDesk {
    child: Child,
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl HttpDesk {
    /// `plugins/tickets/server.py --http 127.0.0.1:0` with the `mcp1` virtual environment's
    /// Python (the official Python SDK), logging its calls to `calls`.
    pub fn python(calls: &CallLog) -> HttpDesk {
        let mut command = Command::new(python(Sdk::Mcp1));
        command
            .arg(tickets_dir().join("server.py"))
            .args(["--http", "127.0.0.1:0"])
            .env("PYTHONDONTWRITEBYTECODE", "1");
        HttpDesk::spawn(command, calls)
    }

    /// `tests/upstream/ts/server.mjs --port 0` (the official TypeScript SDK), logging its calls
    /// to `calls`; runs `npm ci` there first if this machine never did.
    pub fn typescript(calls: &CallLog) -> HttpDesk {
        ts_node_modules();
        let mut command = Command::new("node");
        command
            .arg(ts_dir().join("server.mjs"))
            .args(["--port", "0"]);
        HttpDesk::spawn(command, calls)
    }

    /// Starts `command` and waits for the URL it prints as its first line on stdout.
    fn spawn(mut command: Command, calls: &CallLog) -> HttpDesk {
        let described = format!("{command:?}");
        let mut child = command
            .env("TICKETS_CALL_LOG", calls.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {described}: {e}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let log = stderr.clone();
        let errors = BufReader::new(child.stderr.take().expect("piped stderr"));
        // Drained for the desk's whole life, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in errors.lines().map_while(Result::ok) {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (url_tx, url_rx) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = url_tx.send(line);
            }
        });
        let url = match url_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) if url.starts_with("http://") => url.trim().to_owned(),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "{described} did not print its URL ({other:?}); stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        HttpDesk { child, url, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the desk wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for HttpDesk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILL to the upstream process `pid` (a desk the server started: its results carry its
/// pid), then waits until it is dead: every thread of it gone, so every file it held is closed.
pub fn kill9(pid: u32) {
    // SAFETY: `kill` has no memory effects; a stale pid is reported, not undefined.
    let sent = unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert_eq!(
        sent,
        0,
        "kill -9 {pid}: {}",
        std::io::Error::last_os_error()
    );
    eventually_blocking(
        &format!("process {pid} never died"),
        Duration::from_secs(10),
        Duration::from_millis(10),
        || !is_alive(pid),
    );
}

/// Whether some thread of the process `pid` still runs. A killed process's first thread turns
/// zombie while the others are still exiting (the Python desk has several), and it holds its
/// pipes until the last one is gone; a thread that is gone leaves `/proc/PID/task/`.
pub fn is_alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // `TID (COMM) STATE ...`: the state follows the last `)`.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
    })
}

/// Runs `node tests/upstream/ts/<script> ARGS...`, a client written with the official
/// TypeScript SDK (running `npm ci` there first if this machine never did), for at most two
/// minutes: what it left, whatever its exit status.
pub fn run_ts_client(script: &str, args: &[&str]) -> Output {
    ts_node_modules();
    let mut command = Command::new("node");
    command.arg(ts_dir().join(script)).args(args);
    run_with_timeout(command, Duration::from_secs(120))
        .unwrap_or_else(|message| panic!("{message}"))
}

/// Makes sure `tests/upstream/ts/node_modules` holds what `package-lock.json` pins, running
/// `npm ci` once per machine if not (serialized in-process by a `OnceLock`, across processes by
/// a file lock in the target directory). Panics with npm's output if it fails.
fn ts_node_modules() {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        let dir = ts_dir();
        let lock_path = target_dir().join("upstream-ts.lock");
        let lock =
            File::create(&lock_path).map_err(|e| format!("create {}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;
        if ts_installed(&dir) {
            return Ok(());
        }
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                format!(
                    "cannot run `npm ci` in {}: {e}. The TypeScript upstream's tests need node \
                     (>= 18) and npm, and the npm registry to install @modelcontextprotocol/sdk.",
                    dir.display()
                )
            })?;
        drop(lock);
        if !output.status.success() || !ts_installed(&dir) {
            return Err(format!(
                "`npm ci` in {} failed ({}): the TypeScript upstream's tests need node (>= 18), \
                 npm and the npm registry to install what package-lock.json pins.\n\
                 --- stdout ---\n{}\n--- stderr ---\n{}",
                dir.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(())
    });
    if let Err(message) = ready {
        panic!("{message}");
    }
}

/// Whether `dir/node_modules` has every package `dir/package-lock.json` pins, at its version.
fn ts_installed(dir: &Path) -> bool {
    let read = |path: PathBuf| -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    };
    let Some(lock) = read(dir.join("package-lock.json")) else {
        return false;
    };
    let Some(packages) = lock["packages"].as_object() else {
        return false;
    };
    let pinned: BTreeMap<&str, &str> = packages
        .iter()
        .filter(|(path, package)| {
            path.starts_with("node_modules/") && package.get("optional") != Some(&Value::Bool(true))
        })
        .filter_map(|(path, package)| Some((path.as_str(), package["version"].as_str()?)))
        .collect();
    !pinned.is_empty()
        && pinned.iter().all(|(path, version)| {
            read(dir.join(path).join("package.json"))
                .is_some_and(|installed| installed["version"] == *version)
        })
}
