//! [`Tenure`]: an instance actor's lease on its record, in a store other servers share.
//!
//! On one server the actor's mailbox makes "one call at a time" true. Across servers it is the
//! lease (`store/lease.rs`): before a call reaches its plugin, the actor holds the instance's
//! lease, so the handler runs on one server only; every save names the lease's fencing token,
//! so a server whose lease lapsed mid-call (a pause, a partition) cannot commit. While the lease
//! is held nobody else writes the record, so the copy in memory is the stored one and the call
//! skips the reread: in steady state a call costs one store round trip, its save.
//!
//! A call at a server that does not hold the lease waits for it, up to `--lease-wait`, polling
//! the store; past that it is answered `BUSY` and its handler never runs. The holder gives the
//! lease up when its instance has been idle for `--lease-idle`, and renews it while it works.
//!
//! It must not decide what a call does (that is `instance/`) or keep leases on stores no other
//! process shares: there the actor has no tenure at all.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use crate::store::{Fence, LeaseGrant, LeaseRenewal, StateStore, StoreError};

/// How leases are held (`--lease-ttl`, `--lease-wait`, `--lease-idle`).
#[derive(Debug, Clone, Copy)]
pub struct LeaseSettings {
    /// How long a lease lives unless renewed: how long a server that stops answering (a crash,
    /// a pause) keeps others waiting. Shorter than `wait` by default, so that a call outwaits a
    /// crashed server's lease instead of being answered `BUSY`.
    pub ttl: Duration,
    /// How long a call waits for another server's lease before it is answered `BUSY`.
    pub wait: Duration,
    /// How long an instance is left without calls before its lease is given up, so that calls
    /// at other servers need not wait for it to lapse.
    pub idle: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            ttl: Duration::from_millis(1500),
            wait: Duration::from_secs(2),
            idle: Duration::from_millis(20),
        }
    }
}

/// What [`Tenure::hold`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Holding {
    /// Held since before, without a break: the store holds what this actor last saved or read.
    Kept,
    /// Granted anew, when the record was at `version`: another server may have written since
    /// this actor last looked, which the version tells.
    Granted { version: u64 },
    /// There is no record to lease (a handle never minted or deleted, a session's instance never
    /// saved): nothing else can write it but its first save.
    Absent,
}

impl Holding {
    /// Whether a copy of the record at `version` is the stored one: every save moves the
    /// version on by one, so an unchanged version is an unchanged record.
    pub(super) fn keeps(self, version: u64) -> bool {
        match self {
            Holding::Kept => true,
            Holding::Granted { version: stored } => stored == version,
            // Nothing stored: only a copy never saved (a session's instance before its first
            // save) is what the store has.
            Holding::Absent => version == 0,
        }
    }
}

/// The other server holds the lease past the wait: the call did not run.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseBusy {
    /// About when the lease may be free: the holder's remaining time to live, at least a little.
    pub retry_after_ms: u64,
}

/// One instance's lease, as its actor holds it. Shared (by `Arc`) with the futures the actor
/// runs, which the actor's mailbox already runs one at a time; the mutex guards only a token and
/// a deadline, and is never held across an await.
pub(super) struct Tenure {
    store: Arc<dyn StateStore>,
    /// The record's key in the store.
    key: String,
    /// This server process's name (its node name).
    holder: Arc<str>,
    settings: LeaseSettings,
    held: Mutex<Option<Held>>,
}

/// A lease held, as this process knows it.
#[derive(Debug, Clone, Copy)]
struct Held {
    token: u64,
    /// Another server asked for it (as of the last grant or renewal): give it up after the
    /// current call.
    wanted: bool,
    /// When the lease lapses by this process's clock, counted from before the request that
    /// granted it was sent, so never later than the store's own expiry.
    lapses_at: Instant,
}

/// The shortest pause between two tries for a busy lease, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);
/// The pause before a renewal that failed is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

impl Tenure {
    pub(super) fn new(
        store: Arc<dyn StateStore>,
        key: String,
        holder: Arc<str>,
        settings: LeaseSettings,
    ) -> Self {
        Tenure {
            store,
            key,
            holder,
            settings,
            held: Mutex::new(None),
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<Held>> {
        // Plain assignments only: a panic cannot leave it half-written.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The fence to save under: the lease held, if any (whether or not it has lapsed by now:
    /// the store judges that, atomically with the write).
    pub(super) fn fence(&self) -> Option<Fence> {
        self.held().map(|held| Fence {
            token: held.token,
            holder: self.holder.clone(),
        })
    }

    /// Whether another server asked for the lease the last time it was renewed: the actor
    /// gives it up after the call in progress, so that servers sharing an instance take turns.
    pub(super) fn is_wanted(&self) -> bool {
        self.held().is_some_and(|held| held.wanted)
    }

    /// Whether the lease is held with more than half its life left: the copy in memory can be
    /// used without asking the store anything.
    pub(super) fn is_fresh(&self) -> bool {
        self.held()
            .is_some_and(|held| held.lapses_at > Instant::now() + self.settings.ttl / 2)
    }

    /// Holds the lease for a call: at once when it is fresh, else by asking the store (a
    /// renewal of the lease held, or, when none is or it was lost, a new grant). With
    /// `waiting_since` (when the call was sent), it waits for another holder until
    /// `--lease-wait` after that; without, not at all.
    pub(super) async fn hold(
        &self,
        waiting_since: Option<Instant>,
    ) -> Result<Result<Holding, LeaseBusy>, StoreError> {
        if self.is_fresh() || self.renew().await? {
            return Ok(Ok(Holding::Kept));
        }
        let wait = waiting_since.is_some();
        let deadline = waiting_since.unwrap_or_else(Instant::now) + self.settings.wait;
        let mut pause = FIRST_PAUSE;
        let mut waited = false;
        loop {
            let asked_at = Instant::now();
            let grant = self
                .store
                .acquire_lease(&self.key, &self.holder, self.settings.ttl)
                .await;
            let grant = match grant {
                Ok(grant) => grant,
                Err(error) => {
                    *self.held() = None;
                    return Err(error);
                }
            };
            match grant {
                LeaseGrant::Held {
                    token,
                    took_over,
                    version,
                    wanted,
                } => {
                    // Nothing was held when this ask was sent (a lease held is renewed, above),
                    // so this is a grant: another server may have written since this actor
                    // last looked, which the version tells.
                    *self.held() = Some(Held {
                        token,
                        wanted,
                        lapses_at: self.lapses_at(asked_at),
                    });
                    crate::metrics::lease_granted(took_over);
                    return Ok(Ok(Holding::Granted { version }));
                }
                LeaseGrant::Absent => {
                    *self.held() = None;
                    return Ok(Ok(Holding::Absent));
                }
                LeaseGrant::Busy { remaining_ms } => {
                    *self.held() = None;
                    let now = Instant::now();
                    if !wait || now >= deadline {
                        if wait {
                            crate::metrics::lease_wait_ran_out();
                        }
                        return Ok(Err(LeaseBusy {
                            retry_after_ms: remaining_ms
                                .clamp(10, self.settings.ttl.as_millis() as u64),
                        }));
                    }
                    if !waited {
                        waited = true;
                        crate::metrics::lease_waiting();
                    }
                    let left = Duration::from_millis(remaining_ms.max(1));
                    tokio::time::sleep(pause.min(left).min(deadline - now)).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        }
    }

    /// Renews the lease held, naming its fencing token: `true` while it is still this
    /// process's, `false` when none is held or the store refused the renewal (the lease lapsed
    /// or passed on: it is forgotten). A renewal is never a new grant (`store/lease.rs`), so one
    /// delivered late, after a partition, cannot take the lease back from the server that moved
    /// on.
    async fn renew(&self) -> Result<bool, StoreError> {
        let Some(fence) = self.fence() else {
            return Ok(false);
        };
        let asked_at = Instant::now();
        let renewal = self
            .store
            .renew_lease(&self.key, &fence, self.settings.ttl)
            .await;
        let held = match renewal {
            Ok(LeaseRenewal::Renewed { wanted }) => Some(Held {
                token: fence.token,
                wanted,
                lapses_at: self.lapses_at(asked_at),
            }),
            Ok(LeaseRenewal::Lost) | Err(_) => None,
        };
        *self.held() = held;
        renewal.map(|renewal| renewal != LeaseRenewal::Lost)
    }

    /// When a lease granted or renewed by a request sent at `asked_at` lapses by this process's
    /// clock, with a margin for the store's clock running a little fast.
    fn lapses_at(&self, asked_at: Instant) -> Instant {
        asked_at + self.settings.ttl - self.settings.ttl / 10
    }

    /// Renews the lease while a long call runs, a third of its life before it would lapse;
    /// never returns (the call's future is raced against it). Once a renewal finds the lease
    /// lost (lapsed, and maybe taken by another server, while this process was paused or cut
    /// off), it stops renewing and keeps the fence the call read under, so that the store
    /// refuses the call's save as fenced, as it must. It never asks for a new grant: what the
    /// call read may be stale by then, so a grant would be of no use to it.
    pub(super) async fn keep_alive(&self) {
        loop {
            let Some(held) = *self.held() else {
                return std::future::pending().await;
            };
            let renew_at = held.lapses_at - self.settings.ttl / 3;
            tokio::time::sleep_until(renew_at.into()).await;
            let mut renewed = self.renew().await;
            // A store that does not answer once may answer the next time: keep trying while
            // the lease lives. Every try names the same token, so a try that was applied though
            // its answer was lost makes the next one a renewal all the same.
            while renewed.is_err() && Instant::now() + RETRY_PAUSE < held.lapses_at {
                tokio::time::sleep(RETRY_PAUSE).await;
                *self.held() = Some(held);
                renewed = self.renew().await;
            }
            match renewed {
                Ok(true) => {}
                Ok(false) | Err(_) => {
                    *self.held() = Some(Held {
                        lapses_at: Instant::now(),
                        ..held
                    });
                    return std::future::pending().await;
                }
            }
        }
    }

    /// Gives the lease up (idle, or the actor stops), so a call at another server need not wait
    /// for it to lapse. Best effort: if the store does not answer, it lapses by itself.
    pub(super) async fn release(&self) {
        let Some(fence) = self.fence() else {
            return;
        };
        *self.held() = None;
        if let Err(error) = self.store.release_lease(&self.key, &fence).await {
            tracing::debug!(instance = %self.key, %error, "could not release a lease; it lapses by itself");
        }
    }

    /// Forgets the lease without telling the store: a write under it was refused, so it is not
    /// this process's any more.
    pub(super) fn forget(&self) {
        *self.held() = None;
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, Instant},
    };

    use super::{Holding, LeaseSettings, Tenure};
    use crate::store::{InstanceRecord, MemoryStore, StateStore, StoreError};

    fn settings(ttl_ms: u64, wait_ms: u64) -> LeaseSettings {
        LeaseSettings {
            ttl: Duration::from_millis(ttl_ms),
            wait: Duration::from_millis(wait_ms),
            idle: Duration::from_millis(10),
        }
    }

    #[tokio::test]
    async fn a_second_server_waits_for_the_lease_and_then_holds_a_newer_token() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::shared());
        store
            .save("k", &InstanceRecord::first("w", serde_json::json!(1)), 0)
            .await
            .unwrap();
        let a = Tenure::new(store.clone(), "k".into(), "a".into(), settings(5000, 100));
        let b = Tenure::new(store.clone(), "k".into(), "b".into(), settings(5000, 100));
        assert_eq!(
            a.hold(Some(Instant::now())).await.unwrap().unwrap(),
            Holding::Granted { version: 1 }
        );
        assert_eq!(
            a.hold(Some(Instant::now())).await.unwrap().unwrap(),
            Holding::Kept
        );
        // b waits its 100 ms and gives up: a holds it for seconds.
        let busy = b.hold(Some(Instant::now())).await.unwrap().unwrap_err();
        assert!(busy.retry_after_ms > 1000, "{}", busy.retry_after_ms);
        // a's fence writes; b's none is refused.
        let next = InstanceRecord::first("w", serde_json::json!(1)).next(serde_json::json!(2));
        assert!(matches!(
            store.save("k", &next.clone().fenced(b.fence()), 1).await,
            Err(StoreError::Fenced { .. })
        ));
        store
            .save("k", &next.clone().fenced(a.fence()), 1)
            .await
            .unwrap();
        // Released, b gets it at once, with a larger token, and a's old fence is refused.
        let old = a.fence().unwrap();
        a.release().await;
        assert_eq!(
            b.hold(Some(Instant::now())).await.unwrap().unwrap(),
            Holding::Granted { version: 2 }
        );
        assert!(b.fence().unwrap().token > old.token);
        let third = next.next(serde_json::json!(3));
        assert!(matches!(
            store.save("k", &third.clone().fenced(Some(old)), 2).await,
            Err(StoreError::Fenced { .. })
        ));
        store.save("k", &third.fenced(b.fence()), 2).await.unwrap();
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_while_the_other_waits() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::shared());
        store
            .save("k", &InstanceRecord::first("w", serde_json::json!(1)), 0)
            .await
            .unwrap();
        let a = Tenure::new(store.clone(), "k".into(), "a".into(), settings(60, 1000));
        let b = Tenure::new(store.clone(), "k".into(), "b".into(), settings(60, 1000));
        a.hold(Some(Instant::now())).await.unwrap().unwrap();
        // a pauses (renews nothing); b waits until a's lease lapses.
        assert_eq!(
            b.hold(Some(Instant::now())).await.unwrap().unwrap(),
            Holding::Granted { version: 1 }
        );
        assert!(matches!(
            store
                .save(
                    "k",
                    &InstanceRecord::first("w", serde_json::json!(1))
                        .next(serde_json::json!(2))
                        .fenced(a.fence()),
                    1
                )
                .await,
            Err(StoreError::Fenced { .. })
        ));
    }

    #[tokio::test]
    async fn a_late_renewal_takes_nothing_back() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::shared());
        store
            .save("k", &InstanceRecord::first("w", serde_json::json!(1)), 0)
            .await
            .unwrap();
        let a = Tenure::new(store.clone(), "k".into(), "a".into(), settings(60, 1000));
        let b = Tenure::new(store.clone(), "k".into(), "b".into(), settings(5000, 1000));
        a.hold(Some(Instant::now())).await.unwrap().unwrap();
        let old = a.fence().unwrap();
        // a is cut off past its lease; b takes the instance over, and gives the lease up.
        tokio::time::sleep(Duration::from_millis(120)).await;
        b.hold(Some(Instant::now())).await.unwrap().unwrap();
        let taken = b.fence().unwrap().token;
        b.release().await;
        // a's renewal comes late: refused, it grants a nothing (the next grant is the one after
        // b's), and a keeps the fence its call read under, which the store refuses.
        let renewing = tokio::time::timeout(Duration::from_millis(100), a.keep_alive()).await;
        assert!(renewing.is_err(), "keep_alive never returns");
        assert_eq!(a.fence(), Some(old.clone()));
        let next = store
            .acquire_lease("k", "c", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(
            matches!(next, crate::store::LeaseGrant::Held { token, took_over: false, .. } if token == taken + 1),
            "{next:?}"
        );
        let moved = InstanceRecord::first("w", serde_json::json!(1)).next(serde_json::json!(2));
        assert!(matches!(
            store.save("k", &moved.fenced(Some(old)), 1).await,
            Err(StoreError::Fenced { .. })
        ));
    }

    #[test]
    fn a_copy_stands_when_nobody_can_have_written_since() {
        assert!(Holding::Kept.keeps(7));
        assert!(Holding::Granted { version: 7 }.keeps(7));
        assert!(!Holding::Granted { version: 8 }.keeps(7));
        // No record: only a copy never saved is what the store has.
        assert!(Holding::Absent.keeps(0));
        assert!(!Holding::Absent.keeps(7));
    }

    #[tokio::test]
    async fn no_record_no_lease() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::shared());
        let a = Tenure::new(store, "k".into(), "a".into(), settings(5000, 100));
        assert_eq!(
            a.hold(Some(Instant::now())).await.unwrap().unwrap(),
            Holding::Absent
        );
        assert!(a.fence().is_none());
    }
}
