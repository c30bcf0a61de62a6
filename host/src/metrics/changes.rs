//! How many instance changes this process has seen (transitions saved here, changes relayed from
//! other servers sharing the store, an operator's reset or delete), for what waits for the next
//! one: the console's live counts (`console/live.rs`) are worked out again when it moves, instead
//! of reading the store on a clock.
//!
//! Counted where `transition_saved` and `change_relayed` already count, so the code that moves
//! instances needs no hook of its own. Telling costs an atomic add, and a wake-up only while
//! something waits.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The change count and its waiters.
pub struct Changes {
    count: AtomicU64,
    waiting: AtomicUsize,
    notify: Notify,
}

static CHANGES: Changes = Changes {
    count: AtomicU64::new(0),
    waiting: AtomicUsize::new(0),
    notify: Notify::const_new(),
};

/// The process's change count.
pub fn changes() -> &'static Changes {
    &CHANGES
}

impl Changes {
    /// How many changes were seen so far.
    pub fn seen(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// One more change.
    pub fn tell(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Returns once the count is past `seen`.
    pub async fn after(&self, seen: u64) {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        // Counted as waiting until this future ends, however it ends.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the count is read again: a change in between still wakes it.
            notified.as_mut().enable();
            if self.seen() != seen {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_on_the_next_change_and_not_before() {
        let changes = changes();
        let seen = changes.seen();
        let waiter = tokio::spawn(async move { changes.after(seen).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        changes.tell();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        // A count already past returns at once.
        changes.after(seen).await;
    }
}
