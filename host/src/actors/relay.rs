//! The relay of other servers' changes: with a store several server processes share, a
//! transition made on another process must still notify the sessions here that watch the
//! instance (DESIGN behaviour 7).
//!
//! The store's feed (`store/changes.rs`) listens to the instances watched here only: the
//! notifier says when one gains its first watcher or loses its last ([`WatchEvent`]), so a
//! transition reaches the servers watching it and no others. When the feed's connection drops,
//! the relay opens a new one and watches again.
//!
//! A feed hears only what is announced while it listens, and a watch begins before the feed
//! listens to it (the notifier's news has to reach this task, and its `LISTEN` or `SUBSCRIBE`
//! the store), and again for as long as a lost feed takes to come back. A change another server
//! makes in such a gap is announced to nobody here. So, once a key is listened to (first
//! watched, or watched again on a new feed), the relay reads its stored version once and
//! compares it with the newest this server's watchers are known to have seen: the version the
//! first watcher saw ([`WatchEvent::Watched`]'s `seen`), the one a previous check read, and the
//! one the instance's actor holds (which counts this server's own moves, each told as it was
//! saved). A stored version past all of them is a change nobody here was told of, told as an
//! announced one would be. No version moved, nothing is told: a watch costs one read more (and
//! one message to the instance's actor), not a notice more, and a call costs nothing more.
//!
//! An announcement carries no version, so the one announcement of a change saved between the
//! `LISTEN` and the check's read would tell the watchers a second time of what the check told
//! them. After a check, announcements are therefore checked too, against the version the check
//! read, until one is of a change past it; from then on they are told as they come, unread.
//!
//! What is left, where the relay tells rather than risk a stale menu: two changes missed in one
//! gap are told as one notice (the watchers list again either way). After a lost feed, an
//! instance whose last change was relayed (not checked) and whose actor here is gone may get
//! one notice more than its changes: the newest version told is not known. An actor busy in a
//! call for longer than [`HELD_WAIT`] is not waited for, so a move this server made just before
//! the check may be told once more.
//!
//! On a Redis Cluster the feed listens on a connection per master, and a node that drops one (it
//! restarted, or killed the client) leaves a gap in what that node's channels carry, though
//! redis-rs subscribes again by itself. The store's feed ends there anyway (`store/redis/link.rs`
//! hears redis-rs's notice of the drop), so the relay does here what it does for any lost feed:
//! a new one, every key watched on it, and each checked. A node's reconnect costs one read per
//! key watched here, and tells the watchers of a key only what they missed.

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{InstanceKey, Owner, Runtime, WatchEvent, instance};
use crate::store::{ChangeFeed, StateStore, StoreError};

/// How long a check waits for the instance's actor to say what it holds: it answers between
/// calls, and a long call should not hold up the relay of every other instance.
const HELD_WAIT: Duration = Duration::from_millis(250);

/// One instance watched here, by its store key.
struct Watch {
    instance: InstanceKey,
    /// The newest version of the instance this server's watchers are known to have seen or
    /// been told of, as far as the relay knows (a lower bound: a relayed announcement says no
    /// version, and this server's own moves are known to its actor, not here).
    told: Option<u64>,
    /// A check read `told` from the store, and no announcement was of a change past it yet: the
    /// next announcement may be of a change the check already told of, and is checked first.
    verify: bool,
}

/// Relays, until the server stops, the changes other server processes announce for the
/// instances watched here (`watched` says which those are) to the runtime, which tells their
/// watchers; and the changes made while the feed did not listen yet (see the module docs).
/// `node` is this process's name in announcements: its own are not relayed.
pub async fn relay_changes_from_other_servers(
    store: Arc<dyn StateStore>,
    runtime: Runtime,
    node: Arc<str>,
    mut watched: UnboundedReceiver<WatchEvent>,
) {
    let mut relay = Relay {
        store,
        runtime,
        keys: HashMap::new(),
        peak: 0,
    };
    let mut announced = false;
    loop {
        let mut feed = match relay.store.watch_changes().await {
            None => return,
            Some(Ok(feed)) => feed,
            Some(Err(error)) => {
                tracing::warn!(%error, "cannot watch other servers' changes; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut listening = match relay.watch_all(&mut feed).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "cannot watch other servers' changes; retrying");
                false
            }
        };
        if listening {
            if !announced {
                tracing::info!("watching changes made by other servers sharing the store");
                announced = true;
            }
            // What changed while no feed listened (nothing, on the first feed).
            relay.check_all().await;
        }
        while listening {
            tokio::select! {
                change = feed.changes.next() => match change {
                    Some((origin, key)) => {
                        if *origin != *node {
                            relay.announced(&key).await;
                        }
                    }
                    None => {
                        // A connection dropped (a Redis restart, a cluster node's reconnect):
                        // the next feed checks what this one missed. Only a feed that cannot be
                        // opened again is worth a warning.
                        tracing::info!("the store's change feed ended; opening another");
                        listening = false;
                    }
                },
                event = watched.recv() => {
                    let Some(event) = event else { return };
                    // And whatever else the notifier said meanwhile: a burst of watches is
                    // followed as one batch, not a round trip each.
                    let mut events = vec![event];
                    while events.len() < EVENTS_AT_ONCE
                        && let Ok(event) = watched.try_recv()
                    {
                        events.push(event);
                    }
                    match relay.follow(events, &mut feed).await {
                        Ok(Feed::Keep) => {}
                        Ok(Feed::Renew) => {
                            tracing::debug!(
                                watched = relay.keys.len(),
                                "most watches ended: a new change feed, sized for what is left"
                            );
                            listening = false;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "lost the store's change feed; resubscribing");
                            listening = false;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        relay.peak = relay.keys.len();
    }
}

/// Most of the notifier's watch events followed as one batch. When sessions watch new
/// instances faster than one store round trip each (a thousand clients minting), the events
/// queue while the relay works; taken together, they cost one subscription command and one
/// round of concurrent reads per batch, so the relay keeps pace instead of falling minutes
/// behind with the queue in memory.
const EVENTS_AT_ONCE: usize = 1024;

/// Most checks reading the store at once.
const CHECKS_AT_ONCE: usize = 64;

/// Most keys a feed has watched at once before it is worth replacing when a sixteenth of them
/// is left (see [`Feed::Renew`]): the new feed costs a subscription and a read per key left, so
/// at a sixteenth the renewals after a drain cost about a fifteenth of what was watched.
const RENEW_PAST: usize = 4096;

/// Whether the feed in hand goes on after a watch event.
enum Feed {
    Keep,
    /// Nearly all the feed watched at its peak is no longer watched: open another. The
    /// client keeps what a feed subscribed to in tables sized by that peak (redis-rs's
    /// subscription tracker, a set that never shrinks), so a server whose sessions once
    /// watched a million instances would hold the room for them for good. A new feed watches
    /// what is left and checks it, as after a lost one: one read per key still watched.
    Renew,
}

/// Whether a feed that watched `peak` keys at once, and watches `now`, is worth replacing.
fn worth_renewing(peak: usize, now: usize) -> bool {
    peak > RENEW_PAST && now < peak / 16
}

struct Relay {
    store: Arc<dyn StateStore>,
    runtime: Runtime,
    keys: HashMap<String, Watch>,
    /// The most keys watched at once on the feed in hand.
    peak: usize,
}

impl Relay {
    /// Watches every key on a new feed. Their checks are left to the caller, once all listen.
    async fn watch_all(&mut self, feed: &mut ChangeFeed) -> Result<(), StoreError> {
        for watch in self.keys.values_mut() {
            // Whatever an announcement before the loss was of, the check after this one tells
            // of what came since.
            watch.verify = false;
        }
        let keys: Vec<String> = self.keys.keys().cloned().collect();
        feed.subscriptions.watch_many(&keys).await
    }

    /// Checks every key watched, after a new feed listens to them all.
    async fn check_all(&mut self) {
        let keys: Vec<String> = self.keys.keys().cloned().collect();
        self.check(keys).await;
    }

    /// Follows the notifier's news on `feed`: listens to an instance's key when it gains its
    /// first watcher here (and checks it once it listens), drops it when it loses its last.
    /// Handle-keyed instances only: a session's instances live with the session, on one server.
    ///
    /// `events` are taken in order, and the feed is told only what they changed in the end: a
    /// key watched and dropped within them is never listened to, and one dropped and watched
    /// again is listened to throughout (no announcement is read between two events of a batch,
    /// so none is missed).
    async fn follow(
        &mut self,
        events: Vec<WatchEvent>,
        feed: &mut ChangeFeed,
    ) -> Result<Feed, StoreError> {
        // Whether the feed listened to each key the events touch, before them.
        let mut listened: HashMap<String, bool> = HashMap::new();
        for event in events {
            match event {
                WatchEvent::Watched { instance, seen } => {
                    if !matches!(instance.owner, Owner::Handle(_)) {
                        continue;
                    }
                    let key = instance.store_key();
                    if self.keys.contains_key(&key) {
                        continue;
                    }
                    listened.entry(key.clone()).or_insert(false);
                    self.keys.insert(
                        key,
                        Watch {
                            instance,
                            told: seen,
                            verify: false,
                        },
                    );
                }
                WatchEvent::Unwatched(instance) => {
                    let key = instance.store_key();
                    if self.keys.remove(&key).is_some() {
                        listened.entry(key).or_insert(true);
                    }
                }
            }
        }
        self.peak = self.peak.max(self.keys.len());
        let (mut added, mut dropped) = (Vec::new(), Vec::new());
        for (key, before) in listened {
            match (before, self.keys.contains_key(&key)) {
                (false, true) => added.push(key),
                (true, false) => dropped.push(key),
                // Came and went, or went and came back: the feed is right as it is.
                _ => {}
            }
        }
        if !dropped.is_empty() {
            super::tables::shrink_if_sparse(&mut self.keys);
            if worth_renewing(self.peak, self.keys.len()) {
                return Ok(Feed::Renew);
            }
        }
        // An error loses the feed, and the next one checks every key.
        feed.subscriptions.unwatch_many(&dropped).await?;
        feed.subscriptions.watch_many(&added).await?;
        self.check(added).await;
        Ok(Feed::Keep)
    }

    /// Another server announced a change of `key`.
    async fn announced(&mut self, key: &str) {
        let Some(watch) = self.keys.get_mut(key) else {
            // Dropped meanwhile, or a key this feed no longer watches.
            return;
        };
        if watch.verify {
            // Unreadable: better a notice the check may have sent already than none.
            let stored = stored_version(&*self.store, key).await;
            if let (Some(stored), Some(told)) = (stored, watch.told)
                && stored <= told
            {
                tracing::debug!(instance = %key, stored, "an announcement of a change the check told of already");
                return;
            }
            watch.verify = false;
            watch.told = stored.max(watch.told);
        }
        tell(&self.runtime, &watch.instance);
    }

    /// Whether each of `keys` moved past what its watchers here have seen, now that the feed
    /// listens to it; if so, its watchers are told, as they are of an announced change. The
    /// reads go [`CHECKS_AT_ONCE`] at a time.
    async fn check(&mut self, keys: Vec<String>) {
        let watched: Vec<(String, InstanceKey)> = keys
            .into_iter()
            .filter_map(|key| {
                let instance = self.keys.get(&key)?.instance.clone();
                Some((key, instance))
            })
            .collect();
        let (store, runtime) = (&*self.store, &self.runtime);
        let read: Vec<(String, InstanceKey, u64, Option<u64>)> =
            futures_util::stream::iter(watched)
                .map(|(key, instance)| async move {
                    // The store first, then the actor: a move of this server's saved before the
                    // read is in what the actor holds by the time it answers (it answers
                    // between calls).
                    let stored = stored_version(store, &key).await?;
                    let held = held_here(runtime, &instance).await;
                    Some((key, instance, stored, held))
                })
                .buffer_unordered(CHECKS_AT_ONCE)
                .filter_map(std::future::ready)
                .collect()
                .await;
        for (key, instance, stored, held) in read {
            let Some(watch) = self.keys.get_mut(&key) else {
                continue;
            };
            let known = watch.told.max(held);
            if known.is_none_or(|known| stored > known) {
                tracing::debug!(instance = %key, stored, ?known, "a change made while the feed did not listen");
                tell(&self.runtime, &instance);
            }
            watch.told = Some(known.map_or(stored, |known| known.max(stored)));
            watch.verify = true;
        }
    }
}

/// Tells `instance`'s watchers here that another server changed it.
fn tell(runtime: &Runtime, instance: &InstanceKey) {
    crate::metrics::change_relayed();
    runtime.changed_elsewhere(instance.clone());
}

/// The version stored under `key`, if it can be read and is there. (A record deleted meanwhile
/// is announced as it is deleted; its watchers learn it is gone when they next ask.)
async fn stored_version(store: &dyn StateStore, key: &str) -> Option<u64> {
    match store.load(key).await {
        Ok(record) => record.map(|record| record.version),
        Err(error) => {
            tracing::warn!(instance = %key, %error, "cannot check an instance for changes made while the feed did not listen");
            None
        }
    }
}

/// The version `instance`'s actor here holds, if it is live and answers in time.
async fn held_here(runtime: &Runtime, instance: &InstanceKey) -> Option<u64> {
    let actor = runtime.routes.live(instance)?;
    tokio::time::timeout(HELD_WAIT, actor.send(instance::Held))
        .await
        .ok()?
        .ok()?
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::{
        actors::{ActorOptions, Listener, Notice, Sending, SessionId, Subscribe, start},
        catalog::{Catalog, LiveCatalog},
        store::{FeedSubscriptions, MemoryStore},
    };

    /// A feed is replaced once nearly all it watched at its busiest is gone, and only then: a
    /// few watches coming and going never cost a new feed and its reads.
    #[test]
    fn a_feed_is_renewed_when_all_but_a_sixteenth_of_its_peak_is_gone() {
        assert!(worth_renewing(160_000, 9_999));
        assert!(!worth_renewing(160_000, 10_000));
        assert!(
            !worth_renewing(RENEW_PAST, 0),
            "a small peak keeps its feed"
        );
        assert!(worth_renewing(RENEW_PAST + 1, 0));
    }

    /// A feed that subscribes at once and hears nothing: the test hands the relay its
    /// announcements itself, in the order it wants.
    struct Quiet;

    #[async_trait]
    impl FeedSubscriptions for Quiet {
        async fn watch(&mut self, _key: &str) -> Result<(), StoreError> {
            Ok(())
        }

        async fn unwatch(&mut self, _key: &str) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A feed that writes down what it was told to watch and drop, batch by batch.
    #[derive(Clone, Default)]
    struct Recorded(Arc<std::sync::Mutex<Vec<String>>>);

    #[async_trait]
    impl FeedSubscriptions for Recorded {
        async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
            self.watch_many(&[key.to_owned()]).await
        }

        async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
            self.unwatch_many(&[key.to_owned()]).await
        }

        async fn watch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
            if !keys.is_empty() {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("watch {}", keys.join(" ")));
            }
            Ok(())
        }

        async fn unwatch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
            if !keys.is_empty() {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("unwatch {}", keys.join(" ")));
            }
            Ok(())
        }
    }

    impl Recorded {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut self.0.lock().unwrap())
        }
    }

    /// A batch of watch events costs the feed only what it changed in the end: a key watched
    /// and dropped within it is never listened to, one dropped and watched again stays
    /// listened to, and the rest are (un)watched in one command each way.
    #[tokio::test]
    async fn a_batch_of_watch_events_tells_the_feed_only_its_net_change() {
        let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![])));
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let runtime = start(catalog, store.clone(), ActorOptions::default()).unwrap();
        let recorded = Recorded::default();
        let mut feed = ChangeFeed {
            changes: Box::pin(futures_util::stream::pending()),
            subscriptions: Box::new(recorded.clone()),
        };
        let mut relay = Relay {
            store,
            runtime,
            keys: HashMap::new(),
            peak: 0,
        };
        let [a, b, c] = ["a", "b", "c"].map(|_| InstanceKey::mint("invoice"));
        let watched = |instance: &InstanceKey| WatchEvent::Watched {
            instance: instance.clone(),
            seen: None,
        };
        let unwatched = |instance: &InstanceKey| WatchEvent::Unwatched(instance.clone());

        let events = vec![watched(&a), watched(&b), watched(&c), unwatched(&a)];
        relay.follow(events, &mut feed).await.unwrap();
        let mut told = recorded.take();
        assert_eq!(told.len(), 1, "one command: {told:?}");
        let mut keys: Vec<&str> = told[0].strip_prefix("watch ").unwrap().split(' ').collect();
        keys.sort_unstable();
        let mut want = vec![b.store_key(), c.store_key()];
        want.sort_unstable();
        assert_eq!(keys, want, "a came and went");

        let events = vec![unwatched(&b), watched(&b)];
        relay.follow(events, &mut feed).await.unwrap();
        assert_eq!(
            recorded.take(),
            Vec::<String>::new(),
            "b went and came back"
        );

        let events = vec![unwatched(&b), unwatched(&c), unwatched(&a)];
        relay.follow(events, &mut feed).await.unwrap();
        told = recorded.take();
        assert_eq!(told.len(), 1, "one command: {told:?}");
        let mut keys: Vec<&str> = told[0]
            .strip_prefix("unwatch ")
            .unwrap()
            .split(' ')
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, want, "a was never listened to");
        assert!(relay.keys.is_empty());
    }

    /// Counts the `tools/list_changed` a session is sent.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Listener for Counting {
        fn notify(&self, notice: Notice) -> Sending {
            if notice == Notice::ToolsChanged {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            Sending::Done(Ok(()))
        }
    }

    impl Counting {
        /// Waits (up to 5 s) until `n` notices came, then a moment more for any extra one.
        async fn heard(&self, n: usize) -> usize {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while self.0.load(Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Saves the next version of `key`, as another server would.
    async fn moved_elsewhere(store: &dyn StateStore, key: &str) -> u64 {
        let record = store.load(key).await.unwrap().expect("the record exists");
        let next = record.next(record.snapshot.clone());
        store.save(key, &next, record.version).await.unwrap();
        next.version
    }

    /// A session watching a new instance of `runtime`'s: the instance, the session's count of
    /// notices, and the version it saw.
    async fn watched(runtime: &Runtime) -> (InstanceKey, Arc<Counting>, u64) {
        let instance = InstanceKey::mint("invoice");
        runtime.create(instance.clone()).await.unwrap();
        let watcher = Arc::new(Counting::default());
        let subscribe = Subscribe {
            session: SessionId::new(),
            listener: watcher.clone(),
            instance: instance.clone(),
            seen: None,
        };
        let view = runtime
            .look(instance.clone(), Some(subscribe))
            .await
            .unwrap();
        (instance, watcher, view.version)
    }

    /// The race the check closes, and the one it opens: a change saved after the watcher saw
    /// the instance and before the check reads is told by the check, and its announcement,
    /// coming after, is not told again; the next change's announcement is. An instance that did
    /// not move is told nothing.
    #[tokio::test]
    async fn a_change_the_check_found_is_told_once_and_the_next_one_as_announced() {
        let machine = serde_json::json!({"id":"invoice","initial":"draft","states":{
            "draft":{"on":{"SUBMIT":"review"}},"review":{}}});
        let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![machine])));
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let runtime = start(catalog, store.clone(), ActorOptions::default()).unwrap();
        let mut feed = ChangeFeed {
            changes: Box::pin(futures_util::stream::pending()),
            subscriptions: Box::new(Quiet),
        };
        let mut relay = Relay {
            store: store.clone(),
            runtime: runtime.clone(),
            keys: HashMap::new(),
            peak: 0,
        };

        // Nothing moved between the watch and the check: nothing is told.
        let (still, still_watcher, seen) = watched(&runtime).await;
        let event = WatchEvent::Watched {
            instance: still,
            seen: Some(seen),
        };
        relay.follow(vec![event], &mut feed).await.unwrap();
        assert_eq!(still_watcher.heard(0).await, 0, "nothing moved");

        // Moved on elsewhere before the check read it.
        let (instance, watcher, seen) = watched(&runtime).await;
        let key = instance.store_key();
        moved_elsewhere(&*store, &key).await;
        let event = WatchEvent::Watched {
            instance,
            seen: Some(seen),
        };
        relay.follow(vec![event], &mut feed).await.unwrap();
        assert_eq!(watcher.heard(1).await, 1, "the check tells of the change");
        relay.announced(&key).await;
        assert_eq!(
            watcher.heard(1).await,
            1,
            "its announcement is not told again"
        );

        moved_elsewhere(&*store, &key).await;
        relay.announced(&key).await;
        assert_eq!(watcher.heard(2).await, 2, "a change past the check is told");
        moved_elsewhere(&*store, &key).await;
        relay.announced(&key).await;
        assert_eq!(watcher.heard(3).await, 3, "and so is every one after it");
    }
}
