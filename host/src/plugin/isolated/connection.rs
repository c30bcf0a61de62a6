//! One running plugin process as its calls see it: the pipe to its stdin, the calls waiting for
//! their answers, and the loop (on a thread of the supervisor's) that reads its stdout and hands
//! each answer, log line and progress report to the call it belongs to.
//!
//! A connection is closed once, after its process has ended: every call still waiting is then
//! woken with the reason, and no call can register on it any more. That is what makes a crash
//! fail exactly the calls in flight. It must not start, stop or restart processes
//! (`supervisor.rs` does), and it holds no lock while writing to a pipe it does not own.

use std::{
    collections::HashMap,
    io::{self, BufReader, Write},
    process::{ChildStdin, ChildStdout},
    sync::{Arc, Mutex, mpsc::Sender},
};

use super::{
    frame,
    protocol::{FromChild, Outcome},
};
use crate::plugin::{CallEvent, HostCall};

/// What wakes a call that waits on its channel.
#[derive(Debug)]
pub(super) enum Wake {
    /// The process is up (again): look at the link once more.
    Up,
    /// The call's answer.
    Done(Outcome),
    /// The process ended while the call was in flight; how it ended.
    Crashed(String),
    /// The call's work is no longer wanted (client cancellation or deadline).
    Cancelled,
    /// The plugin was unloaded while the call waited for a restart.
    Stopped,
}

/// See the module docs.
pub(super) struct Connection {
    /// `None` once closed: the process reads the end of its stdin as "exit".
    stdin: Mutex<Option<ChildStdin>>,
    calls: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, Waiting>,
    closed: bool,
}

struct Waiting {
    wake: Sender<Wake>,
    /// Where the plugin's logs and progress for this call go.
    host: Option<Arc<HostCall>>,
}

/// Why the reading loop stopped.
pub(super) enum Ended {
    /// The process closed its stdout (it exited, normally or not).
    Closed,
    /// The process sent something that is not the protocol; it must be stopped.
    Broken(String),
}

impl Connection {
    pub fn new(stdin: ChildStdin) -> Arc<Connection> {
        Arc::new(Connection {
            stdin: Mutex::new(Some(stdin)),
            calls: Mutex::default(),
        })
    }

    /// Makes call `id` wait for its answer on `wake`; false if the connection is closed
    /// already (the call must wait for the next process).
    pub fn register(&self, id: u64, wake: Sender<Wake>, host: Option<Arc<HostCall>>) -> bool {
        // The lock is only ever held for a map operation; a poisoned one still holds a map.
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if calls.closed {
            return false;
        }
        calls.waiting.insert(id, Waiting { wake, host });
        true
    }

    /// Writes one encoded frame to the process. The lock keeps frames whole when several calls
    /// send at once; the process reads its stdin all the time, so a write never waits long.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let mut stdin = self
            .stdin
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match stdin.as_mut() {
            // One `write_all` of the whole frame: `ChildStdin` is unbuffered.
            Some(stdin) => stdin.write_all(frame),
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the plugin's process is being stopped",
            )),
        }
    }

    /// Closes the process's stdin, which tells it to exit.
    pub fn close_stdin(&self) {
        let mut stdin = self
            .stdin
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        stdin.take();
    }

    /// The process has ended (`how`): wakes every call still waiting with it, and refuses
    /// registrations from now on.
    pub fn close(&self, how: &str) {
        self.close_stdin();
        let waiting = {
            let mut calls = self
                .calls
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            calls.closed = true;
            std::mem::take(&mut calls.waiting)
        };
        for (_, call) in waiting {
            // A call that stopped waiting (it gave up) has dropped its receiver: nothing to do.
            let _ = call.wake.send(Wake::Crashed(how.to_owned()));
        }
    }

    fn finish(&self, id: u64, outcome: Outcome) {
        let call = {
            let mut calls = self
                .calls
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            calls.waiting.remove(&id)
        };
        // An unknown id: the call was failed already (it cannot be, while the process that
        // answers lives) or never existed; either way nobody waits for it.
        if let Some(call) = call {
            let _ = call.wake.send(Wake::Done(outcome));
        }
    }

    fn event(&self, id: u64, event: CallEvent) {
        let host = {
            let calls = self
                .calls
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            calls.waiting.get(&id).and_then(|call| call.host.clone())
        };
        // An event for a call that already returned is dropped, as an in-process plugin's
        // services do nothing once its call has returned.
        if let Some(host) = host {
            host.send(event);
        }
    }
}

/// Reads the process's `stdout` until it ends: the first message goes to `first` (the
/// supervisor waits for `Ready` there), every later one to the call it names.
pub(super) fn read(
    stdout: ChildStdout,
    connection: &Connection,
    first: Sender<FromChild>,
) -> Ended {
    let mut reader = BufReader::new(stdout);
    match frame::read::<FromChild>(&mut reader) {
        Ok(Some(message)) => {
            // The supervisor may have given up waiting (a start timeout): nothing to do then.
            let _ = first.send(message);
        }
        Ok(None) => return Ended::Closed,
        Err(error) => return Ended::Broken(error.to_string()),
    }
    drop(first);
    loop {
        match frame::read::<FromChild>(&mut reader) {
            Ok(Some(FromChild::Done { id, outcome })) => connection.finish(id, outcome),
            Ok(Some(message @ (FromChild::Log { .. } | FromChild::Progress { .. }))) => {
                if let Some((id, event)) = message.into_event() {
                    connection.event(id, event);
                }
            }
            Ok(Some(FromChild::Ready { .. } | FromChild::LoadFailed { .. })) => {
                return Ended::Broken("it announced itself again while serving".into());
            }
            Ok(None) => return Ended::Closed,
            Err(error) => return Ended::Broken(error.to_string()),
        }
    }
}
