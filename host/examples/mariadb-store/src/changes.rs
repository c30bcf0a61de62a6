//! The change feed: announcements as rows of a change table, and feeds that poll it.
//!
//! This module owns `{namespace}_changes` (`id`, `origin`, `k`, `at`): [`announce`] inserts a
//! row, and each feed polls for the rows after the last id it has seen, every
//! [`POLL_EVERY`], delivering those of the keys it watches. MySQL has no `LISTEN`/`NOTIFY`, and
//! a poll is one indexed range read of the primary key whether or not anything changed. It
//! must not decide what is watched: the host tells each feed.
//!
//! Delivery is at most once, as the contract allows: a row whose transaction commits after a
//! row with a larger id was polled is missed (announcements are single-row autocommit inserts,
//! so only announcements racing each other within one poll can do this), and a feed that
//! cannot poll ends, so its owner opens another.
//!
//! Rows older than [`KEPT_FOR`] are pruned by the announcing servers, at most once per
//! [`KEPT_FOR`] each, with a bounded `DELETE` on the `at` index; a feed starts from the
//! newest row, so it never reads the old ones.
//!
//! [`announce`]: MariaDbStore::announce

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use tokio::sync::mpsc;
use turnstile::store::{ChangeFeed, FeedSubscriptions, StoreError};

use crate::{
    MariaDbStore,
    link::{Kind, Link},
};

/// How often a feed polls: the most a watched change waits to be heard (plus the poll itself),
/// and the rate of one cheap query per feed (about one feed per server).
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// How long announcements are kept before pruning: far longer than a poll, so a feed slowed by
/// a busy server still finds the rows it has not read.
pub const KEPT_FOR: Duration = Duration::from_secs(60);

/// The rows one poll reads at most; more wait for the next poll, which comes at once.
const PAGE: u64 = 1000;

/// When this process last pruned the change table.
#[derive(Default)]
pub(crate) struct Pruned(Mutex<Option<Instant>>);

impl Pruned {
    /// Whether it is time to prune again, taking the turn if so.
    fn due(&self) -> bool {
        // A std Mutex: no await happens while it is held. A poisoned one only held a time.
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_some_and(|at| at.elapsed() < KEPT_FOR) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

impl MariaDbStore {
    pub(crate) async fn announce(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        let what = "announce change";
        let t = &self.tables.changes;
        let insert = format!("INSERT INTO {t} (origin, k, at) VALUES (?, ?, NOW(6))");
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(insert, (origin, key))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                if self.pruned.due() {
                    let prune = format!(
                        "DELETE FROM {t} WHERE at < NOW(6) - INTERVAL ? MICROSECOND LIMIT 10000"
                    );
                    conn.exec_drop(prune, (KEPT_FOR.as_micros() as u64,))
                        .await
                        .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                }
                Ok(())
            })
            .await
    }

    /// A feed starting after the newest announcement, polled by a task of its own that ends
    /// with the feed (or with the first poll that fails, ending the feed).
    pub(crate) async fn feed(&self) -> Result<ChangeFeed, StoreError> {
        let what = "watch changes";
        let newest = format!("SELECT COALESCE(MAX(id), 0) FROM {}", self.tables.changes);
        let mut conn = self.link.conn(what).await?;
        let start: Option<u64> = self.link.read(what, conn.exec_first(newest, ())).await?;
        drop(conn);
        let watched = Arc::new(Mutex::new(HashSet::new()));
        let (sender, receiver) = mpsc::channel(1024);
        let sql = format!(
            "SELECT id, origin, k FROM {} WHERE id > ? ORDER BY id LIMIT {PAGE}",
            self.tables.changes
        );
        tokio::spawn(poll(
            Arc::clone(&self.link),
            sql,
            start.unwrap_or(0),
            Arc::clone(&watched),
            sender,
        ));
        let changes = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|change| (change, receiver))
        });
        Ok(ChangeFeed {
            changes: Box::pin(changes),
            subscriptions: Box::new(Watched(watched)),
        })
    }
}

/// The keys a feed delivers.
type WatchedKeys = Arc<Mutex<HashSet<String>>>;

/// Polls the change table with `sql` after `last` until the feed is dropped or a poll fails.
async fn poll(
    link: Arc<Link>,
    sql: String,
    mut last: u64,
    watched: WatchedKeys,
    sender: mpsc::Sender<(String, String)>,
) {
    let what = "poll changes";
    let mut every = tokio::time::interval(POLL_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = sender.closed() => return,
        }
        let rows: Vec<(u64, String, Vec<u8>)> = match link.conn(what).await {
            Ok(mut conn) => match link.read(what, conn.exec(sql.as_str(), (last,))).await {
                Ok(rows) => rows,
                Err(error) => return ended(&link, error),
            },
            Err(error) => return ended(&link, error),
        };
        for (id, origin, key) in rows {
            last = id;
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            let wanted = watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .contains(&key);
            if wanted && sender.send((origin, key)).await.is_err() {
                return;
            }
        }
    }
}

/// A feed ends when it cannot poll: its owner opens another (see `changes.rs` in the host).
fn ended(link: &Link, error: StoreError) {
    tracing::warn!(store = %link.name(), %error, "the change feed ends: it cannot poll");
}

/// The subscriptions of one feed: a set its poller reads.
struct Watched(WatchedKeys);

#[async_trait]
impl FeedSubscriptions for Watched {
    async fn watch(&mut self, key: &str) -> Result<(), StoreError> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(key.to_owned());
        Ok(())
    }

    async fn unwatch(&mut self, key: &str) -> Result<(), StoreError> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
        Ok(())
    }
}
