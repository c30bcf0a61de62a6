//! An instance's call that runs as a task (`host/src/tasks.rs`, `mcp/handler/tasks.rs`): its
//! start, kept with the instance, its plugin run outside the mailbox, and its end.
//!
//! A task's call takes the steps of a plain call (`run_call.rs`) in two halves. In the mailbox,
//! like any call: the lease, the load, the gate, the confirmation; then, instead of running the
//! plugin, the task is saved with the instance as `working` ([`start`]), and the caller is
//! answered [`CallOutcome::TaskStarted`]. The plugin then runs outside the mailbox, so the
//! instance goes on answering: a call that reads is served, a call that would write is refused
//! [`InstanceError::TaskRunning`] naming the task. When the plugin returns, [`FinishTask`] takes
//! the mailbox again for the steps after it (the transition, the save, which also saves the
//! task's end) and hands the call's outcome to whoever waits for it ([`TaskRun::done`]).
//!
//! While a task runs here its lease is renewed (`run_plugin`), so another server sharing the
//! store cannot write the instance; a server that finds a `working` task with no runner (it
//! holds the lease, so the runner's lapsed, or no process runs it) ends it `failed`, saying what
//! is known ([`orphaned`]): its handler may have run, nothing it did was saved.

use actix::prelude::*;
use serde_json::json;
use tokio::sync::oneshot;

use super::task_entries::{ended, failed, with_entry};
use super::{
    CallOutcome, InstanceActor, InstanceDeps, InstanceError, InstanceView,
    run_call::{AfterPlugin, Failed, PluginCall, after_plugin, readers, run_plugin},
};
use crate::actors::{InstanceKey, tenure::Tenure};
use crate::plugin::PluginOutput;
use crate::store::{InstanceRecord, TaskEntry, TaskEntryStatus, now_ms};

/// A call to run as a task: its id, and where its outcome goes when it ends.
#[derive(Debug)]
pub struct TaskRun {
    pub id: String,
    /// How long the task is kept once ended, from its start.
    pub ttl_ms: u64,
    /// The call's outcome, once the task ended (dropped unanswered if the actor stopped).
    pub done: oneshot::Sender<Result<CallOutcome, InstanceError>>,
}

/// The task an instance actor runs, while its plugin works.
pub(super) struct Running {
    pub id: String,
    pub tool: String,
    pub done: oneshot::Sender<Result<CallOutcome, InstanceError>>,
}

/// A task's call that passed the gate and was saved as started: what the plugin run and the
/// steps after it need.
pub(super) struct Started {
    pub view: InstanceView,
    pub plugin: PluginCall,
    pub rest: AfterPlugin,
    pub done: oneshot::Sender<Result<CallOutcome, InstanceError>>,
}

/// The plugin of the running task returned (or failed to): the steps after it, in the mailbox.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct FinishTask {
    output: Result<PluginOutput, InstanceError>,
    rest: AfterPlugin,
    /// The task was cancelled while its plugin ran (`tasks/cancel`): whatever the plugin
    /// answered, only the tool's `on_cancel` fires (if it has one) and the task ends cancelled.
    cancelled: bool,
}

/// Where task `id` of the instance stands, as its record says (`None`: it holds no such task),
/// with the instance as it stands: for a server asked about a task it does not run (another
/// server sharing the store started it, or a server since restarted). A task saved as running
/// that no process here runs is looked at under the instance's lease, taken without waiting:
/// if its runner still holds it, the task is working; if the lease could be taken, the runner
/// stopped, and the task is ended failed first ([`orphaned`]).
#[derive(Message)]
#[rtype(result = "Result<Option<(TaskEntry, InstanceView)>, InstanceError>")]
pub struct ReadTask {
    pub id: String,
}

impl Handler<ReadTask> for InstanceActor {
    type Result = AtomicResponse<Self, Result<Option<(TaskEntry, InstanceView)>, InstanceError>>;

    fn handle(&mut self, read: ReadTask, _ctx: &mut Self::Context) -> Self::Result {
        self.follow_catalog();
        let loading = self.current_or_load();
        let (deps, key, tenure, workflow) = (
            self.deps.clone(),
            self.key.clone(),
            self.tenure.clone(),
            self.workflow.clone(),
        );
        let work = async move {
            let view = loading.await?;
            let find = |view: &InstanceView| view.tasks.iter().find(|e| e.id == read.id).cloned();
            let Some(entry) = find(&view) else {
                return Ok((None, false));
            };
            // Run by this process (by this actor, or one passivated while its task runs).
            let ours = deps.running_tasks.contains_key(&entry.id);
            if entry.status != TaskEntryStatus::Working || ours {
                return Ok((Some((entry, view)), false));
            }
            let view = match &tenure {
                // One process alone writes this store, and it runs no such task.
                None => view,
                Some(tenure) => match tenure.hold(None).await? {
                    // Its runner still holds the instance: working.
                    Err(_busy) => return Ok((Some((entry, view)), false)),
                    Ok(holding) if holding.keeps(view.version) => view,
                    Ok(_) => super::load(&deps, &key, &workflow).await?,
                },
            };
            let Some(entry) = find(&view) else {
                return Ok((None, true));
            };
            if entry.status != TaskEntryStatus::Working {
                return Ok((Some((entry, view)), true));
            }
            let after = orphaned(&deps, tenure.as_deref(), &key, view).await?;
            Ok((find(&after).map(|entry| (entry, after)), true))
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|read, actor, ctx| {
            let read = read.map(|(found, wrote)| {
                if let Some((_, view)) = &found
                    && wrote
                {
                    actor.workflow = view.workflow.clone();
                    actor.current = Some(view.clone());
                }
                found
            });
            actor.after(&read, ctx);
            read
        })))
    }
}

/// Saves `view` with the task `run` of `tool` started (`working`): the instance is held by it
/// from this save on. Returns the view after it.
pub(super) async fn start(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: &InstanceView,
    run: &TaskRun,
    tool: &str,
    principal: Option<String>,
) -> Result<InstanceView, InstanceError> {
    let now = now_ms();
    let entry = TaskEntry::working(&run.id, tool, principal, now, run.ttl_ms);
    let tasks = with_entry(&view.tasks, entry, now);
    save_tasks(deps, tenure, key, view, tasks).await
}

/// Ends the working tasks no process runs (`orphaned`): `failed`, the handler maybe run, nothing
/// saved. Called by a call that holds the instance (its lease, or one process alone) and finds
/// one: its runner stopped (a server killed, or its lease lapsed) before it could save the end.
pub(super) async fn orphaned(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: InstanceView,
) -> Result<InstanceView, InstanceError> {
    let now = now_ms();
    let mut tasks = view.tasks.clone();
    for entry in tasks
        .iter_mut()
        .filter(|entry| entry.status == TaskEntryStatus::Working)
    {
        tracing::warn!(instance = %key, task = %entry.id, tool = %entry.tool, "a task's runner stopped before it ended; the task ends failed");
        failed(
            entry,
            json!("unknown"),
            "the server running the task stopped before the task ended; its handler may have \
             run, and nothing it did was saved",
        );
        entry.updated_at_ms = now;
    }
    save_tasks(deps, tenure, key, &view, tasks).await
}

/// Saves `view` as it is but for its tasks: a save that moves nothing, announced like a call's.
async fn save_tasks(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: &InstanceView,
    tasks: Vec<TaskEntry>,
) -> Result<InstanceView, InstanceError> {
    let record = InstanceRecord {
        tasks,
        ..view.restated(tenure.and_then(Tenure::fence))
    };
    deps.save(key, &view.workflow, &record, view.version, true)
        .await?;
    Ok(InstanceView {
        version: record.version,
        tasks: record.tasks,
        ..view.clone()
    })
}

impl InstanceActor {
    /// Runs `started`'s plugin outside the mailbox; its end comes back as [`FinishTask`].
    pub(super) fn run_task(&mut self, started: Started, ctx: &mut Context<Self>) {
        let Started {
            view,
            plugin,
            rest,
            done,
        } = started;
        let id = rest.task.clone().unwrap_or_default();
        self.deps.running_tasks.insert(id.clone(), ());
        self.running = Some(Running {
            id,
            tool: rest.tool.name().to_string(),
            done,
        });
        let (deps, lock, tenure) = (
            self.deps.clone(),
            self.task_lock.clone(),
            self.tenure.clone(),
        );
        let me = ctx.address();
        let host = plugin.host();
        actix::spawn(async move {
            let tool = rest.tool.clone();
            let output = run_plugin(&deps, &lock, tenure.as_deref(), &view, &tool, plugin).await;
            let cancelled = host.is_some_and(|host| host.is_cancelled());
            // The address keeps the actor alive until the task's end is in its mailbox.
            me.do_send(FinishTask {
                output,
                rest,
                cancelled,
            });
        });
    }
}

impl Handler<FinishTask> for InstanceActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, finish: FinishTask, _ctx: &mut Self::Context) -> Self::Result {
        let loading = self.current_or_load();
        let (deps, key, tenure) = (self.deps.clone(), self.key.clone(), self.tenure.clone());
        let id = finish.rest.task.clone().unwrap_or_default();
        let work = async move {
            let view = loading.await?;
            let mut rest = finish.rest;
            let output = match finish.output {
                // Cancelled: whatever the plugin answered, only the tool's `on_cancel` fires
                // (`run_call::fire`), and the task's end is saved with the trail's line.
                Err(_) if finish.cancelled => Ok(PluginOutput::ToolError("cancelled".to_owned())),
                output => output,
            };
            rest.cancelled = finish.cancelled;
            let ran = match output {
                Ok(output) => {
                    after_plugin(&deps, tenure.as_deref(), &key, view.clone(), rest, output).await
                }
                Err(error) => Err(Failed::from(error)),
            };
            let (after, outcome) = match ran {
                Ok((after, _, outcome)) => (after, Ok(outcome)),
                Err(Failed {
                    error,
                    after_handler,
                }) => {
                    let why = error.to_string();
                    let handler_ran = if after_handler {
                        json!(true)
                    } else {
                        json!("unknown")
                    };
                    let tasks = ended(&view.tasks, &id, now_ms(), |entry| {
                        failed(entry, handler_ran, &why);
                    });
                    // The end is saved if the store takes it; else the next holder finds the
                    // task orphaned, and says as much.
                    let after = save_tasks(&deps, tenure.as_deref(), &key, &view, tasks)
                        .await
                        .unwrap_or(view.clone());
                    let outcome = CallOutcome::Failed {
                        error,
                        after_handler,
                        next: view.next_step(),
                        readers: readers(&view),
                    };
                    (after, Ok(outcome))
                }
            };
            Ok::<_, InstanceError>((after, outcome))
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|result, actor, ctx| {
            let running = actor.running.take();
            if let Some(running) = &running {
                actor.deps.running_tasks.remove(&running.id);
            }
            let outcome = match result {
                Ok((after, outcome)) => {
                    actor.workflow = after.workflow.clone();
                    actor.current = Some(after);
                    if let Ok(CallOutcome::Ran {
                        lists: Some(lists), ..
                    }) = &outcome
                    {
                        actor.announce(*lists, None);
                    }
                    outcome
                }
                Err(error) => {
                    actor.current = None;
                    Err(error)
                }
            };
            actor.after(&outcome, ctx);
            if let Some(running) = running {
                let _ = running.done.send(outcome);
            }
        })))
    }
}
