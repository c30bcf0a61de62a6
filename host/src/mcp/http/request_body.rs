//! A POST body as the JSON-RPC request it carries, for `direct.rs`.
//!
//! rmcp reads a message as `ClientJsonRpcMessage`: an untagged enum (request, response,
//! notification, error) whose request is itself an untagged enum of every client request. serde
//! reads an untagged enum by buffering the whole input and trying each variant in turn, so a
//! `tools/call`, the fourteenth request variant, is parsed into a buffer, then fails thirteen
//! times (each failure a formatted error message) before it parses. That was the largest single
//! item in the CPU of a call that fires no transition (BENCHMARKS.md's history, session 11).
//!
//! The answer-only requests a client sends most are read here straight into their variant: the
//! envelope (`jsonrpc`, `id`, `method`) first, then the body again as that one request type,
//! with rmcp's own `Deserialize` for it, so `params` and `_meta` are read exactly as rmcp reads
//! them. Anything else, and anything those two steps refuse, gets rmcp's generic parse, so what
//! is accepted and what is refused does not change.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequest, ClientJsonRpcMessage, ClientRequest, JsonRpcVersion2_0, ListToolsRequest,
    PingRequest, RequestId,
};
use serde::Deserialize;

/// What a request says about itself before its parameters. Other members are skipped.
#[derive(Deserialize)]
struct Envelope<'a> {
    /// Checked, as rmcp checks it: a body that is not JSON-RPC 2.0 is not parsed here.
    #[serde(rename = "jsonrpc")]
    _jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(borrow)]
    method: Cow<'a, str>,
}

/// The request `body` carries and its id, as rmcp would read it; `None` when rmcp would not read
/// it as a request (a notification, a response, or not a message at all).
pub fn parse(body: &[u8]) -> Option<(RequestId, ClientRequest)> {
    parse_typed(body).or_else(|| parse_generic(body))
}

/// rmcp's own reading of `body` (and the reference the tests hold [`parse`] to).
fn parse_generic(body: &[u8]) -> Option<(RequestId, ClientRequest)> {
    match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
        Ok(ClientJsonRpcMessage::Request(request)) => Some((request.id, request.request)),
        _ => None,
    }
}

/// The hot requests, each parsed as its own type (see the module's note).
fn parse_typed(body: &[u8]) -> Option<(RequestId, ClientRequest)> {
    let envelope = serde_json::from_slice::<Envelope>(body).ok()?;
    let request = match &*envelope.method {
        "tools/call" => {
            ClientRequest::CallToolRequest(serde_json::from_slice::<CallToolRequest>(body).ok()?)
        }
        "tools/list" => {
            ClientRequest::ListToolsRequest(serde_json::from_slice::<ListToolsRequest>(body).ok()?)
        }
        "ping" => ClientRequest::PingRequest(serde_json::from_slice::<PingRequest>(body).ok()?),
        _ => return None,
    };
    Some((envelope.id, request))
}

#[cfg(test)]
mod tests {
    use rmcp::model::GetMeta;
    use serde_json::{Value, json};

    use super::*;

    /// What a handler can see of a parsed request: its id, method, params as sent, and `_meta`.
    fn seen(parsed: Option<(RequestId, ClientRequest)>) -> Option<(Value, String, Value, Value)> {
        parsed.map(|(id, request)| {
            (
                serde_json::to_value(&id).unwrap(),
                request.method().to_owned(),
                serde_json::to_value(&request).unwrap(),
                serde_json::to_value(request.get_meta()).unwrap(),
            )
        })
    }

    #[test]
    fn every_body_is_read_as_rmcp_reads_it() {
        let bodies = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "invoice.status", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": "a-7", "method": "tools/call",
                   "params": {"name": "invoice.submit",
                              "arguments": {"amount": 5.25, "count": 18446744073709551615_u64,
                                            "note": "a \"quoted\" \u{e9} line\n"},
                              "_meta": {"idempotencyKey": "k1", "progressToken": 3}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "invoice.status"}, "extra": true}),
            json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
                   "params": {"name": "invoice.status", "arguments": null, "_meta": null}}),
            json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call",
                   "params": {"name": "invoice.status", "arguments": [1, 2]}}),
            json!({"jsonrpc": "2.0", "id": "14", "method": "tools/call",
                   "params": {"name": 7}}),
            json!({"jsonrpc": "2.0", "id": 15, "method": "tools/list", "params": null}),
            json!({"jsonrpc": "2.0", "id": 16, "method": "ping", "params": {"_meta": {"a": 1}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "x"}}),
            json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/list"}),
            // Refused by the typed parse (no name): rmcp reads it as a custom request.
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {}}),
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": "nope"}),
            json!({"jsonrpc": "1.0", "id": 9, "method": "tools/call",
                   "params": {"name": "invoice.status"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 10, "result": {}}),
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            json!([{"jsonrpc": "2.0", "id": 11, "method": "ping"}]),
        ];
        for body in bodies {
            let body = serde_json::to_vec(&body).unwrap();
            assert_eq!(
                seen(parse(&body)),
                seen(parse_generic(&body)),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        for body in [
            &b"{"[..],
            b"",
            b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"",
        ] {
            assert!(parse(body).is_none(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn the_hot_requests_take_the_typed_parse() {
        for body in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "invoice.status", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
        ] {
            let body = serde_json::to_vec(&body).unwrap();
            assert!(parse_typed(&body).is_some(), "{body:?}");
        }
    }
}
