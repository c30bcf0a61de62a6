//! Durable timers: the task that wakes instances when their due time comes.
//!
//! This module owns [`due_at`], the one rule for a record's due time (its next timer deadline,
//! or for a handle-keyed instance the moment retention deletes it, whichever comes first); the
//! [`Alarm`] through which instance actors report a due time they just saved; and the timer task
//! ([`spawn`]), which asks the store for the records that are due ([`StateStore::due`], an
//! indexed query), earliest first, and wakes each one's instance actor ([`Runtime::wake`]).
//! It must not fire a timer or delete a record itself: the instance actor does both, with its
//! compare-and-set save (or delete), so a timer fires exactly once however many servers share
//! the store, and a call on the instance is never interleaved with it. It keeps nothing that
//! matters across restarts: the store's due-time index is the truth.
//!
//! # Why one task, and not a `run_later` per live actor
//!
//! Most instances with a running timer are not in memory: they were passivated, the server
//! restarted, or another server moved them last. Something has to find those in the store
//! anyway, and once that exists, a second mechanism for live actors would only be a second way to
//! get the same thing wrong. So every due time goes through the store's index, and this task is
//! the only thing that wakes instances.
//!
//! # When it wakes
//!
//! At the due times this process saved: instance actors report each one to the [`Alarm`], which
//! wakes the task early when one comes before what it sleeps towards, so nothing polls for
//! them. With a store no other process writes to, also at the earliest due time in the store
//! (after a restart the alarm knows nothing yet; the store knows everything).
//!
//! With a store other servers share (`is_shared`), the due times they set are theirs to fire on
//! time, so the task does not sleep towards those: all servers waking at the same millisecond
//! would race for every timer, and all but one would lose. It looks at the store every
//! [`SHARED_POLL`] instead, which finds the timers of a server that went away (the timers of one
//! that is up have moved on by then, and are not due any more).
//!
//! It never sleeps longer than [`LONGEST_SLEEP`]: due times are wall-clock milliseconds, and the
//! clock may be stepped while it sleeps.
//!
//! Keys it cannot wake (a session of another server process, a workflow no plugin serves now,
//! a damaged record, a store that failed) are held back for [`RETRY_AFTER`] so that one of them
//! cannot keep the task busy, then tried again.

mod alarm;
mod due;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures_util::{StreamExt, stream};

pub use self::{
    alarm::Alarm,
    due::{due_at, due_rule, record_due},
};
use crate::{
    actors::{InstanceError, Runtime, Woke},
    store::{Due, StateStore, StoreError, now_ms},
};

/// How often the task looks at a store other servers write to, for timers they set: the
/// longest a timer of a server that went away waits for another to fire it (beyond the moment
/// it fell due). One indexed query per second per server costs the store nothing worth counting.
pub const SHARED_POLL: Duration = Duration::from_secs(1);

/// The longest the task sleeps without looking at the store (wall-clock steps).
pub const LONGEST_SLEEP: Duration = Duration::from_secs(60);

/// How long a key that could not be woken is left alone.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long a key that is still due right after it was woken is left alone: it lost a race
/// (another writer saved it meanwhile) or its timers restart with no delay, faster than they
/// fire (at most [`crate::statechart::MAX_TIMERS_PER_CALL`] fire per wake). Without the pause
/// such a key would keep the task busy.
pub const REWAKE_AFTER: Duration = Duration::from_secs(1);

/// Due entries read per query, and the most instances woken at once.
const PAGE: usize = 256;
const IN_FLIGHT: usize = 32;

/// Starts the timer task: it runs as long as the process does.
pub fn spawn(store: Arc<dyn StateStore>, runtime: Runtime, alarm: Arc<Alarm>) {
    tokio::spawn(async move {
        Timers {
            store,
            runtime,
            held: HashMap::new(),
        }
        .run(&alarm)
        .await;
    });
}

struct Timers {
    store: Arc<dyn StateStore>,
    runtime: Runtime,
    /// Keys that could not be woken, and when to try them again.
    held: HashMap<String, u64>,
}

impl Timers {
    async fn run(&mut self, alarm: &Alarm) {
        let shared = self.store.is_shared();
        // After a failed query: retry after `backoff`, doubling up to `LONGEST_SLEEP`.
        let mut backoff: Option<Duration> = None;
        loop {
            let now = now_ms();
            self.held.retain(|_, retry_at| *retry_at > now);
            let next = match self.wake_due(now, !shared).await {
                Ok(next) => {
                    if backoff.take().is_some() {
                        tracing::info!("reading due timers from the state store again");
                    }
                    next
                }
                Err(error) => {
                    let wait = match backoff {
                        None => {
                            tracing::warn!(%error, "could not read due timers from the state store; retrying");
                            Duration::from_secs(1)
                        }
                        Some(wait) => {
                            tracing::debug!(%error, "still cannot read due timers from the state store");
                            (wait * 2).min(LONGEST_SLEEP)
                        }
                    };
                    backoff = Some(wait);
                    Some(now.saturating_add(millis(wait)))
                }
            };
            let polled = shared.then(|| now.saturating_add(millis(SHARED_POLL)));
            let until = [
                next,
                alarm.next_after(now),
                self.held.values().min().copied(),
                polled,
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(u64::MAX)
            .min(now.saturating_add(millis(LONGEST_SLEEP)));
            alarm.sleep_until(until).await;
        }
    }

    /// Wakes every instance due by `now`, in due-time order. Returns, if `then_next`, the next
    /// due time in the store after them (of a key not held back).
    async fn wake_due(&mut self, now: u64, then_next: bool) -> Result<Option<u64>, StoreError> {
        let mut woken = HashSet::new();
        let mut after: Option<Due> = None;
        loop {
            let page = self.store.due(now, after.as_ref(), PAGE).await?;
            let Some(last) = page.last().cloned() else {
                break;
            };
            let runtime = &self.runtime;
            let wakes = page
                .into_iter()
                .filter(|due| !self.held.contains_key(&due.key))
                .map(|due| async move {
                    let woke = runtime.wake(&due.key).await;
                    (due.key, woke)
                });
            // Started in due-time order; several at once, so one instance busy with a long call
            // does not hold up the others (it fires its timers before that call's successor).
            let results: Vec<_> = stream::iter(wakes).buffered(IN_FLIGHT).collect().await;
            for (key, woke) in results {
                match woke {
                    Ok(Woke::Elsewhere) => {
                        tracing::debug!(
                            key,
                            "a due instance this server does not run; left to its own"
                        );
                        self.hold(key, now, RETRY_AFTER);
                    }
                    Ok(woke) => {
                        tracing::debug!(key, ?woke, "woke a due instance");
                        woken.insert(key);
                    }
                    // The store failing is worth an operator's attention; a record this server
                    // cannot run (its workflow is not loaded, it is damaged) was reported when
                    // the server started and is retried quietly.
                    Err(error @ InstanceError::Store(_)) => {
                        tracing::warn!(key, %error, "could not wake a due instance; retrying later");
                        self.hold(key, now, RETRY_AFTER);
                    }
                    Err(error) => {
                        tracing::debug!(key, %error, "could not wake a due instance; retrying later");
                        self.hold(key, now, RETRY_AFTER);
                    }
                }
            }
            after = Some(last);
        }
        if !then_next {
            return Ok(None);
        }
        self.next_due(now, &woken).await
    }

    /// The earliest due time of a key not held back. A key woken in this pass that is still
    /// due is held back for [`REWAKE_AFTER`] instead.
    async fn next_due(
        &mut self,
        now: u64,
        woken: &HashSet<String>,
    ) -> Result<Option<u64>, StoreError> {
        let mut after: Option<Due> = None;
        loop {
            let page = self.store.due(u64::MAX, after.as_ref(), PAGE).await?;
            let Some(last) = page.last().cloned() else {
                return Ok(None);
            };
            for due in page {
                if self.held.contains_key(&due.key) {
                    continue;
                }
                if due.at_ms <= now && woken.contains(&due.key) {
                    tracing::debug!(
                        key = due.key,
                        "an instance is still due right after it was woken"
                    );
                    self.hold(due.key, now, REWAKE_AFTER);
                    continue;
                }
                return Ok(Some(due.at_ms));
            }
            after = Some(last);
        }
    }

    fn hold(&mut self, key: String, now: u64, pause: Duration) {
        self.held.insert(key, now.saturating_add(millis(pause)));
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
