//! DESIGN behaviour 3: transitions, `list_changed`, and per-session instances.

mod common;

use common::{Client, PluginDir, invoice_lifecycle, names};
use serde_json::json;

mod http {
    use super::*;

    #[tokio::test]
    async fn full_lifecycle_notifies_after_each_transition() {
        let (_plugins, _server, client) = common::serve_and_connect(&["invoice"], &[]).await;
        invoice_lifecycle(&client).await;
        client.close().await;
    }

    #[tokio::test]
    async fn full_lifecycle_on_protocol_2025_06_18() {
        let (_plugins, server) = common::start(&["invoice"], &[]);
        let client =
            Client::http_speaking(&server.url, rmcp::model::ProtocolVersion::V_2025_06_18).await;
        invoice_lifecycle(&client).await;
        client.close().await;
    }

    #[tokio::test]
    async fn two_sessions_have_separate_instances_and_separate_notifications() {
        let (_plugins, server, alice) = common::serve_and_connect(&["invoice"], &[]).await;
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
        invoice_lifecycle(&client).await;
        client.close().await;
    }
}
