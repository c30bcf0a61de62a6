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

/// JSON-RPC -32603 for `tasks/cancel` of a working task another server runs, on a store that
/// keeps no marks (`StateStore::save_mark`): nothing can carry the cancel to that server.
pub fn task_runs_elsewhere(id: &str) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "task {:?} runs on another server, and this store cannot carry a cancel to it: \
             send tasks/cancel to the server that started it",
            clip(id)
        ),
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

/// JSON-RPC -32601, as 2025-11-25 says a server should answer a task-augmented call of a tool
/// whose `execution.taskSupport` is absent (`forbidden`). Nothing ran.
pub fn task_forbidden(tool: &str) -> ErrorData {
    not_this_way(tool, "does not run as a task: call it without `task`")
}

/// JSON-RPC -32601, as 2025-11-25 says a server may answer a plain call of a tool whose
/// `execution.taskSupport` is `required`. Nothing ran.
pub fn task_param_required(tool: &str) -> ErrorData {
    not_this_way(
        tool,
        "runs only as a task: call it with `task` in its params",
    )
}

/// JSON-RPC -32601 naming `tool`, which is not called the way the request called it (`why`).
fn not_this_way(tool: &str, why: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("{} {why}", clip(tool)),
        Some(json!({ "tool": clip(tool) })),
    )
}

/// JSON-RPC -32602 for a 2025-11-25 task-augmented call that was refused before its task was
/// created (out of order, wrong arguments, over quota...): a client that asked for a task
/// cannot be answered with a result, so the result's words are the message and the result is
/// `data.result`. No task was created, and nothing ran.
pub fn task_not_started(tool: &str, refusal: &CallToolResult) -> ErrorData {
    let words = refusal
        .content
        .iter()
        .find_map(|block| block.as_text())
        .map_or_else(
            || format!("{} was refused", clip(tool)),
            |text| text.text.clone(),
        );
    ErrorData::invalid_params(
        words,
        Some(json!({
            "tool": clip(tool),
            "result": serde_json::to_value(refusal).unwrap_or_default(),
        })),
    )
}

/// JSON-RPC -32602, as 2025-11-25 says a server must answer a `tasks/cancel` of a task that has
/// ended.
pub fn task_already_ended(id: &str, status: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("task {:?} cannot be cancelled: it is {status}", clip(id)),
        Some(json!({ "taskId": clip(id), "status": status })),
    )
}

/// JSON-RPC -32600 for `tasks/result` of a task its client cancelled: it has no result.
pub fn task_cancelled(id: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!("task {:?} was cancelled: it has no result", clip(id)),
        Some(json!({ "taskId": clip(id), "status": "cancelled" })),
    )
}

/// JSON-RPC -32602 for params of a 2025-11-25 task request that do not read as its method's.
pub fn invalid_task_params(method: &str, problem: &dyn std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(format!("{method}: {problem}"), None)
}

/// Whether `result` refuses its call before the handler ran: an error of the host's (not the
/// tool's own, `TOOL_ERROR`) that does not say the handler ran or may have.
pub fn refused_before_running(result: &CallToolResult) -> bool {
    if result.is_error != Some(true) {
        return false;
    }
    let error = result
        .structured_content
        .as_ref()
        .and_then(|structured| structured.get("error"));
    let code = error
        .and_then(|error| error.get("code"))
        .and_then(Value::as_str);
    let handler_ran = error.and_then(|error| error.get("handlerRan"));
    code != Some("TOOL_ERROR") && handler_ran.is_none_or(|ran| *ran == json!(false))
}

/// JSON-RPC -32800 for a `tasks/result` its client cancelled while it waited: the task runs
/// on.
pub fn task_wait_cancelled(id: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(-32800),
        format!(
            "the wait for task {:?} was cancelled; the task runs on",
            clip(id)
        ),
        Some(json!({ "taskId": clip(id) })),
    )
}
