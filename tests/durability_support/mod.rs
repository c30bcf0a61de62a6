//! Fixtures for the durability tests (issue 5): a server launcher that exposes the child's pid
//! (for `kill -9` and `/proc/<pid>/status`) and keeps its data directory across restarts, a
//! private `redis-server`, and the invoice workflow as a walk of acknowledged transitions.
//!
//! `tests/common/` stays as it is; this module adds what only these tests need.
#![allow(dead_code)] // Each test file uses a different part of this module.

use std::{
    io::{BufRead, BufReader},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The binary under test.
pub fn turnstile_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_turnstile"))
}

/// Redis server the tests share (`TURNSTILE_TEST_REDIS_URL`, default the local one).
pub fn redis_url() -> String {
    std::env::var("TURNSTILE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// PostgreSQL server the tests share (`TURNSTILE_TEST_POSTGRES_URL`, default the local one).
pub fn postgres_url() -> String {
    std::env::var("TURNSTILE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Panics, naming the URL, unless something accepts TCP connections at the URL's host:port.
/// A missing Redis or PostgreSQL is a test failure, never a silent skip.
pub fn require_reachable(url: &str) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let address = if host_port.contains(':') {
        host_port.to_string()
    } else if url.starts_with("redis") {
        format!("{host_port}:6379")
    } else {
        format!("{host_port}:5432")
    };
    let reachable = address
        .parse()
        .ok()
        .and_then(|socket| TcpStream::connect_timeout(&socket, Duration::from_secs(2)).ok())
        .is_some();
    assert!(
        reachable,
        "the store {url} is not reachable at {address}: start it, or point \
         TURNSTILE_TEST_REDIS_URL / TURNSTILE_TEST_POSTGRES_URL at one"
    );
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

/// A running `turnstile serve --http`, killed on drop. Unlike `common::Server` it exposes the
/// pid and does not own its data directory, so a test can kill it and start another on the
/// same store.
pub struct Turnstile {
    child: Child,
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl Turnstile {
    /// Starts `turnstile serve --http 127.0.0.1:0 --plugins <plugins> --data-dir <data> <extra>`
    /// and waits (up to 30 s) until it listens.
    pub fn start(plugins: &Path, data: &Path, extra: &[&str]) -> Turnstile {
        let mut child = Command::new(turnstile_bin())
            .args(["serve", "--http", "127.0.0.1:0", "--plugins"])
            .arg(plugins)
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start turnstile");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if let Some(start) = line.find("http://")
                    && line.contains("/mcp")
                {
                    let url: String = line[start..].split_whitespace().next().unwrap().to_string();
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
                    "turnstile {extra:?} did not start; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Turnstile { child, url, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address without path, e.g. `http://127.0.0.1:4242`.
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// SIGKILL (`Child::kill` on Unix) and reap: no shutdown code of the server runs.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9 turnstile");
        self.child.wait().expect("reap turnstile");
    }

    /// Resident set size of the server process, in KiB (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// `GET /stats`.
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

impl Drop for Turnstile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VmRSS` of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// A private, non-persistent `redis-server` on a port of its own; killed on drop (also when the
/// test panics).
pub struct PrivateRedis {
    child: Option<Child>,
    pub port: u16,
}

impl PrivateRedis {
    /// Starts on a free port.
    pub fn start() -> PrivateRedis {
        PrivateRedis::start_on(free_port())
    }

    /// Starts on `port` and waits (up to 10 s) until it answers PING.
    pub fn start_on(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed?)");
        let redis = PrivateRedis {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis.answers_ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn answers_ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }

    /// Sends a signal (`STOP`, `CONT`, …) with the `kill` utility.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("redis is running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Kills the server (SIGKILL): its data is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process dies of SIGKILL all the same.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The states of the invoice workflow, as `invoice.status` reports them.
pub const DRAFT: &str = "draft";
pub const REVIEW: &str = "review";
pub const APPROVED: &str = "approved";
pub const DISCHARGED: &str = "discharged";

/// The tool, its arguments (without the handle) and the state it leads to, for the next step of
/// an invoice in `state`: reject/submit cycles while `cycles_left > 0`, then approve and
/// discharge. `None` once discharged.
pub fn next_step(state: &str, cycles_left: u32) -> Option<(&'static str, Value, &'static str)> {
    match state {
        DRAFT => Some(("invoice.submit", json!({"amount": 12.5}), REVIEW)),
        REVIEW if cycles_left > 0 => Some((
            "invoice.reject",
            json!({"reason": "missing purchase order"}),
            DRAFT,
        )),
        REVIEW => Some(("invoice.approve", json!({}), APPROVED)),
        APPROVED => Some(("invoice.discharge", json!({}), DISCHARGED)),
        _ => None,
    }
}

/// The same call with `{"handle": handle}` added.
pub fn with_handle(arguments: &Value, handle: &str) -> Value {
    let mut arguments = arguments.clone();
    arguments["handle"] = json!(handle);
    arguments
}

/// `structuredContent.error.code` of an error result, if it is one.
pub fn error_code(result: &CallToolResult) -> Option<String> {
    if result.is_error != Some(true) {
        return None;
    }
    Some(
        result
            .structured_content
            .as_ref()
            .and_then(|s| s["error"]["code"].as_str())
            .unwrap_or("(no code)")
            .to_string(),
    )
}

/// The handle a minting call returned; panics if the call failed.
pub fn minted_handle(result: &CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "minting failed: {result:?}");
    result
        .structured_content
        .as_ref()
        .and_then(|s| s["handle"].as_str())
        .unwrap_or_else(|| panic!("the result carries the handle: {result:?}"))
        .to_string()
}

/// `structuredContent.state` of a successful `invoice.status`.
pub fn state_of(result: &CallToolResult) -> Option<String> {
    if result.is_error == Some(true) {
        return None;
    }
    result
        .structured_content
        .as_ref()
        .and_then(|s| s["state"].as_str())
        .map(str::to_string)
}

/// A small deterministic pseudo-random sequence (xorshift), so a failing run can be replayed
/// from the seed it prints.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A seed from the clock, or `TURNSTILE_TEST_SEED` to replay one.
pub fn seed() -> u64 {
    std::env::var("TURNSTILE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}
