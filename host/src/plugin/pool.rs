//! A plugin's share of the threads that run plugin calls.
//!
//! A plugin call is a synchronous C call on a blocking thread, and a call past its deadline
//! cannot be interrupted: its thread stays busy until the plugin returns. Without a bound per
//! plugin, a hung or slow plugin would take threads without limit and starve every other
//! plugin. With it, each plugin runs at most `size` calls at once; a call beyond that waits for a
//! slot at most [`QUEUE_WAIT`] (a busy but healthy plugin frees slots within microseconds) and is
//! then turned away (`BUSY`, with a hint when to retry) instead of queueing behind a hung plugin.
//! The permit is held by the thread itself, so a call that timed out keeps counting until the
//! plugin really returns.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::quick::{Overrun, QuickTrust};

/// How many calls of one plugin may run at once unless configured (`--plugin-pool`).
pub const DEFAULT_POOL_SIZE: usize = 64;

/// How long a call waits for a free slot before it is answered `BUSY`.
pub const QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The bound on one plugin's concurrent calls.
#[derive(Debug)]
pub struct CallPool {
    permits: Arc<Semaphore>,
    size: usize,
    /// Calls that were still running when their deadline passed (for `/stats`).
    past_deadline: AtomicU64,
    /// Whether the plugin's quick tools (`quick_ms`) may still run on the caller's thread.
    quick: QuickTrust,
}

impl CallPool {
    pub fn new(size: usize) -> CallPool {
        let size = size.max(1);
        CallPool {
            permits: Arc::new(Semaphore::new(size)),
            size,
            past_deadline: AtomicU64::new(0),
            quick: QuickTrust::new(),
        }
    }

    /// Whether a tool of this plugin that declares itself quick may run on the caller's thread.
    pub fn trusts_quick_calls(&self) -> bool {
        self.quick.trusted()
    }

    /// A quick call of this plugin begins (overruns are weighed against the calls made);
    /// answers whether to measure it, not only time it (`plugin/quick.rs` says when).
    pub fn quick_call_begins(&self) -> bool {
        self.quick.calling()
    }

    /// A quick call overran its budget, by its own doing if `measured`, else by the wall clock:
    /// forgiven when it is one of few or unmeasured, else from now on every call of this plugin
    /// runs on a worker thread (`plugin/quick.rs` has the rule).
    pub fn quick_call_overran(&self, measured: bool) -> Overrun {
        self.quick.overran(std::time::Instant::now(), measured)
    }

    /// A slot for one call, waiting at most `wait` for one to free up.
    pub async fn enter(&self, wait: std::time::Duration) -> Option<OwnedSemaphorePermit> {
        let acquire = self.permits.clone().acquire_owned();
        match tokio::time::timeout(wait, acquire).await {
            Ok(Ok(permit)) => Some(permit),
            _ => None,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Calls running now.
    pub fn busy(&self) -> usize {
        self.size - self.permits.available_permits()
    }

    /// Records a call that outlived its deadline.
    pub fn count_past_deadline(&self) {
        self.past_deadline.fetch_add(1, Ordering::Relaxed);
    }

    /// How many calls have outlived their deadline so far.
    pub fn past_deadline(&self) -> u64 {
        self.past_deadline.load(Ordering::Relaxed)
    }
}

impl Default for CallPool {
    fn default() -> Self {
        CallPool::new(DEFAULT_POOL_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_most_size_calls_enter_and_a_slot_frees_when_dropped() {
        let wait = std::time::Duration::from_millis(20);
        let pool = CallPool::new(2);
        let first = pool.enter(wait).await.expect("a slot");
        let _second = pool.enter(wait).await.expect("a slot");
        assert!(pool.enter(wait).await.is_none(), "the pool is full");
        assert_eq!(pool.busy(), 2);
        drop(first);
        assert!(pool.enter(wait).await.is_some());
    }
}
