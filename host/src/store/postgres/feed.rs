//! The PostgreSQL store's change feed: `NOTIFY` on one of [`CHANNEL_SHARDS`] channels per
//! namespace, chosen by a digest of the key, carrying `origin` and the key; a server `LISTEN`s,
//! on a connection of its own, to the channels of the shards its watched instances fall in, and
//! its feed passes on only the changes of the keys it watches.
//!
//! Why shards, not a channel per instance: a backend keeps the channels it listens to in a list
//! and scans it for every `LISTEN`, `UNLISTEN` and notification it reads, so its cost grows with
//! what it listens to. A server watching 60,000 instances spent over 2 s on a batch of 1,024
//! `LISTEN`s, and a million would cost it tens of milliseconds per notification. With shards a
//! feed listens to at most [`CHANNEL_SHARDS`] channels, whatever it watches. What it hears more
//! (the changes of other instances of its shards) is dropped by the feed on arrival, by a
//! 64-bit digest of the key: a collision between two keys costs one change passed on that was
//! not watched, which the relay ignores (it knows its keys).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{chain, tokio_postgres};
use crate::store::{FeedSubscriptions, StoreError};

/// Channels per namespace: the most a feed listens to.
pub const CHANNEL_SHARDS: u64 = 1024;

/// A 64-bit digest of `key`: it names the key in a feed's filter and picks its shard.
fn digest(key: &str) -> u64 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The `NOTIFY` channel of the shard `key` falls in, in `namespace`: `t` and 32 hex digits of
/// a digest of both, 33 bytes whatever their length (a channel name is at most 63 bytes, and
/// longer ones are cut, not refused, by `LISTEN`).
pub fn changed_channel(namespace: &str, key: &str) -> String {
    shard_channel(namespace, digest(key) % CHANNEL_SHARDS)
}

fn shard_channel(namespace: &str, shard: u64) -> String {
    let mut hasher = Sha256::new();
    hasher.update(namespace.as_bytes());
    hasher.update(b"\n");
    hasher.update(shard.to_be_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("t{hex}")
}

/// The keys a feed watches, by digest: written by its [`Subscriptions`], read by its stream
/// to drop the changes of the other keys of its shards.
#[derive(Clone, Default)]
pub struct Filter(Arc<Mutex<HashSet<u64>>>);

impl Filter {
    /// Whether the change `payload` (`origin\nkey`) announces is of a watched key: as
    /// `(origin, key)` if so.
    pub fn pass(&self, payload: &str) -> Option<(String, String)> {
        let (origin, key) = payload.split_once('\n')?;
        self.lock()
            .contains(&digest(key))
            .then(|| (origin.to_owned(), key.to_owned()))
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The channels a feed listens to, on its connection.
pub struct Subscriptions {
    client: tokio_postgres::Client,
    namespace: String,
    name: String,
    op_timeout: Duration,
    filter: Filter,
    /// How many watched keys each listened shard holds: its channel is listened to while
    /// that is above zero.
    shards: HashMap<u64, usize>,
}

impl Subscriptions {
    /// The subscriptions of a feed on `client` (a connection of its own; `name` names the
    /// store in errors), listening to nothing yet, and the filter its stream of notifications
    /// passes through.
    pub fn new(
        client: tokio_postgres::Client,
        namespace: String,
        name: String,
        op_timeout: Duration,
    ) -> (Subscriptions, Filter) {
        let filter = Filter::default();
        let subscriptions = Subscriptions {
            client,
            namespace,
            name,
            op_timeout,
            filter: filter.clone(),
            shards: HashMap::new(),
        };
        (subscriptions, filter)
    }

    /// Runs `command` (`LISTEN` or `UNLISTEN`) on each of `channels`, as one batch.
    async fn run(&self, command: &str, channels: &[String]) -> Result<(), StoreError> {
        if channels.is_empty() {
            return Ok(());
        }
        // The channels are `t` and hex digits: safe to interpolate.
        let statement: String = channels
            .iter()
            .map(|channel| format!("{command} {channel};"))
            .collect();
        let what = command.to_lowercase();
        match tokio::time::timeout(self.op_timeout, self.client.batch_execute(&statement)).await {
            Ok(result) => result.map_err(|e| {
                StoreError::Unavailable(format!("{}: {what} failed: {}", self.name, chain(&e)))
            }),
            Err(_) => Err(StoreError::Unavailable(format!(
                "{}: {what} timed out after {:?}",
                self.name, self.op_timeout
            ))),
        }
    }
}

#[async_trait]
impl FeedSubscriptions for Subscriptions {
    async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
        self.watch_many(&[key.to_owned()]).await
    }

    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
        self.unwatch_many(&[key.to_owned()]).await
    }

    async fn watch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        let mut opened = Vec::new();
        {
            let mut filter = self.filter.lock();
            for key in keys {
                let digest = digest(key);
                if !filter.insert(digest) {
                    continue;
                }
                let shard = digest % CHANNEL_SHARDS;
                let held = self.shards.entry(shard).or_default();
                *held += 1;
                if *held == 1 {
                    opened.push(shard_channel(&self.namespace, shard));
                }
            }
        }
        self.run("LISTEN", &opened).await
    }

    async fn unwatch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        let mut closed = Vec::new();
        {
            let mut filter = self.filter.lock();
            for key in keys {
                let digest = digest(key);
                if !filter.remove(&digest) {
                    continue;
                }
                let shard = digest % CHANNEL_SHARDS;
                if let Some(held) = self.shards.get_mut(&shard) {
                    *held -= 1;
                    if *held == 0 {
                        self.shards.remove(&shard);
                        closed.push(shard_channel(&self.namespace, shard));
                    }
                }
            }
        }
        self.run("UNLISTEN", &closed).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys spread over the shards, each shard's channel is its own, and a namespace's
    /// channels are not another's.
    #[test]
    fn keys_fall_in_a_bounded_set_of_channels_per_namespace() {
        let channels: HashSet<String> = (0..100_000)
            .map(|n| changed_channel("ns", &format!("handle/invoice-{n}")))
            .collect();
        assert_eq!(channels.len() as u64, CHANNEL_SHARDS);
        assert!(channels.iter().all(|c| c.len() == 33 && c.starts_with('t')));
        assert_ne!(changed_channel("ns", "k"), changed_channel("other", "k"));
        assert_eq!(changed_channel("ns", "k"), changed_channel("ns", "k"));
    }

    #[test]
    fn the_filter_passes_watched_keys_only() {
        let filter = Filter::default();
        filter.lock().insert(digest("a"));
        assert_eq!(
            filter.pass("east\na"),
            Some(("east".to_owned(), "a".to_owned()))
        );
        assert_eq!(filter.pass("east\nb"), None);
        assert_eq!(filter.pass("no key"), None);
    }
}
