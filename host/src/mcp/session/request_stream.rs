//! A request's own stream: what its handler says about it before its result (a plugin's log
//! lines, its own `list_changed`), for the transport that serves the request to carry ahead of
//! the answer (`http/direct.rs`). Found in the request's `RequestContext` extensions; a request
//! without one (stdio, or served by rmcp's machinery) says such things through the session's
//! outbox or rmcp's peer instead.

use std::sync::{
    Arc, Mutex, PoisonError,
    atomic::{AtomicBool, Ordering},
};

use rmcp::model::ServerJsonRpcMessage;
use tokio::sync::Notify;

use super::sse;
use crate::actors::Notice;

/// What a request's handler said about it that its stream has not carried yet: SSE events, in
/// the order said. A lock and a buffer rather than a channel: most requests say nothing, and
/// this is all they pay for the chance.
#[derive(Default)]
struct Said {
    events: Mutex<Vec<u8>>,
    arrived: Notify,
    /// Something was said: the answer is a stream now, and cannot be handed to rmcp.
    said_any: AtomicBool,
    /// The handler asked for the request to be served by rmcp instead ([`RequestStream::reroute`]).
    rerouted: AtomicBool,
    /// This request may be handed to rmcp: `serve` kept its parts for that.
    reroutable: AtomicBool,
}

/// The stream of one request, for what its handler says about it before its result (a
/// plugin's log lines: `call_events.rs`).
#[derive(Clone, Default)]
pub struct RequestStream(Arc<Said>);

impl RequestStream {
    /// A stream for a request the transport may hand to rmcp to serve from the start
    /// (`reroutable`: it kept the request's parts for that).
    pub fn new(reroutable: bool) -> RequestStream {
        let stream = RequestStream::default();
        stream.0.reroutable.store(reroutable, Ordering::Relaxed);
        stream
    }

    /// What was said and not yet carried, taken.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.events.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Resolves when something was said since the last wait.
    pub async fn arrived(&self) {
        self.0.arrived.notified().await
    }

    /// Whether the handler asked for the request to be served by rmcp instead ([`Self::reroute`]).
    pub fn rerouted(&self) -> bool {
        self.0.rerouted.load(Ordering::Relaxed)
    }

    /// Sends `message` ahead of the request's result. What is said after the result is out (a
    /// thread the plugin left running) is never carried.
    pub fn send(&self, message: &ServerJsonRpcMessage) {
        self.send_event(&sse::message(message));
    }

    /// Sends `notice` ahead of the request's result (the caller's own move: `call_events.rs`).
    pub fn notice(&self, notice: &Notice) {
        self.send_event(&sse::notice(notice));
    }

    fn send_event(&self, event: &[u8]) {
        let mut events = self.0.events.lock().unwrap_or_else(PoisonError::into_inner);
        if self.0.rerouted.load(Ordering::Relaxed) {
            // rmcp serves the request from the start: this run's words are not the caller's.
            return;
        }
        self.0.said_any.store(true, Ordering::Relaxed);
        events.extend_from_slice(event);
        drop(events);
        self.0.arrived.notify_one();
    }

    /// Hands the request to rmcp, to be served from the start, once its handler returns: a call
    /// that must send the client requests related to it (`asking.rs`), which only rmcp's
    /// machinery routes. `false` when that is too late: something was said on this stream.
    pub fn reroute(&self) -> bool {
        let _events = self.0.events.lock().unwrap_or_else(PoisonError::into_inner);
        if self.0.said_any.load(Ordering::Relaxed) || !self.0.reroutable.load(Ordering::Relaxed) {
            return false;
        }
        self.0.rerouted.store(true, Ordering::Relaxed);
        true
    }
}
