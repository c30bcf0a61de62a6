//! The straight line of one `tools/call` on an instance, in the instance actor's mailbox:
//! [`run_call`] reads as its steps, each a function below it, in order:
//!
//! 1. [`replayed`]: a retry of a call already answered gets that answer; nothing runs.
//! 2. [`runnable`]: the tool as the instance's machine version defines it (an instance on an
//!    older machine keeps that version's tools), resolved by the actor before this, once; a
//!    name the version lacks is refused by the gate. The arguments are checked against that
//!    tool's schema.
//! 3. the gate ([`gate::refusal`]): a tool out of order is refused; so is a call whose answers
//!    were given for a step the instance has moved on from ([`Call::made_for`]).
//! 4. [`confirmed`]: a binding that has a person confirm asks now, and runs again with the
//!    answer; a decline runs nothing.
//! 5. [`event_input`] and [`call_context`]: what the event carries, and what the plugin is told
//!    (a confirmation as the host kept it, `confirm::told`).
//! 6. [`run_plugin`]: under the instance's lease, renewed while the plugin works.
//! 7. [`fire`]: a success fires the tool's transition, a handler error its `on_error`; the
//!    plugin guards the step consults are answered through `invoke`, as tools are.
//! 8. [`record_of`] and the save (compare-and-set), unless nothing is to be kept.
//! 9. [`ran`]: the gate's account of the instance after the call: its next step, and which
//!    lists a move changed.
//!
//! An early step that answers returns the view unchanged and an outcome; nothing after it runs.
//!
//! Steps 1 to 5 are [`prepare`], 6 is [`run_plugin`], 7 to 9 are [`after_plugin`]: [`run_call`]
//! runs them in a row; a call that runs as a task (`task.rs`) runs the plugin outside the
//! mailbox, between the other two.

use std::{ops::ControlFlow, sync::Arc};

use serde_json::Value;
use tracing::Instrument;

use super::{
    Call, CallOutcome, InstanceDeps, InstanceError, InstanceView,
    task_entries::{self, CANCELLED_BY},
};
use crate::actors::{
    InstanceKey,
    idempotency::{self, Lookup},
    tenure::{LeaseBusy, Tenure},
};
use crate::{
    catalog::{ToolEntry, Workflow},
    confirm::Decision,
    gate,
    invoke::{self, InvokeError},
    logs::otlp,
    plugin::{CallContext, PluginOutput},
    statechart::{Event, Step, TransitionLoop},
    store::{AuditEntry, IdempotencyEntry, InstanceRecord, TaskEntryStatus, now_ms},
};

/// What a call ran: the view after it, whether the state changed, and the outcome.
type Ran = (InstanceView, bool, CallOutcome);

/// A call's idempotency key and the digest of its arguments.
type Idempotent = (String, String);

/// A call that failed: why, and whether the tool's handler had run and returned by then (the
/// failure came at the fire, the size check or the save: what the handler did outside the
/// workflow stands, whatever the workflow did).
#[derive(Debug)]
pub(super) struct Failed {
    pub error: InstanceError,
    pub after_handler: bool,
}

impl Failed {
    /// A failure once the handler had run and returned.
    fn after_handler(error: impl Into<InstanceError>) -> Failed {
        Failed {
            error: error.into(),
            after_handler: true,
        }
    }
}

/// A failure before the handler returned (a plugin's own failure says, in its error, whether it
/// ran: `mcp/handler/reply.rs`).
impl From<InstanceError> for Failed {
    fn from(error: InstanceError) -> Failed {
        Failed {
            error,
            after_handler: false,
        }
    }
}

/// The tools on `view`'s menu that move nothing (a read-only one first): what a caller unsure
/// whether its call moved the instance may call to learn where it is.
pub(super) fn readers(view: &InstanceView) -> Vec<String> {
    let mut readers: Vec<_> = gate::menu(&view.workflow, &view.snapshot)
        .into_iter()
        .filter(|tool| !tool.fires_something())
        .collect();
    readers.sort_by_key(|tool| {
        let read_only = tool
            .manifest
            .annotations
            .as_ref()
            .and_then(|hints| hints.read_only_hint)
            .unwrap_or(false);
        !read_only
    });
    readers.iter().map(|tool| tool.name().to_string()).collect()
}

/// A call that passed steps 1 to 5, about to run its plugin.
pub(super) struct Prepared {
    pub plugin: PluginCall,
    pub rest: AfterPlugin,
}

/// What the plugin is given (step 6).
pub(super) struct PluginCall {
    arguments: Value,
    context: CallContext,
    host: Option<Arc<crate::plugin::HostCall>>,
}

impl PluginCall {
    /// Where the call's cancellation is told (`None`: it cannot be cancelled).
    pub fn host(&self) -> Option<Arc<crate::plugin::HostCall>> {
        self.host.clone()
    }
}

/// What steps 7 to 9 need of the call, once its plugin returned.
pub(super) struct AfterPlugin {
    pub tool: Arc<ToolEntry>,
    input: Option<Value>,
    idempotent: Option<Idempotent>,
    confirmation: Option<Value>,
    principal: Option<String>,
    mint: bool,
    now: u64,
    /// The id of the task the call runs as (`task.rs`): its end is saved with the call's step.
    pub task: Option<String>,
    /// The task was cancelled by its client while the plugin ran: whatever the plugin
    /// answered, only the tool's `on_cancel` fires, if it has one, and the task ends cancelled.
    pub cancelled: bool,
}

/// Idempotency, gate, confirmation, plugin, transition, save: one call, step by step (see the
/// module docs).
pub(super) async fn run_call(
    deps: &InstanceDeps,
    plugin_lock: &invoke::InstanceLock,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: InstanceView,
    tool: Option<Arc<ToolEntry>>,
    call: Call,
) -> Result<Ran, Failed> {
    let Prepared { plugin, rest } = match prepare(deps, key, &view, tool, call)? {
        ControlFlow::Continue(prepared) => prepared,
        ControlFlow::Break(answer) => return Ok((view, false, answer)),
    };
    let output = run_plugin(deps, plugin_lock, tenure, &view, &rest.tool, plugin).await?;
    after_plugin(deps, tenure, key, view, rest, output).await
}

/// Steps 1 to 5: go on to the plugin with what it is given and what the steps after it need,
/// or stop with the answer (a replay, a refusal, a question for the person).
pub(super) fn prepare(
    deps: &InstanceDeps,
    key: &InstanceKey,
    view: &InstanceView,
    tool: Option<Arc<ToolEntry>>,
    call: Call,
) -> Result<ControlFlow<CallOutcome, Prepared>, InstanceError> {
    let workflow = view.workflow.clone();
    let now = now_ms();
    if otlp::exporting() {
        let from = otlp::state(&view.snapshot.value());
        tracing::Span::current().record("from", from.as_str());
    }
    let idempotent = call.idempotency_key.as_ref().map(|idempotency_key| {
        (
            idempotency_key.clone(),
            idempotency::digest(&call.arguments),
        )
    });
    if let Some(answer) = replayed(deps, view, &call, idempotent.as_ref(), now)? {
        return Ok(ControlFlow::Break(answer));
    }
    let tool = match runnable(&workflow, key, view, &call, tool)? {
        ControlFlow::Continue(tool) => tool,
        ControlFlow::Break(answer) => return Ok(ControlFlow::Break(answer)),
    };
    if let Some(refusal) = gate::refusal(&workflow, &tool, &view.snapshot, &call.arguments) {
        return Ok(ControlFlow::Break(CallOutcome::Forbidden(refusal)));
    }
    // Answers given for another step (a sealed `requestState` replayed after a reset and a new
    // approval) answer nothing now: the person is asked anew, on a call of its own.
    if call
        .made_for
        .is_some_and(|made_for| made_for != view.revision())
    {
        let next = view.next_step_in(&workflow);
        return Ok(ControlFlow::Break(CallOutcome::MovedOn { next }));
    }
    let confirmation = match confirmed(&workflow, &tool, view, &call) {
        ControlFlow::Continue(confirmation) => confirmation,
        ControlFlow::Break(answer) => return Ok(ControlFlow::Break(answer)),
    };
    // Arguments and a confirmation that alone would put the record over its limit (the event
    // carries them into the context, the audit entry keeps the confirmation) are refused before
    // the plugin runs.
    let known_bytes = crate::store::json_bytes(&call.arguments)
        + confirmation.as_ref().map_or(0, crate::store::json_bytes);
    if known_bytes > deps.max_record_bytes {
        return Err(InstanceError::RecordTooLarge {
            size: known_bytes,
            limit: deps.max_record_bytes,
        });
    }
    let input = event_input(&tool, &call.arguments, confirmation.as_ref());
    let context = call_context(
        key,
        view,
        &tool,
        call.call_id,
        &call.arguments,
        call.idempotency_key.as_deref(),
        // Step 5b: what the handler is told of its asking (`confirm::told`).
        crate::confirm::told(call.asking, confirmation.as_ref()),
    );
    Ok(ControlFlow::Continue(Prepared {
        plugin: PluginCall {
            arguments: call.arguments,
            context,
            host: call.host,
        },
        rest: AfterPlugin {
            tool,
            input,
            idempotent,
            confirmation,
            principal: call.principal,
            mint: call.mint,
            now,
            task: call.task.as_ref().map(|task| task.id.clone()),
            cancelled: false,
        },
    }))
}

/// Steps 7 to 9, on `view` as it stands when the plugin returned `output` (for a task's call,
/// timers may have moved it meanwhile).
pub(super) async fn after_plugin(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: InstanceView,
    rest: AfterPlugin,
    output: PluginOutput,
) -> Result<Ran, Failed> {
    let workflow = view.workflow.clone();
    let AfterPlugin {
        tool,
        input,
        idempotent,
        confirmation,
        principal,
        mint,
        now,
        task,
        cancelled,
    } = rest;
    // A cancelled call's answer is not its result: a retry must run it again.
    let idempotent = idempotent.filter(|_| !cancelled);
    let firing = Firing {
        output,
        input,
        mint,
        cancelled,
    };
    let fired = fire(deps, &workflow, &view, &tool, key, firing).await;
    let (output, step, fired_event) = match fired {
        ControlFlow::Continue(fired) => fired,
        ControlFlow::Break(answer) => return Ok((view, false, answer)),
    };
    let succeeded = matches!(output, PluginOutput::Success(_));
    let moved = step.as_ref().is_some_and(|step| step.changed);
    // Saved: a transition, the first record of an instance this call started, the result of
    // a successful call a retry may repeat, or the end of a task. A failed call that fired
    // nothing stores nothing.
    let remembered = idempotent.is_some() && succeeded;
    let saves = moved || (mint && succeeded) || remembered || task.is_some();
    if otlp::exporting() {
        let after = match &step {
            Some(step) if step.changed => &step.snapshot,
            _ => &view.snapshot,
        };
        let to = otlp::state(&after.value());
        tracing::Span::current().record("to", to.as_str());
    }
    if !saves {
        let outcome = ran(&view, output, None);
        return Ok((view, false, outcome));
    }
    let snapshot = match step {
        Some(step) if step.changed => step.snapshot,
        _ => view.snapshot.clone(),
    };
    let record = record_of(
        deps,
        tenure,
        key,
        &view,
        &tool,
        &snapshot,
        Kept {
            output: &output,
            idempotent,
            moved,
            fired_event: fired_event.as_deref(),
            confirmation,
            principal,
            now,
            task: task.as_deref(),
            cancelled,
        },
    );
    // Past a shutdown's deadline the caller is told SHUTTING_DOWN: save nothing it was not told.
    if deps.limits.abandon.is_cancelled() {
        return Err(Failed::after_handler(InvokeError::ShuttingDown));
    }
    // A record past its limit is not saved, and nothing the call would fire happens.
    let size = record.stored_bytes();
    if size > deps.max_record_bytes {
        return Err(Failed::after_handler(InstanceError::RecordTooLarge {
            size,
            limit: deps.max_record_bytes,
        }));
    }
    // A call's save is announced whether or not it moved the instance, as it always was; only a
    // timer's save that moves nothing stays quiet.
    let saving = if otlp::exporting() {
        tracing::info_span!(target: "turnstile::call", "save", version = record.version)
    } else {
        tracing::Span::none()
    };
    deps.save(key, &workflow, &record, view.version, true)
        .instrument(saving)
        .await
        .map_err(Failed::after_handler)?;
    if moved && let Some(event) = &fired_event {
        crate::metrics::transition_saved(&workflow.id, event);
    }
    let after = InstanceView {
        snapshot,
        version: record.version,
        workflow: view.workflow.clone(),
        idempotency: record.idempotency,
        tasks: record.tasks,
        updated_at_ms: record.updated_at_ms,
        due_at_ms: record.due_at_ms,
    };
    // What the move changed, asked of the gate once, here, for the notices.
    let lists = moved.then(|| {
        gate::ListsChanged::of_move(
            &deps.catalog.current(),
            &key.workflow,
            &view.snapshot,
            &after.snapshot,
        )
    });
    let outcome = ran(&after, output, lists);
    Ok((after, moved, outcome))
}

/// Step 9: the outcome of a call that ran, with `after` the instance as it is now: where it
/// stands (its next step, for the result) and, if the call moved it, which of its lists besides
/// the tools the move changed (`lists`, for the notices).
pub(super) fn ran(
    after: &InstanceView,
    output: PluginOutput,
    lists: Option<gate::ListsChanged>,
) -> CallOutcome {
    let next = after.next_step();
    CallOutcome::Ran {
        output,
        moved: lists.is_some(),
        state: next.state.clone(),
        next,
        lists,
        revision: after.revision(),
    }
}

/// Step 1: a retry of a call already answered (same idempotency key, same arguments, within
/// the window) gets that answer: nothing runs, nothing fires. A key reused with other
/// arguments, or past the window, is an error.
fn replayed(
    deps: &InstanceDeps,
    view: &InstanceView,
    call: &Call,
    idempotent: Option<&Idempotent>,
    now: u64,
) -> Result<Option<CallOutcome>, InstanceError> {
    let Some((idempotency_key, arguments)) = idempotent else {
        return Ok(None);
    };
    match idempotency::lookup(
        &view.idempotency,
        idempotency_key,
        &call.tool,
        arguments,
        deps.idempotency_window,
        now,
    ) {
        Lookup::Miss => Ok(None),
        Lookup::Replay(entry) => Ok(Some(CallOutcome::Ran {
            output: PluginOutput::success(entry.output.clone()),
            moved: entry.moved,
            state: entry.state.clone(),
            next: view.next_step(),
            lists: None,
            revision: view.revision(),
        })),
        Lookup::Expired(entry) => Err(InstanceError::IdempotencyResultExpired {
            key: idempotency_key.clone(),
            at_ms: entry.at_ms,
            state: entry.state.clone(),
        }),
        Lookup::Conflict => Err(InstanceError::IdempotencyConflict {
            key: idempotency_key.clone(),
        }),
    }
}

/// Step 2: the instance's own version of the tool (`tool`, resolved by the actor): the
/// catalog's, or the one of the older machine version the instance still runs on (see
/// `Catalog::follow`). A version restored from the store alone has no tools to run; a name the
/// version lacks is refused as out of order (it is on no menu of this instance). Go on with the
/// tool, or stop with the answer: the refusal, or the arguments' problems against its schema.
fn runnable(
    workflow: &Workflow,
    key: &InstanceKey,
    view: &InstanceView,
    call: &Call,
    tool: Option<Arc<ToolEntry>>,
) -> Result<ControlFlow<CallOutcome, Arc<ToolEntry>>, InstanceError> {
    if workflow.archived {
        return Err(InstanceError::VersionUnavailable {
            key: key.to_string(),
            workflow: workflow.id.clone(),
            reason: format!(
                "it runs on machine version {}, whose plugin is no longer loaded",
                workflow.version
            ),
        });
    }
    let Some(tool) = tool else {
        let refusal = gate::not_offered(workflow, &call.tool, &view.snapshot);
        return Ok(ControlFlow::Break(CallOutcome::Forbidden(refusal)));
    };
    if let Err(problems) = tool.check_arguments(&call.arguments) {
        let next = view.next_step_in(workflow);
        return Ok(ControlFlow::Break(CallOutcome::InvalidArguments {
            problems,
            next,
        }));
    }
    Ok(ControlFlow::Continue(tool))
}

/// Step 4: a binding that has a person confirm asks now that the gate lets the call through,
/// and the call runs again with the answer (`confirm.rs`). Go on with what the person
/// confirmed, if anything was asked, or stop with the answer for now (asking, or declined).
fn confirmed(
    workflow: &Workflow,
    tool: &ToolEntry,
    view: &InstanceView,
    call: &Call,
) -> ControlFlow<CallOutcome, Option<Value>> {
    let decision = tool
        .confirm
        .as_ref()
        .map(|confirm| confirm.decide(view.snapshot.context(), &call.arguments, &call.asking));
    match decision {
        None | Some(Decision::NotNeeded) => ControlFlow::Continue(None),
        Some(Decision::Accepted(content)) => ControlFlow::Continue(Some(content)),
        Some(Decision::Ask(requests)) => {
            ControlFlow::Break(ran(view, PluginOutput::NeedsInput(requests), None))
        }
        Some(Decision::Declined(action)) => ControlFlow::Break(CallOutcome::Declined {
            action,
            next: view.next_step_in(workflow),
        }),
    }
}

/// Step 5a: what the event carries, for guards and assignments to read: the call's arguments,
/// when the tool fires anything. Under a binding that confirms, `input.confirmation` is the
/// host's to say: what the person confirmed, or nothing; never an argument posing as it.
fn event_input(tool: &ToolEntry, arguments: &Value, confirmation: Option<&Value>) -> Option<Value> {
    tool.fires_something().then(|| {
        let mut input = arguments.clone();
        if let (Value::Object(input), Some(_)) = (&mut input, &tool.confirm) {
            match confirmation {
                Some(confirmation) => {
                    input.insert("confirmation".to_owned(), confirmation.clone());
                }
                None => {
                    input.remove("confirmation");
                }
            }
        }
        input
    })
}

/// Step 5c: what the plugin is told of the call (`call_id`, its `arguments`, the client's
/// `idempotency_key`, what it may `ask`) and of the instance.
fn call_context(
    key: &InstanceKey,
    view: &InstanceView,
    tool: &ToolEntry,
    call_id: String,
    arguments: &Value,
    idempotency_key: Option<&str>,
    asking: Value,
) -> CallContext {
    CallContext {
        call_id,
        handle: key.handle(),
        state: view.snapshot.value(),
        context: view.snapshot.context().clone(),
        // The same for every run of this attempt, on any server (a paused server's and the one
        // that took over from it): the instance, the version it is moved from, the tool, its
        // arguments and the client's own key.
        idempotency_key: key.attempt_key(view.version, tool.name(), arguments, idempotency_key),
        asking,
        ..CallContext::default()
    }
}

/// Step 6: the plugin runs. Loading and settling took store round trips: the lease must still
/// be safely alive when the plugin starts (free when it is: no round trip), or the call does
/// not run; it is renewed while the plugin works, however long it takes.
pub(super) async fn run_plugin(
    deps: &InstanceDeps,
    plugin_lock: &invoke::InstanceLock,
    tenure: Option<&Tenure>,
    view: &InstanceView,
    tool: &Arc<ToolEntry>,
    plugin_call: PluginCall,
) -> Result<PluginOutput, InstanceError> {
    let PluginCall {
        arguments,
        context,
        host,
    } = plugin_call;
    if let Some(tenure) = tenure {
        match tenure.hold(None).await? {
            Ok(holding) if holding.keeps(view.version) => {}
            // Lost since the call held it, or granted anew over a record another server saved
            // meanwhile: the plugin must not run on a copy that may be stale.
            Ok(_) | Err(_) => return Err(LeaseBusy { retry_after_ms: 10 }.into()),
        }
    }
    let plugin = if otlp::exporting() {
        tracing::info_span!(target: "turnstile::call", "plugin", tool = %tool.name())
    } else {
        tracing::Span::none()
    };
    let running = invoke::run(
        tool.clone(),
        arguments,
        context,
        host,
        &deps.limits,
        Some(plugin_lock),
    )
    .instrument(plugin);
    let output = match tenure {
        Some(tenure) => {
            tokio::select! {
                output = running => output,
                () = tenure.keep_alive() => unreachable!("keep_alive never returns"),
            }
        }
        None => running.await,
    }?;
    Ok(output)
}

/// What the plugin gave step 7 to fire by.
struct Firing {
    output: PluginOutput,
    input: Option<Value>,
    mint: bool,
    /// Cancelled while the plugin ran (a task's call): only `on_cancel` may fire.
    cancelled: bool,
}

/// Step 7: a success fires the tool's transition, a handler error its `on_error`, a cancelled
/// task's call its `on_cancel` (if any); a tool without one, or an event the state does not
/// take, moves nothing. Go on with the output,
/// the step taken and the event fired, if any, or stop with the answer when an eventless loop
/// stopped the step (the instance keeps its state). The plugin's guards the step consults are
/// answered through `invoke`, as its tools are.
#[allow(clippy::type_complexity)] // Three results of one step, named at the call.
async fn fire(
    deps: &InstanceDeps,
    workflow: &Workflow,
    view: &InstanceView,
    tool: &ToolEntry,
    key: &InstanceKey,
    firing: Firing,
) -> ControlFlow<CallOutcome, (PluginOutput, Option<Step>, Option<String>)> {
    let Firing {
        output,
        input,
        mint,
        cancelled,
    } = firing;
    let manifest = &tool.manifest;
    let fired = match (&output, &manifest.transition, &manifest.on_error) {
        _ if cancelled => manifest
            .on_cancel
            .as_deref()
            .map(|event| Event::with_call(event, input, None)),
        (PluginOutput::Success(structured), Some(event), _) => Some(Event::with_call(
            event.as_str(),
            input,
            Some(structured.value.clone()),
        )),
        // A failed call that would have minted the instance leaves none behind to move.
        (PluginOutput::ToolError(message), _, Some(event)) if !mint => {
            Some(Event::with_error(event.as_str(), input, message))
        }
        _ => None,
    };
    let Some(event) = fired else {
        return ControlFlow::Continue((output, None, None));
    };
    let now = now_ms();
    let stepped = invoke::answering_guards(&deps.limits, || {
        workflow.machine.step(&view.snapshot, &event, now)
    })
    .await;
    match stepped {
        Ok(step) => {
            ControlFlow::Continue((output, Some(step), Some(event.event_type().to_string())))
        }
        Err(TransitionLoop) => {
            tracing::warn!(instance = %key, tool = %tool.name(), "an eventless loop stopped a transition; the instance keeps its state");
            let next = view.next_step_in(workflow);
            let state = next.state.clone();
            ControlFlow::Break(match output {
                PluginOutput::Success(output) => CallOutcome::Looped {
                    output: output.value,
                    state,
                    next,
                },
                // The caller is told its call failed, which it did; nothing moved.
                failed @ (PluginOutput::ToolError(_)
                | PluginOutput::BadInput(_)
                | PluginOutput::NeedsInput(_)) => CallOutcome::Ran {
                    output: failed,
                    moved: false,
                    state,
                    next,
                    lists: None,
                    revision: view.revision(),
                },
            })
        }
    }
}

/// What a saved call keeps besides the instance's new snapshot.
struct Kept<'a> {
    output: &'a PluginOutput,
    idempotent: Option<Idempotent>,
    moved: bool,
    fired_event: Option<&'a str>,
    confirmation: Option<Value>,
    principal: Option<String>,
    now: u64,
    /// The task the call ran as: it ends completed with this save.
    task: Option<&'a str>,
    /// That task was cancelled by its client: it ends cancelled, and the trail says so.
    cancelled: bool,
}

/// Step 8: the record the call saves: the new snapshot at the next version, the call's result
/// for a retry to repeat, its due time, and an audit entry when it moved the instance.
fn record_of(
    deps: &InstanceDeps,
    tenure: Option<&Tenure>,
    key: &InstanceKey,
    view: &InstanceView,
    tool: &ToolEntry,
    snapshot: &crate::statechart::Snapshot,
    kept: Kept<'_>,
) -> InstanceRecord {
    let workflow = &view.workflow;
    let state = snapshot.value();
    let entry = match (kept.idempotent, kept.output) {
        (Some((idempotency_key, arguments)), PluginOutput::Success(output)) => {
            Some(IdempotencyEntry {
                key: idempotency_key,
                tool: tool.name().to_string(),
                arguments,
                at_ms: kept.now,
                output: output.value.clone(),
                moved: kept.moved,
                state: state.clone(),
                output_dropped: false,
            })
        }
        _ => None,
    };
    let updated_at_ms = now_ms();
    InstanceRecord {
        machine: Some(workflow.version.clone()),
        idempotency: idempotency::remember(
            &view.idempotency,
            entry,
            deps.idempotency_window,
            kept.now,
        ),
        tasks: match kept.task {
            Some(id) => task_entries::ended(&view.tasks, id, updated_at_ms, |entry| {
                if kept.cancelled {
                    entry.status = TaskEntryStatus::Cancelled;
                } else {
                    task_entries::completed(entry, kept.output, kept.moved, state.clone());
                }
            }),
            None => view.tasks.clone(),
        },
        due_at_ms: deps.due_at(key, snapshot, updated_at_ms),
        // A cancel is in the trail whether or not it moved the instance: who stopped the step.
        audit: (kept.moved || kept.cancelled).then(|| AuditEntry {
            confirmation: kept.confirmation,
            at_ms: updated_at_ms,
            version: view.version + 1,
            by: match kept.cancelled {
                true => format!("{CANCELLED_BY}{}", tool.name()),
                false => format!("tool:{}", tool.name()),
            },
            event: kept.fired_event.map(str::to_owned),
            from: view.snapshot.value(),
            to: state,
            principal: kept.principal,
        }),
        fence: tenure.and_then(Tenure::fence),
        ..InstanceRecord::new(
            workflow.id.clone(),
            snapshot.to_persisted(),
            view.version + 1,
            updated_at_ms,
        )
    }
}
