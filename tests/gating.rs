//! DESIGN behaviours 1 and 2: what a new session sees, and what happens when an agent calls a
//! step out of order. Each scenario runs over Streamable HTTP and over stdio.

mod common;

use common::{Client, PluginDir, Server, names, text_of};
use serde_json::json;

const DRAFT_MENU: &[&str] = &["invoice.status", "invoice.submit"];

async fn new_session_sees_only_draft_tools_with_compact_descriptions(client: &Client) {
    let tools = client.tools().await;
    let mut listed: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    listed.sort();
    assert_eq!(listed, names(DRAFT_MENU));
    let submit = tools.iter().find(|t| t.name == "invoice.submit").unwrap();
    let compact = submit.description.as_deref().unwrap();
    // After the first transition the same tool family shows full descriptions; compare the two.
    client.call("invoice.submit", json!({"amount": 10})).await;
    let tools = client.tools().await;
    let approve = tools.iter().find(|t| t.name == "invoice.approve").unwrap();
    assert!(
        approve.description.as_deref().unwrap().len() > compact.len(),
        "full descriptions outside the initial state should be longer than the compact one"
    );
    assert!(
        submit.input_schema.get("properties").is_some(),
        "input schema is listed"
    );
}

async fn out_of_order_call_is_forbidden_and_changes_nothing(client: &Client) {
    let result = client.call("invoice.discharge", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    let text = text_of(&result);
    assert!(
        text.contains("not available in the current state"),
        "text: {text}"
    );
    assert!(
        text.contains("invoice.submit"),
        "text lists the available tools: {text}"
    );
    let error = &result
        .structured_content
        .as_ref()
        .expect("structuredContent")["error"];
    assert_eq!(error["code"], "FORBIDDEN");
    assert_eq!(error["tool"], "invoice.discharge");
    assert_eq!(error["workflow"], "invoice");
    assert_eq!(error["state"], "draft");
    let mut allowed: Vec<String> = error["allowed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    allowed.sort();
    assert_eq!(allowed, names(DRAFT_MENU));
    assert_eq!(client.invoice_state().await, json!("draft"));
    assert_eq!(client.tool_names().await, names(DRAFT_MENU));
    client.changes.stays_at(0).await;
}

async fn wrong_arguments_are_a_tool_error_and_fire_nothing(client: &Client) {
    let result = client.call("invoice.submit", json!({"amount": -5})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("amount"),
        "names the problem: {}",
        text_of(&result)
    );
    assert_eq!(
        result.structured_content.unwrap()["error"]["code"],
        "INVALID_ARGUMENTS"
    );
    let result = client.call("invoice.submit", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("amount"),
        "names the missing property: {}",
        text_of(&result)
    );
    assert_eq!(client.invoice_state().await, json!("draft"));
}

async fn unknown_tool_is_a_protocol_error(client: &Client) {
    let error = client
        .try_call("invoice.teleport", json!({}))
        .await
        .expect_err("unknown tool must fail");
    let message = error.to_string();
    assert!(
        message.contains("-32602") || message.contains("unknown tool"),
        "error: {message}"
    );
    // The session still works.
    assert_eq!(client.tool_names().await, names(DRAFT_MENU));
}

macro_rules! over_both_transports {
    ($($scenario:ident),* $(,)?) => {
        mod http {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let plugins = super::PluginDir::with(&["invoice"]);
                    let server = super::Server::http(plugins.path(), &[]);
                    let client = super::Client::http(&server.url).await;
                    super::$scenario(&client).await;
                    client.close().await;
                }
            )*
        }
        mod stdio {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let plugins = super::PluginDir::with(&["invoice"]);
                    let client = super::Client::stdio(plugins.path()).await;
                    super::$scenario(&client).await;
                    client.close().await;
                }
            )*
        }
    };
}

over_both_transports!(
    new_session_sees_only_draft_tools_with_compact_descriptions,
    out_of_order_call_is_forbidden_and_changes_nothing,
    wrong_arguments_are_a_tool_error_and_fire_nothing,
    unknown_tool_is_a_protocol_error,
);
