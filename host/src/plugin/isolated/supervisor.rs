//! Starting an isolated plugin's process and keeping it running.
//!
//! [`start`] runs the first process on the caller's thread (a plugin whose process cannot start
//! is refused like one whose library cannot load), then hands it to a thread of its own, the
//! supervisor, which waits for the process to end, fails the calls it had in flight, logs one
//! ERROR line, and starts another after a pause that doubles with each failure in a row. The
//! supervisor ends when the plugin is dropped ([`Event::Stop`]), after stopping the process.
//!
//! A process is `PROGRAM ARGS plugin-host LIBRARY`, with LIBRARY a file written for it alone
//! (from the bytes loaded in the server, under the library's own file name, so that its
//! configuration variables are found as in the server) and deleted once the process has loaded
//! its own private copy. Its stderr is the server's; it runs in a process group of its own, so a
//! terminal's Ctrl-C reaches the server, which then drains its calls, and not its plugins.

use std::{
    ffi::OsString,
    fs, io,
    os::unix::{
        fs::DirBuilderExt,
        process::{CommandExt, ExitStatusExt},
    },
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError, Sender},
    },
    thread,
    time::{Duration, Instant},
};

use turnstile_plugin_abi::Manifest;

use super::{
    Isolation, Link, Shared,
    connection::{self, Connection, Ended, Wake},
    protocol::FromChild,
};

/// How long a process may take to load its library and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause before the first restart after a crash.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A process that served this long before it ended resets the pause to [`FIRST_BACKOFF`].
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// How long a process being stopped may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the supervisor thread hears.
pub(super) enum Event {
    /// The reader of process number `generation` stopped: the process ended, or broke the
    /// protocol.
    Ended { generation: u64, how: Ended },
    /// The plugin was dropped: stop the process, then the thread.
    Stop,
}

/// One running process.
struct Process {
    child: Child,
    connection: Arc<Connection>,
    generation: u64,
    started: Instant,
}

/// Everything needed to start a process, again and again.
struct Launcher {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    file_name: OsString,
    image: Vec<u8>,
    manifest: Manifest,
    events: Sender<Event>,
}

/// Starts the first process, then the supervisor thread; see the module docs.
pub(super) fn start(
    shared: Arc<Shared>,
    events: Receiver<Event>,
    manifest: &Manifest,
    image: Vec<u8>,
    isolation: &Isolation,
) -> Result<(), String> {
    let launcher = Launcher {
        name: shared.name.clone(),
        program: isolation.program.clone(),
        args: isolation.args.clone(),
        file_name: shared
            .path
            .file_name()
            .map_or_else(|| "plugin".into(), ToOwned::to_owned),
        image,
        manifest: manifest.clone(),
        events: shared.supervisor.clone(),
    };
    let process = launcher.launch(1)?;
    shared.set_link(Link::Up(process.connection.clone()), || Wake::Up);
    let thread_name = format!("isolate-{}", shared.name);
    let supervising = shared.clone();
    let spawned = thread::Builder::new()
        .name(thread_name)
        .spawn(move || supervise(&supervising, &launcher, &events, process));
    match spawned {
        Ok(_) => Ok(()),
        Err(error) => {
            // The process went with the closure; without its supervisor its connection never
            // closes, so take the link down by hand.
            shared.set_link(Link::Stopped, || Wake::Stopped);
            Err(format!("cannot start its supervising thread: {error}"))
        }
    }
}

/// The supervisor thread: see the module docs.
fn supervise(shared: &Shared, launcher: &Launcher, events: &Receiver<Event>, first: Process) {
    let mut process = first;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let ended = loop {
            match events.recv() {
                Ok(Event::Ended { generation, how }) if generation == process.generation => {
                    break Some(how);
                }
                // The reader of a process that never got ready.
                Ok(Event::Ended { .. }) => {}
                // `Err`: cannot happen, `shared` holds a sender.
                Ok(Event::Stop) | Err(_) => break None,
            }
        };
        let Some(how) = ended else {
            stop(events, process);
            shared.set_link(Link::Stopped, || Wake::Stopped);
            return;
        };
        let how = reap(&mut process.child, how);
        // Down before closed: a call that finds the connection closed looks at the link again
        // and must then wait for the restart.
        shared.set_link(Link::Down(Vec::new()), || Wake::Up);
        process.connection.close(&how);
        shared.crashes.fetch_add(1, Ordering::Relaxed);
        if process.started.elapsed() >= STABLE_AFTER {
            backoff = FIRST_BACKOFF;
        }
        tracing::error!(
            plugin = %shared.name,
            path = %shared.path.display(),
            restart_in_ms = backoff.as_millis(),
            "isolated plugin {}: its process {how}; the calls in flight in it fail with \
             PLUGIN_CRASHED; restarting in {} ms",
            shared.name,
            backoff.as_millis(),
        );
        let mut generation = process.generation;
        process = loop {
            if stopped_during(events, backoff) {
                shared.set_link(Link::Stopped, || Wake::Stopped);
                return;
            }
            generation += 1;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            match launcher.launch(generation) {
                Ok(next) => break next,
                Err(reason) => tracing::error!(
                    plugin = %shared.name,
                    path = %shared.path.display(),
                    restart_in_ms = backoff.as_millis(),
                    "isolated plugin {}: cannot restart its process: {reason}; next attempt in \
                     {} ms",
                    shared.name,
                    backoff.as_millis(),
                ),
            }
        };
        tracing::info!(plugin = %shared.name, "isolated plugin {}: its process was restarted", shared.name);
        shared.set_link(Link::Up(process.connection.clone()), || Wake::Up);
    }
}

/// Waits `pause`; true if the plugin was stopped meanwhile.
fn stopped_during(events: &Receiver<Event>, pause: Duration) -> bool {
    let until = Instant::now() + pause;
    loop {
        match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return true,
            // Readers of earlier processes.
            Ok(Event::Ended { .. }) => {}
            Err(RecvTimeoutError::Timeout) => return false,
        }
    }
}

/// Stops a serving process: closes its stdin (it exits when its stdin ends), waits for it a
/// while, then kills it.
fn stop(events: &Receiver<Event>, mut process: Process) {
    process.connection.close_stdin();
    let until = Instant::now() + STOP_GRACE;
    loop {
        match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Ended { generation, .. }) if generation == process.generation => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = process.child.kill();
    let _ = process.child.wait();
    process.connection.close("was stopped");
}

/// Makes sure the process whose reader stopped (`how`) is gone, and says how it ended.
fn reap(child: &mut Child, how: Ended) -> String {
    // A process whose stdout closed has almost always exited (its status is kept); one that
    // broke the protocol, or closed its stdout and runs on, is of no use any more.
    let _ = child.kill();
    let status = describe(child.wait());
    match how {
        Ended::Closed => status,
        Ended::Broken(why) => format!("broke the protocol ({why}) and was stopped"),
    }
}

/// "exited with code 1", "was killed by signal 6 (SIGABRT)".
fn describe(status: io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => {
                format!("was killed by signal {signal} ({})", signal_name(signal))
            }
            (None, None) => format!("ended ({status})"),
        },
        Err(error) => format!("ended (its exit status is unknown: {error})"),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL, e.g. the out-of-memory killer",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        _ => "see `kill -l`",
    }
}

impl Launcher {
    /// Starts process number `generation` and waits until it is ready.
    fn launch(&self, generation: u64) -> Result<Process, String> {
        let dir = private_dir().map_err(|error| {
            format!("cannot create a directory for its library in the temp directory: {error}")
        })?;
        let library = dir.join(&self.file_name);
        let started = fs::write(&library, &self.image)
            .map_err(|error| format!("cannot write {}: {error}", library.display()))
            .and_then(|()| self.spawn(&library, generation));
        // The process has loaded its own private copy by now (or failed): this one is done.
        let _ = fs::remove_dir_all(&dir);
        started
    }

    fn spawn(&self, library: &Path, generation: u64) -> Result<Process, String> {
        let mut child = Command::new(&self.program)
            // What `ps` shows, rather than `/proc/self/exe`.
            .arg0("turnstile")
            .args(&self.args)
            .arg("plugin-host")
            .arg(library)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|error| format!("cannot run {}: {error}", self.program.display()))?;
        // Both were asked for as pipes just above, so both are there.
        let stdin = child.stdin.take().expect("a piped stdin");
        let stdout = child.stdout.take().expect("a piped stdout");
        let connection = Connection::new(stdin);
        let (first, ready) = mpsc::channel();
        let reading = connection.clone();
        let events = self.events.clone();
        let reader = thread::Builder::new()
            .name(format!("isolate-{}-{generation}", self.name))
            .spawn(move || {
                let how = connection::read(stdout, &reading, first);
                // Fails only once the supervisor is gone, when nobody cares any more.
                let _ = events.send(Event::Ended { generation, how });
            });
        let failed = |mut child: Child, reason: String| {
            let _ = child.kill();
            let _ = child.wait();
            connection.close("did not start");
            Err(reason)
        };
        if let Err(error) = reader {
            return failed(child, format!("cannot start a thread to read it: {error}"));
        }
        match ready.recv_timeout(START_TIMEOUT) {
            Ok(FromChild::Ready { manifest }) if manifest == self.manifest => Ok(Process {
                child,
                connection,
                generation,
                started: Instant::now(),
            }),
            Ok(FromChild::Ready { .. }) => failed(
                child,
                "its process reported another manifest than the library loaded in the server"
                    .into(),
            ),
            Ok(FromChild::LoadFailed { message }) => failed(
                child,
                format!("its process could not load the library: {message}"),
            ),
            Ok(_) => failed(child, "its process broke the protocol at start".into()),
            Err(RecvTimeoutError::Timeout) => failed(
                child,
                format!(
                    "its process was not ready within {} s",
                    START_TIMEOUT.as_secs()
                ),
            ),
            Err(RecvTimeoutError::Disconnected) => {
                let _ = child.kill();
                let how = describe(child.wait());
                connection.close("did not start");
                Err(format!("its process {how} before it was ready"))
            }
        }
    }
}

/// A new directory only this user can enter, in the temp directory.
fn private_dir() -> io::Result<PathBuf> {
    /// Distinguishes the directories one process makes; the process id distinguishes processes.
    static NEXT_DIR: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("turnstile-{}-{n}-isolated", std::process::id()));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_read_as_what_happened() {
        assert_eq!(
            describe(Ok(ExitStatus::from_raw(libc::SIGABRT))),
            "was killed by signal 6 (SIGABRT)"
        );
        // A wait status holds the exit code in its second byte.
        assert_eq!(
            describe(Ok(ExitStatus::from_raw(3 << 8))),
            "exited with code 3"
        );
    }

    #[test]
    fn a_program_that_is_not_a_plugin_host_is_refused_with_its_exit_status() {
        let (events, _heard) = mpsc::channel();
        let launcher = Launcher {
            name: "p".into(),
            // `sh -c 'exit 3' plugin-host LIBRARY`: exits at once, saying nothing.
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "exit 3".into()],
            file_name: "libp.so".into(),
            image: b"not a library".to_vec(),
            manifest: Manifest::new("p", "1"),
            events,
        };
        let error = launcher.launch(1).err().expect("no process");
        assert_eq!(error, "its process exited with code 3 before it was ready");
    }
}
