//! The instance actor's [`Call`] handler: the mailbox side of a `tools/call` — the tool
//! resolved once against the instance's machine version, the lease, the load and the due
//! timers, then [`run_call`]'s steps, and afterwards what the actor adopts, whom it has watch
//! the instance, and what it tells the notifier.

use std::sync::Arc;

use actix::prelude::*;
use tracing::Instrument;

use super::{
    Call, CallOutcome, InstanceActor, InstanceDeps, InstanceError, InstanceView, TaskRun, load,
    run_call::{self, Failed, Prepared, readers, run_call},
    task::{self, Started},
    task_entries,
    wake::settle,
};
use crate::actors::{InstanceKey, tenure::Tenure};
use crate::catalog::ToolEntry;
use crate::gate::ListsChanged;
use crate::store::{StoreError, now_ms};

/// The result of a call's async part, with the view the actor should adopt afterwards.
struct Finished {
    adopt: Option<InstanceView>,
    /// `Some` when the instance moved: which lists besides its tools the move changed.
    changed: Option<ListsChanged>,
    /// The instance is known to exist: it loaded, or the call that minted it saved it.
    exists: bool,
    outcome: Result<CallOutcome, InstanceError>,
    /// For a call that failed once the instance was known: the instance as it stood, and
    /// whether the handler had returned (the caller is told [`CallOutcome::Failed`]).
    failed_on: Option<(InstanceView, bool)>,
    /// A task's call that started: its plugin is to run outside the mailbox (`task.rs`).
    started: Option<Started>,
}

impl Finished {
    /// A call refused before it loaded anything (the instance is held): nothing changed, and
    /// the state is as far as it is known, the copy in memory, if any.
    fn refused(cached: Option<InstanceView>, error: InstanceError) -> Finished {
        Finished {
            failed_on: cached.clone().map(|view| (view, false)),
            started: None,
            adopt: cached,
            changed: None,
            exists: false,
            outcome: Err(error),
        }
    }
}

impl Handler<Call> for InstanceActor {
    type Result = AtomicResponse<Self, Result<CallOutcome, InstanceError>>;

    fn handle(&mut self, mut call: Call, _ctx: &mut Self::Context) -> Self::Result {
        self.follow_catalog();
        let mint = call.mint;
        // The tool as the instance's machine version defines it: resolved here, once, and again
        // only if loading the record puts the instance on another version.
        let tool = self.workflow.tool(&call.tool).cloned();
        // A mint's record does not exist yet: no lease to hold, and none needed (its first save
        // is the compare-and-set insert). A call that can write nothing (its tool fires no
        // event and it carries no idempotency key to remember) needs none either: it reads.
        let writes = tool.as_ref().is_some_and(|tool| tool.fires_something())
            || call.idempotency_key.is_some();
        let tenure = if mint { None } else { self.tenure.clone() };
        // A call that would write while a task holds the instance is refused, naming it (or,
        // once the task ended past its deadline, while its plugin still runs, as for any call).
        let busy = match &self.running {
            _ if !writes || mint => None,
            Some(running) => Some(InstanceError::TaskRunning {
                id: running.id.clone(),
                tool: running.tool.clone(),
            }),
            None if self.task_lock.is_held() => Some(InstanceError::Tool(
                crate::invoke::InvokeError::InstanceBusy,
            )),
            None => None,
        };
        // A call that mints its instance runs as a plain call: there is nothing to hold yet.
        let task_run = call.task.take().filter(|_| !mint);
        let principal = call.principal.clone();
        let leased = tenure.clone().filter(|_| writes);
        // The view is in memory for most calls: only a load is a future of its own (boxed, so
        // that the call's future does not carry room for it).
        let ready = if mint {
            Some(InstanceView::unsaved(&self.workflow))
        } else if leased.is_some() {
            None
        } else {
            self.trusted_current()
        };
        let cached = self.current.clone();
        let deps = self.deps.clone();
        let plugin_lock = self.plugin_lock.clone();
        let key = self.key.clone();
        let workflow = self.workflow.clone();
        let sent_at = call.sent_at;
        let told_in_reply = call.told_in_reply.clone();
        let watcher = call.watcher.take();
        let span = std::mem::replace(&mut call.span, tracing::Span::none());
        let work = async move {
            if let Some(busy) = busy {
                return Finished::refused(cached, busy);
            }
            // With a store other servers share, the lease first: the handler runs only where it
            // is held, and the copy in memory stands if nobody wrote since it was read.
            let ready = match &leased {
                None => ready,
                Some(tenure) => match tenure.hold(Some(sent_at)).await {
                    Ok(Ok(holding)) => cached.clone().filter(|view| holding.keeps(view.version)),
                    Ok(Err(busy)) => return Finished::refused(cached, busy.into()),
                    Err(error) => {
                        return Finished {
                            adopt: None,
                            changed: None,
                            exists: false,
                            outcome: Err(error.into()),
                            failed_on: None,
                            started: None,
                        };
                    }
                },
            };
            let current = match ready {
                Some(view) => Ok(view),
                None => Box::pin(load(&deps, &key, &workflow)).await,
            };
            let loaded = match current {
                // Timers that fell due fire first: the call sees the state they left. (A mint
                // starts now: nothing of it is due, and it is saved only if its call succeeds.)
                // Without the lease, the server that holds it settles the instance: a reading
                // call sees the record as stored.
                Ok(view) if !mint => {
                    let fence = tenure.as_ref().and_then(|tenure| tenure.fence());
                    match settle(&deps, &key, view.clone(), now_ms(), fence).await {
                        Ok(settled) => Ok((settled.view, settled.moved)),
                        Err(InstanceError::Store(StoreError::Fenced { .. }))
                            if leased.is_none() =>
                        {
                            Ok((view, false))
                        }
                        Err(error) => Err(error),
                    }
                }
                Ok(view) => Ok((view, false)),
                Err(error) => Err(error),
            };
            let (mut view, settled) = match loaded {
                Ok(loaded) => loaded,
                Err(error) => {
                    return Finished {
                        adopt: None,
                        changed: None,
                        exists: false,
                        outcome: Err(error),
                        failed_on: None,
                        started: None,
                    };
                }
            };
            // A task saved as running that no process here runs: if this call may write, the
            // instance is this call's (its lease is held, or no other process shares the
            // store), so the task's runner stopped. It ends failed; the call goes on.
            if writes
                && !mint
                && let Some(entry) = task_entries::working(&view)
            {
                if deps.running_tasks.contains_key(&entry.id) {
                    let busy = InstanceError::TaskRunning {
                        id: entry.id.clone(),
                        tool: entry.tool.clone(),
                    };
                    return Finished {
                        failed_on: Some((view.clone(), false)),
                        started: None,
                        adopt: Some(view),
                        changed: settled.then_some(ListsChanged::ALL),
                        exists: true,
                        outcome: Err(busy),
                    };
                }
                view = match task::orphaned(&deps, leased.as_deref(), &key, view.clone()).await {
                    Ok(view) => view,
                    Err(error) => {
                        return Finished {
                            failed_on: Some((view, false)),
                            started: None,
                            adopt: None,
                            changed: settled.then_some(ListsChanged::ALL),
                            exists: true,
                            outcome: Err(error),
                        };
                    }
                };
            }
            let tool = if Arc::ptr_eq(&view.workflow, &workflow) {
                tool
            } else {
                view.workflow.tool(&call.tool).cloned()
            };
            if let Some(run) = task_run {
                return start_task(
                    &deps,
                    leased.as_deref(),
                    &key,
                    view,
                    tool,
                    call,
                    run,
                    principal,
                    settled,
                )
                .await;
            }
            let finished = run_call(
                &deps,
                &plugin_lock,
                leased.as_deref(),
                &key,
                view.clone(),
                tool,
                call,
            )
            .await;
            let outcome = finished.as_ref().ok().map(|(_, _, outcome)| outcome);
            let exists = CallOutcome::leaves_instance(mint, outcome);
            match finished {
                Ok((after, _, outcome)) => Finished {
                    failed_on: None,
                    started: None,
                    exists,
                    changed: match &outcome {
                        // Timers fired before the call: its before is not at hand.
                        _ if settled => Some(ListsChanged::ALL),
                        CallOutcome::Ran { lists, .. } => *lists,
                        _ => None,
                    },
                    adopt: Some(after),
                    outcome: Ok(outcome),
                },
                // The state is whatever was loaded: a failed step changes nothing, except that a
                // failed save leaves us unsure what the store holds, so reload next time. A
                // failed mint created nothing: forget it.
                Err(Failed {
                    error,
                    after_handler,
                }) => Finished {
                    exists,
                    failed_on: Some((view.clone(), after_handler)),
                    started: None,
                    adopt: (!matches!(error, InstanceError::Store(_)) && !mint).then_some(view),
                    // Timers that fired before the call moved the instance (their before is not
                    // at hand: every list may have changed).
                    changed: settled.then_some(ListsChanged::ALL),
                    outcome: Err(error),
                },
            }
        };
        AtomicResponse::new(Box::pin(work.instrument(span).into_actor(self).map(
            |mut finished, actor, ctx| {
                if let Some(started) = finished.started.take() {
                    actor.run_task(started, ctx);
                }
                if let Some(view) = &finished.adopt {
                    // The machine the load found the instance on (a pinned version, maybe).
                    actor.workflow = view.workflow.clone();
                }
                actor.current = finished.adopt;
                // Ahead of the news of the call's own move, in the notifier's mailbox, with
                // the version the call left (its move is told to the watcher as it is sent).
                if finished.exists
                    && let Some(watcher) = watcher
                {
                    let version = actor.current.as_ref().map(|view| view.version);
                    actor.deps.notifier.do_send(match version {
                        Some(version) => watcher.seeing(version),
                        None => watcher,
                    });
                }
                if let Some(changed) = finished.changed {
                    // A caller that ran hears of it in its reply; one that failed, on its
                    // event stream with the other watchers.
                    let told = match &mut finished.outcome {
                        Ok(CallOutcome::Ran { lists, .. }) => {
                            *lists = Some(changed);
                            told_in_reply
                        }
                        _ => None,
                    };
                    actor.announce(changed, told);
                }
                actor.after(&finished.outcome, ctx);
                match (finished.outcome, finished.failed_on) {
                    (Err(error), Some((view, after_handler))) => Ok(CallOutcome::Failed {
                        error,
                        after_handler,
                        next: view.next_step(),
                        readers: readers(&view),
                    }),
                    (outcome, _) => outcome,
                }
            },
        )))
    }
}

/// A task's call (`task.rs`), on `view` as loaded and settled: steps 1 to 5 of a plain call,
/// then, instead of the plugin, the task saved as started. An early answer (a refusal, a
/// question for the person) is the call's, and no task starts.
#[allow(clippy::too_many_arguments)] // One call's pieces, each used once.
async fn start_task(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: InstanceView,
    tool: Option<Arc<ToolEntry>>,
    call: Call,
    run: TaskRun,
    principal: Option<String>,
    settled: bool,
) -> Finished {
    let changed = settled.then_some(ListsChanged::ALL);
    let Prepared { plugin, mut rest } = match run_call::prepare(deps, key, &view, tool, call) {
        Ok(std::ops::ControlFlow::Continue(prepared)) => prepared,
        Ok(std::ops::ControlFlow::Break(answer)) => {
            return Finished {
                adopt: Some(view),
                changed,
                exists: true,
                outcome: Ok(answer),
                failed_on: None,
                started: None,
            };
        }
        Err(error) => {
            return Finished {
                failed_on: Some((view.clone(), false)),
                adopt: Some(view),
                changed,
                exists: true,
                outcome: Err(error),
                started: None,
            };
        }
    };
    rest.task = Some(run.id.clone());
    match task::start(deps, tenure, key, &view, &run, rest.tool.name(), principal).await {
        Ok(after) => {
            tracing::debug!(instance = %key, task = %run.id, tool = %rest.tool.name(), "call started as a task");
            let next = after.next_step();
            Finished {
                adopt: Some(after.clone()),
                changed,
                exists: true,
                outcome: Ok(CallOutcome::TaskStarted {
                    id: run.id.clone(),
                    next,
                }),
                failed_on: None,
                started: Some(Started {
                    view: after,
                    plugin,
                    rest,
                    done: run.done,
                }),
            }
        }
        // Not started: the store's answer is doubtful, so the instance is read again next time.
        Err(error) => Finished {
            failed_on: Some((view, false)),
            adopt: None,
            changed,
            exists: true,
            outcome: Err(error),
            started: None,
        },
    }
}
