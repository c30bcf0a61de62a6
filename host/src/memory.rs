//! The allocator, handing memory the process no longer uses back to the OS, and reading what
//! the allocator holds.
//!
//! The host allocates with jemalloc ([`Allocator`], the process's global allocator wherever this
//! library is linked). A call allocates and frees a few hundred small blocks (request and answer
//! JSON, the event, the snapshot's save), on the worker threads and the store's writer; with
//! glibc's malloc that was about 15% of the server's CPU under load, and jemalloc's thread caches
//! cut the CPU per call by 15–20% (BENCHMARKS.md's history, session 9). Plugins keep their own allocator:
//! each side of the C ABI frees only what it allocated.
//!
//! A burst of instances and sessions is freed when it passivates, and jemalloc returns the freed
//! pages only as it goes on allocating (its decay runs on allocator activity), so an idle server
//! would stay at its peak size without [`release_free_memory_every`].

use std::time::Duration;

/// The allocator of the process: jemalloc, with its statistics compiled in ([`stats`]).
pub type Allocator = tikv_jemallocator::Jemalloc;

/// How long a blocking-pool thread with nothing to do lives (tokio's default is 10 s), in the
/// server's runtime and in the instance workers' runtimes, where plugin calls run.
///
/// A plugin call that is not quick runs on a blocking thread, so a burst of concurrent calls
/// starts dozens of them. Each keeps its stack and its allocator's thread cache while it lives.
/// Threads that leave soon after the burst hand both back; under steady load they are reused and
/// this changes nothing.
pub const IDLE_THREAD_LIFETIME: Duration = Duration::from_secs(2);

/// Starts a thread that returns the free pages of every jemalloc arena to the OS every `period`.
///
/// A thread of its own, because a purge walks every arena's dirty pages and is slowest right
/// after a burst: on an actor that every call goes through it would delay those calls.
pub fn release_free_memory_every(period: Duration) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("memory-trim".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(period);
                if !purge_all_arenas() {
                    tracing::debug!("jemalloc refused arena.all.purge");
                }
            }
        })?;
    Ok(())
}

/// `arena.<all>.purge`: every arena hands its unused dirty pages back to the OS now. Returns
/// whether jemalloc took the command.
fn purge_all_arenas() -> bool {
    // 4096 is `MALLCTL_ARENAS_ALL`, which names every arena at once.
    let name = c"arena.4096.purge";
    // SAFETY: a void mallctl: `name` is NUL-terminated, and it reads and writes nothing, which
    // the null pointers and zero length say.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        ) == 0
    }
}

/// What the allocator holds, in bytes.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes the allocator holds resident beyond them (free blocks, its own metadata).
    pub free: u64,
}

/// A reading of the allocator's counters (`None` if jemalloc refused one).
pub fn stats() -> Option<MemoryStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The counters are a snapshot taken at each epoch: take a new one.
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()? as u64;
    let resident = stats::resident::read().ok()? as u64;
    Some(MemoryStats {
        allocated,
        free: resident.saturating_sub(allocated),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_counts_a_live_allocation() {
        // The counters are the whole process's: a test on another thread freeing memory between
        // the two reads can hide the block, so a few tries are allowed; one that never counts
        // the block fails every time.
        let mut seen = Vec::new();
        let counted = (0..5).any(|_| {
            let before = stats().expect("jemalloc's counters are readable");
            let block = vec![1u8; 8 << 20];
            let during = stats().expect("counters were readable a moment ago");
            drop(block);
            let counted = during.allocated >= before.allocated + (8 << 20);
            seen.push((before, during));
            counted
        });
        assert!(counted, "{seen:?}");
    }

    #[test]
    fn freed_pages_can_be_purged() {
        // A name jemalloc does not know would be refused, and memory never handed back.
        assert!(purge_all_arenas());
    }
}
