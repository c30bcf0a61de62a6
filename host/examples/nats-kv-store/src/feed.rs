//! The change feed: a plain NATS subscription per watched key, on the subject its
//! announcements are published to.
//!
//! An announcement is one core NATS message (`turnstile.{bucket}.changed.{hex key}`, the origin
//! as its payload), stored nowhere: delivery at most once, to the processes subscribed at that
//! moment, which is what the contract asks of a feed (`turnstile::store::ChangeFeed`). Watching
//! a key costs one subscription on the server; an announcement reaches only the processes
//! watching its key. The feed ends when the connection drops (the client resubscribes on its
//! own, but what was announced meanwhile is lost, so the owner must open a feed again and read
//! what it watches).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};
use turnstile::store::{ChangeFeed, FeedSubscriptions, StoreError};

use crate::entry::kv_key;

/// The keys a feed watches now: a change already received for a key unwatched since is dropped.
type Watched = Arc<Mutex<HashSet<String>>>;

/// A feed on `client` (`shown` in errors) of the announcements under `subjects`, ending at
/// the next of `drops`.
pub(crate) fn open(
    client: async_nats::Client,
    shown: String,
    subjects: String,
    mut drops: watch::Receiver<u64>,
) -> ChangeFeed {
    drops.mark_unchanged();
    let (sender, receiver) = mpsc::unbounded_channel();
    let watched = Watched::default();
    let changes = futures_util::stream::unfold(
        (receiver, drops, watched.clone()),
        |(mut receiver, mut drops, watched)| async move {
            loop {
                tokio::select! {
                    change = receiver.recv() => {
                        let (origin, key) = change?;
                        if lock(&watched).contains(&key) {
                            return Some(((origin, key), (receiver, drops, watched)));
                        }
                    }
                    _ = drops.changed() => return None,
                }
            }
        },
    );
    ChangeFeed {
        changes: Box::pin(changes),
        subscriptions: Box::new(Subscriptions {
            client,
            shown,
            subjects,
            sender,
            watched,
            forwarders: HashMap::new(),
        }),
    }
}

fn lock(watched: &Watched) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // Held for a set lookup or insert only: a poisoned set is still a set.
    watched
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct Subscriptions {
    client: async_nats::Client,
    /// The server and bucket, for errors.
    shown: String,
    subjects: String,
    sender: mpsc::UnboundedSender<(String, String)>,
    watched: Watched,
    /// A task per watched key, forwarding its subscription's messages to the feed.
    forwarders: HashMap<String, JoinHandle<()>>,
}

#[async_trait]
impl FeedSubscriptions for Subscriptions {
    async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
        if self.forwarders.contains_key(key) {
            return Ok(());
        }
        let mut subscriber = self
            .client
            .subscribe(kv_key(&self.subjects, key))
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!("{}: cannot watch {key:?}: {e}", self.shown))
            })?;
        lock(&self.watched).insert(key.to_owned());
        let sender = self.sender.clone();
        let owned = key.to_owned();
        let forwarder = tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                let origin = String::from_utf8_lossy(&message.payload).into_owned();
                if sender.send((origin, owned.clone())).is_err() {
                    return;
                }
            }
        });
        self.forwarders.insert(key.to_owned(), forwarder);
        Ok(())
    }

    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
        lock(&self.watched).remove(key);
        // Dropping the subscriber with its task unsubscribes.
        if let Some(forwarder) = self.forwarders.remove(key) {
            forwarder.abort();
        }
        Ok(())
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        for forwarder in self.forwarders.values() {
            forwarder.abort();
        }
    }
}
