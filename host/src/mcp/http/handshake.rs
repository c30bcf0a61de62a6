//! Sessions whose handshake is not finished: opened by `initialize`, not yet confirmed by the
//! client's `notifications/initialized`.
//!
//! rmcp keeps such a session for the whole session idle timeout, and each one holds memory and a
//! place under `--max-sessions`; a client (or an attacker) that sends only `initialize` could fill
//! the server with them. So every new session is noted here when rmcp answers its `initialize`,
//! and ended `--handshake-timeout` later unless its `notifications/initialized` came first.
//!
//! `http/endpoint.rs` reports both events; this module owns the set of pending sessions and the
//! timers. It must not look at a session after its handshake: a finished session costs nothing
//! here.

use std::{sync::Arc, time::Duration};

use rmcp::transport::streamable_http_server::session::SessionId;

use super::session_records::SessionRecords;
use crate::fast_hash::ConcurrentSet;

/// The sessions still waiting for their client's `notifications/initialized`.
pub struct Handshakes {
    pending: ConcurrentSet<SessionId>,
    timeout: Duration,
    sessions: Arc<SessionRecords>,
}

impl Handshakes {
    pub fn new(sessions: Arc<SessionRecords>, timeout: Duration) -> Arc<Handshakes> {
        Arc::new(Handshakes {
            pending: ConcurrentSet::default(),
            timeout,
            sessions,
        })
    }

    /// rmcp opened session `id` for an `initialize`: it has `timeout` to finish its handshake.
    pub fn begun(self: &Arc<Self>, id: SessionId) {
        self.pending.insert(id.clone());
        let handshakes = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(handshakes.timeout).await;
            if handshakes.pending.remove(&id).is_some() {
                tracing::debug!(session = %id, "ending a session that never finished its handshake");
                handshakes.sessions.end(&id).await;
            }
        });
    }

    /// Whether session `id` has not finished its handshake yet.
    pub fn is_pending(&self, id: &str) -> bool {
        !self.pending.is_empty() && self.pending.contains(id)
    }

    /// The client of session `id` sent `notifications/initialized`.
    pub fn finished(&self, id: &str) {
        self.pending.remove(id);
    }

    /// How many sessions are waiting for their handshake to finish.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// Whether `body` is the `notifications/initialized` message.
pub fn is_initialized_notification(body: &[u8]) -> bool {
    is_method(body, "notifications/initialized")
}

/// Whether `body` is a JSON-RPC message of `method` (read without building the message).
pub fn is_method(body: &[u8], method: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
    }
    serde_json::from_slice::<Message<'_>>(body).is_ok_and(|message| message.method == Some(method))
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_server::session::{
        SessionManager, local::LocalSessionManager,
    };

    use super::*;

    #[test]
    fn only_the_initialized_notification_finishes_a_handshake() {
        assert!(is_initialized_notification(
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
        ));
        assert!(!is_initialized_notification(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#
        ));
        assert!(!is_initialized_notification(b"not json"));
    }

    #[tokio::test]
    async fn an_unfinished_handshake_ends_its_session_and_a_finished_one_is_kept() {
        let sessions = Arc::new(LocalSessionManager::default());
        let records = SessionRecords::new(sessions.clone(), None, Duration::from_secs(300));
        let handshakes = Handshakes::new(records, Duration::from_millis(100));
        let (lagging, _lagging_transport) = sessions.create_session().await.unwrap();
        let (prompt, _prompt_transport) = sessions.create_session().await.unwrap();
        handshakes.begun(lagging.clone());
        handshakes.begun(prompt.clone());
        assert_eq!(handshakes.pending(), 2);
        handshakes.finished(&prompt);
        assert!(!handshakes.is_pending(&prompt));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!sessions.has_session(&lagging).await.unwrap());
        assert!(sessions.has_session(&prompt).await.unwrap());
        assert_eq!(handshakes.pending(), 0);
    }
}
