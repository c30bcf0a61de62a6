//! How many instances each workflow has in each state, and the stream (`GET
//! /console/api/live`, SSE) that sends the counts again whenever they change, to the workflows
//! page's script.
//!
//! There is no index of instances by state, so a count reads every instance record
//! (`instances::query::each_instance`). It is made again when something changed, and only while
//! someone watches: a transition saved here or relayed from another server sharing the store
//! (`metrics::changes`, counted where those are counted), an operator's reset or delete. The
//! relay hears only of the instances this server watches, and instances other servers create or
//! delete reach no feed at all, so with a store others write to the count is also made every
//! [`SHARED_EVERY`] while watched; with one only this process writes, every [`OWN_EVERY`]
//! (retention deletes records without a transition). Bursts of changes are folded: the next
//! count waits at least four times as long as the last one took, and [`SETTLE`] at the least.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    extract::State,
    response::sse::{Event, KeepAlive, Sse},
};
use serde::Serialize;
use tokio::sync::{Notify, watch};

use super::Console;
use crate::{
    catalog::LiveCatalog,
    instances::{active_paths, query::each_instance},
    metrics::changes::changes,
    store::StateStore,
};

/// With a store other servers write to, how often the count is made while someone watches.
const SHARED_EVERY: Duration = Duration::from_secs(2);
/// With a store only this process writes to, the same (its own changes are told at once).
const OWN_EVERY: Duration = Duration::from_secs(30);
/// The shortest time between two counts: changes in a burst are counted together.
const SETTLE: Duration = Duration::from_millis(100);

/// One workflow's instances: how many in all, and how many in each state (a state counts an
/// instance whose state it is or contains: `review` counts `review.checking` too).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkflowCount {
    pub total: u64,
    pub states: BTreeMap<String, u64>,
}

/// Every workflow's count, by workflow id (also workflows no plugin loads now, whose instances
/// remain).
pub type Counts = BTreeMap<String, WorkflowCount>;

/// The counts, kept while watched.
pub struct Census {
    store: Arc<dyn StateStore>,
    catalog: Arc<LiveCatalog>,
    /// The last counts made (`None` before the first); its receivers are the watchers.
    latest: watch::Sender<Option<Arc<Counts>>>,
    /// Told when a watcher comes, to wake the counting task.
    watched: Notify,
}

impl Census {
    pub fn new(store: Arc<dyn StateStore>, catalog: Arc<LiveCatalog>) -> Census {
        Census {
            store,
            catalog,
            latest: watch::Sender::new(None),
            watched: Notify::new(),
        }
    }

    /// Counts now, reading every instance record.
    pub async fn count(&self) -> anyhow::Result<Counts> {
        let mut counts = Counts::new();
        for workflow in self.catalog.current().workflows() {
            counts.entry(workflow.id.clone()).or_default();
        }
        each_instance(&*self.store, |_, record| {
            let count = counts.entry(record.workflow.clone()).or_default();
            count.total += 1;
            for path in active_paths(&record.snapshot["value"]) {
                *count.states.entry(path).or_default() += 1;
            }
            true
        })
        .await?;
        Ok(counts)
    }

    /// A watcher of the counts, which wakes the counting task if it sleeps.
    fn watch(&self) -> watch::Receiver<Option<Arc<Counts>>> {
        let receiver = self.latest.subscribe();
        self.watched.notify_one();
        receiver
    }

    /// Makes the counts again whenever they may have changed, while anyone watches, until
    /// `closing`.
    pub async fn keep_counting(
        self: Arc<Self>,
        console_closing: tokio_util::sync::CancellationToken,
    ) {
        let every = if self.store.is_shared() {
            SHARED_EVERY
        } else {
            OWN_EVERY
        };
        loop {
            while self.latest.receiver_count() == 0 {
                tokio::select! {
                    _ = self.watched.notified() => {}
                    _ = console_closing.cancelled() => return,
                }
            }
            let seen = changes().seen();
            let started = Instant::now();
            match self.count().await {
                Ok(counts) => {
                    let counts = Some(Arc::new(counts));
                    self.latest.send_if_modified(|latest| {
                        let changed = *latest != counts;
                        if changed {
                            *latest = counts;
                        }
                        changed
                    });
                }
                Err(error) => {
                    tracing::debug!(%error, "the console could not count instances; trying again");
                }
            }
            let pause = (started.elapsed() * 4).max(SETTLE);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = console_closing.cancelled() => return,
            }
            tokio::select! {
                _ = changes().after(seen) => {}
                _ = tokio::time::sleep(every.saturating_sub(pause)) => {}
                _ = console_closing.cancelled() => return,
            }
        }
    }
}

/// `GET /console/api/live`: an SSE stream of `counts` events, each the whole [`Counts`] as
/// JSON, the first as soon as they are known, then one per change; ends when the server shuts
/// down.
pub async fn stream(
    State(console): State<Arc<Console>>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let receiver = console.census.watch();
    let closing = console.closing.clone();
    let events = futures_util::stream::unfold(
        (receiver, closing, true),
        |(mut receiver, closing, first)| async move {
            loop {
                // The first event goes out as soon as there are counts; then one per change.
                let ready = first && receiver.borrow().is_some();
                if !ready {
                    tokio::select! {
                        changed = receiver.changed() => changed.ok()?,
                        _ = closing.cancelled() => return None,
                    }
                }
                let counts = receiver.borrow_and_update().clone();
                if let Some(counts) = counts {
                    let event = Event::default().event("counts").json_data(&*counts).ok()?;
                    return Some((Ok(event), (receiver, closing, false)));
                }
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default())
}
