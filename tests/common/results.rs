//! What a tool result says, read the one way every test reads it: its text, its error code, the
//! handle it minted.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use super::Client;

/// The `structuredContent.error.code` of a tool error; panics if the result is not an error.
pub fn error_code(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["error"]["code"]
        .clone()
}

/// The handle a successful call in handle mode returned (`structuredContent.handle`).
pub fn handle_of(result: &CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "call failed: {result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["handle"]
        .as_str()
        .expect("the result carries the handle")
        .to_string()
}

/// The text of a tool result's content, joined.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `structuredContent.error.code` of an error result, if it is one (`None` for a success): for
/// tests that classify outcomes rather than expect one.
pub fn error_code_if_any(result: &CallToolResult) -> Option<String> {
    if result.is_error != Some(true) {
        return None;
    }
    Some(
        result
            .structured_content
            .as_ref()
            .and_then(|s| s["error"]["code"].as_str())
            .unwrap_or("(no code)")
            .to_string(),
    )
}

/// `structuredContent.state` of a successful `invoice.status` result; `None` for an error.
pub fn state_if_ok(result: &CallToolResult) -> Option<String> {
    if result.is_error == Some(true) {
        return None;
    }
    result
        .structured_content
        .as_ref()
        .and_then(|s| s["state"].as_str())
        .map(str::to_string)
}

/// The state `invoice.status` reports for `handle` (handle mode); panics if the call fails.
pub async fn state_of(client: &Client, handle: &str) -> Value {
    let status = client
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
    status.structured_content.expect("structured content")["state"].clone()
}

/// The next step a workflow tool's result carries (`_meta["dev.turnstile/next-step"]`):
/// `{"workflow", "state", "status", "available", "moved", "handle"?}`.
pub fn next_step_of(result: &CallToolResult) -> Value {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(super::NEXT_STEP_META_KEY))
        .cloned()
        .unwrap_or_else(|| panic!("the result carries its next step: {result:?}"))
}

/// The last text block of a result: a workflow tool's next step, in words.
pub fn next_step_sentence(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .next_back()
        .expect("a text block")
}
