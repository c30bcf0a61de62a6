//! One instance, one runner, across servers (issue 38): several server processes share a Redis
//! or PostgreSQL store, and a transition's handler runs on one of them only, however many calls
//! race for it. The testkit's `testkit.reset` writes a line per run of its handler to a file, so
//! the runs are counted across processes; a server paused mid-call loses its lease and cannot
//! commit once it resumes, and one cut off from the store by a partition cannot take its lease
//! back with a renewal the partition held (issue 50).

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::{
    Client, Partition, PluginDir, Scrape, Server, error_code, eventually, handle_of,
    reachable_postgres_url, reachable_redis_url, redis_url,
};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// A server in handle mode on `store`, in `namespace`, with `extra` flags.
fn node(plugins: &PluginDir, store: &str, namespace: &str, extra: &[&str]) -> Server {
    let flags = [&["--state-handle-key"], extra].concat();
    Server::sharing(plugins.path(), store, namespace, &flags)
}

fn namespace() -> String {
    format!("leases_{}", uuid::Uuid::new_v4().simple())
}

/// Three servers on `store`, in a namespace of their own, and two clients of each.
async fn three_servers(plugins: &PluginDir, store: &str) -> (Vec<Server>, Vec<Client>) {
    let namespace = namespace();
    let servers: Vec<Server> = (0..3)
        .map(|_| node(plugins, store, &namespace, &[]))
        .collect();
    with_clients(servers).await
}

/// `servers`, and two clients of each.
async fn with_clients(servers: Vec<Server>) -> (Vec<Server>, Vec<Client>) {
    let mut clients = Vec::new();
    for server in &servers {
        for _ in 0..2 {
            clients.push(Client::http(&server.url).await);
        }
    }
    (servers, clients)
}

/// `calls` calls of `tool` with `arguments`, spread over `clients` round-robin, all at once.
async fn race(
    clients: &[Client],
    calls: usize,
    tool: &str,
    arguments: Value,
) -> Vec<CallToolResult> {
    let racing = (0..calls).map(|n| clients[n % clients.len()].call(tool, arguments.clone()));
    futures_util::future::join_all(racing).await
}

/// How many results succeeded, were refused by the gate, and got each other code.
fn tally(results: &[CallToolResult]) -> (usize, usize, Vec<Value>) {
    let won = results.iter().filter(|r| r.is_error != Some(true)).count();
    let forbidden = results
        .iter()
        .filter(|r| r.is_error == Some(true) && error_code(r) == "FORBIDDEN")
        .count();
    let others = results
        .iter()
        .filter(|r| r.is_error == Some(true) && error_code(r) != "FORBIDDEN")
        .map(error_code)
        .collect();
    (won, forbidden, others)
}

fn runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// Three servers on `store`, 60 racing `testkit.reset` calls on one instance, three rounds:
/// one winner each round, every other call refused by the gate, and one run of the handler.
async fn racing_resets_run_once(store: &str) {
    let plugins = PluginDir::with(&["testkit"]);
    let (servers, clients) = three_servers(&plugins, store).await;
    resets_race(servers, clients).await;
}

/// The rounds of [`racing_resets_run_once`] on `clients` of `_servers`, which stay up until
/// they end.
async fn resets_race(_servers: Vec<Server>, clients: Vec<Client>) {
    let dir = tempfile::tempdir().unwrap();
    let minted = clients[0].call("testkit.go", json!({})).await;
    let handle = handle_of(&minted);
    for round in 0..3 {
        let log = dir.path().join(format!("round-{round}.log"));
        let results = race(
            &clients,
            60,
            "testkit.reset",
            json!({"handle": handle, "run_log": log, "sleep_ms": 20}),
        )
        .await;
        let (won, forbidden, others) = tally(&results);
        assert_eq!(
            (won, forbidden, others.clone()),
            (1, 59, Vec::<Value>::new()),
            "round {round}: {others:?}"
        );
        assert_eq!(
            runs(&log),
            1,
            "round {round}: the handler ran more than once"
        );
        // Back to `done` for the next round (one call: nothing races it).
        let again = clients[round % clients.len()]
            .call("testkit.go", json!({"handle": handle}))
            .await;
        assert_ne!(again.is_error, Some(true), "{again:?}");
    }
}

common::on_every_shared_store!(racing_resets_run_once:
    racing_calls_on_three_servers_run_the_handler_once_on_redis,
    racing_calls_on_three_servers_run_the_handler_once_on_redis_cluster,
    racing_calls_on_three_servers_run_the_handler_once_on_postgres);

/// The rounds of [`racing_resets_run_once`] on three servers of `binary` (an example store's,
/// `example_store_bin`) sharing `store`, in a namespace of their own, which it returns for the
/// cleanup.
async fn resets_race_on_three(binary: &Path, store: &str) -> String {
    let plugins = PluginDir::with(&["testkit"]);
    let namespace = namespace();
    let servers: Vec<Server> = (0..3)
        .map(|_| {
            let flags = ["--state-handle-key"];
            Server::sharing_as(binary, plugins.path(), store, &namespace, &flags)
        })
        .collect();
    let (servers, clients) = with_clients(servers).await;
    resets_race(servers, clients).await;
    namespace
}

/// The same race on a store the host does not ship (issue 53): three `turnstile-mariadb`
/// servers (`host/examples/mariadb-store`, the host with a MariaDB/MySQL store registered by its
/// public API) on one database. `TURNSTILE_TEST_MARIADB_URL` names the server, by default the
/// local one. The namespace's tables (`leases_<uuid>_*`) are dropped afterwards with the
/// machine's `mariadb` client, when it has one and the default server is used (this crate has
/// no MySQL client of its own; the example crate's tests drop theirs).
#[tokio::test]
async fn racing_calls_on_three_turnstile_mariadb_servers_run_the_handler_once() {
    let store = std::env::var("TURNSTILE_TEST_MARIADB_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let binary = common::example_store_bin("turnstile-mariadb");
    let namespace = resets_race_on_three(&binary, &store).await;
    if std::env::var_os("TURNSTILE_TEST_MARIADB_URL").is_none() {
        drop_mariadb_tables(&namespace);
    }
}

/// The same race on three `turnstile-nats` servers (`host/examples/nats-kv-store`, the edge-KV
/// store: fencing by compare-and-set on one KV entry per instance) sharing one JetStream bucket
/// on `TURNSTILE_TEST_NATS_URL`, by default the local server, deleted afterwards.
#[tokio::test]
async fn racing_calls_on_three_turnstile_nats_servers_run_the_handler_once() {
    let store = std::env::var("TURNSTILE_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    common::require_reachable(&store);
    let binary = common::example_store_bin("turnstile-nats");
    let namespace = resets_race_on_three(&binary, &store).await;
    delete_nats_bucket(&store, &namespace);
}

/// Deletes the JetStream stream behind the KV bucket `bucket` (`KV_<bucket>`), speaking the NATS
/// text protocol itself (this crate has no NATS client): best effort, as cleanup.
fn delete_nats_bucket(url: &str, bucket: &str) {
    use std::io::{BufRead, BufReader, Write};
    let address = url.trim_start_matches("nats://");
    let Ok(stream) = std::net::TcpStream::connect(address) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut writer = &stream;
    let request = format!(
        "CONNECT {{\"verbose\":false}}\r\nSUB _cleanup.reply 1\r\n\
         PUB $JS.API.STREAM.DELETE.KV_{bucket} _cleanup.reply 0\r\n\r\n"
    );
    if writer.write_all(request.as_bytes()).is_err() {
        return;
    }
    // The INFO line, then the answer (a MSG line and its payload) or a timeout.
    for line in BufReader::new(&stream).lines().take(4) {
        match line {
            Ok(line) if line.starts_with("MSG ") || line.starts_with("-ERR") => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// Drops the tables of `namespace` in the local MariaDB's `test` database, by its command-line
/// client: best effort, as cleanup (a machine without the client keeps them).
fn drop_mariadb_tables(namespace: &str) {
    let client = |sql: &str| {
        std::process::Command::new("mariadb")
            .args(["-h127.0.0.1", "-uroot", "-N", "test", "-e", sql])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let listed = format!(
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = 'test' AND table_name LIKE '{namespace}\\_%'"
    );
    let Some(tables) = client(&listed) else {
        return;
    };
    let tables: Vec<&str> = tables.split_whitespace().collect();
    if !tables.is_empty() {
        // Foreign keys may tie the tables together: dropped as a set, checks off.
        client(&format!(
            "SET FOREIGN_KEY_CHECKS = 0; DROP TABLE IF EXISTS {}",
            tables.join(", ")
        ));
    }
}

/// 60 racing captures of one authorized payment over three servers: one capture, no conflict.
async fn racing_captures_capture_once(store: &str) {
    let plugins = PluginDir::with(&["payment"]);
    let (_servers, clients) = three_servers(&plugins, store).await;
    let authorized = clients[0]
        .call("payment.authorize", json!({"amount": 5, "currency": "EUR"}))
        .await;
    assert_ne!(authorized.is_error, Some(true), "{authorized:?}");
    let handle = handle_of(&authorized);
    let results = race(&clients, 60, "payment.capture", json!({"handle": handle})).await;
    let (won, forbidden, others) = tally(&results);
    assert_eq!(
        (won, forbidden, others.clone()),
        (1, 59, Vec::<Value>::new()),
        "{others:?}"
    );
    let status = clients[5]
        .call("payment.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "captured");
}

common::on_every_shared_store!(racing_captures_capture_once:
    racing_captures_on_three_servers_capture_once_on_redis,
    racing_captures_on_three_servers_capture_once_on_redis_cluster,
    racing_captures_on_three_servers_capture_once_on_postgres);

/// A server paused (SIGSTOP) in the middle of a slow call loses its lease; another server takes
/// the instance over and commits; the paused server, resumed, runs to the end of its handler but
/// its save is refused by the fencing token. The instance moved once, and after the takeover
/// only the new holder ran the handler.
/// Waits (at most 10 s) until the plugin has started a run it logs in `log`.
async fn until_started(log: &Path) {
    let started = async || runs(log) > 0;
    let (within, every) = (Duration::from_secs(10), Duration::from_millis(10));
    eventually("the slow call never started", within, every, started).await;
}

#[tokio::test]
async fn a_paused_server_cannot_commit_after_another_took_over() {
    let plugins = PluginDir::with(&["testkit"]);
    let namespace = namespace();
    let store = redis_url();
    let short = ["--lease-ttl", "600", "--lease-wait", "5000"];
    let paused = node(&plugins, &store, &namespace, &short);
    let other = node(&plugins, &store, &namespace, &short);
    let alice = Client::http(&paused.url).await;
    let bob = Client::http(&other.url).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let handle = handle_of(&alice.call("testkit.go", json!({})).await);

    // The same request, as a client retrying at another server after a timeout sends it.
    let arguments = json!({"handle": handle, "run_log": log, "sleep_ms": 1500});
    let slow = {
        let arguments = arguments.clone();
        tokio::spawn(async move { alice.call("testkit.reset", arguments).await })
    };
    until_started(&log).await;
    paused.signal(libc::SIGSTOP);
    // Bob's call waits out the paused server's lease, then runs and commits.
    let taken = bob.call("testkit.reset", arguments).await;
    assert_ne!(taken.is_error, Some(true), "{taken:?}");
    assert_eq!(runs(&log), 2, "the paused run, then the new holder's");
    // Both runs were one attempt (this instance, from this version, by this tool, with these
    // arguments): they got the same idempotency key to pass on to outside services, which then
    // act once.
    let lines = std::fs::read_to_string(&log).unwrap();
    let keys: Vec<&str> = lines
        .lines()
        .map(|line| line.split(' ').nth(1).unwrap())
        .collect();
    assert!(keys[0].len() == 32 && keys[0] == keys[1], "{lines}");
    paused.signal(libc::SIGCONT);
    let refused = slow.await.unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(error_code(&refused), "CONFLICT", "{refused:?}");
    // One transition: the instance is in `idle` once (bob's), and nothing else ran.
    let status = bob.call("testkit.go", json!({"handle": handle})).await;
    assert_ne!(
        status.is_error,
        Some(true),
        "idle after one reset: {status:?}"
    );
    assert_eq!(runs(&log), 2);
    assert_eq!(
        Scrape::of(&paused)
            .await
            .value("turnstile_lease_fenced_total", &[]),
        1.0
    );
    assert_eq!(
        Scrape::of(&other)
            .await
            .value("turnstile_leases_granted_total", &[("kind", "takeover")]),
        1.0
    );
}

/// A call that waits longer than `--lease-wait` for another server's lease is answered BUSY,
/// with a retry hint, and its handler never runs.
#[tokio::test]
async fn a_call_that_waits_too_long_is_busy_and_runs_nothing() {
    let plugins = PluginDir::with(&["testkit"]);
    let namespace = namespace();
    let store = redis_url();
    let holder = node(&plugins, &store, &namespace, &[]);
    let waiter = node(&plugins, &store, &namespace, &["--lease-wait", "200"]);
    let alice = Client::http(&holder.url).await;
    let bob = Client::http(&waiter.url).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let handle = handle_of(&alice.call("testkit.go", json!({})).await);
    let slow = {
        let arguments = json!({"handle": handle, "run_log": log, "sleep_ms": 1500});
        tokio::spawn(async move { alice.call("testkit.reset", arguments).await })
    };
    until_started(&log).await;
    let busy = bob
        .call("testkit.reset", json!({"handle": handle, "run_log": log}))
        .await;
    assert_eq!(error_code(&busy), "BUSY", "{busy:?}");
    let retry = &busy.structured_content.as_ref().unwrap()["error"]["retryAfterMs"];
    assert!(retry.as_u64().is_some_and(|ms| ms > 0), "{busy:?}");
    assert_eq!(runs(&log), 1, "the waiting call ran nothing");
    let finished = slow.await.unwrap();
    assert_ne!(finished.is_error, Some(true), "{finished:?}");
}

/// Servers take turns: one server's calls on an instance keep coming with no pause, and a call
/// at another server still gets the lease within `--lease-wait` (the holder, told at its next
/// renewal that the lease is wanted, gives it up after its current call) instead of `BUSY`.
#[tokio::test]
async fn a_busy_server_gives_the_lease_up_to_one_that_waits() {
    let plugins = PluginDir::with(&["testkit"]);
    let namespace = namespace();
    let store = redis_url();
    let busy = node(&plugins, &store, &namespace, &[]);
    let other = node(&plugins, &store, &namespace, &[]);
    let alice = Client::http(&busy.url).await;
    let bob = Client::http(&other.url).await;
    let handle = handle_of(&alice.call("testkit.go", json!({})).await);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looping = {
        let (stop, handle) = (stop.clone(), handle.clone());
        tokio::spawn(async move {
            let mut codes = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for tool in ["testkit.reset", "testkit.go"] {
                    let result = alice.call(tool, json!({"handle": handle})).await;
                    if result.is_error == Some(true) {
                        codes.push(error_code(&result));
                    }
                }
            }
            codes
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        let result = bob.call("testkit.reset", json!({"handle": handle})).await;
        let code = if result.is_error == Some(true) {
            error_code(&result)
        } else {
            json!("ok")
        };
        assert_ne!(code, "BUSY", "{result:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let codes = looping.await.unwrap();
    assert!(
        codes.iter().all(|code| code == "FORBIDDEN"),
        "the busy server's own calls: {codes:?}"
    );
}

/// After a partition heals, a renewal it held back is refused (issue 50, item 7). Server A runs
/// a slow call under the instance's lease; from then on A's requests to the store are held back
/// (its renewal is sent, but not delivered), so its lease lapses, and server B takes the
/// instance over and moves it. Then the partition heals and A's held renewal reaches the store
/// first: refused, it does not take the lease back from B, which moved on (B's next call gets
/// the lease within a wait shorter than A's lease would live), and A's save, delivered behind
/// it, is fenced: its caller is told `CONFLICT`, and the instance moved once.
async fn a_held_back_renewal_is_refused_after_the_partition_heals(store: &str) {
    let plugins = PluginDir::with(&["testkit"]);
    let namespace = namespace();
    let partition = Partition::before(store);
    // A's lease lives 600 ms unless renewed (the renewal is sent about 340 ms after a grant);
    // B waits 300 ms at most for a lease, less than one of A's lives.
    let a_flags = ["--lease-ttl", "600", "--lease-wait", "5000"];
    let b_flags = ["--lease-ttl", "600", "--lease-wait", "300"];
    let cut_off = node(&plugins, &partition.url(store), &namespace, &a_flags);
    let other = node(&plugins, store, &namespace, &b_flags);
    let alice = Client::http(&cut_off.url).await;
    let bob = Client::http(&other.url).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let handle = handle_of(&alice.call("testkit.go", json!({})).await);
    // A call long enough for A to renew its lease, so that the store knows the renewal before
    // the partition (Redis has its script, a connection of A's to PostgreSQL its prepared
    // statement): the renewal held back is then sent whole, not as a first request waiting for
    // an answer before the rest is sent.
    let warm_up = json!({"handle": handle, "sleep_ms": 800});
    let reset = alice.call("testkit.reset", warm_up).await;
    assert_ne!(reset.is_error, Some(true), "{reset:?}");
    let done = alice.call("testkit.go", json!({"handle": handle})).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");

    let slow = {
        let arguments = json!({"handle": handle, "run_log": log, "sleep_ms": 1500});
        tokio::spawn(async move { alice.call("testkit.reset", arguments).await })
    };
    until_started(&log).await;
    let started = Instant::now();
    partition.hold();
    // Unrenewed, A's lease lapses 600 ms after its grant: B's call finds it free and moves the
    // instance (done -> idle).
    tokio::time::sleep_until((started + Duration::from_millis(800)).into()).await;
    let taken = bob
        .call("testkit.reset", json!({"handle": handle, "run_log": log}))
        .await;
    assert_ne!(taken.is_error, Some(true), "{taken:?}");
    // A's handler returns at 1500 ms; its save is sent behind its renewal, and held too.
    tokio::time::sleep_until((started + Duration::from_millis(1800)).into()).await;
    assert!(
        partition.held_bytes() > 0,
        "A's requests were not held back"
    );
    partition.release();

    let refused = slow.await.unwrap();
    assert_eq!(error_code(&refused), "CONFLICT", "{refused:?}");
    // The renewal took nothing back: B's next call gets the lease within its 300 ms wait (a
    // lease granted to A would keep it 600 ms) and finds the instance where B moved it.
    let next = bob.call("testkit.go", json!({"handle": handle})).await;
    assert_ne!(
        next.is_error,
        Some(true),
        "B's call after the partition healed: {next:?}"
    );
    // Two runs of the handler (A's, whose save was refused, and B's): one move. A's clients see
    // B's moves too: the instance is `done` now, where `testkit.go` is refused.
    assert_eq!(runs(&log), 2);
    let alice = Client::http(&cut_off.url).await;
    let seen = alice.call("testkit.go", json!({"handle": handle})).await;
    assert_eq!(error_code(&seen), "FORBIDDEN", "{seen:?}");
}

#[tokio::test]
async fn a_held_back_renewal_is_refused_after_the_partition_heals_on_redis() {
    a_held_back_renewal_is_refused_after_the_partition_heals(&reachable_redis_url()).await;
}

#[tokio::test]
async fn a_held_back_renewal_is_refused_after_the_partition_heals_on_postgres() {
    a_held_back_renewal_is_refused_after_the_partition_heals(&reachable_postgres_url()).await;
}
