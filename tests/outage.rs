//! Issue 5 under a store outage: a private, non-persistent Redis is killed in the middle of a
//! load and started again on the same port while Turnstile keeps running. While it is down every
//! call returns the clear `STORE_UNAVAILABLE` error within a few seconds and no transition is
//! acknowledged; once it is back, service resumes without restarting Turnstile. While Redis is
//! up, every acknowledged transition is stored and nothing else is.
//!
//! Also: a server whose store is unreachable at start exits non-zero, naming the store.

mod common;

use std::{
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::durability::{REVIEW, next_step, with_handle};
use common::{
    Client, PluginDir, PrivateRedis, Server, error_code_if_any, eventually, free_port, handle_of,
    poll_blocking, state_if_ok, text_of, turnstile_bin,
};
use serde_json::json;

const HANDLES: usize = 20;
/// A call that takes longer than this hangs, as far as a user is concerned.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// "Within a few seconds": the store's operation timeout is 2 s.
const ERROR_WITHIN: Duration = Duration::from_secs(5);

struct Track {
    handle: String,
    acked: String,
    unavailable: u64,
}

/// What the drivers share with the test.
#[derive(Default)]
struct Load {
    tracks: Mutex<Vec<Track>>,
    stop: AtomicBool,
    /// Set just before Redis is killed, cleared once it is back.
    redis_down: AtomicBool,
    acked: AtomicU64,
    unavailable: AtomicU64,
    slowest_error_ms: AtomicU64,
    problems: Mutex<Vec<String>>,
}

impl Load {
    fn problem(&self, text: String) {
        self.problems.lock().unwrap().push(text);
    }

    fn assert_no_problems(&self, when: &str) {
        let problems = self.problems.lock().unwrap();
        assert!(problems.is_empty(), "{when}:\n{}", problems.join("\n"));
    }
}

async fn mint(client: &Client, n: usize) -> Vec<Track> {
    let mut tracks = Vec::new();
    for _ in 0..n {
        let result = client.call("invoice.submit", json!({"amount": 5})).await;
        tracks.push(Track {
            handle: handle_of(&result),
            acked: REVIEW.to_string(),
            unavailable: 0,
        });
    }
    tracks
}

/// Drives every tracked instance through reject/submit cycles until `load.stop`, one call at a
/// time per instance, checking each answer.
fn drive(client: Arc<Client>, load: Arc<Load>) -> Vec<tokio::task::JoinHandle<()>> {
    let n = load.tracks.lock().unwrap().len();
    (0..n)
        .map(|i| {
            let client = client.clone();
            let load = load.clone();
            tokio::spawn(async move {
                while !load.stop.load(Ordering::SeqCst) {
                    let (handle, acked) = {
                        let tracks = load.tracks.lock().unwrap();
                        (tracks[i].handle.clone(), tracks[i].acked.clone())
                    };
                    let (tool, arguments, target) =
                        next_step(&acked, u32::MAX).expect("cycles never end");
                    let down_at_start = load.redis_down.load(Ordering::SeqCst);
                    let started = Instant::now();
                    let outcome = tokio::time::timeout(
                        CALL_TIMEOUT,
                        client.try_call(tool, with_handle(&arguments, &handle)),
                    )
                    .await;
                    let took = started.elapsed();
                    let result = match outcome {
                        Err(_) => {
                            load.problem(format!(
                                "{tool} on {handle} hung: no answer in {CALL_TIMEOUT:?}"
                            ));
                            return;
                        }
                        Ok(Err(error)) => {
                            load.problem(format!("{tool} on {handle}: protocol error {error}"));
                            return;
                        }
                        Ok(Ok(result)) => result,
                    };
                    match error_code_if_any(&result).as_deref() {
                        None => {
                            if down_at_start {
                                load.problem(format!(
                                    "{tool} on {handle} was acknowledged although it started \
                                     while Redis was down: {result:?}"
                                ));
                            }
                            load.tracks.lock().unwrap()[i].acked = target.to_string();
                            load.acked.fetch_add(1, Ordering::SeqCst);
                        }
                        Some("STORE_UNAVAILABLE") => {
                            if !load.redis_down.load(Ordering::SeqCst) {
                                load.problem(format!(
                                    "{tool} on {handle}: STORE_UNAVAILABLE while Redis is up: \
                                     {result:?}"
                                ));
                            }
                            if took > ERROR_WITHIN {
                                load.problem(format!(
                                    "{tool} on {handle}: STORE_UNAVAILABLE took {took:?}"
                                ));
                            }
                            let text = text_of(&result);
                            // A save in flight when Redis died may have been applied: that
                            // answer says so ("unknown"), never "changed nothing".
                            let committed =
                                &result.structured_content.as_ref().unwrap()["error"]["committed"];
                            let honest = if committed == "unknown" {
                                text.contains("it may have moved")
                            } else {
                                committed == false
                                    && (text.contains("changed nothing")
                                        || text.contains(
                                            "the handler ran but the workflow did not move",
                                        ))
                            };
                            if !(text.contains("store") && honest) {
                                load.problem(format!(
                                    "{tool} on {handle}: the error does not say the store \
                                     failed and nothing changed: {text}"
                                ));
                            }
                            load.tracks.lock().unwrap()[i].unavailable += 1;
                            load.unavailable.fetch_add(1, Ordering::SeqCst);
                            load.slowest_error_ms
                                .fetch_max(took.as_millis() as u64, Ordering::SeqCst);
                            // The store is down; do not spin.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Some(code) => {
                            load.problem(format!("{tool} on {handle}: {code}: {result:?}"));
                            return;
                        }
                    }
                }
            })
        })
        .collect()
}

async fn join(drivers: Vec<tokio::task::JoinHandle<()>>) {
    for driver in drivers {
        tokio::time::timeout(CALL_TIMEOUT + Duration::from_secs(5), driver)
            .await
            .expect("drivers stop")
            .expect("driver task");
    }
}

/// Every instance is exactly where its last acknowledged transition left it.
async fn assert_states_are_acked(client: &Client, load: &Load, when: &str) {
    let tracks: Vec<(String, String)> = load
        .tracks
        .lock()
        .unwrap()
        .iter()
        .map(|t| (t.handle.clone(), t.acked.clone()))
        .collect();
    for (handle, acked) in tracks {
        let result = client
            .call("invoice.status", json!({"handle": handle}))
            .await;
        assert_eq!(
            state_if_ok(&result).as_deref(),
            Some(acked.as_str()),
            "{when}: {handle} should be in {acked} (its last acknowledged transition): {result:?}"
        );
    }
}

/// Waits (up to 10 s) until `load` acknowledged `more` transitions beyond what it had.
async fn wait_for_progress(load: &Load, more: u64, when: &str) {
    let target = load.acked.load(Ordering::SeqCst) + more;
    eventually(
        &format!("{when}: no progress"),
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let acked = load.acked.load(Ordering::SeqCst);
            if acked >= target {
                return Ok(());
            }
            load.assert_no_problems(when);
            Err(format!("{acked} acknowledged"))
        },
    )
    .await;
}

/// Drives a load on `load`'s instances until it made progress (200 more acknowledged
/// transitions), stops it cleanly, and finds every acknowledged transition stored.
async fn drive_and_check(client: &Arc<Client>, load: &Arc<Load>, when: &str) {
    let drivers = drive(client.clone(), load.clone());
    wait_for_progress(load, 200, when).await;
    load.stop.store(true, Ordering::SeqCst);
    join(drivers).await;
    load.assert_no_problems(when);
    assert_states_are_acked(client, load, &format!("{when}, load stopped")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_gives_clear_errors_and_service_resumes_without_a_restart() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let mut redis = PrivateRedis::start();
    let port = redis.port;
    let url = redis.url();
    let mut server = Server::http_in(
        plugins.path(),
        data.path(),
        &["--state-handle-key", "--store", &url],
    );
    let client = Arc::new(Client::http(&server.url).await);

    // Redis up: drive a load, stop it cleanly, and find every acknowledged transition stored.
    let load = Arc::new(Load::default());
    *load.tracks.lock().unwrap() = mint(&client, HANDLES).await;
    drive_and_check(&client, &load, "Redis up").await;

    // Kill Redis in the middle of the load.
    load.stop.store(false, Ordering::SeqCst);
    let drivers = drive(client.clone(), load.clone());
    wait_for_progress(&load, 100, "Redis up, second load").await;
    load.redis_down.store(true, Ordering::SeqCst);
    redis.stop();
    let acked_at_kill = load.acked.load(Ordering::SeqCst);
    let down_since = Instant::now();
    // Every instance hears about it, within a few seconds and more than once.
    eventually(
        "not every instance got STORE_UNAVAILABLE three times in 20 s of outage",
        Duration::from_secs(20),
        Duration::from_millis(50),
        async || {
            let heard = !load
                .tracks
                .lock()
                .unwrap()
                .iter()
                .any(|t| t.unavailable < 3);
            if !heard {
                load.assert_no_problems("Redis down");
            }
            heard
        },
    )
    .await;
    load.stop.store(true, Ordering::SeqCst);
    join(drivers).await;
    load.assert_no_problems("Redis down");
    // Only calls already in flight when Redis died may have been acknowledged since: at most one
    // per instance.
    let acked_in_outage = load.acked.load(Ordering::SeqCst) - acked_at_kill;
    assert!(
        acked_in_outage <= HANDLES as u64,
        "{acked_in_outage} transitions acknowledged after Redis was killed"
    );
    // Starting a new instance fails the same way.
    let started = Instant::now();
    let refused = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_eq!(
        error_code_if_any(&refused).as_deref(),
        Some("STORE_UNAVAILABLE"),
        "minting while Redis is down: {refused:?}"
    );
    assert!(started.elapsed() < ERROR_WITHIN, "{:?}", started.elapsed());
    println!(
        "outage: {} STORE_UNAVAILABLE answers, slowest {} ms, in {:.1?}",
        load.unavailable.load(Ordering::SeqCst),
        load.slowest_error_ms.load(Ordering::SeqCst),
        down_since.elapsed()
    );

    // Redis back on the same port, empty (it keeps nothing on disk). Turnstile reconnects.
    let _redis = PrivateRedis::start_on(port);
    load.redis_down.store(false, Ordering::SeqCst);
    let back = Instant::now();
    let handle = eventually(
        "service did not resume after Redis came back",
        Duration::from_secs(10),
        Duration::from_millis(200),
        async || {
            let result = client.call("invoice.submit", json!({"amount": 2})).await;
            match error_code_if_any(&result).as_deref() {
                None => Ok(handle_of(&result)),
                Some("STORE_UNAVAILABLE") => Err(format!("{result:?}")),
                _ => panic!(
                    "service did not resume {:?} after Redis came back: {result:?}",
                    back.elapsed()
                ),
            }
        },
    )
    .await;
    println!(
        "service resumed {:.1?} after Redis restarted",
        back.elapsed()
    );
    assert!(
        server.is_running(),
        "Turnstile must survive the outage without a restart"
    );
    // The old instances went with Redis's memory: they are unknown now, not resurrected in some
    // state, and not stuck in an error.
    let old: Vec<String> = load
        .tracks
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.handle.clone())
        .collect();
    for old_handle in &old {
        let result = client
            .call("invoice.status", json!({"handle": old_handle}))
            .await;
        assert_eq!(
            error_code_if_any(&result).as_deref(),
            Some("UNKNOWN_HANDLE"),
            "{old_handle} after Redis lost its data: {result:?}"
        );
    }

    // New instances work normally, and what is acknowledged is what is stored.
    let load = Arc::new(Load::default());
    let mut tracks = mint(&client, HANDLES - 1).await;
    tracks.push(Track {
        handle,
        acked: REVIEW.to_string(),
        unavailable: 0,
    });
    *load.tracks.lock().unwrap() = tracks;
    drive_and_check(&client, &load, "Redis back").await;
}

/// DESIGN behaviour 3: "If persisting fails, the call returns an error and the instance stays in
/// its old state." Redis stalls (SIGSTOP) rather than dies, so the save is sent but not answered
/// before the store's timeout; the client is told the call changed nothing. When Redis resumes,
/// the instance must still be in its old state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_refused_by_a_stalled_redis_does_not_happen_later() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let redis = PrivateRedis::start();
    let server = Server::http_in(
        plugins.path(),
        data.path(),
        &["--state-handle-key", "--store", &redis.url()],
    );
    let client = Arc::new(Client::http(&server.url).await);
    let handles: Vec<String> = mint(&client, 10)
        .await
        .into_iter()
        .map(|t| t.handle)
        .collect();

    redis.signal("STOP");
    let calls: Vec<_> = handles
        .iter()
        .map(|handle| {
            let client = client.clone();
            let handle = handle.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let result = tokio::time::timeout(
                    CALL_TIMEOUT,
                    client.call(
                        "invoice.reject",
                        json!({"handle": handle, "reason": "stalled"}),
                    ),
                )
                .await
                .expect("no answer while Redis is stalled");
                (result, started.elapsed())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.expect("call task"));
    }
    redis.signal("CONT");
    for (handle, (result, took)) in handles.iter().zip(&answers) {
        assert_eq!(
            error_code_if_any(result).as_deref(),
            Some("STORE_UNAVAILABLE"),
            "{handle}: reject while Redis is stalled: {result:?}"
        );
        assert!(*took < ERROR_WITHIN, "{handle}: the error took {took:?}");
    }
    println!(
        "stalled Redis: STORE_UNAVAILABLE after {:?}",
        answers.iter().map(|(_, took)| *took).collect::<Vec<_>>()
    );
    // Redis works off what it had queued; then every instance must be where the client was told.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut moved = Vec::new();
    for handle in &handles {
        let result = client
            .call("invoice.status", json!({"handle": handle}))
            .await;
        let state = state_if_ok(&result);
        if state.as_deref() != Some(REVIEW) {
            moved.push(format!("{handle}: {state:?} ({})", text_of(&result)));
        }
    }
    assert!(
        moved.is_empty(),
        "{} of {} instances moved although invoice.reject answered STORE_UNAVAILABLE \"{}\":\n{}",
        moved.len(),
        handles.len(),
        text_of(&answers[0].0),
        moved.join("\n")
    );
}

/// Several servers share one Redis (DESIGN: "Redis is also how several server processes share
/// instances"). Starting (or restarting) one of them must not lose what another one acknowledged
/// to its live sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_a_second_server_on_a_shared_redis_keeps_the_first_ones_sessions() {
    let plugins = PluginDir::with(&["invoice"]);
    let (data_a, data_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let redis = PrivateRedis::start();
    let url = redis.url();
    let first = Server::http_in(plugins.path(), data_a.path(), &["--store", &url]);
    let client = Client::http(&first.url).await;
    let submitted = client.call("invoice.submit", json!({"amount": 4})).await;
    assert_eq!(error_code_if_any(&submitted), None, "{submitted:?}");
    assert_eq!(client.invoice_state().await, json!(REVIEW));

    let _second = Server::http_in(plugins.path(), data_b.path(), &["--store", &url]);
    let approved = client.call("invoice.approve", json!({})).await;
    assert_eq!(
        error_code_if_any(&approved),
        None,
        "the first server's session lost its acknowledged state when a second server started \
         on the same Redis: {}",
        text_of(&approved)
    );
    assert_eq!(client.invoice_state().await, json!("approved"));
}

#[test]
fn a_server_whose_store_is_unreachable_exits_naming_the_store() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let url = format!("redis://127.0.0.1:{}", free_port());
    let mut child = Command::new(turnstile_bin())
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--state-handle-key",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--data-dir")
        .arg(data.path())
        .args(["--store", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start turnstile");
    let started = Instant::now();
    let exited = poll_blocking(Duration::from_secs(20), Duration::from_millis(50), || {
        child.try_wait().expect("try_wait")
    });
    let Ok(status) = exited else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("turnstile kept running for 20 s without its store {url}");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "exit status {status}; stderr:\n{stderr}");
    assert!(
        stderr.contains(&url),
        "the message names the store {url}:\n{stderr}"
    );
    assert!(
        !stderr.contains("/mcp"),
        "it never started serving:\n{stderr}"
    );
    println!(
        "exited with {status} after {:.1?}: {}",
        started.elapsed(),
        stderr.trim()
    );
}
