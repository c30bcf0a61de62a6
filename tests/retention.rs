//! Retention (`--retain-final`): an instance in a final state is deleted once the retention
//! period has passed, on the embedded store, Redis and PostgreSQL; one still running is kept.
//! And `--instance-ttl`: any instance idle (no transition) that long is deleted, on every store,
//! while one that keeps moving is kept.

mod common;

use std::time::Duration;

use common::{Client, PluginDir, Server, error_code, handle_of, state_of};
use serde_json::json;

/// An invoice server in handle mode with `flags` on `store` (the embedded store when `None`),
/// in a namespace of its own starting with `prefix`, and a client of it.
async fn connect(
    store: Option<String>,
    prefix: &str,
    flags: &[&str],
) -> (PluginDir, tempfile::TempDir, Server, Client) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    let data = tempfile::tempdir().expect("temp dir");
    let flags = [&["--state-handle-key"], flags].concat();
    let server = Server::on_store(
        plugins.path(),
        data.path(),
        store.as_deref(),
        &namespace,
        &flags,
        &[],
    );
    let client = Client::http(&server.url).await;
    (plugins, data, server, client)
}

/// Finishes one invoice and leaves another in review, waits past a 1 s retention, and checks
/// that only the finished one is gone.
async fn finished_instances_go_after_the_retention_period(store: Option<String>) {
    let flags = ["--retain-final", "1"];
    let (_plugins, _data, _server, client) = connect(store, "retention", &flags).await;
    let done = common::discharged_invoice(&client).await;
    let running = handle_of(&client.call("invoice.submit", json!({"amount": 6})).await);
    assert_eq!(state_of(&client, &done).await, "discharged");

    let what = "the finished instance outlived its retention";
    common::until_deleted(&client, &done, what).await;
    assert_eq!(
        state_of(&client, &running).await,
        "review",
        "an instance still running is kept"
    );
}

common::on_every_store!(finished_instances_go_after_the_retention_period:
    on_the_embedded_store, on_redis, on_postgres);

/// With a 1 s `--instance-ttl` (and no final-state retention), an invoice left in review is
/// deleted while another that keeps moving (reject, submit, ...) is kept until it stops.
async fn idle_instances_go_after_the_ttl(store: Option<String>) {
    let flags = ["--retain-final", "0", "--instance-ttl", "1"];
    let (_plugins, _data, _server, client) = connect(store, "ttl", &flags).await;
    let idle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    let moving = handle_of(&client.call("invoice.submit", json!({"amount": 6})).await);
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
    let what = "the instance outlived its TTL after it stopped moving";
    common::until_deleted(&client, &moving, what).await;
}

common::on_every_store!(idle_instances_go_after_the_ttl:
    ttl_on_the_embedded_store, ttl_on_redis, ttl_on_postgres);

/// A retention delete leaves a tombstone: once the finished invoice is gone, `turnstile
/// instances show` of its handle says retention deleted it, in which state and version (read
/// from the store directly, the server stopped first for the embedded store's file).
async fn a_retention_delete_leaves_a_tombstone(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let namespace = format!("tomb{}", uuid::Uuid::new_v4().simple());
    let data = tempfile::tempdir().expect("temp dir");
    let flags = ["--state-handle-key", "--retain-final", "1"];
    let mut server = Server::on_store(
        plugins.path(),
        data.path(),
        store.as_deref(),
        &namespace,
        &flags,
        &[],
    );
    let client = Client::http(&server.url).await;
    let done = common::discharged_invoice(&client).await;
    common::until_deleted(
        &client,
        &done,
        "the finished instance outlived its retention",
    )
    .await;
    client.close().await;
    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_code_within(Duration::from_secs(10)), Some(0));

    let mut command = std::process::Command::new(common::turnstile_bin());
    command.args(["instances", "--json"]);
    match &store {
        Some(url) => command.args(["--store", url, "--store-namespace", &namespace]),
        None => command.arg("--data-dir").arg(data.path()),
    };
    let output = command.args(["show", &done]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            &shown["deleted"]["by"],
            &shown["deleted"]["kind"],
            &shown["state"]
        ),
        (
            &json!("retention"),
            &json!("retention"),
            &json!("discharged")
        ),
        "{shown}"
    );
    assert!(shown["version"].as_u64().unwrap() >= 2, "{shown}");
}

common::on_every_store!(a_retention_delete_leaves_a_tombstone:
    tombstone_on_the_embedded_store, tombstone_on_redis, tombstone_on_postgres);
