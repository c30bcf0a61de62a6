//! Issue 5, "nothing acknowledged is ever lost": the server is killed with SIGKILL in the middle
//! of a load of concurrent transitions and restarted on the same store. Every instance must then
//! be in the state of its last acknowledged transition, or one transition later if a call was in
//! flight when the server died (it may or may not have been saved), and in no other state.
//!
//! One test per store that survives a restart: embedded (same data directory), Redis,
//! PostgreSQL. A kill -9 of the server is a process crash, not a power cut: for the embedded
//! store the page cache survives, so this proves the save-before-acknowledge ordering, not the
//! fsync (the store's own tests cover that).

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::durability::{DRAFT, REVIEW, Rng, next_step, seed, with_handle};
use common::{
    Client, PluginDir, Server, error_code_if_any, eventually, handle_of, redis_cluster_url,
    state_if_ok,
};
use serde_json::json;

/// Instances driven at once.
const HANDLES: usize = 50;
/// MCP sessions they share (several handles per session, several sessions per server).
const SESSIONS: usize = 10;
/// Acknowledged transitions before the kill, so that it lands in the middle of the load.
const ACKED_BEFORE_KILL: u64 = 300;
/// No call may take longer than this, before or after the kill.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the client knows about one instance.
#[derive(Debug, Clone)]
struct Track {
    handle: String,
    /// The state the last acknowledged transition led to.
    acked: String,
    /// The state the call in flight would lead to, if one is.
    in_flight: Option<String>,
    /// Reject/submit cycles left before approve and discharge.
    cycles_left: u32,
}

/// Server arguments for handle mode on `store` (`None`: the default embedded store in the data
/// directory).
fn server_args(store: Option<&str>) -> Vec<String> {
    let mut args = vec!["--state-handle-key".to_string()];
    if let Some(store) = store {
        args.extend(["--store".to_string(), store.to_string()]);
    }
    args
}

async fn crash_and_recover(store: Option<&str>) {
    let seed = seed();
    let label = store.unwrap_or("embedded (default)");
    println!("store {label}, seed {seed} (replay with TURNSTILE_TEST_SEED={seed})");
    let mut rng = Rng::new(seed);
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let args = server_args(store);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::http_in(plugins.path(), data.path(), &args);

    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(Arc::new(Client::http(&server.url).await));
    }
    // Mint the instances, concurrently: each starts in review.
    let mut minting = Vec::new();
    for i in 0..HANDLES {
        let client = sessions[i % SESSIONS].clone();
        minting.push(tokio::spawn(async move {
            handle_of(&client.call("invoice.submit", json!({"amount": 10})).await)
        }));
    }
    let mut tracks = Vec::new();
    for (i, minted) in minting.into_iter().enumerate() {
        tracks.push(Track {
            handle: minted.await.expect("mint task"),
            acked: REVIEW.to_string(),
            in_flight: None,
            // A few instances finish (approve, discharge) during the load; most keep cycling.
            cycles_left: if i % 10 == 0 {
                rng.below(20) as u32
            } else {
                1_000_000
            },
        });
    }
    let tracks = Arc::new(Mutex::new(tracks));
    let killed = Arc::new(AtomicBool::new(false));
    let acked_total = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::<String>::new()));

    let started = Instant::now();
    let mut drivers = Vec::new();
    for i in 0..HANDLES {
        let client = sessions[i % SESSIONS].clone();
        let tracks = tracks.clone();
        let killed = killed.clone();
        let acked_total = acked_total.clone();
        let unexpected = unexpected.clone();
        drivers.push(tokio::spawn(async move {
            loop {
                if killed.load(Ordering::SeqCst) {
                    return;
                }
                let (handle, step) = {
                    let mut tracks = tracks.lock().unwrap();
                    let track = &mut tracks[i];
                    let Some(step) = next_step(&track.acked, track.cycles_left) else {
                        return; // discharged
                    };
                    track.in_flight = Some(step.2.to_string());
                    (track.handle.clone(), step)
                };
                let (tool, arguments, target) = step;
                let outcome = tokio::time::timeout(
                    CALL_TIMEOUT,
                    client.try_call(tool, with_handle(&arguments, &handle)),
                )
                .await;
                match outcome {
                    Ok(Ok(result)) if result.is_error != Some(true) => {
                        let mut tracks = tracks.lock().unwrap();
                        let track = &mut tracks[i];
                        if track.acked == REVIEW && target == DRAFT {
                            track.cycles_left -= 1;
                        }
                        track.acked = target.to_string();
                        track.in_flight = None;
                        acked_total.fetch_add(1, Ordering::SeqCst);
                    }
                    // The server refused or failed the call: nothing was acknowledged, but a
                    // live server must not fail these at all.
                    Ok(Ok(result)) => {
                        tracks.lock().unwrap()[i].in_flight = None;
                        unexpected.lock().unwrap().push(format!(
                            "{tool} on {handle} returned {:?}: {result:?}",
                            error_code_if_any(&result)
                        ));
                        return;
                    }
                    // No answer: expected only for a call the kill cut off.
                    Ok(Err(error)) => {
                        if !killed.load(Ordering::SeqCst) {
                            unexpected
                                .lock()
                                .unwrap()
                                .push(format!("{tool} on {handle} failed: {error}"));
                        }
                        return;
                    }
                    Err(_) => {
                        if !killed.load(Ordering::SeqCst) {
                            unexpected.lock().unwrap().push(format!(
                                "{tool} on {handle} took longer than {CALL_TIMEOUT:?}"
                            ));
                        }
                        return;
                    }
                }
            }
        }));
    }

    // Let the load build up, then kill the server in the middle of it.
    eventually(
        &format!("fewer than {ACKED_BEFORE_KILL} transitions acknowledged in 30 s on {label}"),
        Duration::from_secs(30),
        Duration::from_millis(20),
        async || {
            let acked = acked_total.load(Ordering::SeqCst);
            if acked >= ACKED_BEFORE_KILL {
                return Ok(());
            }
            let problems = unexpected.lock().unwrap();
            assert!(
                problems.is_empty(),
                "calls failed on a live server ({label}): {problems:?}"
            );
            Err(format!("only {acked}; problems: {problems:?}"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
    let in_flight_at_kill = {
        let tracks = tracks.lock().unwrap();
        killed.store(true, Ordering::SeqCst);
        server.kill9();
        tracks.iter().filter(|t| t.in_flight.is_some()).count()
    };
    let load_time = started.elapsed();
    // Answers the server sent before it died still arrive; the rest never will (rmcp's client
    // does not fail a call whose connection died, it waits), so stop waiting for them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for driver in drivers {
        if driver.is_finished() {
            driver.await.expect("driver task");
        } else {
            driver.abort();
        }
    }
    let acked = acked_total.load(Ordering::SeqCst);
    assert!(
        unexpected.lock().unwrap().is_empty(),
        "calls failed on a live server ({label}): {:?}",
        unexpected.lock().unwrap()
    );
    drop(sessions);

    // Restart on the same store and read every instance back.
    let restarted = Instant::now();
    let server = Server::http_in(plugins.path(), data.path(), &args);
    let client = Client::http(&server.url).await;
    let tracks = tracks.lock().unwrap().clone();
    let unanswered = tracks.iter().filter(|t| t.in_flight.is_some()).count();
    // The test proves something only if the kill cut calls off in the middle.
    assert!(
        unanswered > 0,
        "{label}: none of the {in_flight_at_kill} calls in flight at the kill went unanswered; \
         the kill missed the load"
    );
    let mut wrong = Vec::new();
    let (mut kept_old, mut saved_in_flight) = (0, 0);
    for track in &tracks {
        let result = client
            .call("invoice.status", json!({"handle": track.handle}))
            .await;
        let Some(state) = state_if_ok(&result) else {
            wrong.push(format!(
                "{}: invoice.status failed after restart: {result:?}",
                track.handle
            ));
            continue;
        };
        if state == track.acked {
            if track.in_flight.is_some() {
                kept_old += 1;
            }
        } else if Some(&state) == track.in_flight.as_ref() {
            saved_in_flight += 1;
        } else {
            wrong.push(format!(
                "{}: state {state} after restart, but the last acknowledged transition led to \
                 {} (in flight: {:?})",
                track.handle, track.acked, track.in_flight
            ));
        }
    }
    println!(
        "{label}: {acked} transitions acknowledged in {load_time:.1?} before kill -9, \
         {in_flight_at_kill} calls in flight, {unanswered} never answered ({saved_in_flight} of \
         those saved, {kept_old} not); \
         restart and check took {:.1?}",
        restarted.elapsed()
    );
    // Every commit to the embedded store's file records its free pages, so an open after a
    // crash reads the journal, not the whole file.
    assert!(
        !server.stderr().contains("reading every page"),
        "{label}: the restart rebuilt the store file's free pages: {}",
        server.stderr()
    );
    assert!(
        wrong.is_empty(),
        "{label}: {} of {HANDLES} instances are not where the client was told they are:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // The restarted server carries on from there: one more step on every unfinished instance.
    for track in &tracks {
        let state = state_if_ok(
            &client
                .call("invoice.status", json!({"handle": track.handle}))
                .await,
        )
        .expect("status");
        if let Some((tool, arguments, target)) = next_step(&state, track.cycles_left) {
            let result = client
                .call(tool, with_handle(&arguments, &track.handle))
                .await;
            assert_eq!(
                error_code_if_any(&result),
                None,
                "{tool} on {} after restart: {result:?}",
                track.handle
            );
            let after = client
                .call("invoice.status", json!({"handle": track.handle}))
                .await;
            assert_eq!(state_if_ok(&after).as_deref(), Some(target));
        }
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_acknowledged_embedded() {
    crash_and_recover(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_acknowledged_redis() {
    let url = common::reachable_redis_url();
    crash_and_recover(Some(&url)).await;
}

/// On a cluster, the instances spread over three masters, and the restarted server finds each
/// one by its shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_acknowledged_redis_cluster() {
    crash_and_recover(Some(&redis_cluster_url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_acknowledged_postgres() {
    let url = common::reachable_postgres_url();
    crash_and_recover(Some(&url)).await;
}
