//! [`InstanceActor`]: one running workflow instance.
//!
//! It owns the instance's snapshot and version, and is the only writer of both. Every call on the
//! instance goes through its mailbox and is handled atomically (`AtomicResponse`): the gate
//! check, the plugin call (on a blocking thread, off the actor's own), the transition and the
//! save all finish before the next message is looked at. That is what makes "of N racing calls,
//! exactly one wins" true without a lock.
//!
//! With a store other servers share, a call first holds the instance's lease (`tenure.rs`), so
//! the same is true across servers: the handler runs where the lease is, and every save names
//! the lease's fencing token.
//!
//! Timers that fall due are fired here too, by the same actor, before anything else looks at
//! the state (`wake.rs`: the timer task's [`wake::Wake`], and [`settle`] before every
//! call and view), so a call never sees a state whose timer should have moved it on.
//!
//! It must not decide visibility itself (that is `gate`), build client-facing messages (that is
//! `mcp`), or talk to sessions (that is the notifier).
//!
//! This file holds the messages, the actor's state and its smaller handlers; its rooms are
//! `call.rs` (the mailbox side of a call), `run_call.rs` (a call's steps), `wake.rs` (timers and
//! retention) and `deps.rs` (what every instance shares, and the save).

mod call;
mod deps;
mod run_call;
mod task;
mod task_entries;
pub(super) mod wake;

pub use self::deps::InstanceDeps;
pub use self::task::{ReadTask, TaskRun};

use self::wake::settle;

use std::sync::Arc;

use actix::prelude::*;
use serde_json::Value;

use crate::actors::{
    InstanceKey, Owner, SessionId, notifier,
    tenure::{LeaseBusy, Tenure},
};
use crate::{
    catalog::Workflow,
    gate::{ListsChanged, NextStep, Refusal},
    invoke::{self, InvokeError},
    plugin::{HostCall, PluginOutput},
    statechart::Snapshot,
    store::{Fence, IdempotencyEntry, InstanceRecord, StoreError, TaskEntry, now_ms},
};

/// Run the tool named `tool` on this instance, if the gate lets it.
#[derive(Message)]
#[rtype(result = "Result<CallOutcome, InstanceError>")]
pub struct Call {
    /// The tool's name. The instance resolves it once, against the machine version it runs on
    /// (an instance on an older version keeps that version's tools), and checks the arguments
    /// with that version's schema: the catalog's tool of the same name may differ after a reload.
    pub tool: String,
    /// The arguments, the handle already taken out of them; not yet checked against a schema.
    pub arguments: Value,
    /// Unique per call; handed to the plugin for its logs and idempotency keys.
    pub call_id: String,
    /// Where the plugin's logs and progress go, and whether the client cancelled the call.
    pub host: Option<Arc<HostCall>>,
    /// The call starts this (handle-keyed) instance: it begins in the machine's initial state
    /// rather than from the store, and is saved only if the call succeeds (one save: its first
    /// record). A mint whose call fails leaves nothing behind.
    pub mint: bool,
    /// The client's idempotency key (`_meta.idempotencyKey`), already checked by `mcp`: a call
    /// that repeats one seen within the window gets the first call's result and runs nothing.
    pub idempotency_key: Option<String>,
    /// Who made the call, with authentication on (for the audit trail).
    pub principal: Option<String>,
    /// When the call was sent to the instance: a wait for another server's lease ends
    /// `--lease-wait` after it, however long the call queued behind others here.
    pub sent_at: std::time::Instant,
    /// The caller's session, when the call's own reply tells it of the lists the call changed,
    /// ahead of the result ([`CallOutcome::Ran`]'s `lists`): the notifier leaves it out of those
    /// notices, which would reach it on its event stream only after the result.
    pub told_in_reply: Option<SessionId>,
    /// What the handler may ask for and has been told (ABI 1.4, see `mcp/handler/asking.rs`): handed to
    /// the plugin as is (but a binding's confirmation, `confirm.rs`, as the host kept it);
    /// `null` when nothing may be asked.
    pub asking: Value,
    /// The revision of the instance the answers in `asking` were given for (from the outcome
    /// that asked for them, [`CallOutcome::Ran`]'s `revision`, or a sealed `requestState`):
    /// the call runs only while the instance is still at it, and is answered
    /// [`CallOutcome::MovedOn`] once the step they answered has moved on, even to a state that
    /// offers the tool again. `None`: nothing was asked yet.
    pub made_for: Option<Revision>,
    /// The caller's session, to watch the instance from the moment it is known to exist: after
    /// it loaded, or once a mint's first save is made. Sent to the notifier ahead of the news
    /// of this call's own move, so the session hears of it; never sent for an instance that
    /// turned out not to exist, so nothing has to be taken back. `None`: the caller does not
    /// watch instances (no session, or its lists do not follow them), or watches this one
    /// already.
    pub watcher: Option<notifier::Subscribe>,
    /// The call's span (`mcp/handler/call_record.rs`), which the actor runs the call in: its
    /// plugin call and save are its children, and it records the states the call moved
    /// between. `Span::none()` unless spans are exported (`logs::otlp`): nothing to pay then.
    pub span: tracing::Span,
    /// Run the call as this task (`task.rs`): answered [`CallOutcome::TaskStarted`] once the
    /// gate let it through and the task is saved with the instance; its outcome comes on
    /// [`TaskRun::done`]. A call that mints its instance runs as a plain call.
    pub task: Option<TaskRun>,
}

/// Test hook: create a handle-keyed instance in its initial state and save it, so that its
/// handle is known from now on. Fails with a conflict if it exists already. (Serving creates an
/// instance through its starting call instead: `Call::mint`.)
#[cfg(test)]
#[derive(Message)]
#[rtype(result = "Result<InstanceView, InstanceError>")]
pub struct Create;

/// The instance's owner (a session) ended: delete its record, if it ever saved one.
#[derive(Message)]
#[rtype(result = "()")]
pub struct End;

/// Read the instance's current snapshot (waits for a call in progress to finish).
#[derive(Message, Default)]
#[rtype(result = "Result<InstanceView, InstanceError>")]
pub struct View {
    /// A session to watch the instance once it is known to exist (see [`Call::watcher`]).
    pub watcher: Option<notifier::Subscribe>,
}

/// The record version the actor holds in memory, loading nothing (`None`: it holds none). Its
/// own moves are in it, each told to the watchers here as it was saved: the relay of other
/// servers' changes reads it to tell those from a change nobody here heard of (`relay.rs`).
/// Answered between calls, never in the middle of one.
#[derive(Message)]
#[rtype(result = "Option<u64>")]
pub struct Held;

/// Test hook: make the actor panic inside a handler, as a bug would.
#[cfg(test)]
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

/// What a call came to.
#[derive(Debug)]
pub enum CallOutcome {
    /// The arguments do not match the input schema of the tool as the instance's machine
    /// version defines it: every problem, each naming where it is. Nothing ran. `next` is where
    /// the instance is.
    InvalidArguments {
        problems: Vec<String>,
        next: NextStep,
    },
    /// The gate refused the call; nothing ran and nothing changed.
    Forbidden(Refusal),
    /// The plugin ran. If its transition moved the instance (`moved`), the new state was saved
    /// before this outcome was produced. `state` is the instance's state value after the call.
    /// `next` is where the instance is now and what may follow (for a replayed call, now, not
    /// when the call first ran, whose state `state` keeps).
    Ran {
        output: PluginOutput,
        moved: bool,
        state: Value,
        next: NextStep,
        /// The lists besides tools that changed, when the instance moved (by this call, or by
        /// timers that fell due before it): what a caller told of its own move in its reply
        /// hears there (`mcp/handler/call_events.rs`).
        lists: Option<ListsChanged>,
        /// The instance's revision after the call: what the answers to a request for input
        /// (`output` `NeedsInput`) are given for ([`Call::made_for`]).
        revision: Revision,
    },
    /// The plugin ran, but its event started an eventless loop (over the engine's microstep
    /// limit): nothing was saved and the instance keeps `state`. `output` is what the plugin
    /// answered, which the caller still gets to see.
    Looped {
        output: Value,
        state: Value,
        next: NextStep,
    },
    /// The binding has a person confirm (`confirm.rs`), who answered `action` (decline,
    /// cancel): nothing ran and nothing changed. `next` is where the instance is.
    Declined { action: String, next: NextStep },
    /// The call's answers were given for an earlier revision of the instance
    /// ([`Call::made_for`]): the step they answered moved on (a call, a timer, an operator's
    /// reset), so nothing ran and nothing changed, however the gate would judge the call now.
    /// `next` is where the instance is.
    MovedOn { next: NextStep },
    /// The call runs on as task `id` (`Call::task`): the gate let it through and the task is
    /// saved with the instance, which it holds until it ends. `next` is where the instance is.
    TaskStarted { id: String, next: NextStep },
    /// The call failed once the instance was known (`error` says why): nothing it did was
    /// saved, or, for a save that got no answer the store could settle, it may have been
    /// (`StoreError::Ambiguous`). `after_handler`: the tool's handler had run and returned when
    /// the call failed (its save failed, or its record was too large, or a shutdown overtook
    /// it). `next` is where the instance stood before the call, which is where it stands unless
    /// the save may have been applied; `readers` are the tools on that menu that move nothing,
    /// for a caller to learn where it is.
    Failed {
        error: InstanceError,
        after_handler: bool,
        next: NextStep,
        readers: Vec<String>,
    },
}

/// Which saved step of an instance something was made for: its record's version and when that
/// version was written (an instance deleted and walked again reaches the same version at another
/// time). Every save makes a new one, whether or not it moved the instance. A never-saved
/// instance's is `(0, 0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Revision {
    pub version: u64,
    pub at_ms: u64,
}

impl CallOutcome {
    /// Whether the call's instance exists after it: always for a call on an instance that
    /// loaded; for a call that mints its instance, only when it ran and succeeded (its first
    /// record is saved then). `outcome` is `None` for a call that failed.
    pub fn leaves_instance(mint: bool, outcome: Option<&CallOutcome>) -> bool {
        !mint
            || matches!(
                outcome,
                Some(CallOutcome::Ran {
                    output: PluginOutput::Success(_),
                    ..
                })
            )
    }
}

/// The instance as a caller may see it.
#[derive(Debug, Clone)]
pub struct InstanceView {
    pub snapshot: Snapshot,
    /// How many transitions have been saved (0: never saved, still in its initial state).
    pub version: u64,
    /// The machine and tools the instance runs on: the catalog's, or an older version it keeps
    /// after a plugin reload (see `Catalog::follow`). Its menu comes from these.
    pub workflow: Arc<Workflow>,
    /// The results of recent calls that carried an idempotency key, as last saved.
    pub idempotency: Vec<IdempotencyEntry>,
    /// Its calls that run, or ran, as tasks, as last saved (`store::TaskEntry`).
    pub tasks: Vec<TaskEntry>,
    /// When the instance last moved (unix ms): retention counts from it.
    pub updated_at_ms: u64,
    /// The due time stored with it (see `timers::due_at`); `None` also when never saved.
    pub due_at_ms: Option<u64>,
}

impl InstanceView {
    /// The saved step this view is of.
    pub fn revision(&self) -> Revision {
        Revision {
            version: self.version,
            // A never-saved view's time is when it was made, which no record keeps.
            at_ms: if self.version == 0 {
                0
            } else {
                self.updated_at_ms
            },
        }
    }

    /// The record of the instance as it stands, one version on, saved under `fence`: a save
    /// that moves nothing and keeps its time (a corrected due time, a task's start or end).
    /// Where the instance stands and which tools may come next ([`gate::next_step`]), with
    /// the step running on it as a task, if one is: then only the tools that read are next.
    pub fn next_step(&self) -> crate::gate::NextStep {
        self.next_step_in(&self.workflow)
    }

    /// [`InstanceView::next_step`] by `workflow`'s menu (the catalog's, when it changed since
    /// the instance was loaded).
    pub(super) fn next_step_in(&self, workflow: &Workflow) -> crate::gate::NextStep {
        let mut next = crate::gate::next_step(workflow, &self.snapshot);
        next.running = task_entries::working(self).map(|entry| crate::gate::RunningStep {
            task_id: entry.id.clone(),
            tool: entry.tool.clone(),
        });
        if next.running.is_some() && !next.done {
            // Until it ends, a call that would move the instance is refused (`call.rs`).
            next.available = crate::gate::menu(workflow, &self.snapshot)
                .into_iter()
                .filter(|tool| !tool.fires_something())
                .map(|tool| tool.name().to_string())
                .collect();
        }
        next
    }

    pub(super) fn restated(&self, fence: Option<Fence>) -> InstanceRecord {
        InstanceRecord {
            machine: Some(self.workflow.version.clone()),
            idempotency: self.idempotency.clone(),
            tasks: self.tasks.clone(),
            due_at_ms: self.due_at_ms,
            fence,
            ..InstanceRecord::new(
                self.workflow.id.clone(),
                self.snapshot.to_persisted(),
                self.version + 1,
                self.updated_at_ms,
            )
        }
    }

    /// An instance of `workflow` in `snapshot` that has saved `version` times, as of now.
    fn new(workflow: Arc<Workflow>, snapshot: Snapshot, version: u64) -> Self {
        InstanceView {
            snapshot,
            version,
            workflow,
            idempotency: Vec::new(),
            tasks: Vec::new(),
            updated_at_ms: now_ms(),
            due_at_ms: None,
        }
    }

    /// A new instance of `workflow`, in its initial state as of now, never saved.
    fn unsaved(workflow: &Arc<Workflow>) -> Self {
        InstanceView::new(
            workflow.clone(),
            workflow.machine.initial_snapshot_at(now_ms()),
            0,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error("the state store failed: {0}")]
    Store(#[from] StoreError),
    #[error("the stored snapshot of {key} does not fit workflow \"{workflow}\": {reason}")]
    Corrupt {
        key: String,
        workflow: String,
        reason: String,
    },
    #[error(transparent)]
    Tool(#[from] InvokeError),
    /// The stored state does not exist in the machine served now, and the machine version the
    /// instance ran on is not loaded (e.g. the instance was passivated, or the server restarted,
    /// after a plugin reload renamed its state). Nothing is changed; the record stays as it is.
    #[error(
        "the stored state of {key} does not exist in workflow \"{workflow}\" as loaded now, and \
         the machine version it ran on is no longer loaded: {reason}"
    )]
    VersionUnavailable {
        key: String,
        workflow: String,
        reason: String,
    },
    /// The idempotency key was used, within the window, for a call of another tool or with other
    /// arguments. Nothing ran.
    #[error(
        "idempotency key {key:?} was already used on this instance for a different call \
         (another tool or other arguments)"
    )]
    IdempotencyConflict { key: String },
    /// A retry of a call that ran already (the same key, tool and arguments) whose result was
    /// too large to keep. Nothing ran again.
    #[error(
        "the call with idempotency key {key:?} ran already, at {at_ms} (unix ms), and left the \
         instance in {state}; its result was too large to keep"
    )]
    IdempotencyResultExpired {
        key: String,
        at_ms: u64,
        state: Value,
    },
    #[error("the instance stopped while handling the call; it restarts from its last saved state")]
    Stopped,
    #[error("no loaded plugin defines workflow \"{0}\"")]
    UnknownWorkflow(String),
    /// A well-formed handle that names no instance: never minted here, or deleted.
    #[error("no instance has handle {0}")]
    UnknownHandle(String),
    /// Another server holds the instance's lease, and held it for all of `--lease-wait`: the
    /// call did not run here.
    #[error("another server is running a call on this instance; try again in {retry_after_ms} ms")]
    LeaseBusy { retry_after_ms: u64 },
    /// A call that would write came while the instance runs a task (`task.rs`): it did not run.
    #[error("{tool} is running on this instance as task {id}; it holds the instance until it ends")]
    TaskRunning { id: String, tool: String },
    /// The instance's record would grow past `--max-record-bytes`: nothing was saved or fired.
    #[error(
        "the instance's record would take about {size} bytes, over this server's limit of \
         {limit} (--max-record-bytes)"
    )]
    RecordTooLarge { size: usize, limit: usize },
}

/// A lease another server holds past the wait is the call's [`InstanceError::LeaseBusy`]: the
/// one place [`Tenure::hold`]'s refusal becomes what a caller is told, so every path that holds
/// the lease before acting (a call, an operator's action) answers alike.
impl From<LeaseBusy> for InstanceError {
    fn from(busy: LeaseBusy) -> Self {
        InstanceError::LeaseBusy {
            retry_after_ms: busy.retry_after_ms,
        }
    }
}

/// The name this actor holds leases under: the process's node name and a number of its own, so
/// that two actors of one instance in one process (a passivated one still finishing a call, and
/// its successor) never take each other's lease for their own.
fn holder_name(node: &str) -> Arc<str> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{node}.{}", NEXT.fetch_add(1, Ordering::Relaxed)).into()
}

pub struct InstanceActor {
    pub(super) key: InstanceKey,
    pub(super) workflow: Arc<Workflow>,
    pub(super) deps: Arc<InstanceDeps>,
    /// `None` until loaded from the store, and again after anything that makes the in-memory copy
    /// doubtful (a failed or conflicting save): the next message reloads it.
    pub(super) current: Option<InstanceView>,
    /// Held by a plugin thread still running a call of this instance past its deadline.
    plugin_lock: invoke::InstanceLock,
    /// Held by the thread running a task's plugin (`task.rs`), which calls that only read do not
    /// wait for; a call that would write waits for it as for `plugin_lock`.
    task_lock: invoke::InstanceLock,
    /// The instance's lease, with a store other servers share (`None` otherwise).
    pub(super) tenure: Option<Arc<Tenure>>,
    /// When the instance was last used, and whether a check for an idle lease is scheduled.
    last_used: std::time::Instant,
    idle_check: bool,
    /// Its owner ended ([`End`]): the actor stops, and a restart is only actix's supervisor
    /// seeing an address still held elsewhere, not a fault.
    ended: bool,
    /// The task whose plugin runs now, outside the mailbox (`task.rs`).
    running: Option<task::Running>,
}

impl InstanceActor {
    /// The refusal of anything that would write the instance while a step runs on it as a task
    /// here (an operator's reset or delete, as a call that would move it): `None` when none runs.
    pub(in crate::actors) fn held_by_task(&self) -> Option<InstanceError> {
        self.running
            .as_ref()
            .map(|running| InstanceError::TaskRunning {
                id: running.id.clone(),
                tool: running.tool.clone(),
            })
    }

    /// Tells the notifier the instance moved, once the answer to what moved it is on its way.
    ///
    /// The notifier may run on this thread (`workers.rs`), and a task woken here runs before
    /// one woken later: sent at once, the fan-out to every watcher would run ahead of the
    /// caller's answer (seen at 10,000 watchers: answers 19–35 ms late instead of 1–6 ms). So
    /// the send is a task of its own, queued now, which runs after the caller, whose wake-up
    /// the answer queues first when it is sent right after this.
    pub(super) fn announce(&self, lists: ListsChanged, told_in_reply: Option<SessionId>) {
        let notifier = self.deps.notifier.clone();
        let instance = self.key.clone();
        actix::spawn(async move {
            notifier.do_send(notifier::InstanceChanged {
                instance,
                lists,
                told_in_reply,
            });
        });
    }

    pub fn new(key: InstanceKey, workflow: Arc<Workflow>, deps: Arc<InstanceDeps>) -> Self {
        let tenure = deps.store.is_shared().then(|| {
            Arc::new(Tenure::new(
                deps.store.clone(),
                key.store_key(),
                holder_name(&deps.node),
                deps.leases,
            ))
        });
        InstanceActor {
            key,
            workflow,
            deps,
            current: None,
            plugin_lock: invoke::InstanceLock::default(),
            task_lock: invoke::InstanceLock::default(),
            tenure,
            last_used: std::time::Instant::now(),
            idle_check: false,
            ended: false,
            running: None,
        }
    }

    /// Whether a plugin thread still runs a call of this instance past its deadline.
    pub(super) fn plugin_running(&self) -> bool {
        self.plugin_lock.is_held() || self.task_lock.is_held() || self.running.is_some()
    }

    /// After a message's work: a write the lease refused means the lease is not this
    /// process's any more; anything else is a use that keeps it.
    pub(super) fn after<T>(&mut self, outcome: &Result<T, InstanceError>, ctx: &mut Context<Self>) {
        if let (Err(InstanceError::Store(StoreError::Fenced { .. })), Some(tenure)) =
            (outcome, &self.tenure)
        {
            tenure.forget();
            self.current = None;
        }
        self.used(ctx);
    }

    /// The fence of the lease held, if any.
    pub(super) fn fence(&self) -> Option<Fence> {
        self.tenure.as_ref().and_then(|tenure| tenure.fence())
    }

    /// Notes a use of the instance, and makes sure its lease, if one is held, is given up once
    /// the instance has been idle for `--lease-idle`: one timer per idle period, not per call.
    pub(super) fn used(&mut self, ctx: &mut Context<Self>) {
        self.last_used = std::time::Instant::now();
        // Another server waits for it: give it up now (the next call here asks again), unless a
        // plugin still runs past its deadline.
        if let Some(tenure) = self.tenure.clone()
            && tenure.is_wanted()
            && !self.plugin_running()
        {
            ctx.wait(async move { tenure.release().await }.into_actor(self));
            return;
        }
        if self.idle_check || self.fence().is_none() {
            return;
        }
        self.idle_check = true;
        self.check_idle(ctx, self.deps.leases.idle);
    }

    fn check_idle(&mut self, ctx: &mut Context<Self>, after: std::time::Duration) {
        ctx.run_later(after, |actor, ctx| {
            let idle = actor.deps.leases.idle;
            let unused = actor.last_used.elapsed();
            if unused < idle {
                return actor.check_idle(ctx, idle - unused);
            }
            // A call that timed out still runs in its plugin: no other server may start the
            // instance's next step meanwhile, so the lease is kept (renewed) until it returns.
            if actor.plugin_running()
                && let Some(tenure) = actor.tenure.clone()
            {
                ctx.wait(
                    async move {
                        let _ = tenure.hold(None).await;
                    }
                    .into_actor(actor),
                );
                return actor.check_idle(ctx, idle);
            }
            actor.idle_check = false;
            if let Some(tenure) = actor.tenure.clone() {
                // Waited on: a call that arrives meanwhile holds the lease anew after it.
                ctx.wait(async move { tenure.release().await }.into_actor(actor));
            }
        });
    }

    /// After a plugin reload, moves this instance onto the catalog's machine when
    /// [`Catalog::follow`] says so (else it keeps the machine it runs on). An instance not loaded
    /// yet takes the catalog's machine and is restored into it when it loads.
    pub(super) fn follow_catalog(&mut self) {
        let catalog = self.deps.catalog.current();
        match &self.current {
            Some(view) => {
                if let Some((workflow, snapshot)) = catalog.follow(&self.workflow, &view.snapshot) {
                    self.workflow = workflow.clone();
                    self.current = Some(InstanceView {
                        snapshot,
                        workflow,
                        ..view.clone()
                    });
                }
            }
            None => {
                if let Some(latest) = catalog.workflow(&self.key.workflow) {
                    self.workflow = latest.clone();
                }
            }
        }
    }

    /// The view in memory, if it can stand for the stored one: with a store other processes
    /// write to, only while this process holds the lease (nobody else writes then); else the
    /// copy in memory may be stale, so it is reread.
    fn trusted_current(&self) -> Option<InstanceView> {
        match &self.tenure {
            Some(tenure) if !tenure.is_fresh() => None,
            _ => self.current.clone(),
        }
    }

    /// The current view, loading it from the store first if needed. Runs outside the actor, so
    /// it takes what it needs by value.
    pub(super) fn current_or_load(
        &self,
    ) -> impl Future<Output = Result<InstanceView, InstanceError>> + 'static {
        let current = self.trusted_current();
        let deps = self.deps.clone();
        let workflow = self.workflow.clone();
        let key = self.key.clone();
        async move {
            match current {
                Some(view) => Ok(view),
                None => load(&deps, &key, &workflow).await,
            }
        }
    }
}

/// The instance as stored. A session-keyed instance that was never saved is in its initial
/// state, created now; a handle-keyed one must exist (handles are saved when minted), so a
/// missing one is an unknown handle rather than a silent new instance.
pub(super) async fn load(
    deps: &InstanceDeps,
    key: &InstanceKey,
    workflow: &Arc<Workflow>,
) -> Result<InstanceView, InstanceError> {
    match load_record(deps, &key.store_key(), workflow).await? {
        Some(view) => Ok(view),
        None => match &key.owner {
            Owner::Session(_) => Ok(InstanceView::unsaved(workflow)),
            Owner::Handle(handle) => Err(InstanceError::UnknownHandle(handle.to_string())),
        },
    }
}

/// The stored record as a view, on the machine it should run on: `workflow` (the catalog's)
/// when the record names no other version (format 1) or its state exists in `workflow` (the
/// rule of `Catalog::follow`); else the version it names, as a loaded plugin still brings it,
/// or else as the store kept its definition ([`Workflow::archived`]: readable, not callable).
async fn load_record(
    deps: &InstanceDeps,
    key: &str,
    workflow: &Arc<Workflow>,
) -> Result<Option<InstanceView>, InstanceError> {
    let corrupt = |reason: String| InstanceError::Corrupt {
        key: key.to_string(),
        workflow: workflow.id.clone(),
        reason,
    };
    let unavailable = |reason: String| InstanceError::VersionUnavailable {
        key: key.to_string(),
        workflow: workflow.id.clone(),
        reason,
    };
    let record = match deps.store.load(key).await? {
        None => return Ok(None),
        Some(record) if record.workflow != workflow.id => {
            return Err(corrupt(format!(
                "it was stored by workflow \"{}\"",
                record.workflow
            )));
        }
        Some(record) => record,
    };
    // A snapshot from before timers were persisted starts its timers when it last moved.
    let restored = workflow
        .machine
        .restore_at(&record.snapshot, record.updated_at_ms);
    let (running, snapshot) = match (restored, record.machine.as_deref()) {
        (Ok(snapshot), _) => (workflow.clone(), snapshot),
        (Err(error), None) => return Err(unavailable(error.to_string())),
        (Err(_), Some(version)) if version == workflow.version => {
            return Err(corrupt(
                "its snapshot does not fit the machine it names".into(),
            ));
        }
        (Err(_), Some(version)) => {
            let pinned = match deps.catalog.loaded_version(&workflow.id, version) {
                Some(loaded) => loaded,
                None => {
                    let definition = deps
                        .store
                        .load_machine(&workflow.id, version)
                        .await?
                        .ok_or_else(|| {
                            unavailable(format!(
                                "its state is not in the machine served now, and machine \
                                 version {version} is neither loaded nor kept in the store"
                            ))
                        })?;
                    Arc::new(Workflow::archived(definition).map_err(corrupt)?)
                }
            };
            let snapshot = pinned
                .machine
                .restore_at(&record.snapshot, record.updated_at_ms)
                .map_err(|error| corrupt(error.to_string()))?;
            (pinned, snapshot)
        }
    };
    Ok(Some(InstanceView {
        snapshot,
        version: record.version,
        workflow: running,
        idempotency: record.idempotency,
        tasks: record.tasks,
        updated_at_ms: record.updated_at_ms,
        due_at_ms: record.due_at_ms,
    }))
}

impl Actor for InstanceActor {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        tracing::debug!(instance = %self.key, "instance activated");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        // Passivated or ended: others need not wait for the lease to lapse.
        if let Some(tenure) = self.tenure.clone()
            && tenure.fence().is_some()
        {
            actix::spawn(async move { tenure.release().await });
        }
    }
}

impl Supervised for InstanceActor {
    /// A restarted actor forgets its copy and reloads the last saved snapshot.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        if self.ended {
            tracing::debug!(instance = %self.key, "ended instance stops once its last address is dropped");
        } else {
            tracing::warn!(instance = %self.key, "instance restarting");
        }
        self.current = None;
    }
}

#[cfg(test)]
impl Handler<Create> for InstanceActor {
    type Result = AtomicResponse<Self, Result<InstanceView, InstanceError>>;

    fn handle(&mut self, _: Create, _ctx: &mut Self::Context) -> Self::Result {
        let deps = self.deps.clone();
        let key = self.key.clone();
        let workflow = self.workflow.clone();
        let mut view = InstanceView::new(
            self.workflow.clone(),
            self.workflow.machine.initial_snapshot_at(now_ms()),
            1,
        );
        view.due_at_ms = deps.due_at(&key, &view.snapshot, view.updated_at_ms);
        let record = crate::store::InstanceRecord {
            updated_at_ms: view.updated_at_ms,
            due_at_ms: view.due_at_ms,
            ..crate::store::InstanceRecord::first(
                self.workflow.id.clone(),
                view.snapshot.to_persisted(),
            )
        };
        let work = async move {
            deps.save(&key, &workflow, &record, 0, false).await?;
            Ok(view)
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |created, actor, _ctx| {
                if let Ok(view) = &created {
                    actor.current = Some(view.clone());
                }
                created
            },
        )))
    }
}

impl Handler<End> for InstanceActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: End, _ctx: &mut Self::Context) -> Self::Result {
        // Version 0 means never saved: there is nothing in the store to delete. An unknown
        // version (not loaded, or a failed save) is deleted to be safe.
        let saved = self.current.as_ref().is_none_or(|view| view.version > 0);
        let store = self.deps.store.clone();
        let key = self.key.store_key();
        let fence = self.fence();
        let work = async move {
            if !saved {
                return;
            }
            match store.delete(&key, None, fence.as_ref()).await {
                Ok(_) => {}
                // Its lease lapsed and the record went with it (or another holder has it now):
                // nothing of this session's is left to delete here.
                Err(StoreError::Fenced { .. }) => {
                    tracing::debug!(instance = %key, "an ended session's instance is not this server's to delete");
                }
                Err(error) => {
                    tracing::warn!(instance = %key, %error, "could not delete an ended session's instance");
                }
            }
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|(), actor, ctx| {
            actor.current = None;
            actor.ended = true;
            ctx.stop();
        })))
    }
}

impl Handler<View> for InstanceActor {
    type Result = AtomicResponse<Self, Result<InstanceView, InstanceError>>;

    fn handle(&mut self, view: View, _ctx: &mut Self::Context) -> Self::Result {
        self.follow_catalog();
        let watcher = view.watcher;
        let loading = self.current_or_load();
        let (deps, key, fence) = (self.deps.clone(), self.key.clone(), self.fence());
        // Timers that fell due fire first: a menu never shows a state they should have left. A
        // view takes no lease: if another server holds it, that server settles the instance,
        // and this view shows the record as read.
        let work = async move {
            let view = loading.await?;
            match settle(&deps, &key, view.clone(), now_ms(), fence).await {
                Ok(settled) => Ok((settled.view, settled.moved)),
                Err(InstanceError::Store(StoreError::Fenced { .. })) => Ok((view, false)),
                Err(error) => Err(error),
            }
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |settled, actor, _ctx| match settled {
                Ok((view, moved)) => {
                    actor.current = Some(view.clone());
                    // Ahead of the news of a timer's move, in the notifier's mailbox.
                    if let Some(watcher) = watcher {
                        actor.deps.notifier.do_send(watcher.seeing(view.version));
                    }
                    if moved {
                        // A timer's move: what it changed besides tools is not worked out
                        // here, so every list is announced.
                        actor.announce(crate::gate::ListsChanged::ALL, None);
                    }
                    Ok(view)
                }
                Err(error) => {
                    actor.current = None;
                    Err(error)
                }
            },
        )))
    }
}

impl Handler<Held> for InstanceActor {
    type Result = Option<u64>;

    fn handle(&mut self, _: Held, _ctx: &mut Self::Context) -> Option<u64> {
        self.current.as_ref().map(|view| view.version)
    }
}

#[cfg(test)]
impl Handler<Crash> for InstanceActor {
    type Result = ();

    fn handle(&mut self, _: Crash, _ctx: &mut Self::Context) {
        panic!("injected crash");
    }
}
