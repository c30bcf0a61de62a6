//! Change feeds: how a server process hears that another one moved an instance its sessions
//! watch, and only those.
//!
//! This module owns the vocabulary ([`ChangeFeed`], [`FeedSubscriptions`]); each shared store
//! carries announcements its own way (Redis: a pub/sub channel per instance; PostgreSQL:
//! `LISTEN`/`NOTIFY` on a channel named by a digest of the key). It must not decide what is
//! watched: that is the notifier's, which tells the relay (`actors/relay.rs`) when an instance
//! gains its first watcher here or loses its last.
//!
//! A change is announced on the instance's own channel, and a process listens on the channels
//! of the instances it watches, so the deliveries of one transition are as many as the servers
//! watching it, not as many as there are servers. Delivery is at most once: a feed whose
//! connection drops ends, and its owner opens a new one and watches again what it watches.
//! What was announced before a key was listened to is lost; the relay makes up for it by
//! reading the key's version once it listens.

use std::pin::Pin;

use async_trait::async_trait;

use super::StoreError;

/// Announced changes: `(origin, key)`.
pub type ChangeStream = Pin<Box<dyn futures_util::Stream<Item = (String, String)> + Send>>;

/// One connection's feed of announced changes, for the keys it is told to watch.
pub struct ChangeFeed {
    /// The changes announced for the watched keys, as `(origin, key)`. Ends when the feed's
    /// connection drops.
    pub changes: ChangeStream,
    /// Chooses the keys whose changes come.
    pub subscriptions: Box<dyn FeedSubscriptions>,
}

/// What a [`ChangeFeed`] listens to.
#[async_trait]
pub trait FeedSubscriptions: Send {
    /// From now on, deliver the changes announced for `key`.
    async fn watch(&mut self, key: &str) -> Result<(), StoreError>;
    /// Stop delivering the changes announced for `key`.
    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError>;

    /// [`watch`](Self::watch) every key of `keys`. A burst of new watches (a thousand sessions
    /// minting at once) comes to the feed as one batch, so a store whose listening command takes
    /// many channels should say so here: one round trip for the batch instead of one per key.
    /// The default watches them one by one.
    async fn watch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        for key in keys {
            self.watch(key).await?;
        }
        Ok(())
    }

    /// [`unwatch`](Self::unwatch) every key of `keys`; one by one unless the store says better.
    async fn unwatch_many(&mut self, keys: &[String]) -> Result<(), StoreError> {
        for key in keys {
            self.unwatch(key).await?;
        }
        Ok(())
    }
}
