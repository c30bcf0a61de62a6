//! Whether a plugin's quick tools (`quick_ms`) may still run on the caller's thread.
//!
//! A quick call runs where the request is served, with no hand-off to a pool thread, because
//! its tool promised to return within its budget. A call that breaks the promise holds up every
//! other request on that thread, so a plugin that keeps breaking it loses the privilege for
//! good. A few overruns are not enough: on a machine whose cores are shared, a call that needs
//! microseconds can still be kept waiting past its budget now and then by something that is not
//! the plugin's doing (benchmarks saw 60 µs calls blocked 4–5 ms, most likely on an allocator
//! lock whose holder had lost its core, three times within five seconds at 3,000 calls a
//! second). A plugin that breaks its promise does so on most calls. So an overrun costs the
//! privilege only when more than [`OVERRUNS_TOLERATED`] happened within [`WINDOW`] and they are
//! more than one in [`CALLS_PER_OVERRUN`] of the plugin's quick calls since the oldest of them;
//! the others are forgiven.
//!
//! Telling the plugin's doing from the machine's takes the thread's CPU clock and scheduler
//! statistics: two system calls before and two after a call that itself may need a few
//! microseconds. So quick calls are only timed by the wall clock until one overruns; that
//! overrun counts (nothing says whose it was) but cannot withdraw the privilege, and the
//! plugin's next [`MEASURED_AFTER_OVERRUN`] quick calls are measured, so that an overrun among
//! them counts only when it was the plugin's own doing, and only such an overrun can withdraw
//! the privilege. A plugin that breaks its promise on most calls still loses it on its third
//! overrun. On a loaded machine, which pauses a call past its budget now and then (one call
//! in a hundred thousand in benchmarks at 64 sessions on two cores), few calls are measured.

use std::{
    collections::VecDeque,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Overruns forgiven within one [`WINDOW`] whatever the number of calls.
pub const OVERRUNS_TOLERATED: usize = 2;

/// Beyond those, overruns are forgiven while they are at most one in this many quick calls.
pub const CALLS_PER_OVERRUN: u64 = 100;

/// How far back overruns count.
pub const WINDOW: Duration = Duration::from_secs(60);

/// How many quick calls are measured after an overrun seen by the wall clock alone.
pub const MEASURED_AFTER_OVERRUN: u64 = 100;

/// What one overrun did to the plugin's privilege.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// Forgiven: this many overruns (this one included) are within the window, or this one was
    /// not measured (only the wall clock saw it).
    Forgiven { recent: usize, calls: u64 },
    /// This overrun took the privilege away.
    Withdrawn,
    /// The privilege was gone already (a call that started before it went).
    AlreadyWithdrawn,
}

/// One plugin's standing for quick calls.
#[derive(Debug)]
pub struct QuickTrust {
    trusted: AtomicBool,
    /// Quick calls begun so far.
    calls: AtomicU64,
    /// Quick calls numbered below this are measured, not only timed: the
    /// [`MEASURED_AFTER_OVERRUN`] calls after the last overrun seen by the wall clock alone.
    measured_until: AtomicU64,
    /// The recent overruns, oldest first: when, and how many quick calls had begun by then.
    /// Locked only on an overrun.
    overruns: Mutex<VecDeque<(Instant, u64)>>,
}

impl QuickTrust {
    pub fn new() -> QuickTrust {
        QuickTrust {
            trusted: AtomicBool::new(true),
            calls: AtomicU64::new(0),
            measured_until: AtomicU64::new(0),
            overruns: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether a quick tool of this plugin may run on the caller's thread.
    pub fn trusted(&self) -> bool {
        self.trusted.load(Ordering::Relaxed)
    }

    /// A quick call of this plugin begins; answers whether to measure it (the thread's CPU time
    /// and scheduler waits), which is only just after an unmeasured overrun.
    pub fn calling(&self) -> bool {
        let number = self.calls.fetch_add(1, Ordering::Relaxed);
        number < self.measured_until.load(Ordering::Relaxed)
    }

    /// A quick call overran its budget at `now`: by its own doing if `measured`, else by the
    /// wall clock, which may be the machine's doing. An unmeasured overrun counts but never
    /// withdraws the privilege, and has the plugin's next [`MEASURED_AFTER_OVERRUN`] quick calls
    /// measured.
    pub fn overran(&self, now: Instant, measured: bool) -> Overrun {
        if !self.trusted() {
            return Overrun::AlreadyWithdrawn;
        }
        let calls_now = self.calls.load(Ordering::Relaxed);
        if !measured {
            self.measured_until
                .fetch_max(calls_now + MEASURED_AFTER_OVERRUN, Ordering::Relaxed);
        }
        let mut overruns = self.overruns.lock().unwrap_or_else(PoisonError::into_inner);
        while overruns
            .front()
            .is_some_and(|&(at, _)| now.saturating_duration_since(at) >= WINDOW)
        {
            overruns.pop_front();
        }
        // Calls since the oldest overrun still in the window, that one included.
        let calls = overruns.front().map_or(1, |&(_, calls_then)| {
            calls_now.saturating_sub(calls_then) + 1
        });
        overruns.push_back((now, calls_now));
        let recent = overruns.len();
        if !measured || recent <= OVERRUNS_TOLERATED || (recent as u64) * CALLS_PER_OVERRUN <= calls
        {
            return Overrun::Forgiven { recent, calls };
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

    /// `calls` quick calls, then an overrun at `at`, measured or not as the calls were.
    fn after_calls(trust: &QuickTrust, calls: u64, at: Instant) -> Overrun {
        let mut measured = false;
        for _ in 0..calls {
            measured = trust.calling();
        }
        trust.overran(at, measured)
    }

    #[test]
    fn rare_overruns_are_forgiven_however_many_they_add_up_to() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        // One overrun in every 1,000 calls, several a second: never withdrawn.
        for n in 0..50 {
            let at = start + Duration::from_millis(300 * n);
            assert!(
                matches!(after_calls(&trust, 1000, at), Overrun::Forgiven { .. }),
                "overrun {n}"
            );
        }
        assert!(trust.trusted());
    }

    #[test]
    fn overruns_spread_over_time_are_forgiven() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        // One overrun a window apart on every call: each one is alone in its window.
        for minute in 0..5 {
            assert_eq!(
                after_calls(&trust, 1, start + WINDOW * minute),
                Overrun::Forgiven {
                    recent: 1,
                    calls: 1
                }
            );
        }
        assert!(trust.trusted());
    }

    #[test]
    fn a_plugin_that_overruns_on_most_calls_loses_the_privilege_once_and_for_good() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        let second = Duration::from_secs(1);
        assert!(matches!(
            after_calls(&trust, 1, start),
            Overrun::Forgiven { recent: 1, .. }
        ));
        assert!(matches!(
            after_calls(&trust, 1, start + second),
            Overrun::Forgiven { recent: 2, .. }
        ));
        assert_eq!(
            after_calls(&trust, 1, start + second * 2),
            Overrun::Withdrawn
        );
        assert!(!trust.trusted());
        assert_eq!(
            after_calls(&trust, 1, start + second * 3),
            Overrun::AlreadyWithdrawn,
            "withdrawn once, reported once"
        );
        assert!(
            !trust.trusted(),
            "for good: a quiet window does not give it back"
        );
    }

    #[test]
    fn calls_are_measured_only_just_after_an_overrun_seen_by_the_wall_clock() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        assert!(!trust.calling(), "no overrun yet: the wall clock alone");
        assert!(matches!(
            trust.overran(start, false),
            Overrun::Forgiven { recent: 1, .. }
        ));
        for n in 0..MEASURED_AFTER_OVERRUN {
            assert!(trust.calling(), "call {n} after it is measured");
        }
        assert!(!trust.calling(), "then the wall clock alone again");
    }

    #[test]
    fn overruns_the_wall_clock_alone_saw_never_withdraw_the_privilege() {
        let trust = QuickTrust::new();
        let start = Instant::now();
        for n in 0..10 {
            trust.calling();
            assert!(
                matches!(trust.overran(start, false), Overrun::Forgiven { .. }),
                "overrun {n}"
            );
        }
        assert!(trust.trusted());
        // The same plugin's next overrun, measured as its own, is the one that counts.
        assert!(trust.calling());
        assert_eq!(trust.overran(start, true), Overrun::Withdrawn);
    }
}
