//! Fixtures for the durability tests (issue 5): servers started on a data directory the test
//! keeps across restarts (`common::Server::http_in`), a private `redis-server`, and the invoice
//! workflow as a walk of acknowledged transitions.
#![allow(dead_code)] // Each test file uses a different part of this module.

use std::{
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

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

/// A running server whose data directory the test owns, so it can be killed and another started
/// on the same store.
pub use crate::common::Server as Turnstile;

impl Turnstile {
    /// Starts `turnstile serve --http 127.0.0.1:0 --plugins <plugins> --data-dir <data> <extra>`
    /// and waits (up to 30 s) until it listens.
    pub fn start(plugins: &Path, data: &Path, extra: &[&str]) -> Turnstile {
        Turnstile::http_in(plugins, data, extra)
    }
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
