//! Durable timers (issue 13, items 5 and 8): the invoice plugin's review deadline
//! (`after` in `review`, set short through `TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS`). A
//! review left past its deadline goes back to draft by itself and the watching session gets
//! `list_changed`: with the instance passivated meanwhile, across a server restart during the
//! wait and with the deadline passing while no server runs, on the embedded store and on Redis;
//! and with two servers on one Redis, the timer fires once. The payment plugin's authorization
//! expires the same way.
//!
//! Times are generous bounds, never measurements: a deadline of a few seconds, then "eventually,
//! within 10 s" (`ListChanges::wait_for`).

mod common;

use std::{path::Path, time::Duration};

use common::{Client, PluginDir, Server, eventually, names, state_of};
use serde_json::{Value, json};

/// The review deadline the tests configure, in ms, as the plugin reads it.
const ENV: &str = "TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS";

/// What the invoice's menu shows in review and in draft, named by its handle.
fn in_review() -> Vec<String> {
    names(&["invoice.approve", "invoice.reject", "invoice.status"])
}
fn in_draft() -> Vec<String> {
    names(&["invoice.status", "invoice.submit"])
}

/// A server in handle mode with a review deadline of `deadline_ms`, on `store` (the embedded
/// store in `data` when `None`) under namespace `ns`.
fn start(
    plugins: &PluginDir,
    data: &Path,
    store: Option<&str>,
    ns: &str,
    deadline_ms: &str,
    extra: &[&str],
) -> Server {
    let flags = [&["--state-handle-key"], extra].concat();
    Server::on_store(
        plugins.path(),
        data,
        store,
        ns,
        &flags,
        &[(ENV, deadline_ms)],
    )
}

/// Submits an invoice (minting its instance); returns its handle.
async fn submit(client: &Client) -> String {
    let minted = client.call("invoice.submit", json!({"amount": 250})).await;
    assert_ne!(minted.is_error, Some(true), "{minted:?}");
    let structured = minted.structured_content.expect("structured content");
    assert_eq!(structured["state"], "review");
    structured["handle"].as_str().expect("a handle").to_string()
}

/// The record of `handle` in Redis, as (version, state value).
async fn redis_record(url: &str, ns: &str, handle: &str) -> (u64, Value) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let (version, snapshot): (String, String) = redis::cmd("HMGET")
        .arg(format!("{ns}:i:handle/{handle}"))
        .arg(&["v", "s"])
        .query_async(&mut con)
        .await
        .unwrap();
    let snapshot: Value = serde_json::from_str(&snapshot).unwrap();
    (version.parse().unwrap(), snapshot["value"].clone())
}

fn namespace(test: &str) -> String {
    format!("timers_{test}_{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn a_review_past_its_deadline_goes_back_to_draft_while_passivated() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().unwrap();
    // Instances leave memory after 1 s without a call; the deadline comes after that.
    let server = start(
        &plugins,
        data.path(),
        None,
        "",
        "3000",
        &["--idle-after", "1"],
    );
    let alice = Client::http(&server.url).await;
    let handle = submit(&alice).await;
    alice.changes.wait_for(1).await;
    assert_eq!(
        alice.tool_names_with_meta(json!({"handle": handle})).await,
        in_review()
    );
    // Nobody calls: the timer task wakes the passivated instance, which moves and notifies.
    alice.changes.wait_for(2).await;
    let stats = server.stats().await;
    assert!(
        stats["registry"]["passivated"].as_u64() >= Some(1),
        "the instance was passivated before its deadline: {stats}"
    );
    assert_eq!(
        alice.tool_names_with_meta(json!({"handle": handle})).await,
        in_draft()
    );
    assert_eq!(state_of(&alice, &handle).await, "draft");
    // The draft can be submitted again, and starts a new deadline.
    let again = alice
        .call("invoice.submit", json!({"handle": handle, "amount": 300}))
        .await;
    assert_eq!(again.structured_content.unwrap()["state"], "review");
    alice.changes.wait_for(4).await;
    assert_eq!(state_of(&alice, &handle).await, "draft");
}

/// The server is killed while the review waits; the next one, on the same store, keeps the
/// deadline and notifies its own session when it passes.
async fn the_deadline_survives_a_restart(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().unwrap();
    let ns = namespace("restart");
    // Long enough for a restart to come first, short enough to wait for.
    let deadline = "6000";
    let mut first = start(&plugins, data.path(), store.as_deref(), &ns, deadline, &[]);
    let alice = Client::http(&first.url).await;
    let handle = submit(&alice).await;
    alice.close().await;
    first.kill9();

    let second = start(&plugins, data.path(), store.as_deref(), &ns, deadline, &[]);
    let bob = Client::http(&second.url).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        in_review(),
        "still in review after the restart (a restart slower than the 6 s deadline fails here)"
    );
    bob.changes.wait_for(1).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        in_draft()
    );
    assert_eq!(state_of(&bob, &handle).await, "draft");
    bob.changes.stays_at(1).await;
}

#[tokio::test]
async fn the_deadline_survives_a_restart_on_the_embedded_store() {
    the_deadline_survives_a_restart(None).await;
}

#[tokio::test]
async fn the_deadline_survives_a_restart_on_redis() {
    let url = common::reachable_redis_url();
    the_deadline_survives_a_restart(Some(url)).await;
}

/// The deadline passes while no server runs: the next server fires the timer when it starts,
/// before anyone asks (the store shows the move), once.
#[tokio::test]
async fn a_deadline_that_passed_while_no_server_ran_fires_on_start() {
    let url = common::reachable_redis_url();
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().unwrap();
    let ns = namespace("overdue");
    let first = start(&plugins, data.path(), Some(&url), &ns, "1000", &[]);
    let alice = Client::http(&first.url).await;
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(submit(&alice).await);
    }
    alice.close().await;
    drop(first);
    for handle in &handles {
        assert_eq!(redis_record(&url, &ns, handle).await, (1, json!("review")));
    }
    // Past every deadline, with no server running.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let second = start(&plugins, data.path(), Some(&url), &ns, "1000", &[]);
    for handle in &handles {
        let record = eventually(
            "the timer never fired on start",
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let record = redis_record(&url, &ns, handle).await;
                if record.0 >= 2 {
                    Ok(record)
                } else {
                    Err(format!("{record:?}"))
                }
            },
        )
        .await;
        assert_eq!(record, (2, json!("draft")), "fired on start, once");
    }
    let bob = Client::http(&second.url).await;
    for handle in &handles {
        assert_eq!(state_of(&bob, handle).await, "draft");
        assert_eq!(redis_record(&url, &ns, handle).await.0, 2);
    }
}

/// Two servers on one Redis, both watching the instance: the timer fires once (one saved move,
/// one `list_changed` per session), whichever server fires it.
#[tokio::test]
async fn two_servers_on_one_redis_fire_a_timer_once() {
    let url = common::reachable_redis_url();
    let plugins = PluginDir::with(&["invoice"]);
    let (east_data, west_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ns = namespace("two");
    let east = start(&plugins, east_data.path(), Some(&url), &ns, "2500", &[]);
    let west = start(&plugins, west_data.path(), Some(&url), &ns, "2500", &[]);
    let alice = Client::http(&east.url).await;
    let bob = Client::http(&west.url).await;
    let handle = submit(&alice).await;
    alice.changes.wait_for(1).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        in_review()
    );

    alice.changes.wait_for(2).await;
    bob.changes.wait_for(1).await;
    alice.changes.stays_at(2).await;
    bob.changes.stays_at(1).await;
    assert_eq!(redis_record(&url, &ns, &handle).await, (2, json!("draft")));
    for client in [&alice, &bob] {
        assert_eq!(
            client.tool_names_with_meta(json!({"handle": handle})).await,
            in_draft()
        );
    }
}

/// The payment plugin's authorization expires: capture leaves the menu and the payment is
/// closed.
#[tokio::test]
async fn an_authorization_expires() {
    let plugins = PluginDir::with(&["payment"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::http_in_env(
        plugins.path(),
        data.path(),
        &["--state-handle-key"],
        &[("TURNSTILE_PLUGIN_PAYMENT_AUTHORIZATION_EXPIRY_MS", "1500")],
    );
    let client = Client::http(&server.url).await;
    let authorized = client
        .call(
            "payment.authorize",
            json!({"amount": 10, "currency": "EUR"}),
        )
        .await;
    let structured = authorized.structured_content.expect("structured content");
    assert_eq!(structured["state"], "authorized");
    let handle = structured["handle"].as_str().unwrap().to_string();
    client.changes.wait_for(1).await;
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["payment.capture", "payment.status", "payment.void"])
    );
    client.changes.wait_for(2).await;
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["payment.status"])
    );
    let status = client
        .call("payment.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "expired");
    let capture = client
        .call("payment.capture", json!({"handle": handle}))
        .await;
    assert_eq!(common::error_code(&capture), "FORBIDDEN");
}
