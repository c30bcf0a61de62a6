//! Shared fixtures for the end-to-end tests: the real `turnstile` binary, the real plugin
//! libraries built by `cargo build --workspace`, and a real MCP client (rmcp's).
#![allow(dead_code)] // Each test file uses a different part of this module.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientConfig, PaginatedRequestParams,
        ProtocolVersion, RequestMetaObject, Tool,
    },
    service::{NotificationContext, RunningService, ServiceError},
    transport::{StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::Notify;

/// The binary under test.
pub fn turnstile_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_turnstile"))
}

/// A plugin library built by cargo next to the binary (`target/<profile>/`).
pub fn built_plugin(name: &str) -> PathBuf {
    let dir = turnstile_bin()
        .parent()
        .expect("the binary lives in a directory")
        .to_path_buf();
    let path = dir.join(format!("libturnstile_plugin_{name}.so"));
    assert!(
        path.exists(),
        "{} is missing: build the plugins first with `cargo build --workspace`",
        path.display()
    );
    path
}

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

/// Redis server the tests share (`TURNSTILE_TEST_REDIS_URL`, default the local one).
pub fn redis_url() -> String {
    std::env::var("TURNSTILE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Redis Cluster the tests share (`TURNSTILE_TEST_REDIS_CLUSTER_URL`, default a local one of
/// three masters that `tests/redis-cluster.sh` starts unless it is running already).
pub fn redis_cluster_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("TURNSTILE_TEST_REDIS_CLUSTER_URL") {
            return url;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/redis-cluster.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        assert!(
            out.status.success(),
            "{script} could not start a Redis Cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    })
    .clone()
}

/// A 2025-11-25 `initialize` POST to `url`, as `bearer` when given: the raw answer, for tests
/// that read its status and headers (an admission, a refusal).
pub async fn initialize_request(url: &str, bearer: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "turnstile-tests", "version": "0"}}})
            .to_string(),
        );
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    request.send().await.expect("an answer to initialize")
}

/// PostgreSQL server the tests share (`TURNSTILE_TEST_POSTGRES_URL`, default the local one).
pub fn postgres_url() -> String {
    std::env::var("TURNSTILE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

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

/// A private plugin directory for one test.
pub struct PluginDir {
    dir: TempDir,
}

impl PluginDir {
    /// A directory holding copies of the named built plugins.
    pub fn with(plugins: &[&str]) -> PluginDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for name in plugins {
            let source = built_plugin(name);
            std::fs::copy(&source, dir.path().join(source.file_name().unwrap()))
                .expect("copy plugin");
        }
        PluginDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Compiles `tests/fixtures/<name>.c` against the real plugin header into `lib<name>.so` here
    /// (gcc is on every machine that builds the C example plugin).
    pub fn add_c_fixture(&self, name: &str) -> PathBuf {
        let output = self.dir.path().join(format!("lib{name}.so"));
        compile_c_fixture(name, &output, &[]);
        output
    }

    /// Puts an arbitrary file into the directory (for broken-plugin tests).
    pub fn add_file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

/// Compiles `tests/fixtures/<name>.c` against the real plugin header into `output`, with the
/// given preprocessor definitions (`-D` arguments, e.g. `BUILD="v2"`).
pub fn compile_c_fixture(name: &str, output: &Path, defines: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(output)
        .arg("-I")
        .arg(root.join("plugin-api/include"))
        .args(defines.iter().map(|define| format!("-D{define}")))
        .arg(root.join(format!("tests/fixtures/{name}.c")))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling tests/fixtures/{name}.c failed");
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

    fn spawn_logging(
        plugins: &Path,
        data: &Path,
        extra: &[&str],
        rust_log: Option<&str>,
        env: &[(&str, &str)],
    ) -> Server {
        let mut command = Command::new(turnstile_bin());
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
        let mut command = Command::new(turnstile_bin());
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self.stderr().lines().find(|line| line.contains(needle)) {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "the server never logged {needle:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status.code().unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Counts `notifications/tools/list_changed`.
#[derive(Default)]
pub struct ListChanges {
    count: AtomicUsize,
    changed: Notify,
}

impl ListChanges {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    fn record(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Waits until at least `n` notifications have arrived; panics after 10 s.
    pub async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.count() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "expected {n} list_changed notifications, got {}",
                self.count()
            );
            let _ = tokio::time::timeout(
                left.min(Duration::from_millis(100)),
                self.changed.notified(),
            )
            .await;
        }
    }

    /// Asserts that the count stays at `n` for a quiet period (for "sends none" checks).
    pub async fn stays_at(&self, n: usize) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(self.count(), n, "unexpected list_changed notifications");
    }
}

/// What the server told a client about its prompts and resources.
#[derive(Default)]
pub struct Notices {
    /// `notifications/prompts/list_changed`.
    pub prompts: ListChanges,
    /// `notifications/resources/list_changed`.
    pub resources: ListChanges,
    /// `notifications/resources/updated`, and the URIs they named, in order.
    pub updated: ListChanges,
    pub updated_uris: Mutex<Vec<String>>,
}

/// The client side of a session: records what the server pushes.
#[derive(Clone)]
pub struct Recorder {
    pub changes: Arc<ListChanges>,
    pub notices: Arc<Notices>,
    /// Log messages and progress reports, in arrival order: `log:<level>:<data>` and
    /// `progress:<progress>/<total>`.
    pub events: Arc<std::sync::Mutex<Vec<String>>>,
    protocol: ProtocolVersion,
    /// The protocol extensions it declares in its capabilities (SEP-1724), by identifier.
    extensions: Vec<&'static str>,
}

/// Turnstile's extension for 2026-07-28 lists that follow the instances named in `_meta`.
pub const GATED_LISTS_EXTENSION: &str = "dev.turnstile/gated-lists";

/// The `_meta` key of a workflow tool's result that carries its next step.
pub const NEXT_STEP_META_KEY: &str = "dev.turnstile/next-step";

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default().with_protocol_version(self.protocol.clone());
        if !self.extensions.is_empty() {
            config.capabilities.extensions = Some(
                self.extensions
                    .iter()
                    .map(|id| (id.to_string(), rmcp::model::JsonObject::new()))
                    .collect(),
            );
        }
        config
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.record();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.prompts.record();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.resources.record();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.updated_uris.lock().unwrap().push(params.uri);
        self.notices.updated.record();
    }

    #[allow(deprecated)] // MCP logging, as 2025-11-25 has it.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level).unwrap();
        let entry = format!("log:{}:{}", level.as_str().unwrap_or("?"), params.data);
        self.events.lock().unwrap().push(entry);
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let total = params
            .total
            .map_or("?".to_string(), |total| total.to_string());
        let entry = format!("progress:{}/{total}", params.progress);
        self.events.lock().unwrap().push(entry);
    }
}

/// A connected MCP client.
pub struct Client {
    service: RunningService<RoleClient, Recorder>,
    pub changes: Arc<ListChanges>,
    /// What the server logged and reported to this client, in order (see [`Recorder::events`]).
    pub events: Arc<std::sync::Mutex<Vec<String>>>,
    /// What the server told it about its prompts and resources.
    pub notices: Arc<Notices>,
}

fn recorder() -> Recorder {
    // The session-based handshake (2025-11-25): initialize, Mcp-Session-Id, GET stream.
    recorder_speaking(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

fn recorder_speaking(protocol: ProtocolVersion) -> Recorder {
    Recorder {
        changes: Arc::new(ListChanges::default()),
        notices: Arc::default(),
        events: Arc::default(),
        protocol,
        extensions: Vec::new(),
    }
}

impl Client {
    /// Connects over Streamable HTTP.
    pub async fn http(url: &str) -> Client {
        Self::http_speaking(url, ProtocolVersion::LATEST_WITH_INITIALIZE).await
    }

    /// Connects over Streamable HTTP, asking for a given protocol revision.
    pub async fn http_speaking(url: &str, protocol: ProtocolVersion) -> Client {
        let recorder = recorder_speaking(protocol);
        let (changes, events, notices) = (
            recorder.changes.clone(),
            recorder.events.clone(),
            recorder.notices.clone(),
        );
        let transport = StreamableHttpClientTransport::from_uri(url.to_string());
        let service = recorder.serve(transport).await.expect("connect over HTTP");
        Client {
            service,
            changes,
            events,
            notices,
        }
    }

    /// Connects over Streamable HTTP with protocol 2026-07-28's lifecycle: `server/discover`,
    /// no session (each request carries its own protocol metadata).
    pub async fn http_sessionless(url: &str) -> Client {
        Self::http_sessionless_declaring(url, &[]).await
    }

    /// [`Client::http_sessionless`], declaring the protocol extensions `extensions` in every
    /// request's capabilities.
    pub async fn http_sessionless_declaring(url: &str, extensions: &[&'static str]) -> Client {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
        let mut recorder = recorder_speaking(ProtocolVersion::V_2026_07_28);
        recorder.extensions = extensions.to_vec();
        let (changes, events, notices) = (
            recorder.changes.clone(),
            recorder.events.clone(),
            recorder.notices.clone(),
        );
        let transport = StreamableHttpClientTransport::from_uri(url.to_string());
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let service = recorder
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("discover over HTTP");
        Client {
            service,
            changes,
            events,
            notices,
        }
    }

    /// Connects over Streamable HTTP as the principal of `bearer` (`Authorization: Bearer`).
    pub async fn http_as(url: &str, bearer: &str) -> Client {
        Self::http_through(url, reqwest::Client::new(), Some(bearer)).await
    }

    /// Connects over Streamable HTTP through `http` (an HTTPS client trusting a test
    /// certificate, say), sending `bearer` as `Authorization: Bearer` when given.
    pub async fn http_through(url: &str, http: reqwest::Client, bearer: Option<&str>) -> Client {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let recorder = recorder();
        let (changes, events, notices) = (
            recorder.changes.clone(),
            recorder.events.clone(),
            recorder.notices.clone(),
        );
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(bearer) = bearer {
            config = config.auth_header(bearer);
        }
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let service = recorder.serve(transport).await.expect("connect over HTTP");
        Client {
            service,
            changes,
            events,
            notices,
        }
    }

    /// Starts `turnstile serve --stdio` as a child process and connects to it.
    /// The server keeps its state in memory: a stdio server lives exactly as long as its client.
    pub async fn stdio(plugins: &Path) -> Client {
        let recorder = recorder();
        let (changes, events, notices) = (
            recorder.changes.clone(),
            recorder.events.clone(),
            recorder.notices.clone(),
        );
        let mut command = tokio::process::Command::new(turnstile_bin());
        command.args(STDIO_SERVE).arg(plugins);
        let transport = TokioChildProcess::new(command).expect("start turnstile --stdio");
        let service = recorder.serve(transport).await.expect("connect over stdio");
        Client {
            service,
            changes,
            events,
            notices,
        }
    }

    pub async fn tools(&self) -> Vec<Tool> {
        self.service
            .list_tools(Some(PaginatedRequestParams::default()))
            .await
            .expect("tools/list")
            .tools
    }

    /// Whether `tools/list` offers `tool` now.
    pub async fn offers(&self, tool: &str) -> bool {
        self.tool_names().await.iter().any(|name| name == tool)
    }

    pub async fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tools()
            .await
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    /// `tools/list` with `_meta` (naming handles, in handle mode).
    pub async fn tools_with_meta(&self, meta: Value) -> Vec<Tool> {
        self.try_tools_with_meta(meta).await.expect("tools/list")
    }

    /// Like `tools_with_meta`, returning a JSON-RPC error instead of panicking on one.
    pub async fn try_tools_with_meta(&self, meta: Value) -> Result<Vec<Tool>, ServiceError> {
        let Value::Object(meta) = meta else {
            panic!("_meta must be an object")
        };
        let mut params = PaginatedRequestParams::default();
        params.meta = Some(RequestMetaObject::from(meta));
        Ok(self.service.list_tools(Some(params)).await?.tools)
    }

    pub async fn tool_names_with_meta(&self, meta: Value) -> Vec<String> {
        let mut names: Vec<String> = self
            .tools_with_meta(meta)
            .await
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect();
        names.sort();
        names
    }

    pub async fn try_call(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ServiceError> {
        let mut params = CallToolRequestParams::new(name.to_string());
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        self.service.call_tool(params).await
    }

    /// Calls a tool with `_meta` on the request (a progress token, a log level).
    pub async fn call_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> CallToolResult {
        self.try_call_with_meta(name, arguments, meta)
            .await
            .unwrap_or_else(|error| panic!("tools/call {name}: {error}"))
    }

    /// Like `call_with_meta`, returning a JSON-RPC error instead of panicking on one.
    pub async fn try_call_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> Result<CallToolResult, ServiceError> {
        let mut params = CallToolRequestParams::new(name.to_string());
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let Value::Object(meta) = meta else {
            panic!("_meta must be an object")
        };
        params.meta = Some(RequestMetaObject::from(meta));
        self.service.call_tool(params).await
    }

    /// Starts a `tools/call` and, after `after`, cancels it (`notifications/cancelled`), as a
    /// client does when its user gives up.
    pub async fn call_then_cancel(&self, name: &str, arguments: Value, after: Duration) {
        let mut params = CallToolRequestParams::new(name.to_string());
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        let handle = self
            .service
            .peer()
            .send_cancellable_request(request, rmcp::service::PeerRequestOptions::default())
            .await
            .expect("send tools/call");
        tokio::time::sleep(after).await;
        handle
            .cancel(Some("the user gave up".to_string()))
            .await
            .expect("send notifications/cancelled");
    }

    /// `logging/setLevel`.
    #[allow(deprecated)] // MCP logging, as 2025-11-25 has it.
    pub async fn set_log_level(&self, level: &str) {
        let level = serde_json::from_value(Value::from(level)).expect("an MCP level name");
        self.service
            .set_level(rmcp::model::SetLevelRequestParams::new(level))
            .await
            .expect("logging/setLevel");
    }

    /// What the server has logged and reported to this client so far, in order.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// The events once `enough` says they are complete; panics after 10 s. For events that
    /// travel on the session's stream, which may reach the client just after the answer of the
    /// call that caused them (two HTTP streams keep no order between them).
    pub async fn events_when(&self, enough: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.events();
            if enough(&events) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "events never completed: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Calls a tool; panics on a protocol error (tool errors are results).
    pub async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        self.try_call(name, arguments)
            .await
            .unwrap_or_else(|error| panic!("tools/call {name}: {error}"))
    }

    /// The state the invoice plugin's `invoice.status` reports.
    pub async fn invoice_state(&self) -> Value {
        let result = self.call("invoice.status", serde_json::json!({})).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "invoice.status failed: {result:?}"
        );
        let structured = result
            .structured_content
            .expect("invoice.status has structured content");
        structured["state"].clone()
    }

    /// Opens a `subscriptions/listen` (protocol 2026-07-28) for `list_changed`, naming no
    /// handle, and counts what arrives on it for as long as the client lives.
    pub async fn listen(&self) -> Arc<ListChanges> {
        let filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .build();
        self.listen_counting(filter, |notification| {
            matches!(
                notification,
                rmcp::model::ServerNotification::ToolListChangedNotification(_)
            )
        })
        .await
        .expect("subscriptions/listen")
    }

    /// Opens a `subscriptions/listen` (protocol 2026-07-28) with `resourceSubscriptions` `uris`
    /// (and nothing else), and counts the `resources/updated` that arrive on it for as long as
    /// the client lives.
    pub async fn listen_resources(&self, uris: &[&str]) -> Result<Arc<ListChanges>, ServiceError> {
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscriptions(uris.iter().copied())
            .build();
        self.listen_counting(filter, |notification| {
            matches!(
                notification,
                rmcp::model::ServerNotification::ResourceUpdatedNotification(_)
            )
        })
        .await
    }

    /// Opens a `subscriptions/listen` for `filter` and counts the notifications on it that
    /// `counts` picks, for as long as the client lives.
    async fn listen_counting(
        &self,
        filter: rmcp::model::SubscriptionFilter,
        counts: fn(&rmcp::model::ServerNotification) -> bool,
    ) -> Result<Arc<ListChanges>, ServiceError> {
        let mut subscription = self.service.peer().listen(filter).await?;
        let changes = Arc::new(ListChanges::default());
        let counting = changes.clone();
        tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                if counts(&notification) {
                    counting.record();
                }
            }
        });
        Ok(changes)
    }

    /// `prompts/list` (with `_meta`, e.g. naming a handle): the names, sorted.
    pub async fn prompt_names_with_meta(&self, meta: Value) -> Vec<String> {
        let mut params = PaginatedRequestParams::default();
        params.meta = Some(meta_object(meta));
        let mut names: Vec<String> = self
            .service
            .list_prompts(Some(params))
            .await
            .expect("prompts/list")
            .prompts
            .into_iter()
            .map(|prompt| prompt.name)
            .collect();
        names.sort();
        names
    }

    pub async fn prompt_names(&self) -> Vec<String> {
        self.prompt_names_with_meta(serde_json::json!({})).await
    }

    /// `prompts/get` with `arguments` (an object) and `_meta`.
    /// `completion/complete` with `params` given as JSON (`ref`, `argument`, `_meta`): the
    /// values.
    pub async fn complete(&self, params: Value) -> Result<Vec<String>, ServiceError> {
        let params: rmcp::model::CompleteRequestParams =
            serde_json::from_value(params).expect("completion params as MCP spells them");
        Ok(self.service.complete(params).await?.completion.values)
    }

    pub async fn get_prompt_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> Result<rmcp::model::GetPromptResult, ServiceError> {
        let mut params = rmcp::model::GetPromptRequestParams::new(name);
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        params = params.with_meta(meta_object(meta));
        self.service.get_prompt(params).await
    }

    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<rmcp::model::GetPromptResult, ServiceError> {
        self.get_prompt_with_meta(name, arguments, serde_json::json!({}))
            .await
    }

    /// `resources/list` (with `_meta`): the URIs, sorted.
    pub async fn resource_uris_with_meta(&self, meta: Value) -> Vec<String> {
        let mut params = PaginatedRequestParams::default();
        params.meta = Some(meta_object(meta));
        let mut uris: Vec<String> = self
            .service
            .list_resources(Some(params))
            .await
            .expect("resources/list")
            .resources
            .into_iter()
            .map(|resource| resource.uri)
            .collect();
        uris.sort();
        uris
    }

    pub async fn resource_uris(&self) -> Vec<String> {
        self.resource_uris_with_meta(serde_json::json!({})).await
    }

    /// `resources/templates/list`: the URI templates, sorted.
    pub async fn resource_templates(&self) -> Vec<String> {
        let mut templates: Vec<String> = self
            .service
            .list_resource_templates(Some(PaginatedRequestParams::default()))
            .await
            .expect("resources/templates/list")
            .resource_templates
            .into_iter()
            .map(|template| template.uri_template)
            .collect();
        templates.sort();
        templates
    }

    /// `resources/read` of `uri`.
    pub async fn read_resource(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult, ServiceError> {
        self.service
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
    }

    /// `resources/subscribe` to `uri`.
    #[allow(deprecated)] // resources/subscribe, as 2025-11-25 has it.
    pub async fn subscribe(&self, uri: &str) -> Result<(), ServiceError> {
        self.service
            .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
            .await
    }

    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// A JSON object as request `_meta`.
fn meta_object(meta: Value) -> RequestMetaObject {
    let Value::Object(meta) = meta else {
        panic!("_meta must be an object")
    };
    RequestMetaObject::from(meta)
}

/// The JSON-RPC error a request was answered with: its code and `data`; panics on anything else.
pub fn rpc_error<T: std::fmt::Debug>(answer: Result<T, ServiceError>) -> (i32, Value) {
    match answer {
        Err(ServiceError::McpError(error)) => (error.code.0, error.data.unwrap_or(Value::Null)),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// The text of a tool result's content, joined.
/// The `structuredContent.error.code` of a tool error; panics if the result is not an error.
pub fn error_code(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["error"]["code"]
        .clone()
}

/// The handle a successful call in handle mode returned (`structuredContent.handle`).
pub fn handle_of(result: &CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "call failed: {result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["handle"]
        .as_str()
        .expect("the result carries the handle")
        .to_string()
}

pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `tools/list` offers a session of the testkit plugin that has touched no instance: the
/// tools that start one (`testkit.go`) and those bound to no workflow.
pub const TESTKIT_STARTING_TOOLS: [&str; 8] = [
    "testkit.abort",
    "testkit.content",
    "testkit.echo",
    "testkit.go",
    "testkit.panic",
    "testkit.quick_slow",
    "testkit.report",
    "testkit.slow",
];

/// Sorted owned names, for comparing menus.
pub fn names(list: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    names.sort();
    names
}

/// submit → reject → submit → approve → discharge, checking the menu and the notification after
/// each step, and that a call which changes no state sends none.
pub async fn invoice_lifecycle(client: &Client) {
    let steps: &[(&str, Value, &str, &[&str])] = &[
        (
            "invoice.submit",
            serde_json::json!({"amount": 120.5, "customer": "ACME"}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.reject",
            serde_json::json!({"reason": "missing PO number"}),
            "draft",
            &["invoice.status", "invoice.submit"],
        ),
        (
            "invoice.submit",
            serde_json::json!({"amount": 120.5}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.approve",
            serde_json::json!({}),
            "approved",
            &["invoice.discharge", "invoice.status"],
        ),
        (
            "invoice.discharge",
            serde_json::json!({}),
            "discharged",
            &["invoice.status"],
        ),
    ];
    client.tool_names().await;
    for (number, (tool, arguments, state, menu)) in steps.iter().enumerate() {
        let result = client.call(tool, arguments.clone()).await;
        assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
        client.changes.wait_for(number + 1).await;
        assert_eq!(client.tool_names().await, names(menu), "menu after {tool}");
        assert_eq!(client.invoice_state().await, serde_json::json!(state));
        // invoice.status changes no state: no notification for it.
        client.changes.stays_at(number + 1).await;
    }
}

/// One series: its labels, sorted.
pub type Labels = BTreeMap<String, String>;

/// One `GET /metrics`, parsed.
pub struct Scrape(prometheus_parse::Scrape);

impl Scrape {
    /// Scrapes `server` (loopback: no token needed) and parses the body.
    pub async fn of(server: &Server) -> Scrape {
        let response = reqwest::get(format!("{}/metrics", server.base()))
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200);
        Scrape::parse(response).await
    }

    pub async fn parse(response: reqwest::Response) -> Scrape {
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let text = response.text().await.expect("the body");
        let lines = text.lines().map(|line| Ok(line.to_owned()));
        Scrape(prometheus_parse::Scrape::parse(lines).expect("Prometheus text"))
    }

    /// Every series of `metric`, with its value: a counter's or gauge's value, a histogram's
    /// count of observations.
    pub fn series(&self, metric: &str) -> BTreeMap<Labels, f64> {
        use prometheus_parse::Value as V;
        self.0
            .samples
            .iter()
            .filter(|sample| sample.metric == metric)
            .map(|sample| {
                let labels = sample
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let value = match &sample.value {
                    V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
                    V::Histogram(buckets) => {
                        buckets
                            .iter()
                            .find(|bucket| bucket.less_than.is_infinite())
                            .expect("a +Inf bucket")
                            .count
                    }
                    V::Summary(_) => panic!("{metric} is a summary"),
                };
                (labels, value)
            })
            .collect()
    }

    /// The value of the series of `metric` with exactly `labels` (0 if it is absent).
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(metric)
            .get(&labels_of(labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// How each series of `metric` moved since `before` (series that did not move are left out).
    pub fn moved_since(&self, before: &Scrape, metric: &str) -> BTreeMap<Labels, f64> {
        let earlier = before.series(metric);
        self.series(metric)
            .into_iter()
            .map(|(labels, now)| {
                let delta = now - earlier.get(&labels).copied().unwrap_or(0.0);
                (labels, delta)
            })
            .filter(|(_, delta)| *delta != 0.0)
            .collect()
    }
}

pub fn labels_of(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
