//! The stores the tests run on: the local Redis, Redis Cluster and PostgreSQL the environment
//! names (a missing one fails the test, it never skips), and a private `redis-server` a test may
//! stop and freeze.

use std::{
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::eventually_blocking;

/// Redis server the tests share (`TURNSTILE_TEST_REDIS_URL`, default the local one).
pub fn redis_url() -> String {
    std::env::var("TURNSTILE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Redis Cluster the tests share (`TURNSTILE_TEST_REDIS_CLUSTER_URL`, default a local one of
/// Deletes every key of `namespace` (`NAMESPACE:*`) from the Redis `con` talks to: the cleanup of
/// a test that wrote into a namespace of its own on the shared server.
pub async fn delete_redis_namespace(con: &mut redis::aio::MultiplexedConnection, namespace: &str) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(con)
        .await
        .unwrap();
    if !keys.is_empty() {
        redis::cmd("DEL").arg(keys).exec_async(con).await.unwrap();
    }
}

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
        eventually_blocking(
            &format!("redis-server on port {port} did not come up"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || redis.answers_ping(),
        );
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

/// The shared Redis's URL, once something answers there (a missing Redis fails the test).
pub fn reachable_redis_url() -> String {
    let url = redis_url();
    require_reachable(&url);
    url
}

/// The shared PostgreSQL's URL, once something answers there (a missing one fails the test).
pub fn reachable_postgres_url() -> String {
    let url = postgres_url();
    require_reachable(&url);
    url
}

/// One `#[tokio::test]` per store that keeps instances across servers, each running
/// `scenario(store)`: the embedded store (`None`), the shared Redis and the shared PostgreSQL
/// (`Some(url)`, once reachable). `on_every_store!(scenario: embedded, redis, postgres)` names the
/// three tests.
macro_rules! on_every_store {
    ($scenario:ident: $embedded:ident, $redis:ident, $postgres:ident) => {
        #[tokio::test]
        async fn $embedded() {
            $scenario(None).await;
        }

        #[tokio::test]
        async fn $redis() {
            $scenario(Some($crate::common::reachable_redis_url())).await;
        }

        #[tokio::test]
        async fn $postgres() {
            $scenario(Some($crate::common::reachable_postgres_url())).await;
        }
    };
}
pub(crate) use on_every_store;

/// One `#[tokio::test]` per store several servers share, each running `scenario(url)`: the
/// shared Redis, the Redis Cluster and PostgreSQL. `on_every_shared_store!(scenario: redis,
/// cluster, postgres)` names the three tests.
macro_rules! on_every_shared_store {
    ($scenario:ident: $redis:ident, $cluster:ident, $postgres:ident) => {
        #[tokio::test]
        async fn $redis() {
            $scenario(&$crate::common::redis_url()).await;
        }

        #[tokio::test]
        async fn $cluster() {
            $scenario(&$crate::common::redis_cluster_url()).await;
        }

        #[tokio::test]
        async fn $postgres() {
            $scenario(&$crate::common::postgres_url()).await;
        }
    };
}
pub(crate) use on_every_shared_store;
