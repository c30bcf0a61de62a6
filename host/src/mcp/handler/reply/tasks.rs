//! What a client is told about tasks (`tasks.rs`): the errors of `tasks/*` and of a call that
//! runs only as a task, and the error a task ends with when its call could not give a result.

use rmcp::{
    ErrorData,
    model::{CallToolResult, ClientCapabilities, TASKS_EXTENSION_ID},
};
use serde_json::{Value, json};

use super::HOST_FAILURES;
use crate::mcp::handler::clip::clip;

/// JSON-RPC -32602, as the tasks extension says for a task id that names nothing the caller may
/// see (another principal's task is not found, exactly as one that never existed).
pub fn unknown_task(id: &str) -> ErrorData {
    let id = clip(id);
    ErrorData::invalid_params(format!("no task {id:?}"), Some(json!({ "taskId": id })))
}

/// JSON-RPC -32021: the tool runs only as a task, and the request's client does not declare the
/// tasks extension, so it could not follow one. Nothing ran.
pub fn task_required(tool: &str) -> ErrorData {
    let mut error = ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    );
    error.message = format!(
        "{} runs only as a task: declare the {TASKS_EXTENSION_ID} extension to call it",
        clip(tool)
    )
    .into();
    error
}

/// JSON-RPC -32603 a task ends `failed` with when its call's `result` says the call could not
/// give its handler's answer for a reason of the host's ([`HOST_FAILURES`]: the plugin crashed
/// or timed out, its output was unusable...): the result's words, and as `data` its
/// `structuredContent.error` (the code, `handlerRan` and `committed`, "unknown" where it does
/// not say). Read back from what `reply` built, as `call_record.rs` reads a call's outcome.
/// `None` for any other result: the handler's own answer (a tool error included) completes
/// the task, as it answers a plain call.
pub fn task_failure(result: &CallToolResult) -> Option<ErrorData> {
    if result.is_error != Some(true) {
        return None;
    }
    let Some(Value::Object(mut error)) = result
        .structured_content
        .as_ref()
        .and_then(|structured| structured.get("error"))
        .cloned()
    else {
        return None;
    };
    let code = error.get("code").and_then(Value::as_str)?.to_owned();
    if !HOST_FAILURES.contains(&code.as_str()) {
        return None;
    }
    for known in ["handlerRan", "committed"] {
        error.entry(known).or_insert_with(|| json!("unknown"));
    }
    let words = result
        .content
        .iter()
        .find_map(|block| block.as_text())
        .map_or_else(
            || format!("the call failed: {code}"),
            |text| text.text.clone(),
        );
    Some(ErrorData::internal_error(words, Some(Value::Object(error))))
}

/// JSON-RPC -32603: the instance a task runs on could not be read (its store is down, say), so
/// where the task stands is not known now.
pub fn task_unreadable(id: &str, error: &dyn std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(
        format!("task {:?} could not be read now: {error}", clip(id)),
        Some(json!({ "taskId": clip(id) })),
    )
}

/// The JSON-RPC error a task of `tool` ended `failed` with, as its instance's record keeps it:
/// what is known (`known`: `handlerRan`, `committed`, and why).
pub fn task_runner_stopped(tool: &str, known: &serde_json::Value) -> ErrorData {
    let why = known["message"].as_str().unwrap_or("the task did not end");
    ErrorData::internal_error(
        format!("{}: {why}", clip(tool)),
        Some(json!({
            "tool": clip(tool),
            "handlerRan": known["handlerRan"],
            "committed": known["committed"],
        })),
    )
}

/// JSON-RPC -32603 a task ends `failed` with when its call's answer could not be kept.
pub fn task_result_unkept(problem: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("the task's result could not be kept: {problem}"),
        None,
    )
}
