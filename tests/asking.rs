//! Asking the person (issue 40), as clients without a person see it: a client that cannot show
//! a form is refused a confirmed step (INPUT_UNAVAILABLE) and nothing moves; an operator who
//! chose `--confirm-fallback allow` lets the step run, and the audit trail says nobody
//! confirmed; a request-state key too short refuses the start. The Python SDKs' runs, with a
//! person answering, are in `python_clients.rs`; the conformance suite's in `.ci/run`.

mod common;

use common::{Client, PluginDir, error_code, handle_of, state_of};
use serde_json::{Value, json};

/// An invoice over the confirmation threshold, approved: the next step is a confirmed payout.
async fn approved_invoice(client: &Client) -> String {
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 8000})).await);
    let approved = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    handle
}

#[tokio::test]
async fn a_client_that_cannot_show_a_form_is_refused_a_confirmed_step() {
    let (_plugins, server) = common::start(&["invoice"], &["--state-handle-key"]);
    // The test client declares no elicitation.
    let client = Client::http(&server.url).await;
    let handle = approved_invoice(&client).await;
    let refused = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_eq!(error_code(&refused), "INPUT_UNAVAILABLE");
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    assert!(
        error["needed"].as_str().unwrap().contains("form"),
        "{error}"
    );
    assert_eq!(state_of(&client, &handle).await, "approved");
    // Below the threshold nothing is asked.
    let small = handle_of(&client.call("invoice.submit", json!({"amount": 80})).await);
    client
        .call("invoice.approve", json!({"handle": small}))
        .await;
    let paid = client
        .call("invoice.discharge", json!({"handle": small}))
        .await;
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
}

#[tokio::test]
async fn confirm_fallback_allow_runs_the_step_and_the_trail_says_nobody_confirmed() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--state-handle-key", "--confirm-fallback", "allow"],
    );
    assert!(
        server
            .wait_for_log("--confirm-fallback allow")
            .contains("WARN")
    );
    let client = Client::http(&server.url).await;
    let handle = approved_invoice(&client).await;
    let paid = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
    assert_eq!(state_of(&client, &handle).await, "discharged");
    let uri = format!("turnstile://invoice/{handle}");
    let read = client
        .read_resource(&uri)
        .await
        .expect("the instance resource");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("a text resource: {read:?}");
    };
    let document: Value = serde_json::from_str(text).unwrap();
    let payout = document["audit"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(payout["event"], "DISCHARGE");
    assert!(
        payout["confirmation"]["fallback"]
            .as_str()
            .is_some_and(|why| why.contains("no person")),
        "{payout}"
    );
}

#[test]
fn a_request_state_key_too_short_refuses_the_start() {
    let plugins = PluginDir::with(&["invoice"]);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "short").unwrap();
    let output = std::process::Command::new(common::turnstile_bin())
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--store",
            "memory:",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--request-state-key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--request-state-key-file") && stderr.contains("at least 32"),
        "{stderr}"
    );
}
