//! The scheduling policy of the store's own threads, the writer (`writer.rs`) and the
//! checkpointer (`checkpoint.rs`): below the threads that serve requests.

/// Makes the calling thread (the writer or the checkpoint thread) give way to the threads that
/// serve requests: under Linux's `SCHED_BATCH` policy it runs as soon as a core is free, but its
/// wake-up never preempts a running thread.
///
/// Why: the writer wakes several times a batch (for the batch, for each disk write it waits on).
/// Each such wake-up used to preempt a request thread on the other core, some 6,500 times a
/// second under load, costing that thread a cache-cold return. With `SCHED_BATCH` the server's
/// CPU per call fell 8% (BENCHMARKS.md's history, session 20); the batch waits for a core only
/// while both are busy serving, which is also when waiting gathers more saves into it.
pub(super) fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads the one `sched_param` it is given, which lives on
        // this stack for the whole call; pid 0 names the calling thread.
        let set = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if set != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_BATCH refused; the thread keeps the default policy");
        }
    }
}
