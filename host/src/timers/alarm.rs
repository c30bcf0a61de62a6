//! [`Alarm`]: how instance actors tell the timer task about the due times they save.
//!
//! It owns the due times this process saved that have not come yet, and the bell that wakes
//! the task when one is earlier than what it sleeps towards. It must not hold anything the task
//! needs for correctness: a due time it forgets (past [`MAX_PENDING`], or after a restart) is
//! still in the store, where the task finds it, at worst a poll later.

use std::{
    collections::BTreeSet,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;

use crate::store::now_ms;

/// The most due times kept (8 bytes each); past it the latest are forgotten.
pub const MAX_PENDING: usize = 65_536;

/// Where instance actors report the due times they save. Cheap: an ordered-set insert under a
/// lock no await is held across, and a notification only when the task must wake earlier.
#[derive(Debug)]
pub struct Alarm {
    /// Due times saved by this process that have not come yet. Kept after the record moves on
    /// (nothing removes a due time when a later save replaces it): such a time costs one query
    /// that finds nothing.
    pending: Mutex<BTreeSet<u64>>,
    /// What the task sleeps towards: a due time before it rings. 0 while the task is awake (it
    /// reads `pending` before it sleeps again, so there is nothing to ring for).
    sleeping_until: AtomicU64,
    bell: Notify,
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm {
            pending: Mutex::default(),
            sleeping_until: AtomicU64::new(0),
            bell: Notify::new(),
        }
    }
}

impl Alarm {
    /// A record with due time `due` was saved (call it after the save returned).
    pub fn set(&self, due: u64) {
        {
            let mut pending = self.pending();
            pending.insert(due);
            if pending.len() > MAX_PENDING {
                pending.pop_last();
            }
        }
        // SeqCst pairs with `sleep_until`: either the task sees `due` in `pending` after it
        // published its target, or this sees the target and rings.
        if due < self.sleeping_until.load(Ordering::SeqCst) {
            // `notify_one` keeps a permit when the task is not waiting yet: nothing is lost.
            self.bell.notify_one();
        }
    }

    /// Forgets the due times up to `now` (the task's pass over the store covers them) and
    /// returns the earliest one left.
    pub(super) fn next_after(&self, now: u64) -> Option<u64> {
        let mut pending = self.pending();
        *pending = pending.split_off(&now.saturating_add(1));
        pending.first().copied()
    }

    /// Sleeps until `until` (unix ms), or until a due time before it is set.
    pub(super) async fn sleep_until(&self, until: u64) {
        self.sleeping_until.store(until, Ordering::SeqCst);
        // A due time set while `until` was worked out is in `pending` now, or its `set` saw
        // `until` and rang.
        let earlier = self.pending().first().is_some_and(|first| *first < until);
        if !earlier {
            let sleep = Duration::from_millis(until.saturating_sub(now_ms()));
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.bell.notified() => {}
            }
        }
        self.sleeping_until.store(0, Ordering::SeqCst);
    }

    fn pending(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        // Inserts and splits only: a panic cannot leave the set inconsistent.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn due_times_are_kept_until_they_come_and_bounded() {
        let alarm = Alarm::default();
        for due in [300, 100, 200, 100] {
            alarm.set(due);
        }
        assert_eq!(alarm.next_after(0), Some(100));
        assert_eq!(alarm.next_after(100), Some(200));
        assert_eq!(alarm.next_after(250), Some(300));
        assert_eq!(alarm.next_after(300), None);
        for due in 0..MAX_PENDING as u64 + 10 {
            alarm.set(1_000 + due);
        }
        assert_eq!(alarm.pending().len(), MAX_PENDING);
        assert_eq!(alarm.next_after(0), Some(1_000), "the latest are forgotten");
    }

    #[tokio::test]
    async fn only_an_earlier_due_time_wakes_the_sleeper() {
        let alarm = std::sync::Arc::new(Alarm::default());
        let hour = now_ms() + 3_600_000;
        let sleeper = {
            let alarm = alarm.clone();
            tokio::spawn(async move { alarm.sleep_until(hour).await })
        };
        tokio::pin!(sleeper);
        // A later due time leaves it asleep (whether set before or after it fell asleep).
        alarm.set(hour + 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut sleeper)
                .await
                .is_err(),
            "a later due time woke the sleeper"
        );
        // An earlier one ends the sleep: set before the sleeper published its target, it is in
        // `pending`; after, it rings.
        alarm.set(hour - 1);
        tokio::time::timeout(Duration::from_secs(10), sleeper)
            .await
            .expect("woken long before the hour")
            .unwrap();
    }
}
