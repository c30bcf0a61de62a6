//! Retention: a workflow instance that reached a final state is deleted `--retain-final` after
//! its last transition, and, with `--instance-ttl`, any instance is deleted that long after its
//! last transition. A finished (or abandoned) workflow's record is clutter that grows without
//! bound, and its handle stays a bearer token for as long as it exists.
//!
//! This module owns the rule: when a record expires ([`Retention::expires_at`]). It must not
//! scan the store. The time is folded into the record's due time (see `timers`), which every
//! store indexes, so the timer task wakes an expired instance exactly when it expires; the
//! instance actor then deletes its record with a compare-and-delete on the version it read (a
//! save that lands meanwhile wins), and the registry drops the actor, so the next call on the
//! handle answers `UNKNOWN_HANDLE`. Session-keyed instances end with their session and are not
//! its business.

use std::time::Duration;

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

    /// When a handle-keyed instance last moved at `updated_at_ms` is deleted: `retain-final`
    /// after that if it is `done` (in a final state), `instance-ttl` after it in any case,
    /// whichever comes first. `None`: it is kept.
    pub fn expires_at(&self, updated_at_ms: u64, done: bool) -> Option<u64> {
        let after = |period: Option<Duration>| {
            period.map(|period| {
                updated_at_ms.saturating_add(u64::try_from(period.as_millis()).unwrap_or(u64::MAX))
            })
        };
        let finished = if done { after(self.final_state) } else { None };
        match (finished, after(self.idle)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_limit_applies_and_final_only_to_finished_instances() {
        let both = Retention {
            final_state: Some(Duration::from_secs(1)),
            idle: Some(Duration::from_secs(10)),
        };
        assert_eq!(both.expires_at(5_000, true), Some(6_000));
        assert_eq!(both.expires_at(5_000, false), Some(15_000));
        let final_only = Retention {
            final_state: Some(Duration::from_secs(1)),
            idle: None,
        };
        assert_eq!(final_only.expires_at(5_000, false), None);
        assert_eq!(final_only.expires_at(5_000, true), Some(6_000));
        let short_idle = Retention {
            final_state: Some(Duration::from_secs(60)),
            idle: Some(Duration::from_secs(2)),
        };
        assert_eq!(short_idle.expires_at(5_000, true), Some(7_000));
        assert_eq!(Retention::default().expires_at(5_000, true), None);
        assert!(!Retention::default().deletes_anything());
        assert_eq!(
            Retention {
                final_state: None,
                idle: Some(Duration::MAX)
            }
            .expires_at(u64::MAX - 1, false),
            Some(u64::MAX)
        );
    }
}
