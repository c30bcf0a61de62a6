//! One MCP session as the host sees it: an id, a way to notify it, and a clean end.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
};

use rmcp::{Peer, RoleServer};

use crate::actors::{Listener, Runtime, SessionId};

/// Lives exactly as long as the session's handler: rmcp drops the handler when the session ends
/// (DELETE, idle timeout, closed stdio), and the drop unsubscribes the session and ends its
/// session-keyed instances, so an ended session leaves nothing behind.
pub struct SessionScope {
    pub id: SessionId,
    runtime: Runtime,
    listener: OnceLock<Arc<dyn Listener>>,
}

impl SessionScope {
    pub fn new(runtime: Runtime) -> Self {
        SessionScope {
            id: SessionId::new(),
            runtime,
            listener: OnceLock::new(),
        }
    }

    /// The session's listener, made from the first request's peer (every request of one session
    /// carries the same peer).
    pub fn listener(&self, peer: &Peer<RoleServer>) -> Arc<dyn Listener> {
        self.listener
            .get_or_init(|| Arc::new(PeerListener(peer.clone())))
            .clone()
    }
}

impl Drop for SessionScope {
    fn drop(&mut self) {
        tracing::debug!(session = %self.id, "session ended");
        self.runtime.session_ended(&self.id);
    }
}

/// Sends `notifications/tools/list_changed` to one session's peer.
struct PeerListener(Peer<RoleServer>);

impl Listener for PeerListener {
    fn tools_changed(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let peer = self.0.clone();
        Box::pin(async move {
            peer.notify_tool_list_changed()
                .await
                .map_err(|error| error.to_string())
        })
    }
}
