//! The SSE framing of what a session is sent: one `data:` event per JSON-RPC message. Shared
//! by the outbox (a session's unprompted messages), a request's own stream, and whatever writes
//! them to a connection.

// rmcp marks MCP logging deprecated (SEP-2577, a future revision); 2025-06-18 and 2025-11-25
// clients, which Turnstile serves, still use it.
#![allow(deprecated)]

use bytes::Bytes;
use rmcp::model::{
    LoggingMessageNotification, LoggingMessageNotificationParam, ResourceUpdatedNotificationParam,
    ServerJsonRpcMessage, ServerNotification,
};

use crate::actors::Notice;

/// One SSE event carrying `json`, a JSON-RPC message on one line (serde_json writes no newline).
pub fn event(json: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(json.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(json);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// `message` as one SSE event.
pub fn message(message: &ServerJsonRpcMessage) -> Bytes {
    event(&serde_json::to_vec(message).unwrap_or_default())
}

/// `notice` as one SSE event; the `list_changed` ones are the same bytes for every session,
/// encoded once.
pub fn notice(notice: &Notice) -> Bytes {
    const TOOLS: &[u8] =
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";
    const PROMPTS: &[u8] =
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/prompts/list_changed\"}\n\n";
    const RESOURCES: &[u8] =
        b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n";
    let notification = match notice {
        Notice::ToolsChanged => return Bytes::from_static(TOOLS),
        Notice::PromptsChanged => return Bytes::from_static(PROMPTS),
        Notice::ResourcesChanged => return Bytes::from_static(RESOURCES),
        Notice::ResourceUpdated(uri) => ServerNotification::ResourceUpdatedNotification(
            rmcp::model::ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(
                &**uri,
            )),
        ),
    };
    self::message(&ServerJsonRpcMessage::notification(notification))
}

/// A log message as one SSE event.
pub fn log(message: &LoggingMessageNotificationParam) -> Bytes {
    let notification = ServerNotification::LoggingMessageNotification(
        LoggingMessageNotification::new(message.clone()),
    );
    self::message(&ServerJsonRpcMessage::notification(notification))
}
