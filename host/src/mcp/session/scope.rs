//! One MCP session as the host sees it: an id, a way to notify it, and a clean end.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use rmcp::{
    Peer, RoleServer,
    model::RequestId,
    service::{SubscriptionSendError, SubscriptionSink},
};
use tokio_util::sync::CancellationToken;

use super::outbox::Outbox;
use crate::{
    actors::{InstanceKey, Listener, Notice, Owner, Runtime, Sending, SessionId},
    plugin::LogLevel,
};

/// The log level of a session that has not sent `logging/setLevel` (MCP leaves it to the
/// server): the plugins' info and above.
pub const DEFAULT_LOG_LEVEL: LogLevel = LogLevel::Info;

/// Lives as long as the session: held by its handler (rmcp drops the handler when the session
/// ends: DELETE, idle timeout, closed stdio) and, over HTTP, by the session's record
/// (`session_records.rs`), which keeps it while the session is passivated, with no handler.
/// The last drop unsubscribes the session and ends its session-keyed instances, so an ended
/// session leaves nothing behind.
pub struct SessionScope {
    pub id: SessionId,
    runtime: Runtime,
    /// One for the session's whole life (the notifier keeps the first listener it is given):
    /// where its messages go, through whichever handler or stream serves it now.
    outbox: Arc<Outbox>,
    /// Handle-keyed instances this session has touched, for `tools/list` without a handle.
    /// A std mutex: it is held for an insert or a copy, never across an await.
    touched: Mutex<BTreeSet<InstanceKey>>,
    /// The least severe plugin log message the client wants (`logging/setLevel`).
    log_level: Mutex<LogLevel>,
    /// Requests served outside rmcp's service loop (`direct.rs`), by id, for
    /// `notifications/cancelled` to reach them. A std mutex: held for an insert or a removal.
    cancellable: Mutex<HashMap<RequestId, CancellationToken>>,
}

impl SessionScope {
    pub fn new(runtime: Runtime) -> Self {
        SessionScope::with_outbox(runtime, Arc::new(Outbox::new()))
    }

    /// A session whose messages go to `outbox` (an HTTP session's, made when it opened).
    pub fn with_outbox(runtime: Runtime, outbox: Arc<Outbox>) -> Self {
        SessionScope {
            id: SessionId::new(),
            runtime,
            outbox,
            touched: Mutex::new(BTreeSet::new()),
            log_level: Mutex::new(DEFAULT_LOG_LEVEL),
            cancellable: Mutex::new(HashMap::new()),
        }
    }

    /// Request `id` of this session can be cancelled through `token` until the returned guard
    /// is dropped (rmcp keeps such a table for the requests its service loop serves).
    pub fn cancellable(&self, id: RequestId, token: CancellationToken) -> Cancellable<'_> {
        self.cancellable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), token);
        Cancellable { scope: self, id }
    }

    /// The client cancelled request `id` (`notifications/cancelled`): if it is one served
    /// outside rmcp's service loop and still running, its token is cancelled.
    pub fn cancel(&self, id: &RequestId) {
        let token = self
            .cancellable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(token) = token {
            tracing::debug!(session = %self.id, request = %id, "request cancelled");
            token.cancel();
        }
    }

    pub fn log_level(&self) -> LogLevel {
        *self
            .log_level
            .lock()
            .expect("no panic while holding this lock")
    }

    pub fn set_log_level(&self, level: LogLevel) {
        *self
            .log_level
            .lock()
            .expect("no panic while holding this lock") = level;
    }

    /// Remembers a handle-keyed instance (session-keyed ones are found from the session id).
    pub fn touch(&self, key: &InstanceKey) {
        if matches!(key.owner, Owner::Handle(_)) {
            self.touched
                .lock()
                .expect("no panic while holding this lock")
                .insert(key.clone());
        }
    }

    /// Drops `key` from the instances this session touched: it is gone (deleted, expired, or
    /// its workflow no longer loaded), and a listing must not fail on it for ever.
    pub fn forget(&self, key: &InstanceKey) {
        self.touched
            .lock()
            .expect("no panic while holding this lock")
            .remove(key);
    }

    /// The handle-keyed instances this session has touched.
    pub fn touched(&self) -> Vec<InstanceKey> {
        self.touched
            .lock()
            .expect("no panic while holding this lock")
            .iter()
            .cloned()
            .collect()
    }

    /// The session's listener, sending to `peer` unless it already sends to a peer of this
    /// session's (every request of one handler carries the same peer).
    pub fn listener(&self, peer: &Peer<RoleServer>) -> Arc<dyn Listener> {
        self.outbox.bind_if_unbound(peer);
        self.outbox.clone()
    }

    /// Where the session's messages go (its event stream's side: `event_stream.rs`).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The session's handler is gone while the session lives on (passivated): until a new
    /// handler serves it, its notices are dropped, unless its event stream is open
    /// ([`Outbox::passivate`]).
    pub fn unbind(&self) {
        self.outbox.passivate();
    }

    /// A new handler serves the session (restored from passivation): notices go to its peer.
    pub fn rebind(&self, peer: &Peer<RoleServer>) {
        self.outbox.restore(peer);
    }
}

impl Drop for SessionScope {
    fn drop(&mut self) {
        tracing::debug!(session = %self.id, "session ended");
        self.runtime.session_ended(&self.id);
    }
}

/// A request that [`SessionScope::cancel`] can reach, until dropped.
pub struct Cancellable<'a> {
    scope: &'a SessionScope,
    id: RequestId,
}

impl Drop for Cancellable<'_> {
    fn drop(&mut self) {
        self.scope
            .cancellable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// Sends notices on a 2026-07-28 `subscriptions/listen` stream: those its filter accepted (a
/// listen that asked for tools only is not sent the others; that is no error).
pub struct SinkListener(SubscriptionSink);

impl SinkListener {
    pub fn new(sink: SubscriptionSink) -> Self {
        SinkListener(sink)
    }
}

impl Listener for SinkListener {
    fn notify(&self, notice: Notice) -> Sending {
        let sink = self.0.clone();
        Sending::Later(Box::pin(async move {
            let sent = match notice {
                Notice::ToolsChanged => sink.notify_tool_list_changed().await,
                Notice::PromptsChanged => sink.notify_prompt_list_changed().await,
                Notice::ResourcesChanged => sink.notify_resource_list_changed().await,
                Notice::ResourceUpdated(uri) => sink.notify_resource_updated(&*uri).await,
            };
            match sent {
                Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => Ok(()),
                Err(error) => Err(error.to_string()),
            }
        }))
    }
}
