//! Retention: a workflow instance that reached a final state is deleted `--retain-final` after
//! its last transition, and, with `--instance-ttl`, any instance is deleted that long after its
//! last transition. A finished (or abandoned) workflow's record is clutter that grows without
//! bound, and its handle stays a bearer token for as long as it exists.
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

/// How long instances are kept (`None`: no limit of that kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// `--retain-final`: after its last transition, for an instance in a final state.
    pub final_state: Option<Duration>,
    /// `--instance-ttl`: after its last transition, for any instance.
    pub idle: Option<Duration>,
}

impl Retention {
    /// Whether any instance is ever deleted.
    pub fn deletes_anything(&self) -> bool {
        self.final_state.is_some() || self.idle.is_some()
    }

    /// How often to sweep: a quarter of the shorter period, between 1 s and 10 min.
    fn sweep_every(&self) -> Duration {
        let shortest = match (self.final_state, self.idle) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => Duration::from_secs(600),
        };
        (shortest / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
    }
}

/// The time `period` before `now_ms`; nothing is that old when there is no period.
fn cutoff(now_ms: u64, period: Option<Duration>) -> Option<u64> {
    period
        .map(|period| now_ms.saturating_sub(u64::try_from(period.as_millis()).unwrap_or(u64::MAX)))
}

/// Deletes the instances past their retention at `now_ms`: in a final state and last saved
/// more than `retention.final_state` before, or last saved more than `retention.idle` before.
/// Returns their keys.
pub async fn sweep_once(
    store: &dyn StateStore,
    catalog: &Catalog,
    retention: Retention,
    now_ms: u64,
) -> Result<Vec<String>, StoreError> {
    let final_cutoff = cutoff(now_ms, retention.final_state);
    let idle_cutoff = cutoff(now_ms, retention.idle);
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
            let idle_too_long = idle_cutoff.is_some_and(|cutoff| record.updated_at_ms <= cutoff);
            let finished_long_ago = !idle_too_long
                && final_cutoff.is_some_and(|cutoff| record.updated_at_ms <= cutoff)
                // A machine no plugin provides any more cannot say whether the record is final.
                && catalog.workflow(&record.workflow).is_some_and(|workflow| {
                    workflow
                        .machine
                        .restore(&record.snapshot)
                        .is_ok_and(|snapshot| snapshot.status() == Status::Done)
                });
            if (idle_too_long || finished_long_ago)
                && store.delete(&key, Some(record.version)).await?
            {
                deleted.push(key);
            }
        }
        after = Some(last);
    }
}

/// Sweeps every so often (a quarter of the shorter period, between 1 s and 10 min) for as long
/// as the process runs.
pub fn spawn(
    store: Arc<dyn StateStore>,
    catalog: Arc<LiveCatalog>,
    runtime: Runtime,
    retention: Retention,
) {
    let every = retention.sweep_every();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match sweep_once(&*store, &catalog.current(), retention, now_ms()).await {
                Ok(deleted) if deleted.is_empty() => {}
                Ok(deleted) => {
                    tracing::info!(
                        deleted = deleted.len(),
                        "deleted instances past their retention (--retain-final, --instance-ttl)"
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
