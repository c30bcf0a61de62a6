//! Isolated plugins: a library that runs in a process of its own (`turnstile plugin-host`), so
//! that a plugin that aborts, segfaults or leaks takes down only that process.
//!
//! This module owns everything on both sides of that process boundary: the frames on the pipes
//! (`frame.rs`) and the messages in them (`protocol.rs`), the child's loop (`child.rs`), the
//! server's view of one running process (`connection.rs`) and the thread that starts, watches
//! and restarts it (`supervisor.rs`). [`Isolated`] is what a `LoadedPlugin` holds instead of an
//! in-process library; the rest of the host cannot tell the two apart, except that an isolated
//! plugin's quick tools are not run inline (a call crosses a pipe) and a crash is an error of
//! its own ([`PluginError::Crashed`], `PLUGIN_CRASHED` for the client).
//!
//! # The life of an isolated plugin
//!
//! - Loaded as every plugin is (a private copy, `init`, `manifest`, in this process): that is
//!   how the server learns its name and whether it asks to be isolated. If it is, that instance
//!   is destroyed, and a process is started on the very bytes just loaded (kept in memory, so a
//!   restart runs the same version even if the file was replaced since). Its manifest must be
//!   the one read here.
//! - A call is sent with an id and waits for the answer with that id; many calls share the
//!   process. Past its deadline the call is told it is cancelled (the plugin sees
//!   `is_cancelled`), as an in-process call is.
//! - When the process ends while serving (crash, kill, a broken pipe), the calls in flight fail
//!   with [`PluginError::Crashed`], one ERROR line names the plugin and the exit status or
//!   signal, and the process is restarted after 100 ms, doubling up to 10 s between failed
//!   attempts (back to 100 ms once a process stayed up 10 s). Calls made meanwhile wait for the
//!   restart, within their own deadline.
//! - When the last handle to the plugin is dropped (a hot reload replaced it and its last call
//!   returned, as for an in-process library), its stdin is closed and the process exits.

mod child;
mod connection;
mod frame;
mod protocol;
mod supervisor;

use std::{
    collections::BTreeSet,
    ffi::OsString,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, Sender},
    },
};

use serde_json::Value;
use turnstile_plugin_abi::{CallContext, Manifest};

pub use self::{child::run as run_child, protocol::GUARD_CALL_PREFIX};

/// For `host/fuzz`: reads frames of either direction from `bytes` until one fails or the
/// bytes end, as the server and a child read their pipes.
#[doc(hidden)]
pub fn fuzz_frames(bytes: &[u8]) {
    let mut from_server = bytes;
    while let Ok(Some(_)) = frame::read::<protocol::ToChild>(&mut from_server) {}
    let mut from_child = bytes;
    while let Ok(Some(_)) = frame::read::<protocol::FromChild>(&mut from_child) {}
}
use self::{
    connection::{Connection, Wake},
    protocol::ToChild,
};
use super::{HostCall, PluginError, PluginOutput};

/// Which plugins run in a process of their own, and how such a process is started.
#[derive(Clone, Debug, Default)]
pub struct Isolation {
    /// Plugins the operator isolates (`serve --isolate NAME`), by manifest name. A plugin whose
    /// manifest says `"isolate": true` is isolated whether named here or not.
    pub names: BTreeSet<String>,
    /// The `turnstile` executable, run as `PROGRAM ARGS plugin-host LIBRARY`.
    pub program: PathBuf,
    /// Global options for the child, before the subcommand (`--log-format json`).
    pub args: Vec<OsString>,
}

impl Isolation {
    /// Whether the plugin described by `manifest` runs isolated.
    pub fn wants(&self, manifest: &Manifest) -> bool {
        manifest.isolate || self.names.contains(&manifest.name)
    }
}

/// The server's handle on an isolated plugin; see the module docs. Dropping it stops the
/// process (after the calls in flight, which hold the handle, have returned).
pub(super) struct Isolated {
    shared: Arc<Shared>,
}

/// What the calls and the supervisor share.
struct Shared {
    /// The library's path, as errors name it.
    path: PathBuf,
    /// The plugin's name, as log lines name it.
    name: String,
    link: Mutex<Link>,
    next_id: AtomicU64,
    /// How many times the process ended while serving.
    crashes: AtomicU64,
    /// Tells the supervisor thread that the plugin was dropped.
    supervisor: Sender<supervisor::Event>,
}

/// The state of the plugin's process, as a call needs it.
enum Link {
    /// Running: calls go to this connection.
    Up(Arc<Connection>),
    /// Ended, restart pending: these calls wait to be woken when it is back.
    Down(Vec<Sender<Wake>>),
    /// Stopped for good (the plugin was dropped).
    Stopped,
}

impl Isolated {
    /// Starts the process for the library `path` whose bytes are `image` and whose manifest, as
    /// loaded in this process, is `manifest`. Blocking: returns once the process has loaded the
    /// library and reported the same manifest.
    pub fn start(
        path: &Path,
        manifest: &Manifest,
        image: Vec<u8>,
        isolation: &Isolation,
    ) -> Result<Isolated, PluginError> {
        let (supervisor, events) = mpsc::channel();
        let shared = Arc::new(Shared {
            path: path.to_owned(),
            name: manifest.name.clone(),
            link: Mutex::new(Link::Stopped),
            next_id: AtomicU64::new(1),
            crashes: AtomicU64::new(0),
            supervisor,
        });
        supervisor::start(shared.clone(), events, manifest, image, isolation).map_err(
            |reason| PluginError::Isolation {
                path: path.to_owned(),
                reason,
            },
        )?;
        Ok(Isolated { shared })
    }

    /// How many times the process ended while serving since the plugin was loaded.
    pub fn crashes(&self) -> u64 {
        self.shared.crashes.load(Ordering::Relaxed)
    }

    /// Runs `tool` in the plugin's process. Blocking, like an in-process call: returns when the
    /// process answers, or fails the call when it ends first.
    pub fn call(
        &self,
        tool: &str,
        input: &Value,
        ctx: &CallContext,
        host: Option<Arc<HostCall>>,
    ) -> Result<PluginOutput, PluginError> {
        let shared = &self.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let call = frame::encode(&ToChild::Call {
            id,
            tool: tool.to_owned(),
            input: input.clone(),
            call_id: ctx.call_id.clone(),
            handle: ctx.handle.clone(),
            state: ctx.state.clone(),
            context: ctx.context.clone(),
            idempotency_key: ctx.idempotency_key.clone(),
            asking: ctx.asking.clone(),
            services: host.is_some(),
        })
        .map_err(|error| shared.crashed(tool, format!("cannot be sent the call: {error}")))?;
        let (wake, woken) = mpsc::channel();
        // Dropped (and the watching task with it) when the call returns.
        let _cancellation = host
            .as_ref()
            .and_then(|host| watch_cancellation(host, wake.clone()));
        let connection = loop {
            let Some(connection) = shared.connection_or_wait(&wake) else {
                // `wake` is ours, so the channel never disconnects while we wait.
                match woken.recv() {
                    Ok(Wake::Up) => continue,
                    Ok(Wake::Cancelled) => {
                        return Err(shared.crashed(
                            tool,
                            "was restarting and the call was cancelled before it started".into(),
                        ));
                    }
                    Ok(Wake::Stopped) | Err(_) => {
                        return Err(shared.crashed(tool, "was stopped".into()));
                    }
                    Ok(Wake::Done(_) | Wake::Crashed(_)) => continue,
                }
            };
            // A connection closes after the link went down, so a refusal here means: look at
            // the link again, which now says to wait for the restart.
            if connection.register(id, wake.clone(), host.clone()) {
                break connection;
            }
        };
        // A failed write means the process is gone: the reader sees the pipe close, and the
        // supervisor fails this call with how the process ended.
        let _ = connection.send(&call);
        loop {
            match woken.recv() {
                Ok(Wake::Done(outcome)) => return outcome.into_result(&shared.path, tool),
                Ok(Wake::Crashed(how)) => return Err(shared.crashed(tool, how)),
                Ok(Wake::Cancelled) => {
                    if let Ok(cancel) = frame::encode(&ToChild::Cancel { id }) {
                        let _ = connection.send(&cancel);
                    }
                }
                // Left over from waiting for a restart.
                Ok(Wake::Up | Wake::Stopped) => {}
                Err(_) => return Err(shared.crashed(tool, "was lost".into())),
            }
        }
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        // Fails only if the supervisor thread is gone already (it never stops on its own).
        let _ = self.shared.supervisor.send(supervisor::Event::Stop);
    }
}

impl Shared {
    /// The running connection, or `None` after adding `wake` to the calls woken when the
    /// process is back (or stopped for good).
    fn connection_or_wait(&self, wake: &Sender<Wake>) -> Option<Arc<Connection>> {
        let mut link = self
            .link
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match &mut *link {
            Link::Up(connection) => Some(connection.clone()),
            Link::Down(waiting) => {
                waiting.push(wake.clone());
                None
            }
            Link::Stopped => {
                let _ = wake.send(Wake::Stopped);
                None
            }
        }
    }

    /// Replaces the link, waking the calls that waited for the process with `wake`.
    fn set_link(&self, next: Link, wake: fn() -> Wake) {
        let previous = {
            let mut link = self
                .link
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            std::mem::replace(&mut *link, next)
        };
        if let Link::Down(waiting) = previous {
            for call in waiting {
                let _ = call.send(wake());
            }
        }
    }

    /// The error of a call whose process `how` ("was killed by signal 6 (SIGABRT)").
    fn crashed(&self, tool: &str, how: String) -> PluginError {
        PluginError::Crashed {
            path: self.path.clone(),
            tool: tool.to_owned(),
            reason: format!("the plugin's process {how}"),
        }
    }
}

/// Until dropped, sends [`Wake::Cancelled`] to `wake` once `host` is cancelled. Needs the tokio
/// runtime the call runs under (a blocking thread of it); without one, cancellation is not
/// passed on.
fn watch_cancellation(host: &HostCall, wake: Sender<Wake>) -> Option<AbortOnDrop> {
    let cancelled = host.cancellation().clone();
    if cancelled.is_cancelled() {
        let _ = wake.send(Wake::Cancelled);
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(AbortOnDrop(runtime.spawn(async move {
        cancelled.cancelled().await;
        let _ = wake.send(Wake::Cancelled);
    })))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
