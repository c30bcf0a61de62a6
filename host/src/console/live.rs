//! How many instances each workflow has in each state, and the stream (`GET
//! /console/api/live`, SSE) that sends the counts again whenever they change, to the workflows
//! page's script.
//!
//! The counts are the store's own ([`StateStore::count_by_state`]): an index every store keeps
//! in the same write as each record, so reading them costs the same at ten instances as at a
//! million, and reads no record. They are read again, while someone watches, when something
//! changed here (a transition saved by this server or relayed from another sharing the store,
//! an operator's reset or delete: `metrics::changes`), and at least every [`EVERY`] besides,
//! for what no feed tells of (instances other servers create or delete, retention's deletes).
//! Bursts of changes are folded: the next read waits at least four times as long as the last one
//! took, and [`SETTLE`] at the least. Counts read before the last watcher left are never sent to
//! the next one as news.

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
use tokio::sync::{Notify, watch};

use super::Console;
pub use crate::store::WorkflowCount;
use crate::{catalog::LiveCatalog, metrics::changes::changes, store::StateStore};

/// How often the counts are read while someone watches, whatever is heard: a move no feed
/// tells of reaches an open page within this.
const EVERY: Duration = Duration::from_secs(1);
/// The shortest time between two reads: changes in a burst are counted together.
const SETTLE: Duration = Duration::from_millis(100);

/// Every workflow's count, by workflow id, all its machine versions together (a state counts an
/// instance whose state it is or contains: `review` counts `review.checking` too), also of
/// workflows no plugin loads now, whose instances remain.
pub type Counts = BTreeMap<String, WorkflowCount>;

/// The counts, kept while watched.
pub struct Census {
    store: Arc<dyn StateStore>,
    catalog: Arc<LiveCatalog>,
    /// The last counts made while someone watched (`None` before the first, and from when the
    /// last watcher left: they go stale from then on); its receivers are the watchers.
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

    /// The counts now, from the store's index: every workflow the catalog serves (at zero if it
    /// has no instance), and every workflow that has instances.
    pub async fn count(&self) -> anyhow::Result<Counts> {
        let mut counts = self.store.count_by_state().await?.by_workflow();
        for workflow in self.catalog.current().workflows() {
            counts.entry(workflow.id.clone()).or_default();
        }
        Ok(counts)
    }

    /// A watcher of the counts, which wakes the counting task if it sleeps.
    fn watch(&self) -> watch::Receiver<Option<Arc<Counts>>> {
        let receiver = self.latest.subscribe();
        self.watched.notify_one();
        receiver
    }

    /// Reads the counts again whenever they may have changed, while anyone watches, until
    /// `closing`.
    pub async fn keep_counting(
        self: Arc<Self>,
        console_closing: tokio_util::sync::CancellationToken,
    ) {
        loop {
            if self.latest.receiver_count() == 0 {
                // Nobody watches: what was counted goes stale from now on, and must not be the
                // first news of the next watcher, maybe hours later.
                self.latest.send_replace(None);
                while self.latest.receiver_count() == 0 {
                    tokio::select! {
                        _ = self.watched.notified() => {}
                        _ = console_closing.cancelled() => return,
                    }
                }
            }
            let seen = changes().seen();
            let started = Instant::now();
            match self.count().await.map(Arc::new) {
                Ok(counts) => {
                    let counts = Some(counts);
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
                _ = tokio::time::sleep(EVERY.saturating_sub(pause)) => {}
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::{
        catalog::Catalog,
        store::{InstanceRecord, MemoryStore},
    };

    /// A census over a memory store, counting while watched until the token is cancelled.
    fn counting() -> (Arc<Census>, Arc<MemoryStore>, CancellationToken) {
        let store = Arc::new(MemoryStore::default());
        let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![])));
        let census = Arc::new(Census::new(store.clone(), catalog));
        let closing = CancellationToken::new();
        tokio::spawn(census.clone().keep_counting(closing.clone()));
        (census, store, closing)
    }

    /// Stores instance `n` of `doc`, in `draft`, behind the console's back: nothing is told.
    async fn add(store: &MemoryStore, n: u32) {
        let record = InstanceRecord::first("doc", json!({"value": "draft", "status": "active"}));
        store
            .save(&format!("handle/doc-{n}"), &record, 0)
            .await
            .unwrap();
    }

    /// The first counts a new watcher is sent: its `doc` total.
    async fn first_total(census: &Census) -> u64 {
        let mut watcher = census.watch();
        let counts = tokio::time::timeout(
            Duration::from_secs(5),
            watcher.wait_for(|counts| counts.is_some()),
        )
        .await
        .expect("counts within 5 s")
        .unwrap()
        .clone()
        .unwrap();
        counts.get("doc").map_or(0, |count| count.total)
    }

    #[tokio::test]
    async fn a_watcher_coming_after_the_last_one_left_gets_counts_made_for_it() {
        let (census, store, closing) = counting();
        add(&store, 1).await;
        assert_eq!(first_total(&census).await, 1);
        // The watcher left; once the task sees it (at the next change), it stops counting.
        changes().tell();
        tokio::time::timeout(Duration::from_secs(5), async {
            while census.latest.borrow().is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the old counts are dropped when nobody watches");
        // An instance arrives that no feed tells of (another server's, say): the next watcher
        // is sent a count made for it, not the one made before.
        add(&store, 2).await;
        assert_eq!(first_total(&census).await, 2);
        closing.cancel();
    }

    #[tokio::test]
    async fn a_change_no_feed_tells_of_reaches_a_watcher_within_a_read_or_two() {
        let (census, store, closing) = counting();
        add(&store, 1).await;
        let mut watcher = census.watch();
        let total = |counts: &Option<Arc<Counts>>| {
            counts
                .as_ref()
                .and_then(|counts| counts.get("doc"))
                .map_or(0, |count| count.total)
        };
        tokio::time::timeout(Duration::from_secs(5), watcher.wait_for(|c| total(c) == 1))
            .await
            .expect("the first counts within 5 s")
            .unwrap();
        // Behind the console's back, and nothing is told: read again within `EVERY`.
        let added = Instant::now();
        add(&store, 2).await;
        tokio::time::timeout(Duration::from_secs(5), watcher.wait_for(|c| total(c) == 2))
            .await
            .expect("the new count within 5 s")
            .unwrap();
        assert!(added.elapsed() < EVERY * 2, "{:?}", added.elapsed());
        closing.cancel();
    }
}
