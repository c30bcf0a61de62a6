//! The tombstone sweep: what a delete leaves of an instance (`store/tombstone.rs`) is kept
//! `--tombstone-days`, then pruned here. Every store indexes tombstones by the time of their
//! delete, so a sweep reads only the expired ones (`StateStore::prune_tombstones`), never every
//! tombstone, and never on a request's path: a task of its own, once at start and every
//! [`SWEEP_EVERY`] after. With 0 days, every tombstone is expired (those the CLI left while
//! the server kept none).
//!
//! Servers sharing a store all sweep it; pruning twice removes nothing twice.

use std::{sync::Arc, time::Duration};

use crate::store::{StateStore, now_ms};

/// How often expired tombstones are pruned: they are kept for days, so a tombstone outliving
/// its time by up to this long matters to nobody.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Tombstones pruned per store call: each call is one short transaction or script.
const PAGE: usize = 1000;

/// Starts the sweep of `store`'s tombstones older than `days` days.
pub fn spawn_sweep(store: Arc<dyn StateStore>, days: u64) {
    tokio::spawn(async move {
        loop {
            sweep(&*store, days).await;
            tokio::time::sleep(SWEEP_EVERY).await;
        }
    });
}

/// Prunes every tombstone older than `days` days; a store that fails is asked again next time.
pub async fn sweep(store: &dyn StateStore, days: u64) -> usize {
    let until = now_ms().saturating_sub(days.saturating_mul(86_400_000));
    let mut pruned = 0;
    loop {
        match store.prune_tombstones(until, PAGE).await {
            Ok(0) => break,
            Ok(n) => pruned += n,
            Err(error) => {
                tracing::warn!(%error, "could not prune expired tombstones; trying again later");
                break;
            }
        }
    }
    if pruned > 0 {
        tracing::debug!(pruned, "pruned expired tombstones");
    }
    pruned
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::sweep;
    use crate::store::{DeleteKind, InstanceRecord, MemoryStore, StateStore, Tombstone, now_ms};

    const DAY_MS: u64 = 86_400_000;

    /// Deletes a record under `key` leaving a tombstone dated `at_ms`.
    async fn bury(store: &MemoryStore, key: &str, at_ms: u64) {
        let record = InstanceRecord::first("w", json!({"value": "a"}));
        store.save(key, &record, 0).await.unwrap();
        let tombstone = Tombstone::of(key, &record, "retention", DeleteKind::Retention, at_ms);
        assert!(
            store
                .delete_leaving(key, 1, None, &tombstone)
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_sweep_prunes_what_is_older_than_the_days_kept_and_zero_keeps_none() {
        let store = MemoryStore::new();
        let now = now_ms();
        bury(&store, "handle/old", now - 31 * DAY_MS).await;
        bury(&store, "handle/recent", now - DAY_MS).await;
        assert_eq!(sweep(&store, 30).await, 1);
        let left: Vec<String> = store
            .tombstones("", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.key)
            .collect();
        assert_eq!(left, ["handle/recent"]);
        assert_eq!(sweep(&store, 30).await, 0);
        assert_eq!(sweep(&store, 0).await, 1);
        assert!(store.tombstones("", 10).await.unwrap().is_empty());
    }
}
