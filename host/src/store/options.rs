//! What a store is opened with: timeouts, the namespace, durability and the audit trail's length.

use std::time::Duration;

use super::StoreError;

/// What an acknowledged save survives (see [`StateStore::durability`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durability {
    /// A restart of the store's server keeps it (a crash may still lose the last moment, as
    /// the sentence says).
    Kept(String),
    /// A restart of the store's server loses it.
    Lost(String),
}

/// Options for [`open`]. `Default` is what a server should use unless told otherwise.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Upper bound for every remote operation, reply included (default 2 s). A save that
    /// exceeds it returns [`StoreError::Unavailable`]; it may or may not have been applied.
    pub op_timeout: Duration,
    /// Upper bound for establishing one connection (default 2 s).
    pub connect_timeout: Duration,
    /// Names this deployment's data: the Redis key prefix (`{namespace}:…`, pub/sub channel
    /// `{namespace}:changed`) and the PostgreSQL table (`{namespace}_instances`). ASCII
    /// lowercase letters, digits and `_`, starting with a letter, at most 48 characters.
    /// Default `"turnstile"`. Tests use a unique one each so parallel runs do not collide.
    pub namespace: String,
    /// Maximum PostgreSQL connections (default 16).
    pub pool_size: usize,
    /// The audit entries kept per instance (`--audit-keep`, default [`DEFAULT_AUDIT_KEEP`]):
    /// a save that appends one drops those older than the last this many, so a long-lived
    /// instance's trail, and what reading it costs, stay bounded.
    pub audit_keep: u64,
    /// Redis only (`--redis-wait-replicas`): a save is acknowledged once this many replicas
    /// have it (`WAIT`), so a failover to one of them keeps it. 0: the primary's word is enough.
    pub redis_wait_replicas: u32,
}

/// The audit entries kept per instance unless configured otherwise.
pub const DEFAULT_AUDIT_KEEP: u64 = 1000;

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            namespace: "turnstile".to_owned(),
            pool_size: 16,
            audit_keep: DEFAULT_AUDIT_KEEP,
            redis_wait_replicas: 0,
        }
    }
}

impl StoreOptions {
    pub(super) fn check_namespace(&self) -> Result<(), StoreError> {
        let ns = &self.namespace;
        let ok = ns.len() <= 48
            && ns.starts_with(|c: char| c.is_ascii_lowercase())
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if ok {
            Ok(())
        } else {
            Err(StoreError::Config(format!(
                "namespace {ns:?} must be 1-48 of [a-z0-9_], starting with a letter"
            )))
        }
    }
}
