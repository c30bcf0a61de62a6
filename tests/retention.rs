//! Retention (`--retain-final`): an instance in a final state is deleted once the retention
//! period has passed, on the embedded store, Redis and PostgreSQL; one still running is kept.

mod common;
mod durability_support;

use std::time::Duration;

use common::{Client, PluginDir, Server, error_code};
use serde_json::{Value, json};

/// Finishes one invoice and leaves another in review, waits past a 1 s retention, and checks
/// that only the finished one is gone.
async fn finished_instances_go_after_the_retention_period(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("retention{}", uuid::Uuid::new_v4().simple());
    let mut flags = vec!["--state-handle-key", "--retain-final", "1"];
    if let Some(store) = &store {
        flags.extend(["--store", store, "--store-namespace", &namespace]);
    }
    let server = Server::http(plugins.path(), &flags);
    let client = Client::http(&server.url).await;
    let handle_of = |result: rmcp::model::CallToolResult| -> String {
        result.structured_content.unwrap()["handle"]
            .as_str()
            .expect("a handle")
            .to_string()
    };
    let done = handle_of(client.call("invoice.submit", json!({"amount": 5})).await);
    client
        .call("invoice.approve", json!({"handle": done}))
        .await;
    client
        .call("invoice.discharge", json!({"handle": done}))
        .await;
    let running = handle_of(client.call("invoice.submit", json!({"amount": 6})).await);
    let state = |result: rmcp::model::CallToolResult| -> Value {
        result.structured_content.unwrap()["state"].clone()
    };
    assert_eq!(
        state(client.call("invoice.status", json!({"handle": done})).await),
        "discharged"
    );

    let mut gone = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let status = client.call("invoice.status", json!({"handle": done})).await;
        if status.is_error == Some(true) {
            assert_eq!(error_code(&status), "UNKNOWN_HANDLE", "{status:?}");
            gone = true;
            break;
        }
    }
    assert!(gone, "the finished instance outlived its retention");
    assert_eq!(
        state(
            client
                .call("invoice.status", json!({"handle": running}))
                .await
        ),
        "review",
        "an instance still running is kept"
    );
}

#[tokio::test]
async fn on_the_embedded_store() {
    finished_instances_go_after_the_retention_period(None).await;
}

#[tokio::test]
async fn on_redis() {
    let url = durability_support::redis_url();
    durability_support::require_reachable(&url);
    finished_instances_go_after_the_retention_period(Some(url)).await;
}

#[tokio::test]
async fn on_postgres() {
    let url = durability_support::postgres_url();
    durability_support::require_reachable(&url);
    finished_instances_go_after_the_retention_period(Some(url)).await;
}
