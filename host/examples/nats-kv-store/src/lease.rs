//! Leases kept in the record's own entry, their expiry judged by the writer's wall clock.
//!
//! This module decides, for an entry read at some revision, what a grant, renewal, release or
//! fenced write makes of its lease; the store then writes the entry back with a compare-and-set
//! on that revision, so the decision and the write are one atomic step (a lease that changed
//! meanwhile makes the write lose, and the store decides again on what it reads). It follows
//! the contract of `turnstile::store::LeaseGrant` and must not talk to the server.
//!
//! The times are unix milliseconds of the process deciding (see the crate docs for what that
//! costs).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use turnstile::store::{Fence, LeaseGrant, LeaseRenewal, StoreError, WANTED_FOR};

/// A lease as the entry keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub token: u64,
    pub holder: String,
    /// Alive while the clock reads before this.
    pub until_ms: u64,
    /// Ended by its holder rather than lapsed.
    #[serde(default)]
    pub released: bool,
    /// Who asked for it while another held it, and until when that mark lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted: Option<(String, u64)>,
}

impl Lease {
    fn alive(&self, now: u64) -> bool {
        self.until_ms > now
    }

    fn wanted_alive(&self, now: u64) -> bool {
        self.wanted.as_ref().is_some_and(|(_, until)| *until > now)
    }

    fn is(&self, fence: &Fence, now: u64) -> bool {
        self.alive(now) && self.token == fence.token && self.holder == *fence.holder
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What `holder` asking for the lease makes of `lease` at `now`: the answer, and whether the
/// entry changed (then it must be written for the answer to stand).
pub(crate) fn acquire(
    lease: &mut Option<Lease>,
    holder: &str,
    ttl: Duration,
    version: u64,
    now: u64,
) -> (LeaseGrant, bool) {
    let until_ms = now.saturating_add(ms(ttl));
    let held = |token, took_over, wanted| LeaseGrant::Held {
        token,
        took_over,
        version,
        wanted,
    };
    let Some(current) = lease else {
        *lease = Some(Lease {
            token: 1,
            holder: holder.to_owned(),
            until_ms,
            released: false,
            wanted: None,
        });
        return (held(1, false, false), true);
    };
    if current.alive(now) && current.holder != holder {
        let remaining_ms = current.until_ms - now;
        // Each ask renews the asker's mark; another asker's live mark is left alone.
        let theirs = current.wanted_alive(now)
            && current.wanted.as_ref().is_some_and(|(by, _)| by != holder);
        if !theirs {
            current.wanted = Some((holder.to_owned(), now.saturating_add(ms(WANTED_FOR))));
        }
        return (LeaseGrant::Busy { remaining_ms }, !theirs);
    }
    if current.alive(now) {
        current.until_ms = until_ms;
        let wanted = current.wanted_alive(now);
        return (held(current.token, false, wanted), true);
    }
    // Free, but kept for the asker who marked it wanted while the mark lives.
    if let Some((asker, until)) = &current.wanted
        && *until > now
        && asker != holder
    {
        return (
            LeaseGrant::Busy {
                remaining_ms: until - now,
            },
            false,
        );
    }
    let took_over = !current.released;
    *current = Lease {
        token: current.token + 1,
        holder: holder.to_owned(),
        until_ms,
        released: false,
        wanted: None,
    };
    (held(current.token, took_over, false), true)
}

/// What renewing `fence` for `ttl` makes of `lease` at `now`; a lost lease changes nothing.
pub(crate) fn renew(
    lease: &mut Option<Lease>,
    fence: &Fence,
    ttl: Duration,
    now: u64,
) -> LeaseRenewal {
    match lease {
        Some(current) if current.is(fence, now) => {
            current.until_ms = now.saturating_add(ms(ttl));
            LeaseRenewal::Renewed {
                wanted: current.wanted_alive(now),
            }
        }
        _ => LeaseRenewal::Lost,
    }
}

/// Ends the lease `fence` names if it is the live one; returns whether anything changed.
pub(crate) fn release(lease: &mut Option<Lease>, fence: &Fence, now: u64) -> bool {
    match lease {
        Some(current) if current.is(fence, now) => {
            current.until_ms = now;
            current.released = true;
            true
        }
        _ => false,
    }
}

/// Whether a write under `fence` (or under none) may change the record `key` now: only the
/// live lease's holder may, and without a fence only while no lease lives.
pub(crate) fn check_fence(
    key: &str,
    lease: Option<&Lease>,
    fence: Option<&Fence>,
    now: u64,
) -> Result<(), StoreError> {
    let live = lease.filter(|lease| lease.alive(now));
    let allowed = match (fence, live) {
        (Some(fence), Some(lease)) => lease.is(fence, now),
        (None, None) => true,
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    Err(StoreError::Fenced {
        key: key.to_owned(),
        remaining_ms: live.map(|lease| lease.until_ms - now),
    })
}
