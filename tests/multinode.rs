//! Several server processes sharing instances through Redis: a transition made on one server
//! reaches the sessions of the other (DESIGN behaviour 7), and each server gates on the state
//! they share, not on a stale copy.

mod common;

use common::{Client, PluginDir, Server, names};
use serde_json::json;

fn node(plugins: &PluginDir, namespace: &str) -> Server {
    let redis = std::env::var("TURNSTILE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    Server::http(
        plugins.path(),
        &[
            "--state-handle-key",
            "--store",
            &redis,
            "--store-namespace",
            namespace,
        ],
    )
}

#[tokio::test]
async fn a_transition_on_one_server_notifies_and_regates_the_other() {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("multinode_{}", uuid::Uuid::new_v4().simple());
    let east = node(&plugins, &namespace);
    let west = node(&plugins, &namespace);
    let alice = Client::http(&east.url).await;
    let bob = Client::http(&west.url).await;

    let minted = alice.call("invoice.submit", json!({"amount": 12})).await;
    assert_ne!(minted.is_error, Some(true), "{minted:?}");
    let handle = minted.structured_content.unwrap()["handle"]
        .as_str()
        .unwrap()
        .to_string();
    alice.changes.wait_for(1).await;

    // Bob, on the other server, sees the instance as Alice left it, and watches it.
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    let approved = alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    bob.changes.wait_for(1).await;
    assert_eq!(
        bob.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    // West gates on the shared state: approving again is refused there too.
    let again = bob.call("invoice.approve", json!({"handle": handle})).await;
    assert_eq!(
        again.structured_content.unwrap()["error"]["code"],
        "FORBIDDEN"
    );

    let discharged = bob
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_ne!(discharged.is_error, Some(true), "{discharged:?}");
    alice.changes.wait_for(3).await;
    let status = alice
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "discharged");
}
