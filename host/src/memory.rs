//! Handing memory the process no longer uses back to the OS, and reading what the allocator
//! holds.
//!
//! A burst of instances and sessions is allocated on many threads (the actix workers, tokio's
//! blocking pool, the store's writer) and freed on others when it passivates. glibc's malloc
//! keeps what is freed in per-thread arenas and only returns the top of the main heap by itself,
//! so without [`release_free_memory`] an idle server would stay at its peak size.

/// How long a blocking-pool thread with nothing to do lives (tokio's default is 10 s), for every
/// runtime the host builds.
///
/// A plugin call runs on a blocking thread, so a burst of concurrent calls starts dozens of them.
/// Each keeps its stack and glibc's per-thread cache of freed chunks while it lives, and those
/// chunks pin arena pages that [`release_free_memory`] cannot return. Threads that leave soon
/// after the burst hand both back; under steady load they are reused and this changes nothing.
pub const IDLE_THREAD_LIFETIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Returns the free pages of every malloc arena to the OS.
///
/// Called every few seconds by the registry: cheap when there is nothing to give back, and it
/// bounds how long an idle server stays at its peak size. With another allocator than glibc's
/// this does nothing (musl and the others return memory by themselves or not at all).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What the allocator holds, in bytes.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes the allocator holds free (in its arenas, resident or already returned).
    pub free: u64,
}

/// A reading of the allocator's counters, where the platform has one (glibc).
pub fn stats() -> Option<MemoryStats> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let info = unsafe { libc::mallinfo2() };
        Some(MemoryStats {
            allocated: (info.uordblks + info.hblkhd) as u64,
            free: info.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}
