//! Retention: a workflow instance that reached a final state is deleted `--retain-final` after
//! its last transition. A finished workflow's record is clutter that grows without bound, and
//! its handle stays a bearer token for as long as it exists.
//!
//! The sweep pages through the handle-keyed records (`handle/…`) of any store through the
//! `StateStore` trait, so it works on every store; it reads each record and deletes it with a
//! compare-and-delete on the version it read, so a save that lands meanwhile wins. Then it asks
//! the registry to drop the instance's actor, so the next call on the handle answers
//! `UNKNOWN_HANDLE` instead of serving a copy from memory. Session-keyed instances end with their
//! session and are not its business.

use std::{sync::Arc, time::Duration};

use crate::{
    actors::{InstanceKey, Runtime},
    catalog::{Catalog, LiveCatalog},
    statechart::Status,
    store::{StateStore, StoreError, now_ms},
};

/// Where handle-keyed records live in every store.
const HANDLE_PREFIX: &str = "handle/";

/// How many keys one page of the sweep reads.
const PAGE: usize = 500;

/// Deletes the final-state instances last saved more than `retain` before `now_ms`; returns
/// their keys.
pub async fn sweep_once(
    store: &dyn StateStore,
    catalog: &Catalog,
    retain: Duration,
    now_ms: u64,
) -> Result<Vec<String>, StoreError> {
    let cutoff = now_ms.saturating_sub(u64::try_from(retain.as_millis()).unwrap_or(u64::MAX));
    let mut deleted = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let keys = store
            .list_keys(HANDLE_PREFIX, after.as_deref(), PAGE)
            .await?;
        let Some(last) = keys.last().cloned() else {
            return Ok(deleted);
        };
        for key in keys {
            let Some(record) = store.load(&key).await? else {
                continue;
            };
            // A machine no plugin provides any more cannot say whether the record is final.
            let Some(workflow) = catalog.workflow(&record.workflow) else {
                continue;
            };
            let done = workflow
                .machine
                .restore(&record.snapshot)
                .is_ok_and(|snapshot| snapshot.status() == Status::Done);
            if done
                && record.updated_at_ms <= cutoff
                && store.delete(&key, Some(record.version)).await?
            {
                deleted.push(key);
            }
        }
        after = Some(last);
    }
}

/// Sweeps every so often (a quarter of `retain`, between 1 s and 10 min) for as long as the
/// process runs.
pub fn spawn(
    store: Arc<dyn StateStore>,
    catalog: Arc<LiveCatalog>,
    runtime: Runtime,
    retain: Duration,
) {
    let every = (retain / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match sweep_once(&*store, &catalog.current(), retain, now_ms()).await {
                Ok(deleted) if deleted.is_empty() => {}
                Ok(deleted) => {
                    tracing::info!(
                        deleted = deleted.len(),
                        "deleted instances past their retention in a final state"
                    );
                    for key in deleted {
                        if let Some(instance) = InstanceKey::from_store_key(&key) {
                            runtime.forget(instance);
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "retention sweep failed; retrying later"),
            }
        }
    });
}
