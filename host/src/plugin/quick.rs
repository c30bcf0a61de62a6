//! Whether a plugin's quick tools (`quick_ms`) may still run on the caller's thread.
//!
//! A quick call runs where the request is served, with no hand-off to a pool thread, because
//! its tool promised to return within its budget. A call that breaks the promise holds up every
//! other request on that thread, so a plugin that keeps breaking it loses the privilege for
//! good. One overrun alone is not enough: on a machine whose cores are shared, a call that needs
//! microseconds can still be kept waiting past its budget now and then by something that is not
//! the plugin's doing (benchmarks saw a 70 µs call blocked 4 ms on a lock whose holder had lost
//! its core). So the privilege goes at the [`OVERRUNS_TOLERATED`]` + 1`th overrun within
//! [`WINDOW`]; the ones before are forgiven.

use std::{
    collections::VecDeque,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

/// Overruns forgiven within one [`WINDOW`].
pub const OVERRUNS_TOLERATED: usize = 2;

/// How far back overruns count.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What one overrun did to the plugin's privilege.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// Forgiven: this many overruns (this one included) are within the window.
    Forgiven { recent: usize },
    /// This overrun took the privilege away.
    Withdrawn,
    /// The privilege was gone already (a call that started before it went).
    AlreadyWithdrawn,
}

/// One plugin's standing for quick calls.
#[derive(Debug)]
pub struct QuickTrust {
    trusted: AtomicBool,
    /// When the recent overruns happened, oldest first. Locked only on an overrun.
    overruns: Mutex<VecDeque<Instant>>,
}

impl QuickTrust {
    pub fn new() -> QuickTrust {
        QuickTrust {
            trusted: AtomicBool::new(true),
            overruns: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether a quick tool of this plugin may run on the caller's thread.
    pub fn trusted(&self) -> bool {
        self.trusted.load(Ordering::Relaxed)
    }

    /// A quick call overran its budget at `now`.
    pub fn overran(&self, now: Instant) -> Overrun {
        if !self.trusted() {
            return Overrun::AlreadyWithdrawn;
        }
        let mut overruns = self.overruns.lock().unwrap_or_else(PoisonError::into_inner);
        while overruns
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= WINDOW)
        {
            overruns.pop_front();
        }
        overruns.push_back(now);
        if overruns.len() <= OVERRUNS_TOLERATED {
            return Overrun::Forgiven {
                recent: overruns.len(),
            };
        }
        if self.trusted.swap(false, Ordering::Relaxed) {
            Overrun::Withdrawn
        } else {
            Overrun::AlreadyWithdrawn
        }
    }
}

impl Default for QuickTrust {
    fn default() -> Self {
        QuickTrust::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overruns_spread_out_are_forgiven_and_a_burst_withdraws_the_privilege_once() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        // One overrun a window apart, for a long time: each one is alone in its window.
        for minute in 0..5 {
            assert_eq!(
                trust.overran(start + WINDOW * minute),
                Overrun::Forgiven { recent: 1 }
            );
        }
        assert!(trust.trusted());

        let later = start + WINDOW * 10;
        assert_eq!(trust.overran(later), Overrun::Forgiven { recent: 1 });
        assert_eq!(
            trust.overran(later + Duration::from_secs(1)),
            Overrun::Forgiven { recent: 2 }
        );
        assert_eq!(
            trust.overran(later + Duration::from_secs(2)),
            Overrun::Withdrawn
        );
        assert!(!trust.trusted());
        assert_eq!(
            trust.overran(later + Duration::from_secs(3)),
            Overrun::AlreadyWithdrawn,
            "withdrawn once, reported once"
        );
        assert!(
            !trust.trusted(),
            "for good: a quiet window does not give it back"
        );
    }
}
