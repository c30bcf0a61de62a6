//! "MCP by the book": what a client gets for input that is not a message, for refused requests,
//! for `DELETE`, and for a foreign `Origin` — over raw Streamable HTTP and raw stdio, against the
//! real binary. Every error is a JSON-RPC error object with the code the spec names and the
//! request's `id` when it could be read, and the server keeps serving afterwards.

mod common;

use std::time::Instant;

use common::{
    Client, PluginDir, RawStdio, Server, answer, http, initialize_message, names, open_session,
    post, post_as, post_in_session, post_sessionless, post_with,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The session-based revision the raw client speaks.
const PROTOCOL: &str = "2025-11-25";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;

/// Asserts `message` is a JSON-RPC error with `code` and `id`; returns its message text.
fn assert_error(message: &Value, code: i64, id: &Value, what: &str) -> String {
    assert_eq!(message["jsonrpc"], "2.0", "{what}: {message}");
    assert_eq!(message["error"]["code"], code, "{what}: {message}");
    assert_eq!(&message["id"], id, "{what}: {message}");
    let text = message["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: error without a message: {message}"));
    assert!(!text.is_empty(), "{what}: empty error message");
    text.to_string()
}

/// The server still serves: a new client connects and lists tools.
async fn still_serving(server: &Server) {
    let client = Client::http(&server.url).await;
    assert_eq!(
        client.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );
    client.close().await;
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[tokio::test]
async fn http_input_that_is_not_a_message_is_a_400_with_a_json_rpc_error() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let cases: &[(&[u8], i64, Value, &str)] = &[
        (b"", PARSE_ERROR, Value::Null, "empty body"),
        (b"{not json", PARSE_ERROR, Value::Null, "not JSON"),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
            PARSE_ERROR,
            Value::Null,
            "invalid UTF-8",
        ),
        (
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            INVALID_REQUEST,
            Value::Null,
            "batch",
        ),
        (b"42", INVALID_REQUEST, Value::Null, "not an object"),
        (b"{}", INVALID_REQUEST, Value::Null, "empty object"),
        (
            br#"{"jsonrpc":"1.0","id":3,"method":"tools/list"}"#,
            INVALID_REQUEST,
            json!(3),
            "jsonrpc 1.0",
        ),
        (
            br#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":"x"}"#,
            INVALID_REQUEST,
            json!(5),
            "params not an object",
        ),
        (
            br#"{"jsonrpc":"2.0","id":"req-6","method":"tools/list","params":[1]}"#,
            INVALID_REQUEST,
            json!("req-6"),
            "params an array, string id",
        ),
    ];
    for (body, code, id, what) in cases {
        let (status, content_type, message) = answer(post(&server.url, body.to_vec())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {message}");
        assert_eq!(
            content_type.as_deref(),
            Some("application/json"),
            "{what}: Content-Type"
        );
        assert_error(&message, *code, id, what);
    }
    still_serving(&server).await;
}

#[tokio::test]
async fn http_refusals_keep_their_status_and_carry_a_json_rpc_error() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let valid = initialize_message(1, PROTOCOL).to_string();

    let (status, content_type, message) = answer(post_as(
        &server.url,
        "application/json",
        "application/json",
        valid.clone(),
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let text = assert_error(&message, INVALID_REQUEST, &Value::Null, "wrong Accept");
    assert!(
        text.contains("text/event-stream"),
        "says what is wrong: {text}"
    );

    let (status, content_type, message) = answer(post_as(
        &server.url,
        "application/json, text/event-stream",
        "text/plain",
        valid,
    ))
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let text = assert_error(
        &message,
        INVALID_REQUEST,
        &Value::Null,
        "wrong Content-Type",
    );
    assert!(
        text.contains("application/json"),
        "says what is wrong: {text}"
    );

    // 5 MiB of whitespace: over rmcp's 4 MiB limit.
    let huge = vec![b' '; 5 * 1024 * 1024];
    let (status, content_type, message) = answer(post(&server.url, huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let text = assert_error(&message, INVALID_REQUEST, &Value::Null, "too large");
    assert!(text.contains("exceeds"), "says what is wrong: {text}");

    still_serving(&server).await;
}

#[tokio::test]
async fn an_unknown_method_is_method_not_found_naming_it() {
    let (_plugins, server) = common::start(&["invoice"], &[]);

    // In a session (2025-11-25): the error comes in the request's event stream.
    let session = open_session(&server.url).await;
    let (status, _, message) = answer(post_in_session(
        &server.url,
        &session,
        json!({"jsonrpc": "2.0", "id": 7, "method": "foo/bar"}).to_string(),
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    let text = assert_error(&message, METHOD_NOT_FOUND, &json!(7), "unknown method");
    assert!(text.contains("foo/bar"), "names the method: {text}");

    // Sessionless (2026-07-28): a 4xx (404), which the Python SDK 2.x falls back on.
    let (status, content_type, message) =
        answer(post_sessionless(&server.url, 8, "foo/bar", json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    let text = assert_error(
        &message,
        METHOD_NOT_FOUND,
        &json!(8),
        "unknown method, 2026",
    );
    assert!(text.contains("foo/bar"), "names the method: {text}");

    still_serving(&server).await;
}

#[tokio::test]
async fn delete_ends_a_live_session_with_204_and_an_unknown_one_is_404() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let delete = |session: &str| {
        http()
            .delete(&server.url)
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", PROTOCOL)
    };

    let session = open_session(&server.url).await;
    let response = delete(&session).send().await.expect("DELETE");
    assert!(
        matches!(response.status(), StatusCode::OK | StatusCode::NO_CONTENT),
        "live session: {}",
        response.status()
    );

    let (status, content_type, message) = answer(delete(&session)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the same session again");
    assert_eq!(content_type.as_deref(), Some("application/json"));
    assert_error(&message, INVALID_REQUEST, &Value::Null, "ended session");

    let (status, _, message) = answer(delete("no-such-session")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "unknown session");
    assert_error(&message, INVALID_REQUEST, &Value::Null, "unknown session");

    // The ended session is gone for requests too (404, as the spec says).
    let (status, _, message) = answer(post_in_session(
        &server.url,
        &session,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}).to_string(),
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(
        &message,
        INVALID_REQUEST,
        &json!(4),
        "request in an ended session",
    );

    still_serving(&server).await;
}

#[tokio::test]
async fn a_foreign_origin_is_refused_and_loopback_or_none_pass() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--allowed-origin", "https://app.example.com:443"],
    );
    let port = server
        .base()
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    let with_origin = |origin: &str| {
        post(&server.url, initialize_message(1, PROTOCOL).to_string()).header("Origin", origin)
    };

    for foreign in [
        "https://evil.example",
        "http://app.example.com",
        "https://app.example.com:8443",
    ] {
        let (status, content_type, message) = answer(with_origin(foreign)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "Origin {foreign}");
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_error(&message, INVALID_REQUEST, &Value::Null, foreign);
    }
    for allowed in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        "http://localhost:3000".to_string(),
        format!("http://[::1]:{port}"),
        "https://app.example.com".to_string(),
    ] {
        let (status, _, message) = answer(with_origin(&allowed)).await;
        assert_eq!(status, StatusCode::OK, "Origin {allowed}: {message}");
        assert_eq!(message["result"]["protocolVersion"], PROTOCOL);
    }
    let (status, _, message) = answer(post(
        &server.url,
        initialize_message(1, PROTOCOL).to_string(),
    ))
    .await;
    assert_eq!(status, StatusCode::OK, "no Origin: {message}");

    still_serving(&server).await;
}

/// Not run by default: times sequential `tools/list` calls in one session over one keep-alive
/// connection, against `TURNSTILE_URL` (a server started by hand, e.g. before and after a change)
/// or a fresh one. `cargo test --test protocol_errors -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn timing_of_valid_requests() {
    let plugins = PluginDir::with(&["invoice"]);
    let own;
    let url = match std::env::var("TURNSTILE_URL") {
        Ok(url) => url,
        Err(_) => {
            own = Server::http(plugins.path(), &[]);
            own.url.clone()
        }
    };
    let http = http();
    let call = |body: String, session: Option<&str>| post_with(&http, &url, session, body);
    let response = call(initialize_message(1, PROTOCOL).to_string(), None)
        .send()
        .await
        .unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = response.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = call(initialized.to_string(), Some(&session)).send().await;
    let calls = 2000;
    for round in 0..3 {
        let start = Instant::now();
        for id in 0..calls {
            let list = json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/list"});
            let text = call(list.to_string(), Some(&session))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(text.contains("invoice.submit"), "{text}");
        }
        let elapsed = start.elapsed();
        println!(
            "round {round}: {calls} tools/list in {elapsed:?}, {:.1} µs each",
            elapsed.as_secs_f64() * 1e6 / f64::from(calls)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// stdio

#[test]
fn stdio_answers_every_unreadable_line_and_keeps_serving() {
    let plugins = PluginDir::with(&["invoice"]);
    let mut server = RawStdio::start(plugins.path());
    let cases: &[(&[u8], i64, Value, &str)] = &[
        (b"this is not json", PARSE_ERROR, Value::Null, "garbage"),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            PARSE_ERROR,
            Value::Null,
            "invalid UTF-8",
        ),
        (b"{}", INVALID_REQUEST, Value::Null, "empty object"),
        (
            br#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":"x"}"#,
            INVALID_REQUEST,
            json!(5),
            "params not an object",
        ),
        (
            br#"[{"jsonrpc":"2.0","id":6,"method":"tools/list"}]"#,
            INVALID_REQUEST,
            Value::Null,
            "batch",
        ),
        (
            br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#,
            INVALID_REQUEST,
            json!("x"),
            "jsonrpc 1.0",
        ),
    ];
    // Before the handshake and after it, the answer is the same.
    for (line, code, id, what) in cases {
        server.send(line);
        assert_error(&server.reply(what), *code, id, what);
    }
    server.send(initialize_message(1, PROTOCOL).to_string().as_bytes());
    let reply = server.reply("initialize");
    assert_eq!(reply["id"], 1, "{reply}");
    assert_eq!(reply["result"]["protocolVersion"], PROTOCOL, "{reply}");
    server.send(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
            .to_string()
            .as_bytes(),
    );
    for (line, code, id, what) in cases {
        server.send(line);
        assert_error(&server.reply(what), *code, id, what);
    }
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            .to_string()
            .as_bytes(),
    );
    let reply = server.reply("tools/list");
    assert_eq!(reply["id"], 2, "{reply}");
    let mut tools: Vec<&str> = reply["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {reply}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    tools.sort();
    assert_eq!(tools, ["invoice.status", "invoice.submit"]);

    server.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "foo/bar"})
            .to_string()
            .as_bytes(),
    );
    let text = assert_error(
        &server.reply("unknown method"),
        METHOD_NOT_FOUND,
        &json!(3),
        "unknown method",
    );
    assert!(text.contains("foo/bar"), "names the method: {text}");
}
