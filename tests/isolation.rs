//! Crash isolation (issue 12, item 4): a plugin run in a process of its own (`--isolate NAME`,
//! or its manifest's `"isolate": true`) that aborts fails only its calls in flight
//! (`PLUGIN_CRASHED`), while the server and the other plugins keep serving and the plugin comes
//! back; and an isolated plugin otherwise serves as an in-process one does.

mod common;

use std::{collections::BTreeSet, fs, time::Duration};

use common::{
    Client, PluginDir, Server, built_plugin, error_code, eventually, invoice_lifecycle, names,
    text_of,
};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Waits (at most 10 s) until `check` holds for the server's `/stats`.
async fn wait_for_stats(server: &Server, what: &str, check: impl Fn(&Value) -> bool) {
    let what = format!("never saw {what}");
    server
        .stats_until(&what, Duration::from_secs(10), check)
        .await;
}

/// A `testkit.slow` call of `ms` made by `other` (which it closes afterwards), once the plugin
/// runs it.
async fn slow_call_running(server: &Server, other: Client, ms: u64) -> JoinHandle<CallToolResult> {
    let slow = tokio::spawn(async move {
        let result = other.call("testkit.slow", json!({ "ms": ms })).await;
        other.close().await;
        result
    });
    wait_for_stats(server, "the slow call running", |stats| {
        stats["plugins"]["testkit"]["calls_running"] == 1
    })
    .await;
    slow
}

/// The `turnstile plugin-host` processes the server runs now.
fn plugin_processes(server: &Server) -> BTreeSet<u32> {
    let tasks = format!("/proc/{}/task", server.pid());
    let mut children = BTreeSet::new();
    for task in fs::read_dir(&tasks).expect("the server's threads") {
        let path = task.expect("a thread").path().join("children");
        // A thread may exit between listing and reading.
        let Ok(pids) = fs::read_to_string(path) else {
            continue;
        };
        children.extend(
            pids.split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok()),
        );
    }
    children.retain(|pid: &u32| {
        fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("plugin-host"))
    });
    children
}

#[tokio::test]
async fn an_isolated_plugin_that_aborts_fails_only_its_calls_in_flight_and_comes_back() {
    let (_plugins, server, client) =
        common::serve_and_connect(&["invoice", "testkit"], &["--isolate", "testkit"]).await;
    let other = Client::http(&server.url).await;
    // The child's stderr is the server's: its own log line is there.
    server.wait_for_log("plugin-host: serving");

    // A call in flight in the same process when it dies.
    let slow = slow_call_running(&server, other, 30000).await;

    let aborted = client.call("testkit.abort", json!({})).await;
    assert_eq!(error_code(&aborted), "PLUGIN_CRASHED", "{aborted:?}");
    let message = aborted.structured_content.as_ref().unwrap()["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().contains("SIGABRT"),
        "the error says how the process ended: {message}"
    );
    assert!(
        text_of(&aborted).contains("retrying may succeed"),
        "{aborted:?}"
    );
    let slow = slow.await.expect("the slow call's task");
    assert_eq!(error_code(&slow), "PLUGIN_CRASHED", "{slow:?}");

    // One ERROR line names the plugin and the signal.
    let line = server.wait_for_log("isolated plugin testkit: its process was killed by signal 6");
    assert!(line.contains("ERROR"), "{line}");
    let crash_lines = server
        .stderr()
        .lines()
        .filter(|line| line.contains("its process was killed"))
        .count();
    assert_eq!(crash_lines, 1, "{}", server.stderr());

    // The server and the in-process plugin never noticed.
    let submitted = client.call("invoice.submit", json!({"amount": 10})).await;
    assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
    assert_eq!(client.invoice_state().await, json!("review"));

    // The next call to the plugin waits for its restart and succeeds.
    let echoed = client
        .call("testkit.echo", json!({"after": "the crash"}))
        .await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert_eq!(
        echoed.structured_content.unwrap()["input"],
        json!({"after": "the crash"})
    );
    let stats = server.stats().await;
    assert_eq!(stats["plugins"]["testkit"]["isolated"], true, "{stats}");
    assert_eq!(stats["plugins"]["testkit"]["process_crashes"], 1, "{stats}");
    assert!(
        stats["plugins"]["invoice"].get("isolated").is_none(),
        "{stats}"
    );
}

/// A crash fires nothing: the workflow call that aborted leaves its instance where it was, and
/// the same call made again moves it.
#[tokio::test]
async fn a_workflow_call_that_crashes_its_plugin_fires_nothing() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["testkit"], &["--isolate", "testkit"]).await;
    let aborted = client.call("testkit.go", json!({"abort": true})).await;
    assert_eq!(error_code(&aborted), "PLUGIN_CRASHED", "{aborted:?}");
    client.changes.stays_at(0).await;
    let menu = client.tool_names().await;
    assert!(menu.contains(&"testkit.go".to_string()), "{menu:?}");
    assert!(!menu.contains(&"testkit.reset".to_string()), "{menu:?}");

    let moved = client.call("testkit.go", json!({})).await;
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    assert_eq!(moved.structured_content.unwrap()["state"], "done");
    client.changes.wait_for(1).await;
    assert!(client.offers("testkit.reset").await);
}

#[tokio::test]
async fn an_isolated_invoice_serves_its_whole_lifecycle_with_list_changed() {
    let (_plugins, server, client) =
        common::serve_and_connect(&["invoice"], &["--isolate", "invoice"]).await;
    invoice_lifecycle(&client).await;
    assert_eq!(server.stats().await["plugins"]["invoice"]["isolated"], true);
    assert_eq!(plugin_processes(&server).len(), 1);
}

/// What a plugin logs and reports during a call reaches the client, and a deadline reaches the
/// plugin (`is_cancelled`), across the process boundary.
#[tokio::test]
async fn host_services_and_deadlines_cross_the_process_boundary() {
    let (_plugins, server, client) = common::serve_and_connect(
        &["testkit"],
        &["--isolate", "testkit", "--tool-timeout", "1"],
    )
    .await;
    client.set_log_level("debug").await;
    let reported = client
        .call_with_meta(
            "testkit.report",
            json!({"count": 2, "level": "info"}),
            json!({"progressToken": "p"}),
        )
        .await;
    assert_eq!(reported.structured_content.unwrap()["services"], true);
    // Each kind arrives in order; a log line and a progress report cross the pipe as separate
    // frames relayed to two notification kinds, so their relative order may differ. A request
    // with a progress token is served by rmcp, which sends log lines on the session's stream and
    // progress on the request's: the last log line may reach the client just after the answer.
    // (Without a progress token both go on the request's stream: `tests/sessions.rs`.)
    let events = client
        .events_when(|events| events.iter().filter(|e| e.starts_with("log:")).count() >= 2)
        .await;
    let of_kind = |kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|event| event.starts_with(kind))
            .cloned()
            .collect()
    };
    assert_eq!(
        of_kind("log:"),
        [r#"log:info:{"step":1}"#, r#"log:info:{"step":2}"#],
        "{events:?}"
    );
    assert_eq!(
        of_kind("progress:"),
        ["progress:1/2", "progress:2/2"],
        "{events:?}"
    );

    client.call("testkit.go", json!({})).await;
    // The plugin would run a minute unless told its call is cancelled.
    let late = client
        .call("testkit.reset", json!({"watch_ms": 60000}))
        .await;
    assert_eq!(error_code(&late), "TOOL_TIMEOUT", "{late:?}");
    wait_for_stats(&server, "the cancelled call returning", |stats| {
        stats["plugins"]["testkit"]["calls_running"] == 0
    })
    .await;
    // It gave up, so the transition did not happen.
    assert!(client.offers("testkit.reset").await);
}

/// A plugin can ask for isolation itself; its configuration reaches its process.
#[tokio::test]
async fn a_manifest_that_asks_for_isolation_is_isolated() {
    let plugins = PluginDir::with(&["testkit"]);
    let server = Server::http_with_env(
        plugins.path(),
        &[],
        &[("TURNSTILE_PLUGIN_TESTKIT_ISOLATE", "true")],
    );
    let client = Client::http(&server.url).await;
    let echoed = client.call("testkit.echo", json!({})).await;
    assert_eq!(
        echoed.structured_content.unwrap()["config"],
        json!({"isolate": "true"})
    );
    let aborted = client.call("testkit.abort", json!({})).await;
    assert_eq!(error_code(&aborted), "PLUGIN_CRASHED", "{aborted:?}");
    let echoed = client.call("testkit.echo", json!({})).await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
}

/// A replaced library gets a process of its own; the old one is stopped once its calls are
/// done, and only then.
#[tokio::test]
async fn replacing_an_isolated_plugin_starts_a_new_process_and_stops_the_old_one() {
    let (plugins, mut server, client) =
        common::serve_and_connect(&["testkit"], &["--isolate", "testkit"]).await;
    let other = Client::http(&server.url).await;
    let before = plugin_processes(&server);
    assert_eq!(before.len(), 1, "one process for the one isolated plugin");

    // A call on the old version, in flight across the replacement.
    let slow = slow_call_running(&server, other, 1500).await;
    let library = built_plugin("testkit");
    let name = library.file_name().unwrap();
    let staging = tempfile::tempdir().expect("temp dir");
    fs::copy(&library, staging.path().join(name)).expect("stage");
    fs::rename(staging.path().join(name), plugins.path().join(name)).expect("deploy");
    server.wait_for_log("plugin replaced");
    let during = plugin_processes(&server);
    assert_eq!(during.len(), 2, "old and new run side by side: {during:?}");
    assert!(during.is_superset(&before));

    let slow = slow.await.expect("the slow call's task");
    assert_ne!(
        slow.is_error,
        Some(true),
        "the old process finished its call: {slow:?}"
    );
    let after = eventually(
        "the old process never stopped",
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || {
            let after = plugin_processes(&server);
            if after.len() == 1 {
                Ok(after)
            } else {
                Err(format!("{after:?}"))
            }
        },
    )
    .await;
    assert!(after.is_disjoint(&before), "the old process is gone");
    let echoed = client.call("testkit.echo", json!({})).await;
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert!(server.is_running());
    assert!(
        !server.stderr().contains("its process was killed"),
        "a stopped process is not a crash: {}",
        server.stderr()
    );
    assert_eq!(
        client.tool_names().await,
        names(&common::TESTKIT_STARTING_TOOLS)
    );
}
