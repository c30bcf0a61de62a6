//! Streamable HTTP by hand, for tests that must see what rmcp's client hides: statuses,
//! headers, framing, and requests a conforming client would never send. The one raw HTTP
//! client of the tests: build requests here, read their answers here.

use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};

/// The session-based revision the raw client speaks.
pub const SESSION_PROTOCOL: &str = "2025-11-25";

/// The sessionless revision: no session, each request carries its own protocol metadata.
pub const SESSIONLESS_PROTOCOL: &str = "2026-07-28";

/// What a conforming client accepts: a JSON answer or an event stream.
pub const ACCEPT_JSON_OR_SSE: &str = "application/json, text/event-stream";

/// An HTTP client that gives up after 30 s, so a server that never answers fails the test.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

/// The `initialize` request `id` a client opens a session with, asking for `protocol`.
pub fn initialize_message(id: u64, protocol: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": protocol,
            "capabilities": {},
            "clientInfo": {"name": "turnstile-tests", "version": "0"}
        }
    })
}

/// A POST to `url` with the headers a conforming client sends before it has a session.
pub fn post(url: &str, body: impl Into<reqwest::Body>) -> RequestBuilder {
    post_as(url, ACCEPT_JSON_OR_SSE, "application/json", body)
}

/// A POST to `url` with the given `Accept` and `Content-Type`.
pub fn post_as(
    url: &str,
    accept: &str,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> RequestBuilder {
    http()
        .post(url)
        .header("Content-Type", content_type)
        .header("Accept", accept)
        .body(body)
}

/// A POST of `body` to `url` as a client sends a JSON-RPC message, on the client `http` (one
/// client for many requests keeps its connections), in `session` if one is named (its
/// `Mcp-Session-Id` and the protocol header).
pub fn post_with(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> RequestBuilder {
    let request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", ACCEPT_JSON_OR_SSE)
        .body(body);
    match session {
        Some(session) => request
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", SESSION_PROTOCOL),
        None => request,
    }
}

/// A POST to `url` in `session`: with its `Mcp-Session-Id` and the protocol header.
pub fn post_in_session(url: &str, session: &str, body: impl Into<reqwest::Body>) -> RequestBuilder {
    post(url, body)
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", SESSION_PROTOCOL)
}

/// A 2026-07-28 `tools/call` of `tool` with `arguments` and the rest of `params` (`_meta`,
/// `inputResponses`, `requestState`), sent as [`post_sessionless`] sends it: the JSON-RPC
/// response, and the size of its body.
pub async fn call_2026(
    url: &str,
    tool: &str,
    arguments: Value,
    mut params: Value,
) -> (Value, usize) {
    params["name"] = json!(tool);
    params["arguments"] = arguments;
    let response = post_sessionless(url, 1, "tools/call", params)
        .send()
        .await
        .expect("the server answers");
    assert!(response.status().is_success(), "{}", response.status());
    let body = response.text().await.expect("a body");
    let response = messages(&body)
        .into_iter()
        .find(|message| message["id"] == 1)
        .unwrap_or_else(|| panic!("no response in {body:?}"));
    (response, body.len())
}

/// A 2026-07-28 request `id` of `method` without a session, as such a client sends it: `params`
/// (an object) with the per-request protocol metadata added to its `_meta` (empty
/// `clientCapabilities` unless `_meta` declares some), and the protocol's headers
/// (`MCP-Protocol-Version`, `Mcp-Method`, and `Mcp-Name` when `params` has a `name`).
pub fn post_sessionless(url: &str, id: u64, method: &str, mut params: Value) -> RequestBuilder {
    let meta = &mut params["_meta"];
    meta["io.modelcontextprotocol/protocolVersion"] = json!(SESSIONLESS_PROTOCOL);
    if meta
        .get("io.modelcontextprotocol/clientCapabilities")
        .is_none()
    {
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    }
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "turnstile-tests", "version": "0"});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = post(url, body.to_string())
        .header("MCP-Protocol-Version", SESSIONLESS_PROTOCOL)
        .header("Mcp-Method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("Mcp-Name", name);
    }
    request
}

/// The 2026-07-28 tasks extension (SEP-2663), as a client declares it.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `_meta` declaring [`TASKS_EXTENSION`] in the client's capabilities.
pub fn declaring_tasks() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
}

/// A 2026-07-28 `tasks/get`, `tasks/cancel` or `tasks/update` of `task_id` from a client
/// declaring the tasks extension, with the `Mcp-Name` header the method takes (the task id):
/// the JSON-RPC response.
pub async fn task_request(url: &str, method: &str, task_id: &str, mut params: Value) -> Value {
    params["taskId"] = json!(task_id);
    params["_meta"] = declaring_tasks();
    let response = post_sessionless(url, 1, method, params)
        .header("Mcp-Name", task_id)
        .send()
        .await
        .expect("the server answers");
    let body = response.text().await.expect("a body");
    messages(&body)
        .into_iter()
        .find(|message| message["id"] == 1)
        .unwrap_or_else(|| panic!("no response in {body:?}"))
}

/// A GET of `session`'s event stream at `url`. No overall timeout: a test holds such a stream
/// open as long as it needs it (set one on the request when it needs one).
pub fn get_stream(url: &str, session: &str) -> RequestBuilder {
    reqwest::Client::new()
        .get(url)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", SESSION_PROTOCOL)
}

/// A 2025-11-25 `initialize` POST to `url`, as `bearer` when given: the raw answer, for tests
/// that read its status and headers (an admission, a refusal).
pub async fn initialize_request(url: &str, bearer: Option<&str>) -> Response {
    let mut request = post(url, initialize_message(1, SESSION_PROTOCOL).to_string());
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    request.send().await.expect("an answer to initialize")
}

/// The `Mcp-Session-Id` an answer carries.
pub fn session_id(answer: &Response) -> String {
    answer
        .headers()
        .get("mcp-session-id")
        .expect("the server starts a session (Mcp-Session-Id)")
        .to_str()
        .expect("session id is text")
        .to_string()
}

/// POSTs `initialize` and returns the new session's id, the handshake left unfinished.
pub async fn begin_session(url: &str) -> String {
    let answer = initialize_request(url, None).await;
    assert_eq!(answer.status(), StatusCode::OK, "initialize");
    session_id(&answer)
}

/// `notifications/initialized` on `session`: the handshake's end, accepted (202).
pub async fn finish_handshake(url: &str, session: &str) {
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = post_in_session(url, session, initialized.to_string())
        .send()
        .await
        .expect("notifications/initialized");
    assert_eq!(answer.status(), StatusCode::ACCEPTED, "initialized");
}

/// `initialize` and `notifications/initialized` by hand; the session id.
pub async fn open_session(url: &str) -> String {
    let session = begin_session(url).await;
    finish_handshake(url, &session).await;
    session
}

/// The messages of a response body: one JSON message, or an event stream's `data:` lines.
pub fn messages(body: &str) -> Vec<Value> {
    if let Ok(message) = serde_json::from_str::<Value>(body) {
        return vec![message];
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// The `result` of the response to request `id` in `body`; panics on a JSON-RPC error.
pub fn result_of(body: &str, id: u64, what: &str) -> Value {
    let messages = messages(body);
    let Some(response) = messages.into_iter().find(|m| m["id"] == json!(id)) else {
        panic!("{what}: no response to request {id} in {body:?}");
    };
    if let Some(error) = response.get("error") {
        panic!("{what}: JSON-RPC error {error}");
    }
    response["result"].clone()
}

/// The answer: status, `Content-Type`, and the body as one JSON-RPC message (an event
/// stream's last `data:`).
pub async fn answer(request: RequestBuilder) -> (StatusCode, Option<String>, Value) {
    let response = request.send().await.expect("the server answers");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().expect("text").to_string());
    let text = response.text().await.expect("body");
    let message = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .rev()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str(data.trim()).ok())
            .unwrap_or_else(|| panic!("{status}: not JSON-RPC: {text:?}"))
    });
    (status, content_type, message)
}
