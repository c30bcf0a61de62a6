//! What an operator's SIGTERM does to a running server (issue "A server you can leave running",
//! item 1): calls in flight deliver their results and the process exits 0; past
//! `--shutdown-timeout` the remaining calls are answered SHUTTING_DOWN, nothing they would still
//! have changed is saved, and the exit code is 1.

mod common;

use std::time::Duration;

use common::{Client, PluginDir, Server, handle_of};
use serde_json::{Value, json};

#[tokio::test]
async fn sigterm_lets_the_calls_in_flight_deliver_their_results_and_exits_0() {
    let (_plugins, mut server) = common::start(&["testkit"], &[]);
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(Client::http(&server.url).await);
    }
    let calls: Vec<_> = clients
        .into_iter()
        .map(|client| {
            tokio::spawn(async move {
                let result = client.call("testkit.slow", json!({"ms": 1500})).await;
                client.close().await;
                result
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.signal(libc::SIGTERM);
    for call in calls {
        let result = call.await.expect("the call's task");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        assert_eq!(result.structured_content.unwrap()["slept_ms"], 1500);
    }
    let code =
        tokio::task::spawn_blocking(move || server.exit_code_within(Duration::from_secs(15)))
            .await
            .unwrap();
    assert_eq!(code, Some(0), "a clean shutdown exits 0");
}

#[tokio::test]
async fn past_the_shutdown_timeout_calls_get_shutting_down_and_nothing_is_saved() {
    let plugins = PluginDir::with(&["testkit"]);
    let data = tempfile::tempdir().unwrap();
    let flags = ["--state-handle-key", "--shutdown-timeout", "1"];
    let mut server = Server::http_in(plugins.path(), data.path(), &flags);
    let client = Client::http(&server.url).await;
    let handle = handle_of(&client.call("testkit.go", json!({})).await);

    let slow = tokio::spawn({
        let handle = handle.clone();
        async move {
            client
                .call("testkit.reset", json!({"handle": handle, "sleep_ms": 5000}))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.signal(libc::SIGTERM);
    let result = slow.await.expect("the call's task");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let error = &result.structured_content.unwrap()["error"];
    assert_eq!(error["code"], "SHUTTING_DOWN", "{error}");
    let code =
        tokio::task::spawn_blocking(move || server.exit_code_within(Duration::from_secs(15)))
            .await
            .unwrap();
    assert_eq!(code, Some(1), "abandoned calls make the exit code 1");

    // The reset never completed for the client, so it must not have been saved: the instance is
    // still in `done`, where `testkit.reset` is on the menu. (The plugin thread was still
    // sleeping when the process exited.)
    let server = Server::http_in(plugins.path(), data.path(), &flags);
    let client = Client::http(&server.url).await;
    let menu: Vec<Value> = client
        .tools_with_meta(json!({ "handle": handle }))
        .await
        .into_iter()
        .map(|tool| json!(tool.name))
        .collect();
    assert!(menu.contains(&json!("testkit.reset")), "{menu:?}");
    assert!(!menu.contains(&json!("testkit.go")), "{menu:?}");
}
