//! MCP tasks on the wire (2026-07-28's extension `io.modelcontextprotocol/tasks`, SEP-2663): a
//! `tools/call` of a tool whose manifest lets it run as a task (`"task": "optional" |
//! "required"`) from a client that declares the extension is answered at once with a task,
//! and the call runs on; `tasks/get` tells where it stands (with its result or error once it
//! ended), `tasks/cancel` stops it, `tasks/update` answers what it asked.
//!
//! This room decides which calls become tasks and how a task looks to a client; `tasks.rs` (the
//! crate's) keeps them. A task's call is the same call a plain one is (`answer_call`: the gate,
//! the plugin, the transition, the save), run with the task's cancellation instead of the
//! request's; what the call would have answered is what the task ends with: its result
//! (`completed`, a tool error included), or, when the host could not get the handler's answer
//! (the plugin crashed, timed out, or gave output it could not use), the JSON-RPC error that
//! says so (`failed`).
//!
//! A task's call that asks for input parks the task (`asking.rs`: `input_required`, with the
//! requests as SEP-2322 words them) until `tasks/update` has answered each, then runs again
//! with every answer, as a plain call does. A binding's confirmation of a tool of no workflow
//! is asked before the task is created instead (SEP-2663: a call's rounds of input SHOULD be
//! done with before its task): that call is answered plainly, and its retry with the person's
//! yes becomes the task.

use std::{sync::Arc, time::Duration};

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, DetailedTask,
        GetTaskParams, GetTaskResult, JsonObject, Task, TaskPayload, TaskStatus as WireStatus,
        UpdateTaskParams,
    },
    service::RequestContext,
};
use serde_json::Value;

use super::{
    asking::Unusable, call_record::CallRecord, era::is_2026_07_28, reply, server::TurnstileServer,
};
use crate::actors::{InstanceError, InstanceKey, InstanceView};
use crate::catalog::{Catalog, ToolEntry};
use crate::mcp::quotas::OverQuota;
use crate::mcp::session::request_stream::RequestStream;
use crate::plugin::PluginOutput;
use crate::store::{StoreError, TaskEntry, TaskEntryStatus};
use crate::tasks::{self, TaskOwner, TaskStatus};
use serde_json::json;
use turnstile_plugin_abi::TaskSupport;

/// How a `tools/call`'s request asked to be served.
#[derive(Clone, Copy)]
pub(super) enum Asked {
    /// A plain `tools/call`: a 2026-07-28 one still runs as a task if its tool lets it and its
    /// client declares the extension ([`TurnstileServer::call_mode`]).
    Plainly,
    /// 2025-11-25's task-augmented `tools/call` (`legacy_tasks.rs`), kept `ttl` if it says.
    AsLegacyTask { ttl: Option<Duration> },
}

/// How a `tools/call` is served.
pub(super) enum CallMode {
    /// As a plain call, answered when it ends.
    Plain,
    /// As a task: answered at once.
    Task(TaskHow),
}

/// How a call run as a task runs.
#[derive(Clone, Copy)]
pub(super) struct TaskHow {
    /// How long the task is kept (the default when `None`).
    pub ttl: Option<Duration>,
    /// Whether what the call asks, it asks of the task (2026-07-28: `input_required` until
    /// `tasks/update` answers), or of the client, as a plain call does (2025-11-25, which has
    /// no `tasks/update`).
    pub asks_of_task: bool,
}

impl TurnstileServer {
    /// Whether `tool`'s call by this request runs as a task. A 2025-11-25 request says so
    /// itself (its `task` param), and is refused for a tool that does not run as one. A
    /// 2026-07-28 request runs as a task if the tool lets it and its client declares the tasks
    /// extension (a client that did not could not read the answer). A tool that runs only as
    /// a task is refused to any other request, with what it needs.
    pub(super) fn call_mode(
        &self,
        tool: &ToolEntry,
        context: &RequestContext<RoleServer>,
        asked: Asked,
    ) -> Result<CallMode, ErrorData> {
        if let Asked::AsLegacyTask { ttl } = asked {
            return match tool.manifest.task {
                Some(_) => Ok(CallMode::Task(TaskHow {
                    ttl,
                    asks_of_task: false,
                })),
                None => Err(reply::task_forbidden(tool.name())),
            };
        }
        let Some(support) = tool.manifest.task else {
            return Ok(CallMode::Plain);
        };
        let of_2026 = is_2026_07_28(context);
        let follows_tasks = of_2026
            && context
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.supports_tasks());
        match (support, follows_tasks) {
            (_, true) => Ok(CallMode::Task(TaskHow {
                ttl: None,
                asks_of_task: true,
            })),
            (TaskSupport::Required, false) if of_2026 => Err(reply::task_required(tool.name())),
            (TaskSupport::Required, false) => Err(reply::task_param_required(tool.name())),
            _ => Ok(CallMode::Plain),
        }
    }

    /// Starts `request` as a task and answers with it at once; the call runs on in the
    /// background, with the task's cancellation, and ends the task with what it would have
    /// answered.
    pub(super) fn start_task(
        &self,
        task: Arc<tasks::Task>,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        catalog: Arc<Catalog>,
        record: CallRecord,
        how: TaskHow,
    ) -> CallToolResponse {
        tracing::debug!(task = %task.id, tool = %request.name, "call started as a task");
        let running = task_context(context, &task, how);
        let server = self.clone();
        let spawned = task.clone();
        tokio::spawn(async move {
            let tool = request.name.clone();
            let answer = server
                .answer_call(request, running, &catalog, &record, None)
                .await;
            let answer = record.finish(&server.shared.call_metrics, answer);
            end(&spawned, &tool, answer);
        });
        created(&task)
    }

    /// A new working task of `tool` for this request's caller, on the instance `handle` names
    /// (if any: a call naming none mints, and runs plainly), kept `ttl` (the default if `None`),
    /// if the caller has room for one more (`--max-tasks-per-principal`: the task holds its
    /// place until it ends).
    pub(super) async fn new_task(
        &self,
        tool: &str,
        handle: Option<&str>,
        context: &RequestContext<RoleServer>,
        ttl: Option<Duration>,
    ) -> Result<Result<Arc<tasks::Task>, OverQuota>, StoreError> {
        let place = match self.caller(context).quota_holder() {
            Some(holder) => {
                let quotas = &self.shared.quotas;
                match quotas.admit_task(&self.shared.store, &holder).await? {
                    Ok(place) => place,
                    Err(refusal) => return Ok(Err(refusal)),
                }
            }
            None => None,
        };
        let task = self
            .shared
            .tasks
            .create(tool, self.task_owner(context), ttl, handle);
        if let Some(place) = place {
            task.hold_until_end(place);
        }
        Ok(Ok(task))
    }

    /// The handle `request` names its instance by, as `target.rs` reads it (an argument, or
    /// `_meta`), if it is a well-formed one.
    pub(super) fn named_handle<'r>(
        &self,
        request: &'r CallToolRequestParams,
        context: &'r RequestContext<RoleServer>,
    ) -> Option<&'r str> {
        let mode = self.handle_mode(context)?;
        let named = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get(&mode.key))
            .or_else(|| context.meta.get(&mode.key))?
            .as_str()?;
        InstanceKey::from_handle(named).ok().map(|_| named)
    }

    /// `tasks/get`: the task as it stands, with its result or error once it ended: from this
    /// server's table, or, for a task of an instance this server does not hold in memory
    /// (another server sharing the store started it, or this one before a restart), from the
    /// instance's record.
    pub(super) async fn answer_get_task(
        &self,
        request: GetTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = &request.task_id;
        if let Ok(task) = self.own_task(id, context) {
            return Ok(GetTaskResult::new(detailed(&task)));
        }
        let unknown = || reply::unknown_task(id);
        let handle = tasks::instance_handle(id).ok_or_else(unknown)?;
        let key = InstanceKey::from_handle(handle)
            .map_err(|_| unknown())?
            .owned_by(self.caller(context).tenant().as_ref());
        let (entry, view) = match self.shared.runtime.read_task(key.clone(), id).await {
            Ok(Some(found)) => found,
            Ok(None) | Err(InstanceError::UnknownHandle(_) | InstanceError::UnknownWorkflow(_)) => {
                return Err(unknown());
            }
            Err(error) => return Err(reply::task_unreadable(id, &error)),
        };
        // With authentication on, the tenant in the key already made it the caller's; the
        // entry says whose it is as well.
        if entry.principal != self.caller(context).principal_name() {
            return Err(unknown());
        }
        Ok(GetTaskResult::new(
            self.stored_task(&entry, &view, &key, context),
        ))
    }

    /// A task as its instance's record keeps it.
    fn stored_task(
        &self,
        entry: &TaskEntry,
        view: &InstanceView,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> DetailedTask {
        let payload = match entry.status {
            TaskEntryStatus::Working => TaskPayload::Working,
            TaskEntryStatus::Cancelled => TaskPayload::Cancelled,
            TaskEntryStatus::Failed => TaskPayload::Failed {
                error: object(
                    serde_json::to_value(reply::task_runner_stopped(&entry.tool, &entry.error))
                        .unwrap_or_default(),
                ),
            },
            TaskEntryStatus::Completed => {
                let output = match entry.error.get("toolError").and_then(Value::as_str) {
                    Some(message) => PluginOutput::ToolError(message.to_owned()),
                    None if entry.output_dropped => PluginOutput::success(
                        json!({"message": "the result was too large to keep with the instance"}),
                    ),
                    None => PluginOutput::success(entry.output.clone()),
                };
                let result = reply::ran(&entry.tool, output, Some(entry.state.clone()));
                let next = view.next_step();
                let result = self.closed_with_step(result, key, context, Ok((next, entry.moved)));
                TaskPayload::Completed {
                    result: object(serde_json::to_value(result).unwrap_or_default()),
                }
            }
        };
        let task = wire_fields(
            &entry.id,
            payload.status(),
            entry.created_at_ms,
            entry.updated_at_ms,
            entry.ttl_ms,
        );
        DetailedTask::new(task, payload)
    }

    /// `tasks/cancel`: the plugin is told to stop, and the task ends cancelled unless it has
    /// ended already (then the ack changes nothing). A task another server runs is asked to
    /// stop through the store (`cancel_elsewhere.rs`).
    pub(super) async fn answer_cancel_task(
        &self,
        request: CancelTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let owner = self.task_owner(context);
        if self.shared.tasks.cancel(&request.task_id, &owner).is_some() {
            return Ok(());
        }
        // Another server's, or one this server ran before a restart.
        self.cancel_elsewhere(&request.task_id, context)
            .await
            .map(|_| ())
    }

    /// `tasks/update`: answers for what a task asked. Each answers the request of its key, if
    /// the task shows it; answers to any other key (never asked, answered already) are
    /// acknowledged and ignored. The task shows what is left at once; once nothing is, its
    /// call runs again with every answer. An answer that is not an object is refused, as in a
    /// `tools/call`'s `inputResponses`.
    pub(super) fn answer_update_task(
        &self,
        request: UpdateTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let task = self.own_task(&request.task_id, context)?;
        if let Some((key, _)) = request
            .input_responses
            .iter()
            .find(|(_, answer)| !answer.is_object())
        {
            let why = Unusable::NotAnObject(key.clone());
            return Err(reply::unusable_answers(&why));
        }
        let taken = task.answer(request.input_responses);
        tracing::debug!(task = %task.id, answered = ?taken, "task input answered");
        Ok(())
    }

    pub(super) fn own_task(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<tasks::Task>, ErrorData> {
        let owner = self.task_owner(context);
        self.shared
            .tasks
            .get(id, &owner)
            .ok_or_else(|| reply::unknown_task(id))
    }

    /// Whose a task is: its creator's principal (none when the server authenticates no one).
    pub(super) fn task_owner(&self, context: &RequestContext<RoleServer>) -> TaskOwner {
        TaskOwner(self.caller(context).principal_name())
    }
}

/// `context` as the call of `task` runs with once its request is answered: the request's own
/// stream ends with the answer, and the call's cancellation is the task's (`tasks/cancel`).
pub(super) fn task_context(
    mut context: RequestContext<RoleServer>,
    task: &Arc<tasks::Task>,
    how: TaskHow,
) -> RequestContext<RoleServer> {
    context.ct = task.cancellation.clone();
    context.extensions.remove::<RequestStream>();
    if how.asks_of_task {
        // What it asks, it asks of the task (`asking.rs`).
        context.extensions.insert(task.clone());
    }
    context
}

/// The answer to a call that started `task`.
pub(super) fn created(task: &tasks::Task) -> CallToolResponse {
    CallToolResponse::Task(CreateTaskResult::new(wire_task(task, WireStatus::Working)))
}

/// Ends `task`, the call of `tool`, with what the call answered.
pub(super) fn end(task: &tasks::Task, tool: &str, answer: Result<CallToolResponse, ErrorData>) {
    if task.end(ended_with(answer)) {
        tracing::debug!(task = %task.id, tool, "task ended");
    }
}

/// The status a call's answer ends its task with: a result completes it, a tool error included,
/// unless it says the host could not get the handler's answer (`reply::task_failure`); an
/// error fails it.
pub(super) fn ended_with(answer: Result<CallToolResponse, ErrorData>) -> TaskStatus {
    let failed =
        |error: ErrorData| TaskStatus::Failed(serde_json::to_value(error).unwrap_or_default());
    match answer {
        Ok(CallToolResponse::Complete(result)) => {
            if let Some(error) = reply::task_failure(&result) {
                return failed(error);
            }
            match serde_json::to_value(result) {
                Ok(result) => TaskStatus::Completed(result),
                Err(error) => failed(reply::task_result_unkept(&error.to_string())),
            }
        }
        // What a task's call asks, it asks of the task (`asking.rs`): never an input-required
        // result. `CallToolResponse` is non-exhaustive: a task, or a kind of answer rmcp adds
        // later.
        Ok(_) => failed(reply::task_result_unkept("it was not a tool result")),
        Err(error) => failed(error),
    }
}

fn rfc3339(at_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(at_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// The task's common fields, in `status`.
fn wire_task(task: &tasks::Task, status: WireStatus) -> Task {
    let (_, updated_at) = task.status();
    let ttl_ms = task.ttl.as_millis() as u64;
    wire_fields(&task.id, status, task.created_at_ms, updated_at, ttl_ms)
}

/// A task's fields as the extension spells them, whether this server's table or an instance's
/// record keeps it.
fn wire_fields(
    id: &str,
    status: WireStatus,
    created_at_ms: u64,
    updated_at_ms: u64,
    ttl_ms: u64,
) -> Task {
    Task::new(id, status, rfc3339(created_at_ms), rfc3339(updated_at_ms))
        .with_ttl_ms(ttl_ms)
        .with_poll_interval_ms(tasks::POLL_INTERVAL.as_millis() as u64)
}

/// The task with its status's payload (`tasks/get`).
pub(super) fn detailed(task: &tasks::Task) -> DetailedTask {
    let (status, _) = task.status();
    let payload = match status {
        TaskStatus::Working => TaskPayload::Working,
        // Checked as MCP describes them before the task showed them (`asking.rs`).
        TaskStatus::InputRequired(requests) => TaskPayload::InputRequired {
            input_requests: serde_json::from_value(Value::Object(requests)).unwrap_or_default(),
        },
        TaskStatus::Completed(result) => TaskPayload::Completed {
            result: object(result),
        },
        TaskStatus::Failed(error) => TaskPayload::Failed {
            error: object(error),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(wire_task(task, payload.status()), payload)
}

pub(super) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
