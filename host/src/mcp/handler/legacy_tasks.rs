//! MCP tasks as 2025-11-25 has them (SEP-1686), for the clients of the 2025 revisions (the
//! official SDKs' `session.experimental.call_tool_as_task`, `client.experimental.tasks`): a
//! `tools/call` with a `task` param is answered at once with `{task}`, and the client polls
//! `tasks/get`, blocks on `tasks/result` for the call's own answer, lists its tasks with
//! `tasks/list` and stops one with `tasks/cancel`.
//!
//! These reach the handler under [`LEGACY_TASKS_PREFIX`] (`mcp/legacy_tasks.rs` says why). The
//! tasks are the same ones 2026-07-28's extension serves (`tasks.rs`): the same call path (the
//! gate first: a refused call creates no task), the same table, the same record of a
//! workflow instance's task, read by any server sharing the store. Only the words differ: this
//! room turns them into 2025-11-25's shapes (`ttl` and `pollInterval` rather than `ttlMs` and
//! `pollIntervalMs`, the result apart from the status).
//!
//! What rmcp 3.11's types have no field for is added here too: a 2025 `tools/list` is renamed
//! like the task requests and answered with each task tool's `execution.taskSupport`, and the
//! transports add [`tasks_capability`] to a 2025-11-25 `initialize` answer (`mcp/
//! legacy_tasks.rs`). The TypeScript SDK's client reads both: its `callToolStream` asks for a
//! task only when both are there, and its `callTool` refuses a tool that runs only as one.
//!
//! What 2025-11-25 has that this does not: a task's call that asks the person asks as a plain
//! call does (an elicitation on the session), not through `tasks/result`.
//! `notifications/tasks/status` is sent on the task's session when it ends.

use std::{sync::Arc, time::Duration};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CustomNotification, DetailedTask, GetTaskParams,
        JsonObject, ServerNotification, ServerResult, TaskPayload, TaskStatus as WireStatus,
    },
    service::RequestContext,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    cancel_elsewhere::Cancelled,
    reply,
    server::TurnstileServer,
    tasks::{Asked, detailed, ended_with, object},
};
use crate::tasks;

/// The method prefix a 2025-11-25 task request reaches the handler under.
pub const LEGACY_TASKS_PREFIX: &str = "dev.turnstile/2025-11-25/";

/// The notification of a task's new status (2025-11-25).
const TASK_STATUS_METHOD: &str = "notifications/tasks/status";

/// The `_meta` key of the task a message belongs to (2025-11-25, "related-task").
const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";

/// What a server that runs `tools/call` as tasks declares in its `initialize` answer
/// (2025-11-25's `ServerCapabilities.tasks`): it lists and cancels tasks, and runs calls as
/// tasks.
pub fn tasks_capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// A task-augmented request's `task` param.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskParam {
    /// How long the client asks the task be kept, in ms.
    ttl: Option<u64>,
}

/// The params of `tasks/get`, `tasks/result` and `tasks/cancel`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskIdParams {
    task_id: String,
}

impl TurnstileServer {
    /// A 2025-11-25 task request, `method` as its client sent it.
    pub(super) async fn answer_legacy_task(
        &self,
        method: &str,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let params = match params {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(params)) => params,
            Some(_) => {
                return Err(reply::invalid_task_params(
                    method,
                    &"params is not an object",
                ));
            }
        };
        let task_id = || {
            serde_json::from_value::<TaskIdParams>(Value::Object(params.clone()))
                .map(|params| params.task_id)
                .map_err(|error| reply::invalid_task_params(method, &error))
        };
        match method {
            "tools/list" => self.legacy_list_tools(params, context).await,
            "tools/call" => self.legacy_call(params, context).await,
            "tasks/get" => self.legacy_get(&task_id()?, &context).await,
            "tasks/result" => self.legacy_result(&task_id()?, &context).await,
            "tasks/list" => Ok(self.legacy_list(&context)),
            "tasks/cancel" => self.legacy_cancel(&task_id()?, &context).await,
            _ => Err(reply::unroutable_request(
                &format!("{LEGACY_TASKS_PREFIX}{method}"),
                Some(&Value::Object(params)),
            )),
        }
    }

    /// A task-augmented `tools/call`: `{task}` once the gate let the call through. A call the
    /// host refused before its handler ran is answered with that refusal as a JSON-RPC error
    /// (a client that asked for a task cannot be answered with a result), and no task is made.
    /// A call answered at once although it ran (one that starts its instance runs plainly) is
    /// a task that has ended with that answer.
    async fn legacy_call(
        &self,
        mut params: JsonObject,
        mut context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let method = "tools/call";
        meta_into_context(&params, &mut context);
        let asked = params.remove("task").unwrap_or_default();
        let asked: TaskParam = serde_json::from_value(asked)
            .map_err(|error| reply::invalid_task_params(method, &format!("task: {error}")))?;
        let request: CallToolRequestParams = serde_json::from_value(Value::Object(params))
            .map_err(|error| reply::invalid_task_params(method, &error))?;
        let tool = request.name.to_string();
        let ttl = asked.ttl.map(Duration::from_millis);
        let owner = self.task_owner(&context);
        let answer = self
            .serve_call(request, context, Asked::AsLegacyTask { ttl })
            .await?;
        match answer {
            CallToolResponse::Task(created) => {
                if let Some(task) = self.shared.tasks.get(&created.task.task_id, &owner) {
                    self.tell_when_ended(task);
                }
                Ok(json!({ "task": legacy_task(&created.task) }))
            }
            CallToolResponse::Complete(result) if reply::refused_before_running(&result) => {
                Err(reply::task_not_started(&tool, &result))
            }
            answered => {
                let task = self.shared.tasks.create(&tool, owner, ttl, None);
                task.end(ended_with(Ok(answered)));
                Ok(json!({ "task": legacy_task(&detailed(&task).task) }))
            }
        }
    }

    /// `tools/list` as the 2025 revisions have it: the listing every client gets, each tool
    /// that may run as a task saying how in its `execution.taskSupport`.
    async fn legacy_list_tools(
        &self,
        params: JsonObject,
        mut context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        meta_into_context(&params, &mut context);
        // Shaped for a peer of the 2025 revisions, as rmcp shapes a typed answer for one.
        let mut listed = ServerResult::ListToolsResult(self.list_tools(None, context).await?);
        listed.strip_result_type_for_legacy_peer();
        listed.strip_non_object_output_for_legacy_peer();
        let mut listed = serde_json::to_value(listed)
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let catalog = self.shared.catalog.current();
        let tools = listed.get_mut("tools").and_then(Value::as_array_mut);
        for tool in tools.into_iter().flatten() {
            let support = tool
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| catalog.tool(name))
                .and_then(|entry| entry.manifest.task);
            if let (Some(support), Value::Object(tool)) = (support, tool) {
                tool.insert(
                    "execution".to_owned(),
                    json!({ "taskSupport": support.as_str() }),
                );
            }
        }
        Ok(listed)
    }

    /// Sends the session `notifications/tasks/status` once `task` has ended (2025-11-25 lets a
    /// server send it on any change; a 2025 task shows no other: what it asks, it asks as a
    /// plain call does), on the session's own route for what it is told unprompted.
    fn tell_when_ended(&self, task: Arc<tasks::Task>) {
        let outbox = self.session().outbox().clone();
        tokio::spawn(async move {
            task.ended().await;
            let status = CustomNotification::new(
                TASK_STATUS_METHOD,
                Some(legacy_detailed(&detailed(&task))),
            );
            let sent = outbox
                .notify_other(ServerNotification::CustomNotification(status))
                .await;
            if let Err(error) = sent {
                tracing::debug!(task = %task.id, %error, "cannot tell a task's client it ended");
            }
        });
    }

    /// `tasks/get`: the task as it stands, without its result (`tasks/result` gives that),
    /// from this server's table or its instance's record, as the extension's `tasks/get` finds
    /// it.
    async fn legacy_get(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let found = self
            .answer_get_task(GetTaskParams::new(id), context)
            .await?;
        Ok(legacy_detailed(&found.task))
    }

    /// `tasks/result`: waits until the task has ended, then answers as its call would have:
    /// its result (a tool error included), or the JSON-RPC error it failed with. A task of
    /// another server is read from its instance's record every poll interval.
    async fn legacy_result(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let ended = match self.own_task(id, context) {
            Ok(task) => {
                tokio::select! {
                    _ = task.ended() => detailed(&task),
                    () = context.ct.cancelled() => return Err(reply::task_wait_cancelled(id)),
                }
            }
            Err(_) => loop {
                let found = self
                    .answer_get_task(GetTaskParams::new(id), context)
                    .await?
                    .task;
                if !matches!(
                    found.payload,
                    TaskPayload::Working | TaskPayload::InputRequired { .. }
                ) {
                    break found;
                }
                tokio::select! {
                    () = tokio::time::sleep(tasks::POLL_INTERVAL) => {}
                    () = context.ct.cancelled() => return Err(reply::task_wait_cancelled(id)),
                }
            },
        };
        let related = json!({ RELATED_TASK_META: { "taskId": id } });
        match ended.payload {
            TaskPayload::Completed { mut result } => {
                // 2026-07-28's discriminator, which a 2025 result does not have.
                result.remove("resultType");
                match result.entry("_meta").or_insert_with(|| json!({})) {
                    Value::Object(meta) => meta.extend(object(related)),
                    other => *other = related,
                }
                Ok(Value::Object(result))
            }
            TaskPayload::Failed { error } => Err(serde_json::from_value(Value::Object(error))
                .unwrap_or_else(|error| reply::task_result_unkept(&error.to_string()))),
            _ => Err(reply::task_cancelled(id)),
        }
    }

    /// `tasks/list`: the caller's tasks this server keeps, oldest first, in one page. (A task
    /// another server started is read by its id, not listed.)
    fn legacy_list(&self, context: &RequestContext<RoleServer>) -> Value {
        let owner = self.task_owner(context);
        let listed: Vec<Value> = self
            .shared
            .tasks
            .of(&owner)
            .iter()
            .map(|task| legacy_detailed(&detailed(task)))
            .collect();
        json!({ "tasks": listed })
    }

    /// `tasks/cancel`: the plugin is told to stop and the task ends cancelled; a task that has
    /// ended is refused, as 2025-11-25 says. Answers with the task. A task another server runs
    /// is asked to stop through the store (`cancel_elsewhere.rs`).
    async fn legacy_cancel(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let owner = self.task_owner(context);
        let Some(task) = self.shared.tasks.get(id, &owner) else {
            return match self.cancel_elsewhere(id, context).await? {
                Cancelled::AlreadyEnded(task) => {
                    Err(reply::task_already_ended(id, status_word(task.task.status)))
                }
                Cancelled::Asked(task) => Ok(legacy_detailed(&task)),
            };
        };
        if task.status().0.is_terminal() {
            let status = detailed(&task).task.status;
            return Err(reply::task_already_ended(id, status_word(status)));
        }
        let task = self
            .shared
            .tasks
            .cancel(id, &owner)
            .ok_or_else(|| reply::unknown_task(id))?;
        Ok(legacy_detailed(&detailed(&task)))
    }
}

/// rmcp reads a typed request's `_meta` into its context; a custom one's stays in its params
/// (where a handle may be named, `target.rs`), and is read into the context here.
fn meta_into_context(params: &JsonObject, context: &mut RequestContext<RoleServer>) {
    if let Some(Value::Object(meta)) = params.get("_meta") {
        for (key, value) in meta {
            context
                .meta
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
    }
}

/// A task in 2025-11-25's words.
fn legacy_task(task: &rmcp::model::Task) -> Value {
    let mut legacy = json!({
        "taskId": task.task_id,
        "status": status_word(task.status),
        "createdAt": task.created_at,
        "lastUpdatedAt": task.last_updated_at,
        "ttl": task.ttl_ms,
    });
    if let Some(poll_interval) = task.poll_interval_ms {
        legacy["pollInterval"] = json!(poll_interval);
    }
    if let Some(message) = &task.status_message {
        legacy["statusMessage"] = json!(message);
    }
    legacy
}

/// A task with its status's payload, in 2025-11-25's words: the payload's error, or what it
/// waits for, becomes its `statusMessage`.
fn legacy_detailed(task: &DetailedTask) -> Value {
    let mut legacy = legacy_task(&task.task);
    let message = match &task.payload {
        TaskPayload::Failed { error } => error.get("message").and_then(Value::as_str),
        TaskPayload::InputRequired { .. } => Some("waiting for the person's answer"),
        _ => None,
    };
    if let Some(message) = message {
        legacy["statusMessage"] = json!(message);
    }
    legacy
}

fn status_word(status: WireStatus) -> &'static str {
    match status {
        WireStatus::Working => "working",
        WireStatus::InputRequired => "input_required",
        WireStatus::Completed => "completed",
        WireStatus::Failed => "failed",
        WireStatus::Cancelled => "cancelled",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reads_in_2025_11_25_words() {
        let task = rmcp::model::Task::new(
            "t1",
            WireStatus::Working,
            "2026-12-06T10:00:00.000Z",
            "2026-12-06T10:00:01.000Z",
        )
        .with_ttl_ms(60_000)
        .with_poll_interval_ms(500);
        assert_eq!(
            legacy_task(&task),
            json!({"taskId": "t1", "status": "working",
                "createdAt": "2026-12-06T10:00:00.000Z",
                "lastUpdatedAt": "2026-12-06T10:00:01.000Z",
                "ttl": 60000, "pollInterval": 500})
        );
        let failed = DetailedTask::new(
            task.clone(),
            TaskPayload::Failed {
                error: object(json!({"code": -32603, "message": "the plugin crashed"})),
            },
        );
        let failed = legacy_detailed(&failed);
        assert_eq!(failed["statusMessage"], "the plugin crashed");
        assert!(failed.get("error").is_none(), "{failed}");
    }
}
