//! The 2025-11-25 task flow (SEP-1686), as both transports hand it to the handler.
//!
//! rmcp 3.11 models tasks as 2026-07-28's extension (SEP-2663) only: it drops a `tools/call`'s
//! `task` param, refuses `tasks/get` and `tasks/cancel` unless the client declared the
//! extension (a 2025-11-25 client declares `capabilities.tasks` instead, which rmcp does not
//! read), and answers them in the extension's shapes, which a 2025-11-25 client cannot read.
//! So a 2025-11-25 task request is renamed, before rmcp parses it, into the handler's own
//! method ([`LEGACY_TASKS_PREFIX`] + its method); rmcp hands it over whole, params as sent, and
//! the handler (`handler/legacy_tasks.rs`) answers in 2025-11-25's shapes. Everything else
//! about the request (its id, session, stream, cancellation) stays rmcp's.
//!
//! A request is of the 2025 revisions when its `_meta` names no protocol revision (2026-07-28
//! requests always name theirs). Of those, renamed are: a `tools/call` with a `task` param,
//! and `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`; and `tools/list`, whose
//! tools say whether they run as tasks (`execution.taskSupport`), a field rmcp's `Tool` lacks,
//! once the process has served such a tool (`catalog::served_task_tools`): the handler's answer
//! is built through a `serde_json::Value`, a listing costs about a third more CPU that way, and
//! without such a tool there is nothing to add.
//!
//! Going out, a 2025-11-25 `initialize` answer gains `capabilities.tasks`, which rmcp's
//! `ServerCapabilities` lacks: on stdio as the line is written ([`to_line`]), on HTTP in the
//! body of the response that opened the session ([`with_tasks_capability`]).
//!
//! This is the one place a transport looks inside a valid message; it decides nothing the
//! handler decides, and leaves every other message byte for byte as it came.

use std::sync::LazyLock;

use axum::{
    body::{Body, Bytes},
    http::header,
    response::Response,
};
use futures_util::StreamExt;
use memchr::memmem;
use rmcp::model::{ProtocolVersion, ServerJsonRpcMessage, ServerResult};
use serde_json::Value;

pub(super) use super::handler::legacy_tasks::LEGACY_TASKS_PREFIX;
use super::handler::legacy_tasks::tasks_capability;

/// The `_meta` key a 2026-07-28 request names its revision under (rmcp's
/// `RequestMetaObject::META_KEY_PROTOCOL_VERSION`, not exported).
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// What every message of the task flow holds: both `"task"` (the param) and `"tasks/…"` (the
/// methods) start so. Built once: building the searcher on every request cost about as much as
/// the search (callgrind, ~400 instructions a POST).
static TASK_WORD: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"task"));

/// The method whose answer says which tools run as tasks.
static TOOLS_LIST_WORD: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"tools/list\""));

/// The methods of the 2025-11-25 task flow that reach the handler renamed.
const TASK_METHODS: &[&str] = &["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];

/// `message` with its method renamed, if it is a request of the 2025-11-25 task flow, or a 2025
/// `tools/list` when `task_tools` (the process serves a tool that runs as a task:
/// `catalog::served_task_tools`); `None` for every other message (most: a byte search or two
/// tells, without parsing).
pub(super) fn renamed(message: &[u8], task_tools: bool) -> Option<Vec<u8>> {
    let lists_tools = || task_tools && TOOLS_LIST_WORD.find(message).is_some();
    if TASK_WORD.find(message).is_none() && !lists_tools() {
        return None;
    }
    let mut message: Value = serde_json::from_slice(message).ok()?;
    let request = message.as_object_mut()?;
    let method = request.get("method")?.as_str()?;
    let params = request.get("params");
    let of_2025 = params
        .and_then(|params| params.get("_meta"))
        .and_then(|meta| meta.get(PROTOCOL_VERSION_META))
        .is_none();
    let task_flow = match method {
        "tools/call" => params.is_some_and(|params| params.get("task").is_some()),
        "tools/list" => task_tools,
        method => TASK_METHODS.contains(&method),
    };
    if !(of_2025 && task_flow) {
        return None;
    }
    let renamed = format!("{LEGACY_TASKS_PREFIX}{method}");
    request.insert("method".to_owned(), Value::String(renamed));
    serde_json::to_vec(&message).ok()
}

/// `message` as the line stdio writes: serialized as it is, but for a 2025-11-25 `initialize`
/// answer, which gains `capabilities.tasks`.
pub(super) fn to_line(message: &ServerJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    let ServerJsonRpcMessage::Response(response) = message else {
        return serde_json::to_vec(message);
    };
    match &response.result {
        ServerResult::InitializeResult(answer)
            if answer.protocol_version == ProtocolVersion::V_2025_11_25 =>
        {
            let mut message = serde_json::to_value(message)?;
            // An `InitializeResult` always has its capabilities.
            let _ = add_tasks_capability(&mut message);
            serde_json::to_vec(&message)
        }
        _ => serde_json::to_vec(message),
    }
}

/// rmcp's answer to a 2025 `initialize` (the response that opened a session), with
/// `capabilities.tasks` added when it agreed on 2025-11-25. rmcp streams that answer as one
/// SSE event, or sends it as JSON; either is rewritten as it passes, and nothing else in the
/// body changes.
pub(super) async fn with_tasks_capability(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let is_json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|kind| kind.as_bytes().starts_with(b"application/json"));
    if !is_json {
        let body = body
            .into_data_stream()
            .map(|chunk| chunk.map(|chunk| sse_with_tasks_capability(&chunk).unwrap_or(chunk)));
        return Response::from_parts(parts, Body::from_stream(body));
    }
    // A JSON answer is a few hundred bytes, read whole; its length changes.
    let json = match axum::body::to_bytes(body, MAX_INITIALIZE_ANSWER).await {
        Ok(json) => json,
        Err(error) => {
            tracing::debug!(%error, "cannot read an initialize answer");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let json = json_with_tasks_capability(&json).unwrap_or(json);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, json.len().into());
    Response::from_parts(parts, Body::from(json))
}

/// More than any `initialize` answer: the server's instructions are its longest part.
const MAX_INITIALIZE_ANSWER: usize = 1024 * 1024;

/// An SSE chunk whose `data:` line is a 2025-11-25 `initialize` answer, with the capability
/// added; `None` for any other chunk (a comment, a priming event, a message of another kind).
fn sse_with_tasks_capability(chunk: &Bytes) -> Option<Bytes> {
    let text = std::str::from_utf8(chunk).ok()?;
    let mut rewritten = String::with_capacity(text.len() + 64);
    let mut changed = false;
    for line in text.split_inclusive('\n') {
        let data = line
            .strip_prefix("data:")
            .map(|data| data.trim_start_matches(' ').trim_end_matches(['\r', '\n']));
        match data.and_then(|data| json_with_tasks_capability(data.as_bytes())) {
            Some(json) => {
                rewritten.push_str("data: ");
                rewritten.push_str(std::str::from_utf8(&json).ok()?);
                rewritten.push('\n');
                changed = true;
            }
            None => rewritten.push_str(line),
        }
    }
    changed.then(|| Bytes::from(rewritten))
}

/// A JSON-RPC message that is a 2025-11-25 `initialize` answer, with the capability added.
fn json_with_tasks_capability(json: &[u8]) -> Option<Bytes> {
    let mut message: Value = serde_json::from_slice(json).ok()?;
    let agreed = message.pointer("/result/protocolVersion")?.as_str()?;
    if agreed != ProtocolVersion::V_2025_11_25.as_str() {
        return None;
    }
    add_tasks_capability(&mut message)?;
    serde_json::to_vec(&message).ok().map(Bytes::from)
}

/// Adds the capability to an answer's `capabilities`; `None` if it has none.
fn add_tasks_capability(message: &mut Value) -> Option<()> {
    let capabilities = message
        .pointer_mut("/result/capabilities")?
        .as_object_mut()?;
    capabilities.insert("tasks".to_owned(), tasks_capability());
    Some(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn method_after(message: Value) -> String {
        let bytes = serde_json::to_vec(&message).unwrap();
        match renamed(&bytes, true) {
            Some(renamed) => {
                let renamed: Value = serde_json::from_slice(&renamed).unwrap();
                // Nothing but the method changes.
                let mut unrenamed = renamed.clone();
                unrenamed["method"] = message["method"].clone();
                assert_eq!(unrenamed, message);
                renamed["method"].as_str().unwrap().to_owned()
            }
            None => message["method"].as_str().unwrap_or_default().to_owned(),
        }
    }

    #[test]
    fn the_2025_task_flow_is_renamed_and_nothing_else() {
        let task_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "migration.apply", "arguments": {"task": 1}, "task": {"ttl": 60000}}});
        assert_eq!(
            method_after(task_call),
            format!("{LEGACY_TASKS_PREFIX}tools/call")
        );
        for method in TASK_METHODS {
            let request = json!({"jsonrpc": "2.0", "id": "r", "method": method,
                "params": {"taskId": "abc"}});
            assert_eq!(
                method_after(request),
                format!("{LEGACY_TASKS_PREFIX}{method}")
            );
        }
        let tools = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"});
        assert_eq!(
            method_after(tools),
            format!("{LEGACY_TASKS_PREFIX}tools/list")
        );
        let tools_of_2026 = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list",
            "params": {"_meta": {PROTOCOL_VERSION_META: "2026-07-28"}}});
        assert_eq!(method_after(tools_of_2026), "tools/list");
        // Where no tool runs as a task, a listing has nothing to add and is left alone.
        let listing = br#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#;
        assert!(renamed(listing, false).is_none());
        let listed = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list"});
        assert_eq!(
            method_after(listed),
            format!("{LEGACY_TASKS_PREFIX}tasks/list")
        );

        // A plain call (a `task` argument is not the param), and the 2026-07-28 extension's
        // requests, which name their revision, are left alone.
        let plain = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "t", "arguments": {"task": {"ttl": 1}}}});
        assert_eq!(method_after(plain), "tools/call");
        let of_2026 = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
            "params": {"taskId": "abc", "_meta": {PROTOCOL_VERSION_META: "2026-07-28"}}});
        assert_eq!(method_after(of_2026), "tasks/get");
        let response = json!({"jsonrpc": "2.0", "id": 5, "result": {"task": {}}});
        assert!(renamed(&serde_json::to_vec(&response).unwrap(), true).is_none());
        assert!(renamed(b"{\"task\": ", true).is_none());
    }

    fn initialize_answer(version: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "turnstile", "version": "0"}}})
    }

    #[test]
    fn a_2025_11_25_initialize_answer_declares_tasks_on_stdio() {
        let answer: ServerJsonRpcMessage =
            serde_json::from_value(initialize_answer("2025-11-25")).unwrap();
        let line: Value = serde_json::from_slice(&to_line(&answer).unwrap()).unwrap();
        assert_eq!(line["result"]["capabilities"]["tasks"], tasks_capability());
        assert_eq!(line["result"]["capabilities"]["tools"]["listChanged"], true);

        // An older revision has no tasks; other messages are written as they are.
        let older: ServerJsonRpcMessage =
            serde_json::from_value(initialize_answer("2025-06-18")).unwrap();
        let line: Value = serde_json::from_slice(&to_line(&older).unwrap()).unwrap();
        assert!(line["result"]["capabilities"].get("tasks").is_none());
        let other: ServerJsonRpcMessage =
            serde_json::from_value(json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}))
                .unwrap();
        assert_eq!(
            to_line(&other).unwrap(),
            serde_json::to_vec(&other).unwrap()
        );
    }

    #[test]
    fn an_sse_initialize_answer_gains_tasks_and_every_other_line_is_kept() {
        let answer = initialize_answer("2025-11-25");
        let event = format!("id: 0\ndata: {answer}\n\n");
        let rewritten = sse_with_tasks_capability(&Bytes::from(event)).unwrap();
        let text = std::str::from_utf8(&rewritten).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines[0], "id: 0");
        let data: Value = serde_json::from_str(lines[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["result"]["capabilities"]["tasks"], tasks_capability());
        assert!(text.ends_with("\n\n"));

        for untouched in [
            ": keep-alive\n\n".to_owned(),
            "data:\n\n".to_owned(),
            format!("data: {}\n\n", initialize_answer("2025-06-18")),
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"
                .to_owned(),
        ] {
            assert!(sse_with_tasks_capability(&Bytes::from(untouched)).is_none());
        }
    }
}
