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
//! and `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`.
//!
//! This is the one place a transport looks inside a valid message; it decides nothing the
//! handler decides, and leaves every other message byte for byte as it came.

use std::sync::LazyLock;

use memchr::memmem;
use serde_json::Value;

pub(super) use super::handler::legacy_tasks::LEGACY_TASKS_PREFIX;

/// The `_meta` key a 2026-07-28 request names its revision under (rmcp's
/// `RequestMetaObject::META_KEY_PROTOCOL_VERSION`, not exported).
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// What every message of the task flow holds: both `"task"` (the param) and `"tasks/…"` (the
/// methods) start so. Built once: building the searcher on every request cost about as much as
/// the search (callgrind, ~400 instructions a POST).
static TASK_WORD: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"task"));

/// The methods of the 2025-11-25 task flow that reach the handler renamed.
const TASK_METHODS: &[&str] = &["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"];

/// `message` with its method renamed, if it is a request of the 2025-11-25 task flow; `None`
/// for every other message (most: one byte search tells, without parsing).
pub(super) fn renamed(message: &[u8]) -> Option<Vec<u8>> {
    TASK_WORD.find(message)?;
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
        method => TASK_METHODS.contains(&method),
    };
    if !(of_2025 && task_flow) {
        return None;
    }
    let renamed = format!("{LEGACY_TASKS_PREFIX}{method}");
    request.insert("method".to_owned(), Value::String(renamed));
    serde_json::to_vec(&message).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn method_after(message: Value) -> String {
        let bytes = serde_json::to_vec(&message).unwrap();
        match renamed(&bytes) {
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
        assert!(renamed(&serde_json::to_vec(&response).unwrap()).is_none());
        assert!(renamed(b"{\"task\": ").is_none());
    }
}
