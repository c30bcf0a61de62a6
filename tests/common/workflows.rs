//! The built plugins' workflows as the tests walk them: menus, and the invoice's lifecycle.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Client, error_code, eventually};

/// What `tools/list` offers a session of the testkit plugin that has touched no instance: the
/// tools that start one (`testkit.go`) and those bound to no workflow.
pub const TESTKIT_STARTING_TOOLS: [&str; 8] = [
    "testkit.abort",
    "testkit.content",
    "testkit.echo",
    "testkit.go",
    "testkit.panic",
    "testkit.quick_slow",
    "testkit.report",
    "testkit.slow",
];

/// Sorted owned names, for comparing menus.
pub fn names(list: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    names.sort();
    names
}

/// submit → reject → submit → approve → discharge, checking the menu and the notification after
/// each step, and that a call which changes no state sends none.
pub async fn invoice_lifecycle(client: &Client) {
    let steps: &[(&str, Value, &str, &[&str])] = &[
        (
            "invoice.submit",
            serde_json::json!({"amount": 120.5, "customer": "ACME"}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.reject",
            serde_json::json!({"reason": "missing PO number"}),
            "draft",
            &["invoice.status", "invoice.submit"],
        ),
        (
            "invoice.submit",
            serde_json::json!({"amount": 120.5}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.approve",
            serde_json::json!({}),
            "approved",
            &["invoice.discharge", "invoice.status"],
        ),
        (
            "invoice.discharge",
            serde_json::json!({}),
            "discharged",
            &["invoice.status"],
        ),
    ];
    client.tool_names().await;
    for (number, (tool, arguments, state, menu)) in steps.iter().enumerate() {
        let result = client.call(tool, arguments.clone()).await;
        assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
        client.changes.wait_for(number + 1).await;
        assert_eq!(client.tool_names().await, names(menu), "menu after {tool}");
        assert_eq!(client.invoice_state().await, serde_json::json!(state));
        // invoice.status changes no state: no notification for it.
        client.changes.stays_at(number + 1).await;
    }
}

/// An invoice taken through submit, approve and discharge (handle mode): its handle, in the
/// final state `discharged`.
pub async fn discharged_invoice(client: &Client) -> String {
    let handle = super::handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    for step in ["invoice.approve", "invoice.discharge"] {
        let result = client.call(step, json!({"handle": handle})).await;
        assert_ne!(result.is_error, Some(true), "{step}: {result:?}");
    }
    handle
}

/// Waits until `invoice.status` finds `handle` no more (`UNKNOWN_HANDLE`: retention deleted the
/// instance), asking every 250 ms for at most 10 s; after that, fails the test with `what`.
pub async fn until_deleted(client: &Client, handle: &str, what: &str) {
    eventually(
        what,
        Duration::from_secs(10),
        Duration::from_millis(250),
        async || {
            let status = client
                .call("invoice.status", json!({"handle": handle}))
                .await;
            if status.is_error == Some(true) {
                assert_eq!(error_code(&status), "UNKNOWN_HANDLE", "{status:?}");
            }
            status.is_error == Some(true)
        },
    )
    .await;
}
