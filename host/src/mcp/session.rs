//! One MCP session as the host sees it: an id, a way to notify it, and a clean end.

use std::{
    collections::BTreeSet,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
};

use rmcp::{
    Peer, RoleServer,
    model::ResourceUpdatedNotificationParam,
    service::{SubscriptionSendError, SubscriptionSink},
};

use crate::{
    actors::{InstanceKey, Listener, Notice, Owner, Runtime, SessionId},
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
    /// One for the session's whole life (the notifier keeps the first listener it is given),
    /// pointed at whichever handler serves the session now.
    listener: Arc<PeerListener>,
    /// Handle-keyed instances this session has touched, for `tools/list` without a handle.
    /// A std mutex: it is held for an insert or a copy, never across an await.
    touched: Mutex<BTreeSet<InstanceKey>>,
    /// The least severe plugin log message the client wants (`logging/setLevel`).
    log_level: Mutex<LogLevel>,
}

impl SessionScope {
    pub fn new(runtime: Runtime) -> Self {
        SessionScope {
            id: SessionId::new(),
            runtime,
            listener: Arc::new(PeerListener(Mutex::new(None))),
            touched: Mutex::new(BTreeSet::new()),
            log_level: Mutex::new(DEFAULT_LOG_LEVEL),
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
        self.listener.bind_if_unbound(peer);
        self.listener.clone()
    }

    /// The session's handler is gone while the session lives on (passivated): until a new
    /// handler serves it, its notices are dropped (it has no stream to carry them).
    pub fn unbind(&self) {
        self.listener.set(None);
    }

    /// A new handler serves the session (restored from passivation): notices go to its peer.
    pub fn rebind(&self, peer: &Peer<RoleServer>) {
        self.listener.set(Some(peer.clone()));
    }
}

impl Drop for SessionScope {
    fn drop(&mut self) {
        tracing::debug!(session = %self.id, "session ended");
        self.runtime.session_ended(&self.id);
    }
}

/// Sends a session's notices to the peer of the handler serving it, if one does.
struct PeerListener(Mutex<Option<Peer<RoleServer>>>);

impl PeerListener {
    fn set(&self, peer: Option<Peer<RoleServer>>) {
        // A std mutex: held for an assignment or a clone, never across an await.
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = peer;
    }

    fn bind_if_unbound(&self, peer: &Peer<RoleServer>) {
        let mut bound = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if bound.is_none() {
            *bound = Some(peer.clone());
        }
    }
}

impl Listener for PeerListener {
    fn notify(&self, notice: Notice) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let peer = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(async move {
            // Passivated: nobody to tell, and not gone (a gone session is forgotten on error).
            let Some(peer) = peer else {
                return Ok(());
            };
            let sent = match notice {
                Notice::ToolsChanged => peer.notify_tool_list_changed().await,
                Notice::PromptsChanged => peer.notify_prompt_list_changed().await,
                Notice::ResourcesChanged => peer.notify_resource_list_changed().await,
                Notice::ResourceUpdated(uri) => {
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(&*uri))
                        .await
                }
            };
            sent.map_err(|error| error.to_string())
        })
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
    fn notify(&self, notice: Notice) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let sink = self.0.clone();
        Box::pin(async move {
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
        })
    }
}
