//! What is wrong with a message rmcp could not read, as the JSON-RPC error a client can act on.
//!
//! This module owns the answer to input that is not a message: -32700 when it is not JSON at all,
//! -32600 when it is JSON but not a JSON-RPC 2.0 message MCP accepts (a batch, a non-object, a
//! wrong `jsonrpc`, no `method`, `params` that is not an object, an `id` that is not a string or
//! a number), with the message's `id` echoed whenever it could be read. Both transports use it:
//! `http/endpoint.rs` when rmcp refused a POST body, `stdio.rs` for a line that does not parse.
//!
//! It must not be on the path of a valid message: callers classify only what rmcp (or their own
//! single parse) has already refused, so a message is parsed here at most once, and only when it
//! is about to be answered with an error.

use serde_json::{Map, Value, json};

/// JSON-RPC 2.0: the input is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: the JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: the server failed on its side.
pub const INTERNAL_ERROR: i64 = -32603;
/// Implementation-defined server error: the server cannot take this request now (a limit).
pub const SERVER_BUSY: i64 = -32000;
/// Implementation-defined server error: the request carries no valid credentials.
pub const UNAUTHORIZED: i64 = -32001;

/// A JSON-RPC error to send in answer to a message that could not be served.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub code: i64,
    pub message: String,
    /// The offending message's `id` when it could be read, else `null`.
    pub id: Value,
}

impl Rejection {
    pub fn parse_error(message: impl Into<String>) -> Rejection {
        Rejection {
            code: PARSE_ERROR,
            message: message.into(),
            id: Value::Null,
        }
    }

    pub fn invalid_request(id: Value, message: impl Into<String>) -> Rejection {
        Rejection {
            code: INVALID_REQUEST,
            message: message.into(),
            id,
        }
    }

    /// The JSON-RPC error response, `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": { "code": self.code, "message": self.message },
        })
    }

    /// An HTTP response with `status` and this error as its JSON body: how every refusal made
    /// before rmcp sees a request looks (Host, authentication, the session cap).
    pub fn into_response(self, status: axum::http::StatusCode) -> axum::response::Response {
        use axum::http::{HeaderValue, header};
        let mut response = axum::response::Response::new(axum::body::Body::from(self.to_bytes()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }

    /// [`Self::to_json`] as bytes, for a body or a line.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a `Value` cannot fail: every map key is a string.
        serde_json::to_vec(&self.to_json()).unwrap_or_default()
    }
}

/// Why `input`, which the protocol layer refused to read as a client message, is not one.
///
/// Only for input already refused: a valid message would be classified as an invalid request
/// "of an unknown kind".
pub fn classify(input: &[u8]) -> Rejection {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    if input.iter().all(u8::is_ascii_whitespace) {
        return Rejection::parse_error("Parse error: empty message");
    }
    let value: Value = match serde_json::from_slice(input) {
        Ok(value) => value,
        Err(error) => return Rejection::parse_error(format!("Parse error: {error}")),
    };
    match value {
        Value::Array(_) => Rejection::invalid_request(
            Value::Null,
            "Invalid Request: JSON-RPC batches are not supported; send one message at a time",
        ),
        Value::Object(object) => classify_object(&object),
        _ => Rejection::invalid_request(
            Value::Null,
            "Invalid Request: a JSON-RPC message is a JSON object",
        ),
    }
}

/// The reason an object is not a message, checked in the order a reader would notice them.
fn classify_object(object: &Map<String, Value>) -> Rejection {
    let id = match object.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    };
    let reason = if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        "`jsonrpc` must be \"2.0\""
    } else if let Some(problem) = object.get("id").and_then(id_problem) {
        problem
    } else {
        let is_response = object.contains_key("result") || object.contains_key("error");
        match (object.get("method"), object.get("params")) {
            (None, _) if !is_response => "no `method`",
            (Some(method), _) if !method.is_string() => "`method` must be a string",
            (_, Some(params)) if !params.is_object() => "`params` must be an object",
            _ => "not a JSON-RPC 2.0 request, notification or response MCP understands",
        }
    };
    Rejection::invalid_request(id, format!("Invalid Request: {reason}"))
}

/// What is wrong with a present `id`, if anything (MCP: a string or an integer, never null).
fn id_problem(id: &Value) -> Option<&'static str> {
    match id {
        Value::String(_) => None,
        Value::Number(number) if number.is_i64() || number.is_u64() => None,
        _ => Some("`id` must be a string or an integer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(input: &str) -> (i64, Value) {
        let rejection = classify(input.as_bytes());
        (rejection.code, rejection.id)
    }

    #[test]
    fn input_that_is_not_json_is_a_parse_error_with_a_null_id() {
        assert_eq!(of("{not json"), (PARSE_ERROR, Value::Null));
        assert_eq!(of(""), (PARSE_ERROR, Value::Null));
        assert_eq!(of("  \r\n"), (PARSE_ERROR, Value::Null));
        assert_eq!(
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}").code,
            PARSE_ERROR
        );
    }

    #[test]
    fn json_of_the_wrong_shape_is_an_invalid_request() {
        assert_eq!(of("[]"), (INVALID_REQUEST, Value::Null));
        assert_eq!(
            of(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            (INVALID_REQUEST, Value::Null)
        );
        assert_eq!(of("42"), (INVALID_REQUEST, Value::Null));
        assert_eq!(of("{}"), (INVALID_REQUEST, Value::Null));
    }

    #[test]
    fn the_id_is_echoed_whenever_it_can_be_read() {
        assert_eq!(
            of(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":"x"}"#),
            (INVALID_REQUEST, json!(5))
        );
        assert_eq!(
            of(r#"{"jsonrpc":"1.0","id":"a","method":"tools/list"}"#),
            (INVALID_REQUEST, json!("a"))
        );
        assert_eq!(
            of(r#"{"jsonrpc":"2.0","id":7}"#),
            (INVALID_REQUEST, json!(7))
        );
        assert_eq!(
            of(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (INVALID_REQUEST, json!(1.5))
        );
        assert_eq!(
            of(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            (INVALID_REQUEST, Value::Null)
        );
        assert_eq!(
            of(r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#),
            (INVALID_REQUEST, Value::Null)
        );
    }

    #[test]
    fn the_message_says_what_is_wrong() {
        let message = |input: &str| classify(input.as_bytes()).message;
        assert!(message(r#"{"jsonrpc":"2.0","id":5,"method":"x","params":[]}"#).contains("params"));
        assert!(message(r#"{"id":5,"method":"x"}"#).contains("jsonrpc"));
        assert!(message(r#"{"jsonrpc":"2.0","id":5}"#).contains("method"));
        assert!(message("[]").contains("batch"));
    }

    #[test]
    fn the_error_is_a_json_rpc_response() {
        let body: Value =
            serde_json::from_slice(&Rejection::invalid_request(json!(3), "nope").to_bytes())
                .unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"nope"}})
        );
    }
}
