//! Outage tests for the remote stores: a server that is down, stalled or restarted.
//!
//! This module owns the fixtures that break things on purpose: a private `redis-server` the
//! test kills and restarts, and a TCP proxy in front of the shared PostgreSQL/Redis that the
//! test can stall or cut. It must not touch the shared servers' data beyond its own namespace,
//! and asserts only what an outage allows: no hang, no success for an unsaved write, recovery.

use std::{
    net::SocketAddr,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    process::{Child, Command},
    task::JoinSet,
};

use super::{
    InstanceRecord, PostgresStore, RedisStore, StateStore, StoreError, StoreOptions,
    contract::builtin::{postgres_url, redis_url, unique_options},
};

const OP_TIMEOUT: Duration = Duration::from_millis(400);
/// What "fails fast" means here: the op timeout plus scheduling slack on a busy 2-core box.
const FAIL_FAST: Duration = Duration::from_millis(1500);

fn outage_options() -> StoreOptions {
    StoreOptions {
        op_timeout: OP_TIMEOUT,
        connect_timeout: OP_TIMEOUT,
        ..unique_options()
    }
}

/// Connects to a healthy server, trying again if a try times out. This is the tests' setup, not
/// what they check: the op timeout here is short (400 ms), and on a loaded 2-core box a healthy
/// PostgreSQL's first round trips (the schema migration) can take longer (seen in CI).
async fn patiently<S, Fut>(what: &str, connect: impl Fn() -> Fut) -> S
where
    Fut: std::future::Future<Output = Result<S, StoreError>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match connect().await {
            Ok(store) => return store,
            Err(error) if tries < 5 => eprintln!("{what}: try {tries} failed ({error}); again"),
            Err(error) => panic!("{what}: {error} (after {tries} tries)"),
        }
    }
}

/// A port nothing listens on right now (the kernel picks it; we close it at once).
async fn spare_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

async fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens on port {port} after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A throwaway, non-persistent redis-server on `port`, killed when dropped.
async fn start_redis(port: u16) -> Child {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server must be installed for the outage test");
    wait_listening(port).await;
    child
}

/// Asserts `op` fails with `Unavailable` within [`FAIL_FAST`].
async fn assert_fails_fast<T: std::fmt::Debug>(
    what: &str,
    op: impl Future<Output = Result<T, StoreError>>,
) {
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), op)
        .await
        .unwrap_or_else(|_| panic!("{what} hung during the outage"));
    let took = start.elapsed();
    // Shown with --nocapture: what an operator would read in the log.
    eprintln!("{what} after {took:?}: {result:?}");
    assert!(
        matches!(&result, Err(error) if error.is_unavailable()),
        "{what} during outage: {result:?}"
    );
    assert!(took < FAIL_FAST, "{what} took {took:?} to fail");
}

/// Retries `op` until it succeeds, for at most 10 s: the store must recover by itself.
async fn assert_recovers<T>(what: &str, mut op: impl AsyncFnMut() -> Result<T, StoreError>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match op().await {
            Ok(value) => return value,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what} did not recover within 10 s: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted() {
    let port = spare_port().await;
    let mut server = start_redis(port).await;
    let url = format!("redis://127.0.0.1:{port}");
    let store = RedisStore::connect(&url, &outage_options()).await.unwrap();
    let v1 = InstanceRecord::first("w", json!("a"));
    store.save("k", &v1, 0).await.unwrap();

    server.kill().await.unwrap();
    assert_fails_fast("save", store.save("k", &v1.next(json!("b")), 1)).await;
    assert_fails_fast("load", store.load("k")).await;
    assert_fails_fast("count", store.count("")).await;
    assert_fails_fast("ping", store.ping()).await;
    // Still down: every attempt fails, none hangs (reconnects are retried per request).
    assert_fails_fast("save again", store.save("k2", &v1, 0)).await;

    let _server = start_redis(port).await;
    // The restarted server is empty (no persistence): the store must simply work again.
    assert_recovers("save after restart", async || {
        store.save("k3", &v1, 0).await
    })
    .await;
    assert_eq!(store.load("k3").await.unwrap(), Some(v1));
    assert_eq!(
        store.load("k").await.unwrap(),
        None,
        "no persistence was configured"
    );
}

#[tokio::test]
async fn remote_store_down_at_startup_fails_clearly() {
    let port = spare_port().await;
    let redis = format!("redis://127.0.0.1:{port}");
    let postgres = format!("postgres://postgres@127.0.0.1:{port}/test");
    for url in [redis, postgres] {
        let start = Instant::now();
        let opened = super::open(&url, &outage_options()).await;
        let Err(StoreError::Unavailable(msg)) = opened else {
            panic!("opening {url} with nothing listening must be Unavailable");
        };
        eprintln!("open {url}: {msg}");
        assert!(msg.contains(&url), "error should name {url}: {msg}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{url}: took {:?}",
            start.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_store_hanging_at_startup_fails_in_time() {
    let targets = [(redis_url(), 6379), (postgres_url(), 5432)];
    for (url, default_port) in targets {
        // Accepts the TCP connection, then never answers.
        let proxy = Proxy::start(0, upstream_of(&url, default_port)).await;
        proxy.stall(true);
        let proxied = via_proxy(&url, proxy.port);
        let start = Instant::now();
        let opened = tokio::time::timeout(
            Duration::from_secs(10),
            super::open(&proxied, &outage_options()),
        )
        .await
        .unwrap_or_else(|_| panic!("opening {proxied} hung"));
        let took = start.elapsed();
        eprintln!(
            "open {proxied} (hanging) after {took:?}: {:?}",
            opened.as_ref().err()
        );
        assert!(
            matches!(opened, Err(StoreError::Unavailable(_))),
            "{proxied}"
        );
        assert!(took < Duration::from_secs(2), "{proxied}: took {took:?}");
    }
}

/// A TCP proxy to a real server that the test can stall (hold every byte), stall the replies of
/// (hold what the server sends, after it acted on the requests), or cut (close every connection
/// and stop listening), to play a slow or failing network.
struct Proxy {
    port: u16,
    upstream: SocketAddr,
    stalled: Arc<AtomicBool>,
    replies_stalled: Arc<AtomicBool>,
    tasks: JoinSet<()>,
}

impl Proxy {
    async fn start(port: u16, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let replies_stalled = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        let (flag, replies_flag) = (Arc::clone(&stalled), Arc::clone(&replies_stalled));
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let none = Arc::new(AtomicBool::new(false));
                conns.spawn(pump(cr, sw, [Arc::clone(&flag), none]));
                conns.spawn(pump(sr, cw, [Arc::clone(&flag), Arc::clone(&replies_flag)]));
            }
        });
        Self {
            port,
            upstream,
            stalled,
            replies_stalled,
            tasks,
        }
    }

    fn stall(&self, on: bool) {
        self.stalled.store(on, Ordering::SeqCst);
    }

    /// Holds (or lets go of) what the server sends back; what clients send still reaches it.
    fn stall_replies(&self) -> Arc<AtomicBool> {
        self.replies_stalled.store(true, Ordering::SeqCst);
        Arc::clone(&self.replies_stalled)
    }

    /// Closes every proxied connection and the listener (the accept task owns both).
    async fn cut(mut self) -> (u16, SocketAddr) {
        self.tasks.shutdown().await;
        (self.port, self.upstream)
    }
}

/// Copies `from` to `to`, holding the bytes while either flag is up.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: [Arc<AtomicBool>; 2],
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while stalled.iter().any(|flag| flag.load(Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn upstream_of(url: &str, default_port: u16) -> SocketAddr {
    // Enough URL parsing for the test defaults and simple overrides: scheme://[user@]host:port/…
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = host_port
        .rsplit_once(':')
        .map_or((host_port, default_port), |(h, p)| (h, p.parse().unwrap()));
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{port}").parse().unwrap()
}

fn via_proxy(url: &str, proxy_port: u16) -> String {
    let upstream = upstream_of(url, 0);
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let replaced = authority.replace(&upstream.port().to_string(), &proxy_port.to_string());
    url.replacen(authority, &replaced, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stalled_then_cut_then_back() {
    let url = postgres_url();
    let proxy = Proxy::start(0, upstream_of(&url, 5432)).await;
    let proxied = via_proxy(&url, proxy.port);
    let options = outage_options();
    let store = patiently(&format!("PostgreSQL via proxy to {url}"), || {
        PostgresStore::connect(&proxied, &options)
    })
    .await;
    let v1 = InstanceRecord::first("w", json!("a"));
    store.save("k", &v1, 0).await.unwrap();

    // Slow server: time out, never report the save as done.
    proxy.stall(true);
    assert_fails_fast("stalled save", store.save("k", &v1.next(json!("b")), 1)).await;
    assert_fails_fast("stalled load", store.load("k")).await;
    proxy.stall(false);

    // Server gone: connections closed, new ones refused.
    let (port, upstream) = proxy.cut().await;
    assert_fails_fast("save while down", store.save("k2", &v1, 0)).await;
    assert_fails_fast("load while down", store.load("k")).await;

    let _proxy = Proxy::start(port, upstream).await;
    let loaded = assert_recovers("load after restart", async || store.load("k").await).await;
    // The stalled save was cut off before reaching PostgreSQL or after; either way the
    // record is a consistent version, and CAS continues from whatever is stored.
    let current = loaded.expect("record k survives a network outage");
    store
        .save("k", &current.next(json!("c")), current.version)
        .await
        .unwrap();
    store.destroy_namespace().await.unwrap();
}

/// The shared Redis through a [`Proxy`] the test can stall, and a store on it.
async fn redis_through_a_proxy() -> (Proxy, RedisStore) {
    let url = redis_url();
    let proxy = Proxy::start(0, upstream_of(&url, 6379)).await;
    let proxied = via_proxy(&url, proxy.port);
    let options = outage_options();
    let store = patiently(&format!("Redis via proxy to {url}"), || {
        RedisStore::connect(&proxied, &options)
    })
    .await;
    (proxy, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stalled_times_out_then_recovers() {
    let (proxy, store) = redis_through_a_proxy().await;
    let v1 = InstanceRecord::first("w", json!("a"));
    store.save("k", &v1, 0).await.unwrap();

    proxy.stall(true);
    assert_fails_fast("stalled save", store.save("k", &v1.next(json!("b")), 1)).await;
    proxy.stall(false);

    let loaded = assert_recovers("load after stall", async || store.load("k").await).await;
    let current = loaded.expect("record k is still there");
    store
        .save("k", &current.next(json!("c")), current.version)
        .await
        .unwrap();
    store.destroy_namespace().await.unwrap();
    drop(proxy);
}

/// Issue 39, item 8: Redis applies a save, and its reply is held past the timeout. The save's
/// caller gets no answer, but a reread (which waits behind the save's reply on the connection)
/// learns that it was applied: the save is reported as done, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_save_applied_but_unanswered_is_learned_by_rereading() {
    let (proxy, store) = redis_through_a_proxy().await;
    let v1 = InstanceRecord::first("w", json!("a"));
    store.save("k", &v1, 0).await.unwrap();
    let v2 = v1.next(json!("b"));

    let stalled = proxy.stall_replies();
    // The replies flow again after the save has timed out, while its reread waits.
    let release = tokio::spawn(async move {
        tokio::time::sleep(OP_TIMEOUT + OP_TIMEOUT / 4).await;
        stalled.store(false, Ordering::SeqCst);
    });
    let failure = store
        .save("k", &v2, 1)
        .await
        .expect_err("the reply is held");
    assert!(matches!(failure, StoreError::NoAnswer(_)), "{failure}");
    let settled = super::settle_unanswered_save(&store, "k", &v2, 1, failure).await;
    release.await.unwrap();
    assert!(settled.is_ok(), "the save was applied: {settled:?}");
    assert_eq!(store.load("k").await.unwrap().map(|r| r.version), Some(2));
    store.destroy_namespace().await.unwrap();
}

/// `--redis-wait-replicas 1`: with its replica up, a save is acknowledged once the replica has
/// it; with the replica gone, the primary still applies it, but the save is `Ambiguous` (a
/// failover could lose it), not done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_save_waits_for_its_replicas() {
    let primary_port = spare_port().await;
    let _primary = start_redis(primary_port).await;
    let replica_port = spare_port().await;
    let replica = Command::new("redis-server")
        .args(["--port", &replica_port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(["--replicaof", "127.0.0.1", &primary_port.to_string()])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server must be installed for the outage test");
    wait_listening(replica_port).await;
    // A longer timeout than the other outage tests: `WAIT` is given three quarters of it, and
    // the quarter left must cover a loaded 2-core box's delay in answering, or the connection
    // gives up before Redis says how many replicas have the save (seen in CI at 400 ms).
    let options = StoreOptions {
        redis_wait_replicas: 1,
        op_timeout: Duration::from_secs(3),
        ..outage_options()
    };
    let url = format!("redis://127.0.0.1:{primary_port}");
    let store = patiently("a private Redis with a replica", || {
        RedisStore::connect(&url, &options)
    })
    .await;
    // The replica needs a moment to sync before it acknowledges anything.
    let v1 = InstanceRecord::first("w", json!("a"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match store.save("k", &v1, 0).await {
            Ok(()) => break,
            Err(StoreError::Ambiguous { .. }) | Err(StoreError::Conflict { .. }) => {
                assert!(Instant::now() < deadline, "the replica never caught up");
                store.delete("k", None, None).await.unwrap();
            }
            Err(other) => panic!("{other}"),
        }
    }
    drop(replica);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v2 = v1.next(json!("b"));
    let unsure = store.save("k", &v2, 1).await;
    assert!(
        matches!(&unsure, Err(StoreError::Ambiguous { reason, .. }) if reason.contains("0 of the 1")),
        "{unsure:?}"
    );
    assert_eq!(store.load("k").await.unwrap().map(|r| r.version), Some(2));
}

/// Where a reread cannot tell (a store that does not answer in order, here the memory store
/// standing in for one), an unanswered save is `Ambiguous`, not failed; a save the reread finds
/// applied is done.
#[tokio::test]
async fn an_unanswered_save_the_reread_cannot_place_is_ambiguous() {
    let store = super::MemoryStore::new();
    let v1 = InstanceRecord::first("w", json!("a"));
    store.save("k", &v1, 0).await.unwrap();
    let v2 = v1.next(json!("b"));
    let no_answer = || StoreError::NoAnswer("timed out after 2s".into());
    let unsure = super::settle_unanswered_save(&store, "k", &v2, 1, no_answer()).await;
    assert!(
        matches!(unsure, Err(StoreError::Ambiguous { .. })),
        "{unsure:?}"
    );
    store.save("k", &v2, 1).await.unwrap();
    let applied = super::settle_unanswered_save(&store, "k", &v2, 1, no_answer()).await;
    assert!(applied.is_ok(), "{applied:?}");
    // Other failures are not second-guessed.
    let conflict = super::settle_unanswered_save(
        &store,
        "k",
        &v2,
        1,
        StoreError::Fenced {
            key: "k".into(),
            remaining_ms: None,
        },
    )
    .await;
    assert!(matches!(conflict, Err(StoreError::Fenced { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_publish_reaches_subscribers() {
    let url = redis_url();
    let store = RedisStore::connect(&url, &unique_options())
        .await
        .unwrap_or_else(|e| panic!("Redis at {url}: {e}"));
    let mut feed = store.subscribe_changed().await.unwrap();
    feed.subscriptions.watch("inv/42").await.unwrap();
    // Only watched keys come: a change of another instance does not.
    store.publish_changed("elsewhere", "inv/7").await.unwrap();
    store.publish_changed("node-a", "inv/42").await.unwrap();
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        futures_util::StreamExt::next(&mut feed.changes),
    )
    .await
    .expect("notification within 5 s");
    assert_eq!(got, Some(("node-a".to_owned(), "inv/42".to_owned())));
    feed.subscriptions.unwatch("inv/42").await.unwrap();
    store.publish_changed("node-a", "inv/42").await.unwrap();
    let quiet = tokio::time::timeout(
        Duration::from_millis(300),
        futures_util::StreamExt::next(&mut feed.changes),
    )
    .await;
    assert!(quiet.is_err(), "an unwatched change arrived: {quiet:?}");
}
