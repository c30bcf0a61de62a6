//! [`Workers`]: the threads that run instance actors, and the HTTP connections that call them.
//!
//! A call hands its request to its instance's mailbox and waits for the answer. When the caller
//! and the actor sit on different threads, each of those two hand-offs wakes a sleeping thread
//! (an eventfd write, then a context switch), and once the rest of a call was cheap that was its
//! largest cost (BENCHMARKS.md's history, session 8). So these threads run both sides: an accepted HTTP
//! connection is served on one of them, round-robin, and an instance actor starts on the thread
//! of the call that first asks for it. The session that minted an instance, or whose own instance
//! it is, then talks to it without leaving its thread; any other caller still reaches it through
//! its mailbox from wherever it runs, as before.
//!
//! Each thread is an actix arbiter over a current-thread tokio runtime, so a connection's
//! sockets and timers are driven by the thread that serves it. Whatever blocks a worker now
//! also holds up the connections it serves: the only synchronous work on it is a quick plugin
//! call, which its budget bounds (`plugin/quick.rs` takes the privilege from a plugin whose
//! quick calls overrun); everything else that may block runs on a blocking thread.

use std::{
    cell::Cell,
    future::Future,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use actix::prelude::*;

thread_local! {
    /// Which of [`Workers`]' threads this is; `None` on any other thread.
    static THIS_WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The worker threads, shared by the registry (where instance actors start) and the accept
/// loop (where connections are served).
pub struct Workers {
    /// A panic in a handler ends only its task (tokio catches it), but should a thread die all
    /// the same, it is replaced when it is next picked.
    threads: Box<[Mutex<Arbiter>]>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `count` worker threads (at least one).
    pub(super) fn start(count: usize) -> Self {
        Workers {
            threads: (0..count.max(1))
                .map(|index| Mutex::new(worker_thread(index)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Where a new instance actor runs: the calling thread, when that is one of these (the
    /// caller is the instance's first and likeliest user), else the next one round-robin.
    pub(super) fn for_new_actor(&self, caller: Option<usize>) -> ArbiterHandle {
        match caller {
            Some(index) if index < self.threads.len() => self.live(index),
            _ => self.live(self.next_index()),
        }
    }

    /// Where the notifier runs: the first thread. A move's `InstanceChanged` then wakes no
    /// thread of its own: it is handled where the instance runs, or on a worker that is serving
    /// connections and so most likely awake, rather than on the `actors` thread, which every
    /// move woke from its sleep (the largest cross-thread cost left in a call, session 9).
    pub(super) fn for_notifier(&self) -> ArbiterHandle {
        self.live(0)
    }

    /// Runs `future` on the next thread, round-robin: an accepted connection, which then does
    /// all of its I/O there.
    pub fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        // `live` just checked the thread; should it die in between, the connection is lost the
        // way it would be had it been running there.
        self.live(self.next_index()).spawn(future);
    }

    fn next_index(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len()
    }

    /// The handle of thread `index`, which is started anew if it died.
    fn live(&self, index: usize) -> ArbiterHandle {
        let mut thread = self.threads[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // `spawn` reports whether the thread is still there to run anything.
        if !thread.spawn(std::future::ready(())) {
            tracing::error!(worker = index, "a worker thread died; starting a new one");
            *thread = worker_thread(index);
        }
        thread.handle()
    }
}

/// The worker thread the caller runs on, if it runs on one.
pub(super) fn current() -> Option<usize> {
    THIS_WORKER.with(Cell::get)
}

/// A new worker thread, which knows its index. Its runtime's blocking pool (where plugin calls
/// run) lets idle threads go after [`crate::memory::IDLE_THREAD_LIFETIME`].
fn worker_thread(index: usize) -> Arbiter {
    let arbiter = Arbiter::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_keep_alive(crate::memory::IDLE_THREAD_LIFETIME)
            .build()
            .expect("a current-thread tokio runtime builds (it only fails without OS resources)")
    });
    // Runs before anything else sent to the thread: its queue is first in, first out.
    arbiter.spawn_fn(move || THIS_WORKER.with(|this| this.set(Some(index))));
    arbiter
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new actor starts beside its caller when the caller is a worker, and a connection
    /// spawned here runs on a worker thread.
    #[test]
    fn actors_start_beside_a_calling_worker() {
        // Arbiters belong to a system, which must exist (it need not run: each has a thread).
        let _system = System::new();
        let workers = std::sync::Arc::new(Workers::start(2));
        assert_eq!(current(), None, "a test thread is no worker");
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..4 {
            let (tx, workers) = (tx.clone(), workers.clone());
            workers.clone().spawn(async move {
                let here = current().expect("spawned on a worker");
                let (placed_tx, placed_rx) = std::sync::mpsc::channel();
                workers
                    .for_new_actor(Some(here))
                    .spawn_fn(move || placed_tx.send(current()).unwrap());
                // Not awaited on this thread: the placed closure runs on its own thread's queue
                // after this task yields, so look from outside.
                tx.send((here, placed_rx)).unwrap();
            });
        }
        drop(tx);
        let mut seen = std::collections::HashSet::new();
        for (here, placed) in rx {
            seen.insert(here);
            let placed = placed
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap();
            assert_eq!(
                placed,
                Some(here),
                "the actor starts on its caller's thread"
            );
        }
        assert_eq!(seen.len(), 2, "connections are spread over both threads");
    }

    /// A bug that panics in one task (a handler, a connection) ends that task only: the thread
    /// goes on serving its other connections and actors.
    #[test]
    fn a_panicking_task_leaves_its_thread_serving() {
        let _system = System::new();
        let workers = Workers::start(1);
        workers.spawn(async { panic!("a bug in a handler") });
        let (tx, rx) = std::sync::mpsc::channel();
        workers.spawn(async move { tx.send(current()).unwrap() });
        let ran = rx.recv_timeout(std::time::Duration::from_secs(5));
        assert_eq!(ran, Ok(Some(0)), "the thread still runs what it is given");
    }
}
