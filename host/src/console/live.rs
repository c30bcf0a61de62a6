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
//!
//! What a count cannot be is incremental: the console hears that something changed, never what
//! (no key, no from and to), and other servers' changes to instances nobody here watches are
//! heard of by no feed. Counting without reading every record needs the store to keep the
//! counts by state itself, in the same write as each record (see `docs/operations.md`).
//! Two reads are spared, though: the workflows page's own count is handed to the stream its
//! script opens a moment later ([`Census::count_for_page`]), instead of being made again at
//! once; and counts made before the last watcher left are never sent to the next one as news.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
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
/// How recent a page's count must be to be the live stream's first (its script connects as the
/// page loads), if no change was heard since.
const TAKE_WITHIN: Duration = Duration::from_secs(2);

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
    /// The last counts made while someone watched (`None` before the first, and from when the
    /// last watcher left: they go stale from then on); its receivers are the watchers.
    latest: watch::Sender<Option<Arc<Counts>>>,
    /// Told when a watcher comes, to wake the counting task.
    watched: Notify,
    /// The workflows page's last count: the change count read before it was made, when it was
    /// done, and the counts (see [`Census::count_for_page`]).
    offered: Mutex<Option<(u64, Instant, Arc<Counts>)>>,
}

impl Census {
    pub fn new(store: Arc<dyn StateStore>, catalog: Arc<LiveCatalog>) -> Census {
        Census {
            store,
            catalog,
            latest: watch::Sender::new(None),
            watched: Notify::new(),
            offered: Mutex::new(None),
        }
    }

    /// Counts now, for the workflows page, whose script opens the live stream as the page
    /// loads: the stream's first counts are these if it comes within [`TAKE_WITHIN`] and no
    /// change was heard meanwhile, rather than every record read twice for one page.
    pub async fn count_for_page(&self) -> anyhow::Result<Arc<Counts>> {
        let seen = changes().seen();
        let counts = Arc::new(self.count().await?);
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((seen, Instant::now(), counts.clone()));
        Ok(counts)
    }

    /// The page's count, if it is as good as one made now.
    fn take_offered(&self) -> Option<Arc<Counts>> {
        let offered = self
            .offered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let (seen, at, counts) = offered?;
        (seen == changes().seen() && at.elapsed() < TAKE_WITHIN).then_some(counts)
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
            let counted = match self.take_offered() {
                Some(counts) => Ok(counts),
                None => self.count().await.map(Arc::new),
            };
            match counted {
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
    async fn the_pages_count_is_its_live_streams_first_unless_something_changed() {
        let (census, store, closing) = counting();
        add(&store, 1).await;
        assert_eq!(census.count_for_page().await.unwrap()["doc"].total, 1);
        // Unheard of, so not counted again at once: the stream starts from the page's count
        // (made a moment ago, with nothing heard since).
        add(&store, 2).await;
        assert_eq!(first_total(&census).await, 1);
        closing.cancel();

        let (census, store, closing) = counting();
        add(&store, 1).await;
        census.count_for_page().await.unwrap();
        add(&store, 2).await;
        // A change heard since the page counted: the stream counts anew.
        changes().tell();
        assert_eq!(first_total(&census).await, 2);
        closing.cancel();
    }
}
