//! The real binary as a server: one `Server` that starts `turnstile serve` and waits until it
//! listens, reads its log, signals and stops it; and the files a server is started with.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tempfile::TempDir;

use super::{PluginDir, eventually, eventually_blocking, poll_blocking, turnstile_bin};

/// `turnstile serve` over stdio on the memory store, as the tests start it, before the plugin
/// directory: the arguments after these are `DIR` (for `--plugins`) and any others.
pub const STDIO_SERVE: [&str; 6] = [
    "serve",
    "--allow-test-plugins",
    "--stdio",
    "--store",
    "memory:",
    "--plugins",
];
/// A bearer-token file (`--auth-token-file`) in a directory of its own, removed when dropped.
pub struct TokenFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TokenFile {
    /// A token file holding `lines` (`NAME TOKEN` or a bare `TOKEN` per line).
    pub fn with(lines: &str) -> TokenFile {
        let dir = tempfile::tempdir().expect("a temp dir for the token file");
        let path = dir.path().join("tokens");
        std::fs::write(&path, lines).expect("write the token file");
        TokenFile { _dir: dir, path }
    }

    /// The file's path, as `--auth-token-file` takes it.
    pub fn arg(&self) -> &str {
        self.path.to_str().expect("a UTF-8 temp path")
    }

    /// Replaces the file's lines (the server reads them again on SIGHUP).
    pub fn rewrite(&self, lines: &str) {
        std::fs::write(&self.path, lines).expect("rewrite the token file");
    }
}
/// The one way a test starts the real binary as a server: `turnstile serve --http` on a free
/// loopback port with copies of the built `plugins` and `flags`, its state in a private data
/// directory; waits until it listens. The plugin directory lives as long as the test keeps it.
/// (`Server`'s constructors take a directory the test made, for the tests that need one.)
pub fn start(plugins: &[&str], flags: &[&str]) -> (PluginDir, Server) {
    let plugins = PluginDir::with(plugins);
    let server = Server::http(plugins.path(), flags);
    (plugins, server)
}

/// Runs `turnstile serve FLAGS` with copies of the built `plugins` and a private data directory,
/// for a server that must refuse to start: panics if it exits successfully; its stderr.
pub fn refused_start(plugins: &[&str], flags: &[&str]) -> String {
    let plugins = PluginDir::with(plugins);
    let data = tempfile::tempdir().expect("temp dir");
    let output = Command::new(turnstile_bin())
        .arg("serve")
        .args(flags)
        .arg("--plugins")
        .arg(plugins.path())
        .arg("--data-dir")
        .arg(data.path())
        .stdin(Stdio::null())
        .output()
        .expect("run turnstile");
    assert!(!output.status.success(), "it started with {flags:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A running `turnstile serve --http` process; killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
    stderr: Arc<Mutex<String>>,
    /// The data directory, when the server owns it (`http`); `http_in` leaves it to the test, so
    /// a test can kill a server and start another on the same store.
    _data: Option<TempDir>,
}

impl Server {
    /// Starts the server on a free loopback port and waits until it listens. State goes to the
    /// embedded store (the default) in a private data directory, unless `extra` names another
    /// `--store`.
    pub fn http(plugins: &Path, extra: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut server = Server::http_in(plugins, data.path(), extra);
        server._data = Some(data);
        server
    }

    /// Like `http`, with the data directory given by the test.
    pub fn http_in(plugins: &Path, data: &Path, extra: &[&str]) -> Server {
        Server::http_in_env(plugins, data, extra, &[])
    }

    /// Like `http_in`, with environment variables for the server (a plugin's configuration,
    /// `TURNSTILE_PLUGIN_<NAME>_<KEY>`).
    pub fn http_in_env(
        plugins: &Path,
        data: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Server::spawn_logging(plugins, data, extra, Some("info,turnstile=debug"), env)
    }

    /// Like `http`, logging as an operator's server does: `rust_log` as `RUST_LOG`, or with
    /// `None`, no `RUST_LOG` at all (the default level).
    pub fn http_logging(plugins: &Path, extra: &[&str], rust_log: Option<&str>) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut server = Server::spawn_logging(plugins, data.path(), extra, rust_log, &[]);
        server._data = Some(data);
        server
    }

    /// Like `http`, with `env` added to the server's environment (plugin configuration, say).
    pub fn http_with_env(plugins: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut server = Server::http_in_env(plugins, data.path(), extra, env);
        server._data = Some(data);
        server
    }

    /// Like `http_in_env` with `flags`, on `store` under namespace `ns` (`None`: the embedded
    /// store in `data`), for the tests that run once per store.
    pub fn on_store(
        plugins: &Path,
        data: &Path,
        store: Option<&str>,
        ns: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut flags = flags.to_vec();
        if let Some(store) = store {
            flags.extend(["--store", store, "--store-namespace", ns]);
        }
        Server::http_in_env(plugins, data, &flags, env)
    }

    /// Like `http` with `flags`, on the shared `store` under `namespace`: one of the servers that
    /// share instances through it.
    pub fn sharing(plugins: &Path, store: &str, namespace: &str, flags: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut server = Server::on_store(plugins, data.path(), Some(store), namespace, flags, &[]);
        server._data = Some(data);
        server
    }

    /// [`Server::sharing`], running `binary` (a build of the host with stores of its own
    /// registered, `turnstile_mariadb_bin()`) instead of `turnstile`.
    pub fn sharing_as(
        binary: &Path,
        plugins: &Path,
        store: &str,
        namespace: &str,
        flags: &[&str],
    ) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let flags = [flags, &["--store", store, "--store-namespace", namespace]].concat();
        let rust_log = Some("info,turnstile=debug");
        let mut server = Server::spawn_binary(binary, plugins, data.path(), &flags, rust_log, &[]);
        server._data = Some(data);
        server
    }

    fn spawn_logging(
        plugins: &Path,
        data: &Path,
        extra: &[&str],
        rust_log: Option<&str>,
        env: &[(&str, &str)],
    ) -> Server {
        Server::spawn_binary(&turnstile_bin(), plugins, data, extra, rust_log, env)
    }

    fn spawn_binary(
        binary: &Path,
        plugins: &Path,
        data: &Path,
        extra: &[&str],
        rust_log: Option<&str>,
        env: &[(&str, &str)],
    ) -> Server {
        let mut command = Command::new(binary);
        command
            .args([
                "serve",
                "--allow-test-plugins",
                "--http",
                "127.0.0.1:0",
                "--plugins",
            ])
            .arg(plugins)
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG");
        if let Some(rust_log) = rust_log {
            command.env("RUST_LOG", rust_log);
        }
        Server::spawn(command)
    }

    /// Starts `turnstile serve ARGS` with nothing added (no plugin directory, address or data
    /// directory: `args` or `env` must say them, as a config file does) and `env` set, and
    /// waits until it listens on HTTP.
    pub fn serve_with(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Server {
        Server::serve_binary(&turnstile_bin(), args, env)
    }

    /// [`Server::serve_with`], running the `turnstile` at `binary` (one `cargo install` put
    /// elsewhere, say) instead of the one this build made.
    pub fn serve_binary(binary: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .args(args)
            .env("RUST_LOG", "info,turnstile=debug")
            .envs(env.iter().copied());
        Server::spawn(command)
    }

    fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start turnstile");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        let log = stderr.clone();
        // Keep draining stderr for the life of the server, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                // The URL ends at `/mcp`, in a text line and in a JSON one (`--log-format json`).
                if let Some(start) = line.find("http://").or_else(|| line.find("https://"))
                    && let Some(length) = line[start..].find("/mcp")
                {
                    let url = line[start..start + length + "/mcp".len()].to_string();
                    let _ = url_tx.send(url);
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = match url_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                // Let the reader thread drain what the process wrote before it died.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "{command:?} did not start; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Server {
            child,
            url,
            stderr,
            _data: None,
        }
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the server's stderr holds `needle` (it writes it at most 10 s from now);
    /// returns the line.
    pub fn wait_for_log(&self, needle: &str) -> String {
        eventually_blocking(
            &format!("the server never logged {needle:?}"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                let stderr = self.stderr();
                match stderr.lines().find(|line| line.contains(needle)) {
                    Some(line) => Ok(line.to_string()),
                    None => Err(format!("stderr:\n{stderr}")),
                }
            },
        )
    }

    /// The address without path, e.g. `http://127.0.0.1:4242`.
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the server, as an orchestrator would.
    pub fn signal(&self, signal: i32) {
        // SAFETY: `kill` with a live child's pid and a valid signal number has no memory effects.
        let sent = unsafe { libc::kill(self.pid() as i32, signal) };
        assert_eq!(sent, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits up to `within` for the server to exit; its exit code, or `None` if it still runs.
    pub fn exit_code_within(&mut self, within: Duration) -> Option<i32> {
        poll_blocking(within, Duration::from_millis(20), || {
            self.child.try_wait().expect("try_wait")
        })
        .ok()
        .map(|status| status.code().unwrap_or(-1))
    }

    /// SIGTERM, and waits for a clean exit: the server drains and folds the embedded store's
    /// journal into its file, so the file alone holds every instance afterwards.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        assert_eq!(
            self.exit_code_within(Duration::from_secs(30)),
            Some(0),
            "turnstile should exit cleanly on SIGTERM"
        );
    }

    /// SIGKILL (`Child::kill` on Unix) and reap: no shutdown code of the server runs.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9 turnstile");
        self.child.wait().expect("reap turnstile");
    }

    /// Resident set size of the server process, in KiB (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }

    /// `GET /stats`: what the server's actors hold.
    pub async fn stats(&self) -> Value {
        let text = reqwest::get(format!("{}/stats", self.base()))
            .await
            .expect("GET /stats")
            .text()
            .await
            .expect("GET /stats body");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("/stats is not JSON ({e}): {text}"))
    }

    /// `/stats` once `check` holds for it, asked every 20 ms for at most `within` (ending a
    /// session, passivating an instance, stopping a cancelled plugin happen in the server's own
    /// time); fails the test with `what` and the last `/stats` after that.
    pub async fn stats_until(
        &self,
        what: &str,
        within: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(what, within, Duration::from_millis(20), async || {
            let stats = self.stats().await;
            if check(&stats) { Ok(stats) } else { Err(stats) }
        })
        .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
