//! Everything a client can see of Turnstile's answers, built on purpose and in one place.
//!
//! Tool-level failures (refused, bad arguments, the tool failed, the store is down) are tool
//! results with `isError: true`, a sentence an agent can act on, and a machine-readable
//! `structuredContent.error` with a stable `code`. Only requests that cannot be routed at all
//! (an unknown tool name), or that cannot be served as sent (`reply/request_errors.rs`: among
//! them a 2026-07-28 call needing a client capability its request did not declare), are
//! JSON-RPC errors.
//!
//! A string the client sent (a tool name, a method, a handle) is echoed back or logged only
//! through [`clip`], so a megabyte of name cannot become a megabyte of error or of log line.
//!
//! Prompts and resources (`prompts/get`, `resources/read`) have no `isError` result: their
//! answers and refusals are built in `reply/primitives.rs`. The JSON-RPC errors of requests the
//! handler cannot serve as sent are in `reply/request_errors.rs`. Nothing else in `handler/`
//! builds an `ErrorData`: a room that finds a problem says what it is, and calls one of these.

mod next_step;
mod primitives;
mod request_errors;
mod tasks;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

pub use self::next_step::{
    NextStepMode, Uncertain, Whereabouts, with_next_step, with_uncertain_step,
};
pub use self::primitives::{
    InstanceDocument, completion_failed, completions_unlisted, instance_document,
    invalid_prompt_arguments, listed_instance_resource, listed_instance_template, listed_prompt,
    listed_resource, listed_template, prompt_input_unavailable, prompt_result, read_failure,
    resource_not_found, resource_result, uncompletable_reference, unknown_completion_argument,
    unknown_prompt, unknown_template, withheld,
};
pub use self::request_errors::{
    MAX_IDEMPOTENCY_KEY_CHARS, handle_of_unloaded_workflow, instance_unreadable, invalid_handles,
    invalid_idempotency_key, missing_client_capability, unknown_tool, unloaded_workflow,
    unroutable_request, unusable_answers, unwatchable,
};
pub use self::tasks::{
    invalid_task_params, refused_before_running, task_already_ended, task_cancelled, task_failure,
    task_forbidden, task_not_started, task_param_required, task_required, task_result_unkept,
    task_runner_stopped, task_runs_elsewhere, task_unreadable, task_wait_cancelled, unknown_task,
};
use super::{clip::clip, target::NoTarget};
use crate::{
    actors::InstanceError,
    catalog::{CONTENT_KEY, ToolEntry},
    gate::Refusal,
    invoke::InvokeError,
    plugin::{PluginError, PluginOutput},
    store::StoreError,
};

/// A `tools/list` entry for `tool`, with the description the gate chose.
pub fn listed_tool(tool: &ToolEntry, description: &str) -> Tool {
    let schema: JsonObject = match &tool.manifest.input_schema {
        Value::Object(schema) => schema.clone(),
        // The catalog compiled the schema; a non-object schema (e.g. `true`) accepts anything.
        _ => JsonObject::from_iter([("type".to_string(), json!("object"))]),
    };
    let manifest = &tool.manifest;
    let mut listed = Tool::new(tool.name().to_string(), description.to_string(), schema);
    listed.title = manifest.title.clone();
    listed.annotations = manifest.annotations.as_ref().map(|hints| {
        let mut annotations = rmcp::model::ToolAnnotations::default();
        annotations.read_only_hint = hints.read_only_hint;
        annotations.destructive_hint = hints.destructive_hint;
        annotations.idempotent_hint = hints.idempotent_hint;
        annotations.open_world_hint = hints.open_world_hint;
        annotations
    });
    // The catalog admitted only object schemas.
    if let Some(Value::Object(output)) = &manifest.output_schema {
        let mut output = output.clone();
        // A workflow tool's result reports the state it left the instance in (`ran`): say so,
        // or a strict client would reject the result.
        if tool.workflow().is_some()
            && let Value::Object(properties) =
                output.entry("properties").or_insert_with(|| json!({}))
        {
            properties.entry(STATE_KEY).or_insert_with(|| {
                json!({"description": "The workflow instance's state after the call \
                    (XState state value)."})
            });
        }
        listed.output_schema = Some(std::sync::Arc::new(output));
    }
    listed
}

/// Where a workflow tool's result reports the state the call left its instance in.
pub const STATE_KEY: &str = "state";

/// The tool ran: its output, or the failure it reported. For a tool of a workflow, `state` is
/// the instance's state after the call: an object output that has no [`STATE_KEY`] of its own
/// gains it, so the plugin reports what it did and the host where the workflow went (a plugin
/// never has to name the next state).
pub fn ran(tool: &str, output: PluginOutput, state: Option<Value>) -> CallToolResult {
    match output {
        PluginOutput::Success(output) => {
            let (mut output, mut text) = output.into_parts();
            if let (Value::Object(object), Some(state)) = (&mut output, state)
                && !object.contains_key(STATE_KEY)
            {
                object.insert(STATE_KEY.to_owned(), state);
                // The plugin's text no longer shows the whole value.
                text = None;
            }
            success(output, text)
        }
        PluginOutput::ToolError(message) | PluginOutput::BadInput(message) => {
            let mut result = tool_error(tool, &message);
            // Where the instance is now: where it was, or where the binding's `on_error` took it.
            if let (Some(Value::Object(structured)), Some(state)) =
                (&mut result.structured_content, state)
                && let Some(Value::Object(error)) = structured.get_mut("error")
            {
                error.insert(STATE_KEY.to_string(), state);
            }
            result
        }
        // Asked where nothing may be asked (`mcp/handler/asking.rs` answers every request it can).
        PluginOutput::NeedsInput(requests) => input_unavailable(tool, &needed(&requests)),
    }
}

/// What `requests` ask for, in words: `"a form (confirm), sampling (draft)"`.
pub fn needed(requests: &serde_json::Map<String, Value>) -> String {
    let mut needed: Vec<String> = requests
        .iter()
        .map(|(key, request)| {
            let what = match super::asking::kind_of(request) {
                "elicitation.url" => "a URL elicitation",
                "elicitation.form" => "a form elicitation",
                other => other,
            };
            format!("{what} ({})", clip(key))
        })
        .collect();
    needed.sort();
    needed.join(", ")
}

/// The tool needs input the client cannot give (it did not declare the capability, or the
/// host cannot ask on this connection): nothing ran to completion and nothing fired. The
/// handler did run up to where it asked (a handler asks before it acts, by contract), so the
/// words say the workflow did not move, not that nothing ran.
pub fn input_unavailable(tool: &str, needed: &str) -> CallToolResult {
    with_known(
        error_result(
            format!(
                "{tool} stopped before acting and the workflow did not move: it needs input this \
                 client cannot give: {needed}. Use a client that supports it, or ask the user \
                 another way."
            ),
            "INPUT_UNAVAILABLE",
            json!({ "tool": tool, "needed": needed }),
        ),
        Fact::Unknown,
        Fact::No,
    )
}

/// The tool's input could not be got (the client failed to answer, or the call asked too many
/// times, or was cancelled while it waited): nothing fired. A handler that asked ran up to its
/// question (it asks before it acts, by contract); a binding's confirmation asks before the
/// handler: `handlerRan` is "unknown" here, where the two are not told apart.
pub fn asking_failed(tool: &str, why: &str) -> CallToolResult {
    with_known(
        error_result(
            format!("{tool} stopped before acting and the workflow did not move: {why}."),
            "INPUT_UNAVAILABLE",
            json!({ "tool": tool, "message": why }),
        ),
        Fact::Unknown,
        Fact::No,
    )
}

/// The person declined (or cancelled) what the tool asked: nothing ran and nothing fired.
pub fn declined(tool: &str, action: &str) -> CallToolResult {
    with_known(
        error_result(
            format!("{tool} did not run and changed nothing: the user answered {action:?}."),
            "DECLINED",
            json!({ "tool": tool, "action": action }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// The tool ran and returned `output`.
///
/// An object with [`CONTENT_KEY`] carries its own MCP content blocks (text, image, audio,
/// embedded resource, resource link): they become the result's content, in order, and the rest
/// of the object, if any, its `structuredContent` (also appended as a text block, as MCP asks of
/// structured results). Any other value is shown as text, and as `structuredContent` when it is
/// an object. `written` is the plugin's JSON text of `output`, if it has it: used as is for that
/// text rather than writing the value out again.
fn success(output: Value, written: Option<String>) -> CallToolResult {
    match output {
        Value::Object(mut object) if object.contains_key(CONTENT_KEY) => {
            let blocks = object.remove(CONTENT_KEY).unwrap_or_default();
            let mut content: Vec<ContentBlock> = match serde_json::from_value(blocks) {
                Ok(content) => content,
                Err(error) => {
                    return error_result(
                        format!("the tool's output has unusable {CONTENT_KEY}: {error}"),
                        "BAD_OUTPUT",
                        json!({ "message": error.to_string() }),
                    );
                }
            };
            let mut result = CallToolResult::success(Vec::new());
            if !object.is_empty() {
                let structured = Value::Object(object);
                content.push(ContentBlock::text(json_text(&structured)));
                result.structured_content = Some(structured);
            }
            result.content = content;
            result
        }
        output => {
            let text = match (&output, written) {
                (Value::String(text), _) => text.clone(),
                (_, Some(written)) => written,
                (other, None) => json_text(other),
            };
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            if output.is_object() {
                result.structured_content = Some(output);
            }
            result
        }
    }
}

/// `value` as JSON text, for a text block. `serde_json::to_string`, not `Value`'s `Display`
/// (`to_string`): that one writes each piece through a `fmt::Formatter`, several times slower,
/// and every successful call writes one (BENCHMARKS.md's history, sessions 14 and 15).
fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

/// The tool ran and reported a failure of its own.
fn tool_error(tool: &str, message: &str) -> CallToolResult {
    error_result(
        format!("{tool} failed: {message}"),
        "TOOL_ERROR",
        json!({ "tool": tool, "message": message }),
    )
}

/// DESIGN behaviour 2: the tool exists but is not on this instance's menu. Nothing ran.
pub fn forbidden(refusal: &Refusal) -> CallToolResult {
    let allowed = if refusal.allowed.is_empty() {
        "none".to_string()
    } else {
        refusal.allowed.join(", ")
    };
    with_known(
        error_result(
            format!(
                "{tool} is not available in the current state of workflow {workflow} ({state}). \
                 Tools available now: {allowed}.",
                tool = refusal.tool,
                workflow = refusal.workflow,
                state = refusal.state,
            ),
            "FORBIDDEN",
            json!({
                "tool": refusal.tool,
                "workflow": refusal.workflow,
                "state": refusal.state,
                "allowed": refusal.allowed,
            }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// The plugin ran, but the event it fired started an eventless loop in the machine (more
/// microsteps than the engine allows): nothing was saved, the instance keeps its state, and the
/// caller still sees what the plugin answered.
pub fn transition_loop(tool: &str, output: Value, state: Value) -> CallToolResult {
    with_known(
        error_result(
            format!(
                "{tool} ran, but its event started a loop of eventless transitions in the workflow \
                 that never settles; the workflow stays in {state} and nothing was saved. The \
                 plugin's answer is in structuredContent.error.output."
            ),
            "TRANSITION_LOOP",
            json!({"tool": tool, "state": state, "output": output}),
        ),
        Fact::Yes,
        Fact::No,
    )
}

/// The arguments do not match the tool's input schema. Nothing ran.
pub fn invalid_arguments(tool: &str, problems: &[String]) -> CallToolResult {
    with_known(
        error_result(
            format!("invalid arguments for {tool}: {}", problems.join("; ")),
            "INVALID_ARGUMENTS",
            json!({ "tool": tool, "problems": problems }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// What a failed call's answer says is known of one part of it (`handlerRan`, `committed`):
/// it happened, it did not, or nobody can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fact {
    Yes,
    No,
    Unknown,
}

impl Fact {
    fn json(self) -> Value {
        match self {
            Fact::Yes => json!(true),
            Fact::No => json!(false),
            Fact::Unknown => json!("unknown"),
        }
    }
}

/// Whether the tool's handler ran, as `error` (met before the handler returned) tells: a
/// plugin that timed out, crashed or failed inside may have acted; one that returned output
/// the host could not use ran; every other failure stopped the call before the handler.
fn handler_ran_of(error: &InstanceError) -> Fact {
    let InstanceError::Tool(error) = error else {
        return Fact::No;
    };
    match error {
        InvokeError::BadOutput(_) | InvokeError::ResultTooLarge { .. } => Fact::Yes,
        InvokeError::Busy(_) | InvokeError::InstanceBusy => Fact::No,
        InvokeError::Plugin(
            PluginError::UpstreamUnreachable { .. } | PluginError::UpstreamBusy { .. },
        ) => Fact::No,
        InvokeError::TimedOut(_)
        | InvokeError::Worker(_)
        | InvokeError::ShuttingDown
        | InvokeError::Plugin(_) => Fact::Unknown,
    }
}

/// Whether the call's save was applied, as `error` tells: only a save that got no answer the
/// store could settle (`store/unanswered.rs`) may have been; every other failure saved nothing.
fn committed_of(error: &InstanceError) -> Fact {
    match error {
        InstanceError::Store(
            StoreError::Ambiguous { .. } | StoreError::NoAnswer(_) | StoreError::Dropped(_),
        ) => Fact::Unknown,
        _ => Fact::No,
    }
}

/// Whether the call that failed with `error` may have been saved (its instance may have moved).
pub fn may_have_saved(error: &InstanceError) -> bool {
    committed_of(error) == Fact::Unknown
}

/// Writes what is known (`handlerRan`, `committed`) into `result`'s `structuredContent.error`.
fn with_known(mut result: CallToolResult, handler_ran: Fact, committed: Fact) -> CallToolResult {
    if let Some(Value::Object(structured)) = &mut result.structured_content
        && let Some(Value::Object(error)) = structured.get_mut("error")
    {
        error.insert("handlerRan".to_owned(), handler_ran.json());
        error.insert("committed".to_owned(), committed.json());
    }
    result
}

/// A call of a workflow tool that failed once its instance was known (`CallOutcome::Failed`):
/// `after_handler` when the handler had run and returned. The answer says what is known, in
/// `structuredContent.error` (`handlerRan`, `committed`: true, false or "unknown") and in words:
/// "the handler ran but the workflow did not move" only when the store proved it, "it may have
/// moved" (naming `readers`, the tools that read where it is) when it could not tell.
pub fn call_failed(
    tool: &str,
    error: &InstanceError,
    after_handler: bool,
    readers: &[String],
) -> CallToolResult {
    let handler_ran = if after_handler {
        Fact::Yes
    } else {
        handler_ran_of(error)
    };
    let committed = committed_of(error);
    let result = match (handler_ran, committed) {
        (_, Fact::Unknown) => may_have_moved(tool, error, handler_ran, readers),
        (Fact::Yes, _) if after_handler => handler_ran_unsaved(tool, error),
        _ => return failure(tool, error),
    };
    with_known(result, handler_ran, committed)
}

/// The handler ran and returned, but what the call would have done to the workflow was not
/// saved, and the store proved it: whatever the handler did outside the workflow stands.
fn handler_ran_unsaved(tool: &str, error: &InstanceError) -> CallToolResult {
    let (code, advice) = match error {
        InstanceError::Store(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => (
            "CONFLICT",
            "Another server moved this instance on meanwhile; re-read it before the next step",
        ),
        InstanceError::RecordTooLarge { .. } => (
            "RECORD_TOO_LARGE",
            "Send less, or finish this instance and start another",
        ),
        InstanceError::Tool(InvokeError::ShuttingDown) => {
            ("SHUTTING_DOWN", "Call again once the server is back")
        }
        _ => (
            "STORE_UNAVAILABLE",
            "What the handler did outside the workflow stands: check it before calling again",
        ),
    };
    let mut details = json!({ "tool": tool, "message": error.to_string() });
    if let InstanceError::RecordTooLarge { size, limit } = error {
        details["size"] = json!(size);
        details["limit"] = json!(limit);
    }
    error_result(
        format!("{tool}: the handler ran but the workflow did not move: {error}. {advice}."),
        code,
        details,
    )
}

/// The call's save got no answer and reading the record again could not tell whether it was
/// applied: the workflow may have moved. Never "changed nothing".
fn may_have_moved(
    tool: &str,
    error: &InstanceError,
    handler_ran: Fact,
    readers: &[String],
) -> CallToolResult {
    let ran = match handler_ran {
        Fact::Yes => format!("{tool}'s handler ran, but the store"),
        Fact::No => "the store".to_owned(),
        Fact::Unknown => format!("{tool} may have run, and the store"),
    };
    let read = if readers.is_empty() {
        "read the instance (tools/list, or its resource)".to_owned()
    } else {
        format!("call {}", readers.join(" or "))
    };
    error_result(
        format!(
            "{ran} did not answer whether the workflow moved ({error}): it may have moved: \
             {read}, or retry with the same idempotency key (_meta.idempotencyKey: if the \
             call was saved, the retry is answered from memory and runs nothing). Without a \
             key, read where it is before calling again."
        ),
        "STORE_UNAVAILABLE",
        json!({ "tool": tool, "message": error.to_string(), "readers": readers }),
    )
}

/// The call could not complete, and nothing of it was saved but what `error` leaves unknown
/// (`handlerRan`, `committed` say what is known).
pub fn failure(tool: &str, error: &InstanceError) -> CallToolResult {
    let (handler_ran, committed) = (handler_ran_of(error), committed_of(error));
    if committed == Fact::Unknown {
        return with_known(
            may_have_moved(tool, error, handler_ran, &[]),
            handler_ran,
            committed,
        );
    }
    with_known(failure_words(tool, error), handler_ran, committed)
}

/// [`failure`]'s code and words, by what failed.
fn failure_words(tool: &str, error: &InstanceError) -> CallToolResult {
    let code = match error {
        InstanceError::Store(StoreError::Conflict { .. }) => {
            return error_result(
                format!(
                    "{tool} ran, but another server moved this instance on at the same moment, so \
                     its transition was not applied. Re-read tools/list before the next step."
                ),
                "CONFLICT",
                json!({ "tool": tool, "message": error.to_string() }),
            );
        }
        InstanceError::IdempotencyConflict { .. } => {
            return error_result(
                format!(
                    "{tool} did not run: {error}. Use a new key for a new call; a retry must \
                     repeat the first call exactly."
                ),
                "IDEMPOTENCY_CONFLICT",
                json!({ "tool": tool, "message": error.to_string() }),
            );
        }
        InstanceError::IdempotencyResultExpired { .. } => {
            return error_result(
                format!(
                    "{tool} did not run again: {error}. Its effect stands; read the instance \
                     (e.g. its status tool) for where it is now."
                ),
                "IDEMPOTENCY_RESULT_EXPIRED",
                json!({ "tool": tool, "message": error.to_string() }),
            );
        }
        InstanceError::Store(StoreError::Fenced { .. }) => {
            return error_result(
                format!(
                    "{tool} was not applied: this server's hold on the instance lapsed before the \
                     call's result could be saved (the server paused or lost the store), and \
                     another server may have moved the instance on. Re-read the instance before \
                     the next step."
                ),
                "CONFLICT",
                json!({ "tool": tool, "message": error.to_string() }),
            );
        }
        InstanceError::LeaseBusy { retry_after_ms } => {
            return error_result(
                format!(
                    "{tool} did not run and changed nothing: another server is running a call on \
                     this instance. Try again in {retry_after_ms} ms."
                ),
                "BUSY",
                json!({
                    "tool": tool,
                    "message": error.to_string(),
                    "retryAfterMs": retry_after_ms,
                }),
            );
        }
        InstanceError::TaskRunning { id, tool: running } => {
            return error_result(
                format!(
                    "{tool} did not run and changed nothing: {running} is running on this \
                     instance as task {id}, which holds it until the task ends. Follow the task \
                     (tasks/get), then call again."
                ),
                "BUSY",
                json!({
                    "tool": tool,
                    "message": error.to_string(),
                    "taskId": id,
                    "runningTool": running,
                }),
            );
        }
        InstanceError::RecordTooLarge { size, limit } => {
            return error_result(
                format!(
                    "{tool} changed nothing: {error}. Send less, or finish this instance and start \
                     another."
                ),
                "RECORD_TOO_LARGE",
                json!({ "tool": tool, "message": error.to_string(), "size": size, "limit": limit }),
            );
        }
        InstanceError::Store(StoreError::UnsupportedFormat { .. }) => "VERSION_UNAVAILABLE",
        InstanceError::Store(_) => "STORE_UNAVAILABLE",
        InstanceError::UnknownHandle(_) => "UNKNOWN_HANDLE",
        InstanceError::Corrupt { .. } => "STATE_CORRUPT",
        InstanceError::VersionUnavailable { .. } => "VERSION_UNAVAILABLE",
        InstanceError::Tool(error) => return invoke_failure(tool, error),
        InstanceError::Stopped | InstanceError::UnknownWorkflow(_) => "INTERNAL",
    };
    error_result(
        format!("{tool} did not run to completion and changed nothing: {error}"),
        code,
        json!({ "tool": tool, "message": error.to_string() }),
    )
}

/// The codes of the error results that say a call could not give its handler's answer for a
/// reason of the host's, not the tool's: the ones [`invoke_failure`] writes (the plugin failed,
/// crashed, timed out or was busy, its upstream could not be reached, its output was unusable,
/// the server was shutting down). A task whose call ends with one ends `failed`
/// (`reply/tasks.rs`); any other result, a tool's own error included, completes it.
const HOST_FAILURES: &[&str] = &[
    "BAD_OUTPUT",
    "BUSY",
    "INTERNAL",
    "PLUGIN_CRASHED",
    "PLUGIN_FAILED",
    "RESULT_TOO_LARGE",
    "SHUTTING_DOWN",
    "TOOL_TIMEOUT",
    "UPSTREAM_UNAVAILABLE",
];

/// The tool produced no output. Nothing was fired; `handlerRan` says whether the handler ran.
pub fn invoke_failure(tool: &str, error: &InvokeError) -> CallToolResult {
    let handler_ran = match error {
        InvokeError::Plugin(
            PluginError::UpstreamUnreachable { .. } | PluginError::UpstreamNoAnswer { .. },
        ) => return invoke_failure_words(tool, error),
        InvokeError::BadOutput(_) | InvokeError::ResultTooLarge { .. } => Fact::Yes,
        InvokeError::Busy(_)
        | InvokeError::InstanceBusy
        | InvokeError::Plugin(PluginError::UpstreamBusy { .. }) => Fact::No,
        _ => Fact::Unknown,
    };
    with_known(invoke_failure_words(tool, error), handler_ran, Fact::No)
}

/// [`invoke_failure`]'s code and words, by what failed.
fn invoke_failure_words(tool: &str, error: &InvokeError) -> CallToolResult {
    let mut details = json!({ "tool": tool, "message": error.to_string() });
    let code = match error {
        InvokeError::Plugin(error) => return plugin_failure(tool, error),
        InvokeError::TimedOut(_) => "TOOL_TIMEOUT",
        InvokeError::Worker(_) => "INTERNAL",
        InvokeError::BadOutput(_) => "BAD_OUTPUT",
        InvokeError::ShuttingDown => "SHUTTING_DOWN",
        InvokeError::Busy(_) | InvokeError::InstanceBusy => return busy(tool, error),
        InvokeError::ResultTooLarge { size, limit } => {
            details["size"] = json!(size);
            details["limit"] = json!(limit);
            "RESULT_TOO_LARGE"
        }
    };
    let words = match code {
        // The handler ran: only its output could not be used.
        "BAD_OUTPUT" | "RESULT_TOO_LARGE" => {
            format!("{tool}: the handler ran but the workflow did not move: {error}")
        }
        "INTERNAL" => format!("{tool} did not complete: {error}. The workflow did not move."),
        _ => format!(
            "{tool} did not complete: {error}. The handler may have acted before it stopped, \
             but the workflow did not move."
        ),
    };
    error_result(words, code, details)
}

/// The caller started instances faster than its quota allows, or holds as many as it may
/// (`quotas.rs`): nothing ran. `retryAfterMs` only where waiting helps.
pub fn over_quota(tool: &str, refusal: &crate::mcp::quotas::OverQuota) -> CallToolResult {
    let mut details = json!({
        "tool": tool,
        "quota": refusal.what,
        "limit": refusal.limit,
    });
    if let Some(wait) = refusal.retry_after {
        details["retryAfterMs"] = json!(wait.as_millis().max(1) as u64);
    }
    with_known(
        error_result(
            format!(
                "{tool} did not run and changed nothing: {}",
                refusal.message()
            ),
            "QUOTA_EXCEEDED",
            details,
        ),
        Fact::No,
        Fact::No,
    )
}

/// The plugin's call slots are all taken: nothing ran; the agent may retry after a pause.
fn busy(tool: &str, error: &InvokeError) -> CallToolResult {
    /// A hint, not a promise: slots free up as the plugin's calls return.
    const RETRY_AFTER_MS: u64 = 1000;
    with_known(
        error_result(
            format!("{tool} did not run and changed nothing: {error}"),
            "BUSY",
            json!({ "tool": tool, "message": error.to_string(), "retryAfterMs": RETRY_AFTER_MS }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// The plugin itself failed (it panicked, or broke the ABI contract). The full error, with the
/// library's path, goes to the server log; the client gets the reason without the path, which is
/// the server's business.
fn plugin_failure(tool: &str, error: &PluginError) -> CallToolResult {
    match error {
        PluginError::Crashed { reason, .. } => return plugin_crashed(tool, reason),
        PluginError::UpstreamUnreachable { reason, .. } => {
            return upstream_unreachable(tool, reason);
        }
        PluginError::UpstreamNoAnswer { reason, .. } => return upstream_no_answer(tool, reason),
        PluginError::UpstreamBusy { reason, .. } => {
            return error_result(
                format!("{tool} did not run and changed nothing: {reason}. Retry shortly."),
                "BUSY",
                json!({ "tool": tool, "message": reason, "retryAfterMs": 1000 }),
            );
        }
        _ => {}
    }
    tracing::warn!(%tool, %error, "plugin failure");
    let full = error.to_string();
    let prefix = format!("{}: ", error.path().display());
    let reason = full.strip_prefix(&prefix).unwrap_or(&full);
    error_result(
        format!(
            "{tool} failed inside its plugin: {reason}. The handler may have acted before it \
             failed, but the workflow did not move."
        ),
        "PLUGIN_FAILED",
        json!({ "tool": tool, "message": reason }),
    )
}

/// An isolated plugin's process ended while the call was in flight: nothing was fired or
/// saved, and the process is being restarted, so the agent may retry. Not logged here: the
/// process's end is logged once, with its exit status, however many calls it fails.
fn plugin_crashed(tool: &str, reason: &str) -> CallToolResult {
    error_result(
        format!(
            "{tool} did not complete: {reason}. The handler may have acted before its process \
             ended, but the workflow did not move. The plugin is being restarted; retrying may \
             succeed."
        ),
        "PLUGIN_CRASHED",
        json!({ "tool": tool, "message": reason }),
    )
}

/// The call never reached the plugin's upstream server (it did not start, answer or accept
/// the call): nothing ran there and nothing fired. Not logged here: the upstream's links log
/// its going away and coming back.
fn upstream_unreachable(tool: &str, reason: &str) -> CallToolResult {
    error_result(
        format!(
            "{tool} did not reach its upstream server and changed nothing: {reason}. \
             Retrying may succeed once the server is back."
        ),
        "UPSTREAM_UNAVAILABLE",
        json!({ "tool": tool, "message": reason, "handlerRan": false, "committed": false }),
    )
}

/// The call was sent to the plugin's upstream server and got no answer: it may have run
/// there, so the answer must not say "changed nothing" of the world, only of the workflow,
/// which did not move.
fn upstream_no_answer(tool: &str, reason: &str) -> CallToolResult {
    error_result(
        format!(
            "{tool} was sent to its upstream server, which gave no answer ({reason}): it may \
             have run there, but the workflow did not move. Check what the server did before \
             acting again, or retry with the same idempotency key (_meta.idempotencyKey, which \
             the server is given) so that a server honouring it acts once."
        ),
        "UPSTREAM_UNAVAILABLE",
        json!({ "tool": tool, "message": reason, "handlerRan": "unknown", "committed": false }),
    )
}

/// The call names no usable instance. Nothing ran.
pub fn no_target(tool: &str, why: &NoTarget) -> CallToolResult {
    match why {
        NoTarget::InvalidHandle(reason) => invalid_handle(tool, reason),
        NoTarget::HandleRequired { key, starters } => handle_required(tool, key, starters),
    }
}

/// The handle is malformed, or names an instance of another workflow. Nothing ran.
fn invalid_handle(tool: &str, reason: &str) -> CallToolResult {
    with_known(
        error_result(
            format!("{tool} was not run: {reason}"),
            "INVALID_HANDLE",
            json!({ "tool": tool, "message": reason }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// A tool that acts on an existing instance was called without a handle. Nothing ran.
fn handle_required(tool: &str, key: &str, starters: &[String]) -> CallToolResult {
    let start = if starters.is_empty() {
        String::new()
    } else {
        format!(
            " To start a new instance, call {} without a {key}.",
            starters.join(" or ")
        )
    };
    with_known(
        error_result(
            format!("{tool} acts on an existing workflow instance: pass its {key}.{start}"),
            "HANDLE_REQUIRED",
            json!({ "tool": tool, "argument": key, "start_with": starters }),
        ),
        Fact::No,
        Fact::No,
    )
}

/// Adds the instance's handle to a result, under `key` in `structuredContent` and, unless the
/// result's next step names it already (`in_text: false`), as a line of text, so the agent can
/// carry it to the next call.
pub fn with_handle(
    mut result: CallToolResult,
    key: &str,
    handle: &str,
    in_text: bool,
) -> CallToolResult {
    match &mut result.structured_content {
        Some(Value::Object(structured)) => {
            structured.insert(key.to_string(), json!(handle));
        }
        Some(other) => {
            result.structured_content = Some(json!({ "result": other.take(), key: handle }));
        }
        None => result.structured_content = Some(json!({ key: handle })),
    }
    if in_text {
        result
            .content
            .push(ContentBlock::text(format!("{key}: {handle}")));
    }
    result
}

fn error_result(text: String, code: &str, details: Value) -> CallToolResult {
    let mut error = json!({ "code": code });
    if let (Value::Object(error), Value::Object(details)) = (&mut error, details) {
        error.extend(details);
    }
    let mut result = CallToolResult::structured_error(json!({ "error": error }));
    result.content = vec![ContentBlock::text(text)];
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::Returned;

    #[test]
    fn a_workflow_result_reports_the_state_unless_the_output_has_its_own() {
        let state = Some(json!({"paying": "card"}));
        let result = ran(
            "p.pay",
            PluginOutput::success(json!({"ok": true})),
            state.clone(),
        );
        let expected = json!({"ok": true, "state": {"paying": "card"}});
        assert_eq!(result.structured_content, Some(expected.clone()));
        let text = serde_json::to_value(&result.content[0]).unwrap();
        assert_eq!(text["text"], expected.to_string(), "the text says the same");

        let own = ran(
            "p.status",
            PluginOutput::success(json!({"state": "mine"})),
            state.clone(),
        );
        assert_eq!(own.structured_content, Some(json!({"state": "mine"})));
        let text = ran("p.say", PluginOutput::success(json!("hi")), state);
        assert_eq!(text.structured_content, None);
        let unbound = ran("p.free", PluginOutput::success(json!({"ok": 1})), None);
        assert_eq!(unbound.structured_content, Some(json!({"ok": 1})));
    }

    #[test]
    fn the_text_block_is_the_plugins_own_text_unless_the_host_added_the_state() {
        let text_of = |result: &CallToolResult| {
            serde_json::to_value(&result.content[0]).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let written = |text: &str| {
            PluginOutput::Success(Returned::written(
                serde_json::from_str(text).unwrap(),
                text.to_owned(),
            ))
        };
        let state = Some(json!("review"));
        let own = ran(
            "p.status",
            written(r#"{"state": "mine", "n": 1}"#),
            state.clone(),
        );
        assert_eq!(text_of(&own), r#"{"state": "mine", "n": 1}"#);
        assert_eq!(
            own.structured_content,
            Some(json!({"state": "mine", "n": 1}))
        );

        let added = ran("p.pay", written(r#"{"ok": true}"#), state);
        assert_eq!(text_of(&added), r#"{"ok":true,"state":"review"}"#);
        assert_eq!(
            added.structured_content,
            Some(json!({"ok": true, "state": "review"}))
        );
        let unbound = ran("p.free", written("[1, 2]"), None);
        assert_eq!(text_of(&unbound), "[1, 2]");
    }

    #[test]
    fn every_invoke_failure_is_the_hosts_and_a_tool_error_is_not() {
        let code = |result: &CallToolResult| {
            result.structured_content.as_ref().unwrap()["error"]["code"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let plugin = |error: PluginError| InvokeError::Plugin(error);
        let (path, tool, reason) = (std::path::PathBuf::from("p.so"), "t", "gone");
        let failures = [
            InvokeError::TimedOut(std::time::Duration::from_secs(1)),
            InvokeError::Worker("panicked".into()),
            InvokeError::Busy(4),
            InvokeError::InstanceBusy,
            InvokeError::ShuttingDown,
            InvokeError::BadOutput(vec!["missing answer".into()]),
            InvokeError::ResultTooLarge { size: 2, limit: 1 },
            plugin(PluginError::Crashed {
                path: path.clone(),
                tool: tool.into(),
                reason: reason.into(),
            }),
            plugin(PluginError::UpstreamUnreachable {
                path: path.clone(),
                tool: tool.into(),
                reason: reason.into(),
            }),
            plugin(PluginError::UpstreamNoAnswer {
                path: path.clone(),
                tool: tool.into(),
                reason: reason.into(),
            }),
            plugin(PluginError::UpstreamBusy {
                path: path.clone(),
                tool: tool.into(),
                reason: reason.into(),
            }),
            plugin(PluginError::BadResponse {
                path,
                tool: tool.into(),
                reason: reason.into(),
            }),
        ];
        for error in failures {
            let result = invoke_failure(tool, &error);
            assert!(HOST_FAILURES.contains(&&*code(&result)), "{error}");
            let failed = task_failure(&result).expect("a host-side failure");
            let data = failed.data.unwrap();
            assert_eq!(data["code"], code(&result));
            assert!(
                data.get("handlerRan").is_some() && data["committed"] == false,
                "{data}"
            );
        }
        let own = ran(tool, PluginOutput::ToolError("no".into()), None);
        assert!(!HOST_FAILURES.contains(&&*code(&own)));
        assert!(task_failure(&own).is_none());
        assert!(task_failure(&ran(tool, PluginOutput::success(json!("ok")), None)).is_none());
    }

    #[test]
    fn a_too_large_result_names_its_size_and_the_limit() {
        let error = InvokeError::ResultTooLarge {
            size: 5000,
            limit: 1000,
        };
        let result = invoke_failure("testkit.echo", &error);
        let structured = result.structured_content.unwrap();
        assert_eq!(structured["error"]["code"], "RESULT_TOO_LARGE");
        assert_eq!(structured["error"]["size"], 5000);
        assert_eq!(structured["error"]["limit"], 1000);
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(text.contains("5000") && text.contains("1000"), "{text}");
    }
}
