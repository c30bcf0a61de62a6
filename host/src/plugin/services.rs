//! Host services (ABI 1.1): what a plugin may ask of the host while one of its calls runs — log
//! to the client, report progress, ask whether the call was cancelled.
//!
//! The plugin gets a `RawHostServices` struct whose `call` field is an id, not a pointer: the id
//! names a [`HostCall`] in a table of live calls for exactly as long as the plugin's `call` runs,
//! so a plugin that keeps the services and uses them after its call returned (or from a thread
//! that outlives it) reaches nothing and gets an error status instead of freed memory.
//!
//! This module only moves what the plugin said to the request waiting for the call (or, in an
//! isolated plugin's process, onto the pipe to the server); what the client sees of it (levels,
//! progress tokens, the order against the result) is the MCP layer's business.

use std::{
    collections::VecDeque,
    ffi::{CStr, c_char, c_void},
    future::poll_fn,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, LazyLock, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Poll, Waker},
};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use turnstile_plugin_abi::{
    LogLevel,
    abi::{RawHostServices, Status},
};

use crate::fast_hash::ConcurrentMap;

/// Something a plugin said during a call, for the client.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    Log {
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
}

/// The host's side of one call's services: where the plugin's events go, and whether the call
/// was cancelled.
pub struct HostCall {
    events: Events,
    cancelled: CancellationToken,
}

/// Where a call's events go.
enum Events {
    /// Held for the request being answered (the server's own calls), which takes them through
    /// the call's [`EventReceiver`].
    Held(Mutex<Held>),
    /// Onward to another process: an isolated plugin's process relays what its plugin says to
    /// the server (`child.rs`). Returns whether the event went out.
    Relay(Box<dyn Fn(CallEvent) -> bool + Send + Sync>),
}

/// What a plugin said that its request has not taken yet. A queue inside the call rather than a
/// channel beside it: most calls say nothing, and a channel costs them an allocation and a
/// wake-up of the request's task when the call's end drops its sender.
#[derive(Default)]
struct Held {
    said: VecDeque<CallEvent>,
    /// The request's task, waiting for the next event.
    waiting: Option<Waker>,
    /// The request took its last event: what is said from now on is not for it.
    closed: bool,
}

impl HostCall {
    /// A call whose events arrive on the returned receiver, cancelled when `cancelled` is.
    pub fn new(cancelled: CancellationToken) -> (Arc<HostCall>, EventReceiver) {
        let events = Events::Held(Mutex::default());
        let call = Arc::new(HostCall { events, cancelled });
        (Arc::clone(&call), EventReceiver(call))
    }

    /// A call whose events are handed to `relay`, cancelled when `cancelled` is.
    pub(super) fn relayed(
        cancelled: CancellationToken,
        relay: impl Fn(CallEvent) -> bool + Send + Sync + 'static,
    ) -> Arc<HostCall> {
        let events = Events::Relay(Box::new(relay));
        Arc::new(HostCall { events, cancelled })
    }

    /// Tells the plugin (through `is_cancelled`) that its work is no longer wanted.
    pub fn cancel(&self) {
        self.cancelled.cancel();
    }

    /// Whether the call's work is no longer wanted (its client cancelled it).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    /// Cancelled once the call's work is no longer wanted.
    pub(super) fn cancellation(&self) -> &CancellationToken {
        &self.cancelled
    }

    /// Hands `event` on to whoever follows the call.
    pub(super) fn send(&self, event: CallEvent) -> Status {
        // Once the client's request is answered nobody takes events; the plugin need not care.
        let sent = match &self.events {
            Events::Held(held) => {
                let mut held = lock(held);
                if held.closed {
                    false
                } else {
                    held.said.push_back(event);
                    let waiting = held.waiting.take();
                    drop(held);
                    if let Some(waiting) = waiting {
                        waiting.wake();
                    }
                    true
                }
            }
            Events::Relay(relay) => relay(event),
        };
        if sent { Status::OK } else { Status::INTERNAL }
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The request's end of a call's events ([`HostCall::new`]): what the plugin says, in order.
/// Dropping it closes the call to further events.
pub struct EventReceiver(Arc<HostCall>);

impl EventReceiver {
    fn held(&self) -> &Mutex<Held> {
        match &self.0.events {
            Events::Held(held) => held,
            Events::Relay(_) => unreachable!("a receiver is made only for held events"),
        }
    }

    /// The next event the plugin says; `None` once closed and empty.
    pub async fn recv(&mut self) -> Option<CallEvent> {
        poll_fn(|context| {
            let mut held = lock(self.held());
            if let Some(event) = held.said.pop_front() {
                return Poll::Ready(Some(event));
            }
            if held.closed {
                return Poll::Ready(None);
            }
            match &mut held.waiting {
                Some(waiting) if waiting.will_wake(context.waker()) => {}
                waiting => *waiting = Some(context.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// An event already said, if there is one.
    pub fn try_recv(&mut self) -> Option<CallEvent> {
        lock(self.held()).said.pop_front()
    }

    /// Takes no further events: what the plugin says from now on is refused. What was said
    /// before is still there to take.
    pub fn close(&mut self) {
        let mut held = lock(self.held());
        held.closed = true;
        held.waiting = None;
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for HostCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCall")
            .field("relayed", &matches!(self.events, Events::Relay(_)))
            .field("cancelled", &self.cancelled.is_cancelled())
            .finish()
    }
}

/// The calls running right now, by the id their plugin holds.
static LIVE_CALLS: LazyLock<ConcurrentMap<usize, Arc<HostCall>>> =
    LazyLock::new(ConcurrentMap::default);

/// Ids start at 1, so a plugin never sees 0 (which reads like NULL) for a live call.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// A call's entry in the live table, and the struct handed to the plugin. Removing the entry on
/// drop is what makes the services inert once the plugin's `call` has returned.
pub(super) struct Registered {
    id: usize,
    pub raw: RawHostServices,
}

impl Registered {
    pub fn new(call: Arc<HostCall>) -> Registered {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        LIVE_CALLS.insert(id, call);
        Registered {
            id,
            raw: RawHostServices {
                struct_size: size_of::<RawHostServices>(),
                call: id as *const c_void,
                log: Some(host_log),
                progress: Some(host_progress),
                is_cancelled: Some(host_is_cancelled),
            },
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        LIVE_CALLS.remove(&self.id);
    }
}

/// Runs `body` with the live call named `call`, or answers `missing` for a stale id. Panics are
/// caught: these functions are called from plugin code through `extern "C"`.
fn with_call<T>(call: *const c_void, missing: T, body: impl FnOnce(&HostCall) -> T) -> T {
    let Some(entry) = LIVE_CALLS.get(&(call as usize)).map(|entry| entry.clone()) else {
        return missing;
    };
    catch_unwind(AssertUnwindSafe(|| body(&entry))).unwrap_or(missing)
}

/// Borrows an optional NUL-terminated UTF-8 string.
///
/// # Safety
///
/// `ptr` is null or NUL-terminated and live for `'a`.
unsafe fn optional_str<'a>(ptr: *const c_char) -> Result<Option<&'a str>, ()> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees `ptr` is NUL-terminated and live.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map(Some)
        .map_err(|_| ())
}

/// `log` of `RawHostServices`.
///
/// # Safety
///
/// The string arguments are null or NUL-terminated and live for the duration of the call.
unsafe extern "C" fn host_log(
    call: *const c_void,
    level: *const c_char,
    logger: *const c_char,
    data_json: *const c_char,
) -> Status {
    with_call(call, Status::INTERNAL, |host| {
        // SAFETY: the caller (the plugin) passes null or live NUL-terminated strings.
        let (level, logger, data) = unsafe {
            match (
                optional_str(level),
                optional_str(logger),
                optional_str(data_json),
            ) {
                (Ok(level), Ok(logger), Ok(data)) => (level, logger, data),
                _ => return Status::BAD_INPUT,
            }
        };
        let Some(level) = level.and_then(LogLevel::parse) else {
            return Status::BAD_INPUT;
        };
        let Ok(data) = serde_json::from_str::<Value>(data.unwrap_or("null")) else {
            return Status::BAD_INPUT;
        };
        host.send(CallEvent::Log {
            level,
            logger: logger.map(str::to_owned),
            data,
        })
    })
}

/// `progress` of `RawHostServices`.
///
/// # Safety
///
/// `message` is null or NUL-terminated and live for the duration of the call.
unsafe extern "C" fn host_progress(
    call: *const c_void,
    progress: f64,
    total: f64,
    message: *const c_char,
) -> Status {
    with_call(call, Status::INTERNAL, |host| {
        // SAFETY: the caller (the plugin) passes null or a live NUL-terminated string.
        let Ok(message) = (unsafe { optional_str(message) }) else {
            return Status::BAD_INPUT;
        };
        if !progress.is_finite() {
            return Status::BAD_INPUT;
        }
        host.send(CallEvent::Progress {
            progress,
            total: (total.is_finite() && total >= 0.0).then_some(total),
            message: message.map(str::to_owned),
        })
    })
}

/// `is_cancelled` of `RawHostServices`.
extern "C" fn host_is_cancelled(call: *const c_void) -> i32 {
    with_call(call, 0, |host| i32::from(host.cancelled.is_cancelled()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_reach_the_call_only_while_it_is_registered() {
        let (call, mut events) = HostCall::new(CancellationToken::new());
        let registered = Registered::new(call.clone());
        let raw = &registered.raw;
        let log = raw.log.unwrap();
        // SAFETY: live NUL-terminated strings, as the ABI requires.
        let status = unsafe {
            log(
                raw.call,
                c"warning".as_ptr(),
                std::ptr::null(),
                c"\"hi\"".as_ptr(),
            )
        };
        assert_eq!(status, Status::OK);
        assert_eq!(
            events.try_recv(),
            Some(CallEvent::Log {
                level: LogLevel::Warning,
                logger: None,
                data: Value::from("hi")
            })
        );
        // SAFETY: as above.
        let bad = unsafe { log(raw.call, c"loud".as_ptr(), std::ptr::null(), c"1".as_ptr()) };
        assert_eq!(bad, Status::BAD_INPUT, "an unknown level is refused");
        let is_cancelled = raw.is_cancelled.unwrap();
        // SAFETY: no pointer arguments besides the id.
        assert_eq!(unsafe { is_cancelled(raw.call) }, 0);
        call.cancel();
        // SAFETY: as above.
        assert_eq!(unsafe { is_cancelled(raw.call) }, 1);
        let stale = raw.call;
        drop(registered);
        // SAFETY: as above; the id is stale now, which the host must tolerate.
        let late = unsafe { log(stale, c"info".as_ptr(), std::ptr::null(), c"1".as_ptr()) };
        assert_eq!(
            late,
            Status::INTERNAL,
            "a finished call's services do nothing"
        );
        assert_eq!(events.try_recv(), None);
    }

    fn line(n: u64) -> CallEvent {
        CallEvent::Log {
            level: LogLevel::Info,
            logger: None,
            data: Value::from(n),
        }
    }

    #[tokio::test]
    async fn the_request_takes_what_was_said_in_order_until_it_closes() {
        let (call, mut events) = HostCall::new(CancellationToken::new());
        let plugin = {
            let call = Arc::clone(&call);
            std::thread::spawn(move || {
                for n in 1..=3 {
                    assert_eq!(call.send(line(n)), Status::OK);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        };
        // Waits for each one: the plugin's thread wakes the request's task.
        for n in 1..=3 {
            assert_eq!(events.recv().await, Some(line(n)));
        }
        plugin.join().unwrap();
        assert_eq!(call.send(line(4)), Status::OK);
        events.close();
        assert_eq!(
            call.send(line(5)),
            Status::INTERNAL,
            "said after the request closed"
        );
        assert_eq!(events.try_recv(), Some(line(4)), "said before it closed");
        assert_eq!(events.recv().await, None);
        drop(events);
        assert_eq!(call.send(line(6)), Status::INTERNAL);
    }
}
