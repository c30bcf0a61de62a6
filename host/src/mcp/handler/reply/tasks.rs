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

/// JSON-RPC -32603 a task ends `failed` with when its call's answer could not be kept.
pub fn task_result_unkept(problem: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("the task's result could not be kept: {problem}"),
        None,
    )
}
