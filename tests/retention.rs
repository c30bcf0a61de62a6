//! Retention (`--retain-final`): an instance in a final state is deleted once the retention
//! period has passed, on the embedded store, Redis and PostgreSQL; one still running is kept.
//! And `--instance-ttl`: any instance idle (no transition) that long is deleted, on every store,
//! while one that keeps moving is kept.

mod common;

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
    let url = common::redis_url();
    common::require_reachable(&url);
    finished_instances_go_after_the_retention_period(Some(url)).await;
}

#[tokio::test]
async fn on_postgres() {
    let url = common::postgres_url();
    common::require_reachable(&url);
    finished_instances_go_after_the_retention_period(Some(url)).await;
}

/// With a 1 s `--instance-ttl` (and no final-state retention), an invoice left in review is
/// deleted while another that keeps moving (reject, submit, ...) is kept until it stops.
async fn idle_instances_go_after_the_ttl(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("ttl{}", uuid::Uuid::new_v4().simple());
    let mut flags = vec![
        "--state-handle-key",
        "--retain-final",
        "0",
        "--instance-ttl",
        "1",
    ];
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
    let idle = handle_of(client.call("invoice.submit", json!({"amount": 5})).await);
    let moving = handle_of(client.call("invoice.submit", json!({"amount": 6})).await);
    // Keep `moving` moving for 4 s (several TTLs), one transition every 250 ms.
    let mut idle_gone = false;
    for step in 0..16 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let tool = if step % 2 == 0 {
            "invoice.reject"
        } else {
            "invoice.submit"
        };
        let moved = client
            .call(
                tool,
                json!({"handle": moving, "reason": "ttl test", "amount": 6}),
            )
            .await;
        assert_ne!(
            moved.is_error,
            Some(true),
            "a moving instance was deleted: {moved:?}"
        );
        let status = client.call("invoice.status", json!({"handle": idle})).await;
        if status.is_error == Some(true) {
            assert_eq!(error_code(&status), "UNKNOWN_HANDLE", "{status:?}");
            idle_gone = true;
        }
    }
    assert!(idle_gone, "the idle instance outlived its TTL");
    // Once it stops moving, it goes too.
    let mut gone = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let status = client
            .call("invoice.status", json!({"handle": moving}))
            .await;
        if status.is_error == Some(true) {
            assert_eq!(error_code(&status), "UNKNOWN_HANDLE", "{status:?}");
            gone = true;
            break;
        }
    }
    assert!(
        gone,
        "the instance outlived its TTL after it stopped moving"
    );
}

#[tokio::test]
async fn ttl_on_the_embedded_store() {
    idle_instances_go_after_the_ttl(None).await;
}

#[tokio::test]
async fn ttl_on_redis() {
    let url = common::redis_url();
    common::require_reachable(&url);
    idle_instances_go_after_the_ttl(Some(url)).await;
}

#[tokio::test]
async fn ttl_on_postgres() {
    let url = common::postgres_url();
    common::require_reachable(&url);
    idle_instances_go_after_the_ttl(Some(url)).await;
}
