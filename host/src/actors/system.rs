//! Starting the actors.
//!
//! actix actors need an actix `System`; the rest of the host runs on a plain tokio runtime where
//! `Actor::start()` would panic. So the system gets its own thread (the registry runs there),
//! plus one worker thread per core for instance actors, the notifier and the HTTP connections
//! ([`Workers`]), and the rest of the host only ever holds addresses, whose `send(..).await`
//! works from any task.

use std::{sync::Arc, thread, time::Duration};

use actix::prelude::*;

use super::{
    Runtime, instance::InstanceDeps, notifier::Notifier, registry::Registry, routes::Routes,
    watching::Watching, workers::Workers,
};
use crate::{catalog::LiveCatalog, store::StateStore};

/// How the actors behave.
#[derive(Debug, Clone)]
pub struct ActorOptions {
    /// Drop an instance from memory after this long without a call (`None`: never). It comes back
    /// from the store on its next call.
    pub idle_after: Option<Duration>,
    /// How long a plugin call may take (see `invoke`).
    pub tool_timeout: Duration,
    /// Cancelled when a shutdown's deadline passes: calls still running are abandoned, and
    /// nothing they would still change is saved (see `shutdown`).
    pub abandon_calls: tokio_util::sync::CancellationToken,
    /// The most bytes of JSON a tool may answer (`--max-result-bytes`, see `invoke`).
    pub max_result_bytes: usize,
    /// This process's name among the servers sharing a store (random by default).
    pub node: Arc<str>,
    /// How long a call's idempotency key is honoured (`--idempotency-window`, default 600 s).
    pub idempotency_window: Duration,
    /// The largest record a call may save (`--max-record-bytes`, default 1 MiB).
    pub max_record_bytes: usize,
    /// How long instances are kept (`--retain-final`, `--instance-ttl`; default: forever).
    pub retention: crate::retention::Retention,
    /// Whether a delete (an operator's, retention's) leaves a tombstone (`--tombstone-days`
    /// above 0; default yes).
    pub tombstones: bool,
    /// The timer task's alarm, rung with every due time saved (see `timers`).
    pub alarm: Arc<crate::timers::Alarm>,
    /// How instances' leases are held in a store other servers share (see `tenure.rs`).
    pub leases: super::LeaseSettings,
    /// Told when an instance gains its first watcher here or loses its last (the relay of
    /// other servers' changes, with a store other processes share).
    pub watch_events: Option<super::WatchEvents>,
}

impl Default for ActorOptions {
    fn default() -> Self {
        ActorOptions {
            idle_after: None,
            tool_timeout: Duration::from_secs(60),
            abandon_calls: tokio_util::sync::CancellationToken::new(),
            max_result_bytes: crate::invoke::DEFAULT_MAX_RESULT_BYTES,
            node: uuid::Uuid::new_v4().simple().to_string().into(),
            idempotency_window: Duration::from_secs(600),
            max_record_bytes: crate::store::DEFAULT_MAX_RECORD_BYTES,
            retention: crate::retention::Retention::default(),
            tombstones: true,
            alarm: Arc::default(),
            leases: super::LeaseSettings::default(),
            watch_events: None,
        }
    }
}

/// Starts the actor system and returns the handle to it. The system runs until the process
/// exits.
pub fn start(
    catalog: Arc<LiveCatalog>,
    store: Arc<dyn StateStore>,
    options: ActorOptions,
) -> std::io::Result<Runtime> {
    let workers = thread::available_parallelism().map_or(2, |n| n.get());
    let node = options.node.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    thread::Builder::new()
        .name("actors".into())
        .spawn(move || {
            let system = System::new();
            system.block_on(async move {
                let workers = Arc::new(Workers::start(workers));
                let watching = Arc::new(Watching::default());
                let notifier = Notifier::start_in_arbiter(&workers.for_notifier(), {
                    let watching = watching.clone();
                    let watch_events = options.watch_events.clone();
                    move |_| Notifier::new(watching, watch_events)
                });
                let deps = Arc::new(InstanceDeps {
                    node,
                    limits: crate::invoke::Limits {
                        timeout: options.tool_timeout,
                        abandon: options.abandon_calls.clone(),
                        max_result_bytes: options.max_result_bytes,
                    },
                    catalog,
                    store,
                    notifier: notifier.clone(),
                    idempotency_window: options.idempotency_window,
                    max_record_bytes: options.max_record_bytes,
                    retention: options.retention,
                    tombstones: options.tombstones,
                    alarm: options.alarm,
                    leases: options.leases,
                    saved_machines: Default::default(),
                    running_tasks: Default::default(),
                });
                let routes = Arc::new(Routes::default());
                let registry =
                    Registry::new(deps, workers.clone(), options.idle_after, routes.clone())
                        .start();
                // The receiver waits in `start`, so this only fails if that thread is gone.
                let _ = ready_tx.send(Runtime {
                    registry,
                    routes,
                    notifier,
                    watching,
                    workers,
                });
            });
            system.run()
        })?;
    ready_rx
        .recv()
        .map_err(|_| std::io::Error::other("the actor system failed to start"))
}
