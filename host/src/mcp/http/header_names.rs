//! The Streamable HTTP transport's own header names, as `HeaderName`s made at compile time.
//!
//! rmcp spells them as `&str` (`"Mcp-Session-Id"`), and a `HeaderMap` looked up by a `&str`
//! parses and lowercases the name again on every lookup; a session's POST looks up its session
//! id several times before its answer. A test holds each name to rmcp's spelling.

use axum::http::HeaderName;

/// `Mcp-Session-Id`.
pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// `Last-Event-Id`.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// `Mcp-Method` (2026-07-28: the request's method, which rmcp checks against its body).
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");

#[cfg(test)]
mod tests {
    use rmcp::transport::common::http_header::{
        HEADER_LAST_EVENT_ID, HEADER_MCP_METHOD, HEADER_MCP_PROTOCOL_VERSION, HEADER_SESSION_ID,
    };

    use super::*;

    #[test]
    fn each_name_is_rmcps() {
        for (ours, rmcps) in [
            (SESSION_ID, HEADER_SESSION_ID),
            (PROTOCOL_VERSION, HEADER_MCP_PROTOCOL_VERSION),
            (LAST_EVENT_ID, HEADER_LAST_EVENT_ID),
            (MCP_METHOD, HEADER_MCP_METHOD),
        ] {
            assert_eq!(ours, HeaderName::from_bytes(rmcps.as_bytes()).unwrap());
        }
    }
}
