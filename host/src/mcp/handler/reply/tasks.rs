//! What a client is told about tasks (`tasks.rs`): the errors of `tasks/*` and of a call that
//! runs only as a task, and the error a task ends with when its call could not give a result.

use rmcp::{
    ErrorData,
    model::{ClientCapabilities, TASKS_EXTENSION_ID},
};
use serde_json::json;

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

/// JSON-RPC -32603 a task ends `failed` with when its call asked the client for input, which
/// a task cannot be given yet. Its handler ran until it asked; nothing fired.
pub fn task_cannot_ask(tool: &str) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "{} asked for input, which a call running as a task cannot be given yet: call it \
             without the tasks extension",
            clip(tool)
        ),
        Some(json!({ "handlerRan": true, "committed": false })),
    )
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
