//! Which principal opened each HTTP session, so that only that principal may use it.
//!
//! With authentication on, an `Mcp-Session-Id` is a session's name, not a credential: a second
//! principal who learns it (from a log, a proxy, a shared machine) must not reach the first
//! one's session-keyed instances or its event stream. So a session belongs to the principal
//! whose `initialize` opened it, and a request of another principal naming it is answered as
//! if the session did not exist (404, the answer for an ended session), so that it cannot even
//! learn that the id is live. Handle-keyed instances carry their principal in their key instead
//! (`actors::Tenant`).
//!
//! Entries of sessions that ended are dropped in passing: every [`PRUNE_EVERY`] sessions opened,
//! the map keeps only the sessions the server still holds (live or passivated). The map is only written when a session
//! opens and read once per request.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use dashmap::DashMap;

use super::session_records::SessionRecords;
use crate::mcp::auth::principal::Principal;

/// How many sessions open between two prunings of ended sessions' entries.
const PRUNE_EVERY: usize = 1024;

/// The principal of every session opened while authentication is on.
#[derive(Default)]
pub struct SessionOwners {
    owners: DashMap<Arc<str>, Principal>,
    opened: AtomicUsize,
}

impl SessionOwners {
    /// Records that `principal` opened `session`; now and then drops the entries of sessions
    /// that `sessions` no longer serves.
    pub fn opened(&self, session: &str, principal: Principal, sessions: &SessionRecords) {
        self.owners.insert(session.into(), principal);
        if self.opened.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.owners.retain(|session, _| sessions.exists(session));
        }
    }

    /// Whether `session` was opened by a principal other than `principal`. A session opened
    /// without one (authentication came on later, it cannot) or not known here is no one's.
    pub fn is_foreign(&self, session: &str, principal: Option<&Principal>) -> bool {
        match (self.owners.get(session), principal) {
            (Some(owner), Some(principal)) => *owner != *principal,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Forgets `session` (it was deleted).
    pub fn ended(&self, session: &str) {
        self.owners.remove(session);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

    use super::*;

    fn no_sessions() -> Arc<SessionRecords> {
        SessionRecords::new(
            Arc::new(LocalSessionManager::default()),
            None,
            Duration::from_secs(300),
        )
    }

    #[tokio::test]
    async fn a_session_is_its_openers_alone() {
        let owners = SessionOwners::default();
        let sessions = no_sessions();
        let alice = Principal("alice".into());
        owners.opened("s1", alice.clone(), &sessions);
        assert!(!owners.is_foreign("s1", Some(&alice)));
        assert!(owners.is_foreign("s1", Some(&Principal("bob".into()))));
        assert!(owners.is_foreign("s1", None));
        assert!(
            !owners.is_foreign("unknown", Some(&alice)),
            "rmcp answers unknown ids"
        );
        owners.ended("s1");
        assert!(!owners.is_foreign("s1", Some(&Principal("bob".into()))));
    }

    #[tokio::test]
    async fn entries_of_ended_sessions_are_pruned() {
        let owners = SessionOwners::default();
        let sessions = no_sessions();
        for n in 0..PRUNE_EVERY {
            owners.opened(&format!("s{n}"), Principal("alice".into()), &sessions);
        }
        // None of them is served by `sessions`: the PRUNE_EVERY-th opening dropped them all.
        assert_eq!(owners.len(), 0);
    }
}
