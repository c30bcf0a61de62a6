//! Names of instances and sessions.

use std::{fmt, sync::Arc};

/// One MCP session (HTTP) or connection (stdio), as the host names it internally.
///
/// Minted by the MCP layer when a session starts; it never leaves the server, so it need not be
/// the transport's own session id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// A fresh random id.
    pub fn new() -> Self {
        SessionId(uuid::Uuid::new_v4().simple().to_string().into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The store-key prefix shared by all session-keyed instances.
pub const SESSION_PREFIX: &str = "session/";

/// Who an instance belongs to, which decides how long it lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// Keyed by a session: it ends, and is deleted, when the session ends.
    Session(SessionId),
    /// Keyed by a handle the client carries: it outlives sessions.
    Handle(Arc<str>),
}

/// One workflow instance: which workflow, and whose.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceKey {
    pub workflow: Arc<str>,
    pub owner: Owner,
}

impl InstanceKey {
    pub fn for_session(session: &SessionId, workflow: &str) -> Self {
        InstanceKey {
            workflow: workflow.into(),
            owner: Owner::Session(session.clone()),
        }
    }

    /// The key under which the instance is stored. Session-keyed instances share the prefix
    /// `session/`, so an operator (or start-up clean-up) can find them all.
    pub fn store_key(&self) -> String {
        match &self.owner {
            Owner::Session(session) => format!("{SESSION_PREFIX}{session}/{}", self.workflow),
            Owner::Handle(handle) => format!("handle/{handle}"),
        }
    }

    /// What a plugin sees as the instance handle in its call context.
    pub fn handle(&self) -> String {
        match &self.owner {
            Owner::Session(session) => format!("session:{session}"),
            Owner::Handle(handle) => handle.to_string(),
        }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.store_key())
    }
}
