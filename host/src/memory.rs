//! Handing memory the process no longer uses back to the OS, and reading what the allocator
//! holds.
//!
//! A burst of instances and sessions is allocated on many threads (the actix workers, tokio's
//! blocking pool, the store's writer) and freed on others when it passivates. glibc's malloc
//! keeps what is freed in per-thread arenas and only returns the top of the main heap by itself,
//! so without [`release_free_memory_every`] an idle server would stay at its peak size.

use std::time::Duration;

/// How long a blocking-pool thread with nothing to do lives (tokio's default is 10 s), in the
/// server's runtime and in the instance workers' runtimes, where plugin calls run.
///
/// A plugin call runs on a blocking thread, so a burst of concurrent calls starts dozens of them.
/// Each keeps its stack and glibc's per-thread cache of freed chunks while it lives, and those
/// chunks pin arena pages that `malloc_trim` cannot return. Threads that leave soon after the
/// burst hand both back; under steady load they are reused and this changes nothing.
pub const IDLE_THREAD_LIFETIME: Duration = Duration::from_secs(2);

/// Starts a thread that returns the free pages of every malloc arena to the OS every `period`.
///
/// A thread of its own, because `malloc_trim` walks every free chunk of every arena (under that
/// arena's lock) and is slowest right after a burst: on an actor that every call goes through it
/// would delay those calls. With another allocator than glibc's there is nothing to do and no
/// thread is started (musl and the others return memory by themselves or not at all).
pub fn release_free_memory_every(period: Duration) -> std::io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    std::thread::Builder::new()
        .name("memory-trim".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(period);
                // SAFETY: malloc_trim only walks the allocator's own free lists; it has no
                // preconditions.
                unsafe {
                    libc::malloc_trim(0);
                }
            }
        })?;
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = period;
    Ok(())
}

/// What the allocator holds, in bytes.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Bytes the allocator holds free (in its arenas, resident or already returned).
    pub free: u64,
}

/// A reading of the allocator's counters, where the platform has one (glibc 2.33 or later).
pub fn stats() -> Option<MemoryStats> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mallinfo2 = glibc::mallinfo2()?;
        // SAFETY: mallinfo2 takes nothing and only reads the allocator's counters.
        let info = unsafe { mallinfo2() };
        Some(MemoryStats {
            allocated: (info.uordblks + info.hblkhd) as u64,
            free: info.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::sync::OnceLock;

    pub type Mallinfo2 = unsafe extern "C" fn() -> libc::mallinfo2;

    /// glibc's `mallinfo2`, looked up at run time: it only exists since glibc 2.33, and linking
    /// it directly would keep the binary from starting on older systems.
    pub fn mallinfo2() -> Option<Mallinfo2> {
        static FOUND: OnceLock<Option<Mallinfo2>> = OnceLock::new();
        *FOUND.get_or_init(|| {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only searches the loaded
            // objects; a non-null result for this name is glibc's `struct mallinfo2 (void)`.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
            (!symbol.is_null()).then(|| {
                // SAFETY: see above: the symbol is a function with exactly this signature.
                unsafe { std::mem::transmute::<*mut libc::c_void, Mallinfo2>(symbol) }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_counts_a_live_allocation() {
        let Some(before) = stats() else {
            return; // Not glibc, or glibc older than 2.33: nothing to read.
        };
        let block = vec![1u8; 8 << 20];
        let during = stats().expect("counters were readable a moment ago");
        assert!(
            during.allocated >= before.allocated + (8 << 20),
            "{before:?} -> {during:?}"
        );
        drop(block);
    }
}
