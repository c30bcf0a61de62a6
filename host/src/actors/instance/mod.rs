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

mod run_call;
pub(super) mod wake;

use self::{run_call::run_call, wake::settle};

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::prelude::*;
use serde_json::Value;
use tracing::Instrument;

use crate::actors::{
    InstanceKey, Owner, SessionId, notifier,
    tenure::{LeaseBusy, LeaseSettings, Tenure},
};
use crate::{
    catalog::{LiveCatalog, Workflow},
    gate::{ListsChanged, NextStep, Refusal},
    invoke::{self, InvokeError},
    plugin::{HostCall, PluginOutput},
    retention::Retention,
    statechart::Snapshot,
    store::{Fence, IdempotencyEntry, InstanceRecord, StateStore, StoreError, now_ms},
    timers::Alarm,
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
    /// the plugin as is; `null` when nothing may be asked.
    pub asking: Value,
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
    /// version defines it: every problem, each naming where it is. Nothing ran.
    InvalidArguments(Vec<String>),
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
    /// When the instance last moved (unix ms): retention counts from it.
    pub updated_at_ms: u64,
    /// The due time stored with it (see `timers::due_at`); `None` also when never saved.
    pub due_at_ms: Option<u64>,
}

impl InstanceView {
    /// An instance of `workflow` in `snapshot` that has saved `version` times, as of now.
    fn new(workflow: Arc<Workflow>, snapshot: Snapshot, version: u64) -> Self {
        InstanceView {
            snapshot,
            version,
            workflow,
            idempotency: Vec::new(),
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

/// What the actor needs that is shared by every instance.
pub struct InstanceDeps {
    /// This process's name in change announcements (see `StateStore::announce_change`).
    pub node: Arc<str>,
    /// How long a plugin call may take, and when a shutdown stops waiting for it.
    pub limits: invoke::Limits,
    /// The catalog being served; a plugin reload replaces it (see [`InstanceActor::follow_catalog`]).
    pub catalog: Arc<LiveCatalog>,
    pub store: Arc<dyn StateStore>,
    pub notifier: Addr<notifier::Notifier>,
    /// How long an idempotency key is honoured (`--idempotency-window`).
    pub idempotency_window: Duration,
    /// The largest record a call may save (`--max-record-bytes`).
    pub max_record_bytes: usize,
    /// How long instances are kept (`--retain-final`, `--instance-ttl`): part of each due time.
    pub retention: Retention,
    /// Told every due time that is saved, so the timer task wakes in time for it.
    pub alarm: Arc<Alarm>,
    /// How leases are held, with a store other servers share (see `tenure.rs`).
    pub leases: LeaseSettings,
    /// The machine versions this process has put in the store (`StateStore::save_machine`),
    /// so each is saved once, before the first record that names it. Keyed by version, which
    /// hashes the whole definition (its `id` included).
    pub saved_machines: Mutex<HashSet<String>>,
}

/// The name this actor holds leases under: the process's node name and a number of its own, so
/// that two actors of one instance in one process (a passivated one still finishing a call, and
/// its successor) never take each other's lease for their own.
fn holder_name(node: &str) -> Arc<str> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{node}.{}", NEXT.fetch_add(1, Ordering::Relaxed)).into()
}

impl InstanceDeps {
    /// Makes sure the store keeps `workflow`'s machine definition, so a record naming its
    /// version can be restored after the plugin that brings it is gone.
    async fn keep_machine(&self, workflow: &Workflow) -> Result<(), StoreError> {
        // The version alone names the machine (it hashes the whole definition, `id` included),
        // so the check on every save allocates nothing.
        if workflow.archived || self.machines().contains(workflow.version.as_str()) {
            return Ok(());
        }
        self.store
            .save_machine(&workflow.id, &workflow.version, &workflow.definition)
            .await?;
        self.machines().insert(workflow.version.clone());
        Ok(())
    }

    fn machines(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Lookups and inserts only: a panic cannot leave the set inconsistent.
        self.saved_machines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The due time of `key` in `snapshot`, last moved at `updated_at_ms` (see
    /// `timers::due_at`): retention applies to handle-keyed instances only.
    pub(super) fn due_at(
        &self,
        key: &InstanceKey,
        snapshot: &Snapshot,
        updated_at_ms: u64,
    ) -> Option<u64> {
        let retention = matches!(key.owner, Owner::Handle(_)).then_some(&self.retention);
        crate::timers::due_at(snapshot, updated_at_ms, retention)
    }

    /// Saves `record` for `key` with compare-and-set on `expected` (under the lease
    /// `record.fence` names, if any), after keeping the machine it names; then tells the timer
    /// task its due time and, when it `moved`, the other server processes sharing the store
    /// (they notify their own sessions).
    pub(super) async fn save(
        &self,
        key: &InstanceKey,
        workflow: &Workflow,
        record: &InstanceRecord,
        expected: u64,
        moved: bool,
    ) -> Result<(), InstanceError> {
        let store_key = key.store_key();
        self.keep_machine(workflow).await?;
        let saved =
            match crate::metrics::timed_save(self.store.save(&store_key, record, expected)).await {
                // No answer is not "not saved": learn which it was before telling the caller.
                Err(failure @ StoreError::NoAnswer(_)) => {
                    crate::store::settle_unanswered_save(
                        &*self.store,
                        &store_key,
                        record,
                        expected,
                        failure,
                    )
                    .await
                }
                other => other,
            };
        if let Err(StoreError::Fenced { .. }) = &saved {
            crate::metrics::lease_fenced();
            tracing::info!(instance = %key, "a save was refused: this server's lease on the instance lapsed or moved");
        }
        saved?;
        if let Some(due) = record.due_at_ms {
            self.alarm.set(due);
        }
        // The transition is saved already, so a failed announcement costs the others a
        // notification, not a state.
        if moved && let Err(error) = self.store.announce_change(&self.node, &store_key).await {
            tracing::warn!(instance = %key, %error, "could not announce a change to other servers");
        }
        Ok(())
    }
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
    /// The instance's lease, with a store other servers share (`None` otherwise).
    pub(super) tenure: Option<Arc<Tenure>>,
    /// When the instance was last used, and whether a check for an idle lease is scheduled.
    last_used: std::time::Instant,
    idle_check: bool,
    /// Its owner ended ([`End`]): the actor stops, and a restart is only actix's supervisor
    /// seeing an address still held elsewhere, not a fault.
    ended: bool,
}

impl InstanceActor {
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
            tenure,
            last_used: std::time::Instant::now(),
            idle_check: false,
            ended: false,
        }
    }

    /// Whether a plugin thread still runs a call of this instance past its deadline.
    pub(super) fn plugin_running(&self) -> bool {
        self.plugin_lock.is_held()
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

/// The result of a call's async part, with the view the actor should adopt afterwards.
struct Finished {
    adopt: Option<InstanceView>,
    /// `Some` when the instance moved: which lists besides its tools the move changed.
    changed: Option<ListsChanged>,
    /// The instance is known to exist: it loaded, or the call that minted it saved it.
    exists: bool,
    outcome: Result<CallOutcome, InstanceError>,
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
            // With a store other servers share, the lease first: the handler runs only where it
            // is held, and the copy in memory stands if nobody wrote since it was read.
            let ready = match &leased {
                None => ready,
                Some(tenure) => match tenure.hold(Some(sent_at)).await {
                    Ok(Ok(holding)) => cached.clone().filter(|view| holding.keeps(view.version)),
                    Ok(Err(busy)) => {
                        return Finished {
                            adopt: cached,
                            changed: None,
                            exists: false,
                            outcome: Err(busy.into()),
                        };
                    }
                    Err(error) => {
                        return Finished {
                            adopt: None,
                            changed: None,
                            exists: false,
                            outcome: Err(error.into()),
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
            let (view, settled) = match loaded {
                Ok(loaded) => loaded,
                Err(error) => {
                    return Finished {
                        adopt: None,
                        changed: None,
                        exists: false,
                        outcome: Err(error),
                    };
                }
            };
            let tool = if Arc::ptr_eq(&view.workflow, &workflow) {
                tool
            } else {
                view.workflow.tool(&call.tool).cloned()
            };
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
                Err(error) => Finished {
                    exists,
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
                finished.outcome
            },
        )))
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
        let record = InstanceRecord {
            updated_at_ms: view.updated_at_ms,
            due_at_ms: view.due_at_ms,
            ..InstanceRecord::first(self.workflow.id.clone(), view.snapshot.to_persisted())
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
