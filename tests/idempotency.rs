//! Safe retries (issue 11): a `tools/call` carrying `_meta.idempotencyKey` that is retried with
//! the same key on the same instance gets the first call's result, without running the plugin or
//! firing anything again, on the embedded store, Redis and PostgreSQL, also after the instance
//! was passivated or the server restarted. A different key runs; a key reused for another call
//! is refused; a malformed key is a JSON-RPC error.

mod common;

use std::time::Duration;

use common::{Client, PluginDir, Server, error_code, handle_of, state_of};
use rmcp::ServiceError;
use serde_json::{Value, json};

fn key(key: &str) -> Value {
    json!({ "idempotencyKey": key })
}

/// Starts a server on `store` (`None`: the embedded store in `data`), sharing `namespace`.
fn start(plugins: &PluginDir, data: &std::path::Path, store: Option<&str>, ns: &str) -> Server {
    let flags = ["--state-handle-key", "--idle-after", "1"];
    Server::on_store(plugins.path(), data, store, ns, &flags, &[])
}

async fn retries_get_the_first_result(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let namespace = format!("idem{}", uuid::Uuid::new_v4().simple());
    let server = start(&plugins, data.path(), store.as_deref(), &namespace);
    let client = Client::http(&server.url).await;

    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    let approve = json!({ "handle": handle, "note": "looks right" });
    let first = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-1"))
        .await;
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(
        first.structured_content.as_ref().unwrap()["state"],
        "approved"
    );

    // The response was lost; the client retries. Without the key this would be FORBIDDEN.
    let retry = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-1"))
        .await;
    assert_eq!(retry, first, "a retry gets the first result");
    assert_eq!(state_of(&client, &handle).await, "approved", "moved once");

    // A different key is a new call: it runs, and the gate refuses it in `approved`.
    let other = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-2"))
        .await;
    assert_eq!(error_code(&other), "FORBIDDEN");
    // A call that fired nothing and failed stored nothing: the same key still refuses.
    let other_again = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-2"))
        .await;
    assert_eq!(error_code(&other_again), "FORBIDDEN");

    // The key reused for other arguments, or another tool: refused, nothing runs.
    let changed = client
        .call_with_meta(
            "invoice.approve",
            json!({ "handle": handle, "note": "something else" }),
            key("approve-1"),
        )
        .await;
    assert_eq!(error_code(&changed), "IDEMPOTENCY_CONFLICT");
    let other_tool = client
        .call_with_meta(
            "invoice.discharge",
            json!({ "handle": handle }),
            key("approve-1"),
        )
        .await;
    assert_eq!(error_code(&other_tool), "IDEMPOTENCY_CONFLICT");
    assert_eq!(state_of(&client, &handle).await, "approved");

    // Passivated (`--idle-after 1`): the instance comes back from the store with its keys.
    let passivated = |stats: &Value| stats["registry"]["instances"].as_u64() == Some(0);
    let what = "the instance was never passivated";
    server
        .stats_until(what, Duration::from_secs(10), passivated)
        .await;
    let after_passivation = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-1"))
        .await;
    assert_eq!(after_passivation, first);

    // Restarted: a new process on the same store honours the key too.
    client.close().await;
    drop(server);
    let server = start(&plugins, data.path(), store.as_deref(), &namespace);
    let client = Client::http(&server.url).await;
    let after_restart = client
        .call_with_meta("invoice.approve", approve.clone(), key("approve-1"))
        .await;
    assert_eq!(after_restart, first);
    let discharged = client
        .call_with_meta(
            "invoice.discharge",
            json!({ "handle": handle }),
            key("discharge-1"),
        )
        .await;
    assert_eq!(
        discharged.structured_content.as_ref().unwrap()["state"],
        "discharged"
    );
    let discharged_again = client
        .call_with_meta(
            "invoice.discharge",
            json!({ "handle": handle }),
            key("discharge-1"),
        )
        .await;
    assert_eq!(discharged_again, discharged);
}

common::on_every_store!(retries_get_the_first_result: on_the_embedded_store, on_redis, on_postgres);

/// A key that is not a string of 1 to 128 characters is a JSON-RPC -32602 naming the field,
/// and nothing runs.
#[tokio::test]
async fn a_malformed_key_is_invalid_params() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["invoice"], &["--state-handle-key"]).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    for bad in [
        json!(42),
        json!(""),
        json!("k".repeat(129)),
        json!({"k": 1}),
    ] {
        let answer = client
            .try_call_with_meta(
                "invoice.approve",
                json!({ "handle": handle }),
                json!({ "idempotencyKey": bad }),
            )
            .await;
        match answer {
            Err(ServiceError::McpError(error)) => {
                assert_eq!(error.code.0, -32602, "{error:?}");
                assert!(error.message.contains("idempotencyKey"), "{error:?}");
            }
            other => panic!("expected -32602 for key {bad}, got {other:?}"),
        }
    }
    assert_eq!(state_of(&client, &handle).await, "review", "nothing ran");
    let longest = client
        .call_with_meta(
            "invoice.approve",
            json!({ "handle": handle }),
            json!({ "idempotencyKey": "k".repeat(128) }),
        )
        .await;
    assert_ne!(longest.is_error, Some(true), "{longest:?}");
}

/// Issue 39, attack 2: a keyed call whose result is large is remembered as having run, not
/// with its result, so it cannot grow its instance's record by its size; a retry is told
/// `IDEMPOTENCY_RESULT_EXPIRED`, runs nothing, and the instance stays where the call left it. A
/// small result is still replayed.
#[tokio::test]
async fn a_large_result_is_remembered_as_having_run() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let server = start(&plugins, data.path(), None, "unused");
    let client = Client::http(&server.url).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    let reason = "r".repeat(100_000);
    let arguments = json!({"handle": handle, "reason": reason});
    let first = client
        .call_with_meta("invoice.reject", arguments.clone(), key("big-1"))
        .await;
    assert_ne!(first.is_error, Some(true), "{first:?}");
    let retry = client
        .call_with_meta("invoice.reject", arguments, key("big-1"))
        .await;
    assert_eq!(error_code(&retry), "IDEMPOTENCY_RESULT_EXPIRED");
    assert_eq!(state_of(&client, &handle).await, "draft", "it ran once");
    let small = json!({"handle": handle, "amount": 6});
    let submitted = client
        .call_with_meta("invoice.submit", small.clone(), key("small-1"))
        .await;
    let replayed = client
        .call_with_meta("invoice.submit", small, key("small-1"))
        .await;
    assert_eq!(
        replayed.structured_content, submitted.structured_content,
        "a small result is replayed"
    );
    assert_eq!(state_of(&client, &handle).await, "review");
}
