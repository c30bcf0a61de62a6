//! DESIGN behaviour 3: transitions, `list_changed`, and per-session instances.

mod common;

use common::{Client, PluginDir, Server, names};
use serde_json::json;

/// submit → reject → submit → approve → discharge, checking the menu and the notification after
/// each step, and that a call which changes no state sends none.
async fn full_lifecycle(client: &Client) {
    let steps: &[(&str, serde_json::Value, &str, &[&str])] = &[
        (
            "invoice.submit",
            json!({"amount": 120.5, "customer": "ACME"}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.reject",
            json!({"reason": "missing PO number"}),
            "draft",
            &["invoice.status", "invoice.submit"],
        ),
        (
            "invoice.submit",
            json!({"amount": 120.5}),
            "review",
            &["invoice.approve", "invoice.reject", "invoice.status"],
        ),
        (
            "invoice.approve",
            json!({}),
            "approved",
            &["invoice.discharge", "invoice.status"],
        ),
        (
            "invoice.discharge",
            json!({}),
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
        assert_eq!(client.invoice_state().await, json!(state));
        // invoice.status changes no state: no notification for it.
        client.changes.stays_at(number + 1).await;
    }
}

mod http {
    use super::*;

    #[tokio::test]
    async fn full_lifecycle_notifies_after_each_transition() {
        let plugins = PluginDir::with(&["invoice"]);
        let server = Server::http(plugins.path(), &[]);
        let client = Client::http(&server.url).await;
        full_lifecycle(&client).await;
        client.close().await;
    }

    #[tokio::test]
    async fn full_lifecycle_on_protocol_2025_06_18() {
        let plugins = PluginDir::with(&["invoice"]);
        let server = Server::http(plugins.path(), &[]);
        let client =
            Client::http_speaking(&server.url, rmcp::model::ProtocolVersion::V_2025_06_18).await;
        full_lifecycle(&client).await;
        client.close().await;
    }

    #[tokio::test]
    async fn two_sessions_have_separate_instances_and_separate_notifications() {
        let plugins = PluginDir::with(&["invoice"]);
        let server = Server::http(plugins.path(), &[]);
        let alice = Client::http(&server.url).await;
        let bob = Client::http(&server.url).await;
        alice.tool_names().await;
        bob.tool_names().await;

        alice.call("invoice.submit", json!({"amount": 1})).await;
        alice.changes.wait_for(1).await;
        assert_eq!(alice.invoice_state().await, json!("review"));
        assert_eq!(bob.invoice_state().await, json!("draft"));
        assert_eq!(
            bob.tool_names().await,
            names(&["invoice.status", "invoice.submit"])
        );
        bob.changes.stays_at(0).await;

        bob.call("invoice.submit", json!({"amount": 2})).await;
        bob.call("invoice.approve", json!({})).await;
        bob.changes.wait_for(2).await;
        alice.changes.stays_at(1).await;
        assert_eq!(alice.invoice_state().await, json!("review"));
        alice.close().await;
        bob.close().await;
    }
}

mod stdio {
    use super::*;

    #[tokio::test]
    async fn full_lifecycle_notifies_after_each_transition() {
        let plugins = PluginDir::with(&["invoice"]);
        let client = Client::stdio(plugins.path()).await;
        full_lifecycle(&client).await;
        client.close().await;
    }
}
