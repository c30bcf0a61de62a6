//! The isolated plugin's own process (`turnstile plugin-host LIBRARY`): loads one library as the
//! server would (a private copy, its configuration from `TURNSTILE_PLUGIN_<NAME>_*`) and runs
//! the calls the server sends on stdin, answering on stdout (`protocol.rs`).
//!
//! It owns the process's standard streams. Before loading anything it moves the protocol's two
//! pipes to descriptors of its own, points descriptor 0 at `/dev/null` and descriptor 1 at
//! stderr: a plugin that reads stdin or prints to stdout (C's `printf`, Rust's `println!`)
//! then reaches neither pipe, and the frames stay whole. It ignores SIGINT and SIGTERM: it
//! lives exactly as long as the server holds its stdin open (a service manager that signals the
//! whole group would otherwise kill it while the server is still draining its calls), and exits
//! when that closes. It must not interpret results: the server does, as for an in-process call.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, BufReader, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread,
};

use tokio_util::sync::CancellationToken;
use turnstile_plugin_abi::CallContext;

use super::{
    frame,
    protocol::{FromChild, GUARD_CALL_PREFIX, Outcome, ToChild},
};
use crate::plugin::{HostCall, PluginConfigs, PluginOutput, load_private_copy};
use serde_json::Value;

/// Serves the library at `library` until the server closes stdin. An error means the library
/// did not load (the server was told why) or the pipes failed.
pub fn run(library: &Path) -> io::Result<()> {
    let (input, output) = take_standard_streams()?;
    ignore_termination_signals();
    let out = Arc::new(Output(Mutex::new(output)));
    // The environment's configuration (`TURNSTILE_PLUGIN_<NAME>_*`, inherited from the server).
    let plugin = match load_private_copy(library, &PluginConfigs::default()) {
        Ok(plugin) => plugin,
        Err(error) => {
            let message = error.to_string();
            out.send(&FromChild::LoadFailed {
                message: message.clone(),
            });
            return Err(io::Error::other(message));
        }
    };
    if !out.send(&FromChild::Ready {
        manifest: plugin.manifest().clone(),
    }) {
        return Err(io::Error::other("cannot write to the server"));
    }
    tracing::debug!(plugin = %plugin.manifest().name, "plugin-host: serving");
    let calls: Calls = Arc::default();
    let workers = Workers::new();
    let mut input = BufReader::new(input);
    loop {
        match frame::read::<ToChild>(&mut input) {
            Ok(Some(ToChild::Call {
                id,
                tool,
                input,
                call_id,
                handle,
                state,
                context,
                idempotency_key,
                asking,
                services,
            })) => {
                // Registered before the call is queued, so a cancel that follows at once finds
                // it.
                let host = services.then(|| {
                    let relay = out.clone();
                    let host = HostCall::relayed(CancellationToken::new(), move |event| {
                        relay.send(&FromChild::event(id, event))
                    });
                    lock(&calls).insert(id, host.clone());
                    host
                });
                let (plugin, out, calls) = (plugin.clone(), out.clone(), calls.clone());
                workers.run(Box::new(move || {
                    let context = CallContext {
                        call_id,
                        handle,
                        state,
                        context,
                        idempotency_key,
                        asking,
                        ..CallContext::default()
                    };
                    let result = match tool.strip_prefix(GUARD_CALL_PREFIX) {
                        Some(guard) => plugin
                            .guard(guard, &input["params"], &input["context"], &input["event"])
                            .map(|passes| PluginOutput::success(Value::Bool(passes))),
                        None => plugin.call_with(&tool, &input, &context, host),
                    };
                    lock(&calls).remove(&id);
                    out.send(&FromChild::Done {
                        id,
                        outcome: Outcome::of(result),
                    });
                }));
            }
            Ok(Some(ToChild::Cancel { id })) => {
                if let Some(host) = lock(&calls).get(&id) {
                    host.cancel();
                }
            }
            // The server closed our stdin: it is done with us.
            Ok(None) => break,
            Err(error) => {
                tracing::error!(plugin = %plugin.manifest().name, %error, "plugin-host: cannot read the server's message; exiting");
                return Err(io::Error::other(error.to_string()));
            }
        }
    }
    // The server waits for its calls before it lets go of a plugin, so none runs now unless the
    // server itself is gone; then there is no one to answer, and no reason to wait for them.
    if workers.busy() > 0 {
        std::process::exit(0);
    }
    // Destroys the instance and unloads the library, as the server does for in-process plugins.
    drop(plugin);
    Ok(())
}

/// The calls running with host services, by id, for `Cancel`.
type Calls = Arc<Mutex<HashMap<u64, Arc<HostCall>>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Held only for a map operation or one write; a poisoned lock still holds a usable value.
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The pipe to the server, shared by the threads running calls.
struct Output(Mutex<File>);

impl Output {
    /// Sends `message`; false if it could not be (the server is gone).
    fn send(&self, message: &FromChild) -> bool {
        let Ok(frame) = frame::encode(message) else {
            return false;
        };
        lock(&self.0).write_all(&frame).is_ok()
    }
}

/// The threads that run calls. A call never waits for a thread busy with another call: one is
/// started whenever none is free. Threads are kept for later calls; the server's call pool
/// (`--plugin-pool`) bounds how many calls, and so threads, there are at once.
struct Workers {
    jobs: mpsc::Sender<Job>,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    /// Threads waiting for a job, less the jobs sent that no thread has taken yet.
    free: Arc<AtomicUsize>,
    /// Calls running now.
    running: Arc<AtomicUsize>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Workers {
    fn new() -> Workers {
        let (jobs, queue) = mpsc::channel();
        Workers {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            free: Arc::default(),
            running: Arc::default(),
        }
    }

    fn busy(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    fn run(&self, job: Job) {
        self.running.fetch_add(1, Ordering::SeqCst);
        let taken = self
            .free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |free| {
                free.checked_sub(1)
            });
        if taken.is_err() {
            let (queue, free, running) =
                (self.queue.clone(), self.free.clone(), self.running.clone());
            let started = thread::Builder::new()
                .name("plugin-call".into())
                .spawn(move || work(&queue, &free, &running));
            if let Err(error) = started {
                // The job waits for a thread that finishes its call; the server's deadline
                // bounds how long its caller waits.
                tracing::error!(%error, "plugin-host: cannot start a thread for a call");
            }
        }
        // The receiver lives in `self.queue` as long as `self`.
        let _ = self.jobs.send(job);
    }
}

fn work(queue: &Mutex<mpsc::Receiver<Job>>, free: &AtomicUsize, running: &AtomicUsize) {
    loop {
        // One thread waits in `recv` holding the lock; the other free ones wait for the lock.
        let job = lock(queue).recv();
        let Ok(job) = job else { return };
        job();
        running.fetch_sub(1, Ordering::SeqCst);
        free.fetch_add(1, Ordering::SeqCst);
    }
}

/// Moves stdin and stdout to new descriptors for the protocol, and puts `/dev/null` and stderr
/// in their places (see the module docs).
fn take_standard_streams() -> io::Result<(File, File)> {
    let null = File::open("/dev/null")?;
    let take = |fd: i32| -> io::Result<File> {
        // SAFETY: `fcntl(F_DUPFD_CLOEXEC)` only reads `fd` (0 or 1, open since the server
        // started us with pipes there) and returns a new descriptor, which nothing else owns.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `copy` is a fresh descriptor, owned by nothing else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(copy) }))
    };
    let (input, output) = (take(0)?, take(1)?);
    let replace = |from: i32, to: i32| -> io::Result<()> {
        // SAFETY: `dup2` with two open descriptors; it closes `to` (the pipe, whose copy we
        // keep) and makes it a copy of `from`. Nothing in this process holds `to` as an object:
        // Rust's stdin and stdout refer to the numbers, not to the pipes.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    replace(null.as_raw_fd(), 0)?;
    replace(2, 1)?;
    Ok((input, output))
}

fn ignore_termination_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: setting a signal's disposition to "ignore" installs no handler code and is
        // allowed at any time.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}
