//! A NATS server that stops and comes back under the store: reads fail as `Unavailable` while it
//! is down, a change feed ends (its owner must watch again), and once the server is back the
//! client reconnects on its own and the saved record is there.
//!
//! The test starts a server of its own (`nats-server`, or the binary `TURNSTILE_TEST_NATS_SERVER`
//! names) on a free port, so it can stop it without touching the one the other tests share.

use std::{
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use futures_util::StreamExt;
use turnstile::store::{InstanceRecord, StateStore, StoreError, StoreOptions};
use turnstile_nats_kv_store::NatsKvStore;

/// A nats-server with JetStream, stopped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(port: u16, dir: &Path) -> Self {
        let binary =
            std::env::var("TURNSTILE_TEST_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
        let child = Command::new(&binary)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("this test starts {binary} (set TURNSTILE_TEST_NATS_SERVER): {e}")
            });
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// Opens the store once the server answers (it takes a moment to start).
async fn open(url: &str, options: &StoreOptions) -> NatsKvStore {
    for _ in 0..100 {
        if let Ok(store) = NatsKvStore::open(url.to_owned(), options.clone()).await {
            return store;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the NATS server at {url} did not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_away_and_comes_back() {
    let dir = std::env::temp_dir().join(format!("turnstile-nats-outage-{}", std::process::id()));
    let mut server = Server::start(free_port(), &dir);
    let options = StoreOptions {
        namespace: "outage".to_owned(),
        op_timeout: Duration::from_secs(1),
        ..StoreOptions::default()
    };
    let store = open(&server.url(), &options).await;
    let record = InstanceRecord::first("w", serde_json::json!({"value": "a"}));
    store.save("k", &record, 0).await.unwrap();
    let mut feed = store.watch_changes().await.unwrap().unwrap();
    feed.subscriptions.watch("k").await.unwrap();

    server.stop();
    let ended = tokio::time::timeout(Duration::from_secs(10), feed.changes.next()).await;
    assert_eq!(
        ended.expect("the feed ends when the connection drops"),
        None
    );
    match store.load("k").await {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains(&server.url()), "{message}")
        }
        other => panic!("a read with the server down must be Unavailable, got {other:?}"),
    }

    let port = server.port;
    drop(server);
    let server = Server::start(port, &dir);
    let mut back = None;
    for _ in 0..150 {
        match store.load("k").await {
            Ok(found) => {
                back = Some(found);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let back = back.expect("the store reconnects once the server is back");
    assert_eq!(
        back,
        Some(record),
        "a saved record outlives the server's restart"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
