//! Names of instances and sessions.

use std::{fmt, sync::Arc};

use crate::store::HANDLE_PREFIX;

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

/// The principal a handle-keyed instance belongs to, when authentication is on: the first 16
/// bytes of SHA-256 over the principal's name, as 32 hex digits.
///
/// It is part of the instance's key, so an instance is found only under the principal that
/// created it: another principal naming the same handle looks for a different key and finds
/// nothing, exactly as for a handle that never existed, in calls, listings, listens, on every
/// server sharing the store, with no ownership check to forget anywhere. A digest rather than
/// the name itself, because a name (a JWT `sub`) may hold any character and a store key may not.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The tenant of the principal named `principal`.
    pub fn of(principal: &str) -> Self {
        Tenant(sha256_hex16(principal).into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The first 16 bytes of SHA-256 over `text`, as 32 hex digits: a tenant, and a bare token's
/// principal (`mcp/auth/bearer.rs`).
pub fn sha256_hex16(text: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(32);
    for byte in &digest[..16] {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

impl InstanceKey {
    /// The key of one attempt to move this instance from `version` with `tool` and
    /// `arguments` (and the client's own idempotency key, if it gave one), for the services a
    /// plugin calls (ABI 1.4's `idempotency_key`): the same on every server and for every run
    /// of that attempt, different for anything else, so a retry with other arguments (or
    /// another client key) after a failure is a new attempt. A digest, so that neither the
    /// handle nor a session's id (both credentials) reaches an outside service. Computed for
    /// every call on an instance: one hash over the pieces, no copies of them.
    pub fn attempt_key(
        &self,
        version: u64,
        tool: &str,
        arguments: &serde_json::Value,
        client_key: Option<&str>,
    ) -> String {
        use sha2::{Digest, Sha256};
        use std::fmt::Write;
        let mut hasher = Sha256::new();
        let mut separator = [0; 4];
        for piece in self.store_key_pieces(&mut separator) {
            hasher.update(piece.as_bytes());
        }
        let version = version.to_string();
        let arguments = crate::catalog::canonical(arguments);
        for piece in [version.as_str(), tool, &arguments, client_key.unwrap_or("")] {
            hasher.update(b"\n");
            hasher.update(piece.as_bytes());
        }
        let digest = hasher.finalize();
        let mut hex = String::with_capacity(32);
        for byte in &digest[..16] {
            // Writing to a String cannot fail.
            let _ = write!(hex, "{byte:02x}");
        }
        hex
    }
}

/// Separates a handle from its tenant in a store key: never part of a handle. The store reads
/// tenants off keys by the same rule (`store::owner_of`), to count what each one holds.
const TENANT_SEPARATOR: char = crate::store::OWNER_SEPARATOR;

/// One workflow instance: which workflow, and whose.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceKey {
    pub workflow: Arc<str>,
    pub owner: Owner,
    /// The principal a handle-keyed instance belongs to (`None`: authentication is off, and the
    /// handle alone names it). Session-keyed instances have none: their session is owned instead.
    pub tenant: Option<Tenant>,
}

impl InstanceKey {
    pub fn for_session(session: &SessionId, workflow: &str) -> Self {
        InstanceKey {
            workflow: workflow.into(),
            owner: Owner::Session(session.clone()),
            tenant: None,
        }
    }

    /// A new instance of `workflow` under a freshly minted handle: `<workflow>-<32 hex digits>`,
    /// 128 bits from the OS's random source, so a handle cannot be guessed from another.
    pub fn mint(workflow: &str) -> Self {
        let bits: u128 = rand::random();
        InstanceKey {
            workflow: workflow.into(),
            owner: Owner::Handle(format!("{workflow}-{bits:032x}").into()),
            tenant: None,
        }
    }

    /// The instance a client-supplied handle names. Checks the form only: whether it exists is
    /// the store's to say.
    pub fn from_handle(handle: &str) -> Result<Self, MalformedHandle> {
        let malformed = || MalformedHandle(handle.chars().take(100).collect());
        let (workflow, bits) = handle.rsplit_once('-').ok_or_else(malformed)?;
        if workflow.is_empty()
            || bits.len() != 32
            || !bits
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(malformed());
        }
        Ok(InstanceKey {
            workflow: workflow.into(),
            owner: Owner::Handle(handle.into()),
            tenant: None,
        })
    }

    /// The same instance, as `tenant`'s (handle-keyed instances only; a session-keyed one is
    /// returned unchanged).
    pub fn owned_by(mut self, tenant: Option<&Tenant>) -> Self {
        if matches!(self.owner, Owner::Handle(_)) {
            self.tenant = tenant.cloned();
        }
        self
    }

    /// How spans and traces name the instance: `<workflow>#<digest>`, the first 6 bytes of the
    /// SHA-256 of its store key in hex. A handle and a session id are credentials, so a span
    /// (which a log line or an exporter may carry anywhere) holds this digest, the same for every
    /// call on the instance, and never the key itself.
    pub fn label(&self) -> String {
        use sha2::{Digest, Sha256};
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut separator = [0u8; 4];
        let mut hasher = Sha256::new();
        for piece in self.store_key_pieces(&mut separator) {
            hasher.update(piece.as_bytes());
        }
        let digest = hasher.finalize();
        // One string, written in place, without the formatting machinery: this runs on every
        // call.
        let mut label = String::with_capacity(self.workflow.len() + 13);
        label.push_str(&self.workflow);
        label.push('#');
        for byte in &digest[..6] {
            label.push(char::from(HEX[usize::from(byte >> 4)]));
            label.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        label
    }

    /// The key under which the instance is stored. Session-keyed instances share the prefix
    /// `session/`, so an operator (or start-up clean-up) can find them all.
    pub fn store_key(&self) -> String {
        let mut separator = [0u8; 4];
        self.store_key_pieces(&mut separator).concat()
    }

    /// [`InstanceKey::store_key`] in the pieces it is joined from (`separator` is room for one
    /// of them). Every call digests the key for its span (`InstanceKey::label`), from these pieces:
    /// joining them costs an allocation, and `format!` cost more than the digest.
    pub fn store_key_pieces<'a>(&'a self, separator: &'a mut [u8; 4]) -> [&'a str; 4] {
        match &self.owner {
            Owner::Session(session) => [SESSION_PREFIX, session.as_str(), "/", &self.workflow],
            Owner::Handle(handle) => match &self.tenant {
                None => [HANDLE_PREFIX, handle, "", ""],
                Some(tenant) => [
                    HANDLE_PREFIX,
                    handle,
                    TENANT_SEPARATOR.encode_utf8(separator),
                    &tenant.0,
                ],
            },
        }
    }

    /// The handle-keyed instance stored under `store_key`, if it is one (session-keyed
    /// instances never leave their process).
    pub fn from_store_key(store_key: &str) -> Option<Self> {
        let rest = store_key.strip_prefix(HANDLE_PREFIX)?;
        let (handle, tenant) = match rest.split_once(TENANT_SEPARATOR) {
            Some((handle, tenant)) => (handle, Some(Tenant(tenant.into()))),
            None => (rest, None),
        };
        let key = Self::from_handle(handle).ok()?;
        Some(Self { tenant, ..key })
    }

    /// The instance stored under `store_key`, handle-keyed or session-keyed (the inverse of
    /// [`InstanceKey::store_key`]); `None` for a key no server writes. For the timer task, which
    /// finds keys in the store's due-time index, session-keyed ones included.
    pub fn parse_store_key(store_key: &str) -> Option<Self> {
        let Some(rest) = store_key.strip_prefix(SESSION_PREFIX) else {
            return Self::from_store_key(store_key);
        };
        // Session ids are hex digits (`SessionId::new`), so the first `/` ends the id.
        let (session, workflow) = rest.split_once('/')?;
        (!session.is_empty() && !workflow.is_empty()).then(|| InstanceKey {
            workflow: workflow.into(),
            owner: Owner::Session(SessionId(session.into())),
            tenant: None,
        })
    }

    /// What a plugin sees as the instance handle in its call context.
    pub fn handle(&self) -> String {
        match &self.owner {
            // Joined, not formatted: this runs on every call.
            Owner::Session(session) => ["session:", session.as_str()].concat(),
            Owner::Handle(handle) => handle.to_string(),
        }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.store_key())
    }
}

/// A string that cannot be a handle this server minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{0}\" is not a workflow handle (expected <workflow>-<32 hex digits>)")]
pub struct MalformedHandle(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_named_by_a_digest_of_its_store_key() {
        use sha2::{Digest, Sha256};

        use crate::actors::{SessionId, Tenant};
        let session = SessionId::new();
        let minted = InstanceKey::mint("invoice");
        for key in [
            InstanceKey::for_session(&session, "invoice"),
            minted.clone(),
            minted.owned_by(Some(&Tenant::of("alice"))),
        ] {
            let digest = Sha256::digest(key.store_key().as_bytes());
            let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(key.label(), format!("invoice#{hex}"), "{key}");
        }
    }

    #[test]
    fn minted_handles_parse_back_to_the_same_instance() {
        let key = InstanceKey::mint("invoice");
        let handle = key.handle();
        assert!(handle.starts_with("invoice-") && handle.len() == "invoice-".len() + 32);
        assert_eq!(InstanceKey::from_handle(&handle), Ok(key));
        assert_ne!(InstanceKey::mint("invoice"), InstanceKey::mint("invoice"));
    }

    #[test]
    fn one_handle_under_two_principals_is_two_instances() {
        let alice = Tenant::of("alice");
        let bob = Tenant::of("bob");
        assert_ne!(alice, bob);
        assert_eq!(alice, Tenant::of("alice"));
        let minted = InstanceKey::mint("invoice").owned_by(Some(&alice));
        let as_bob = InstanceKey::from_handle(&minted.handle())
            .unwrap()
            .owned_by(Some(&bob));
        assert_eq!(
            minted.handle(),
            as_bob.handle(),
            "the client sees one handle"
        );
        assert_ne!(minted, as_bob);
        assert_ne!(minted.store_key(), as_bob.store_key());
        for key in [&minted, &as_bob, &InstanceKey::mint("invoice")] {
            assert_eq!(
                InstanceKey::from_store_key(&key.store_key()).as_ref(),
                Some(key)
            );
        }
        let session = InstanceKey::for_session(&SessionId::new(), "invoice");
        assert_eq!(session.clone().owned_by(Some(&alice)), session);
    }

    #[test]
    fn store_keys_keep_the_shape_stored_records_have() {
        let session = SessionId::new();
        let alice = Tenant::of("alice");
        let minted = InstanceKey::mint("invoice");
        let handle = minted.handle();
        assert_eq!(
            InstanceKey::for_session(&session, "db/migration").store_key(),
            format!("session/{}/db/migration", session.as_str())
        );
        assert_eq!(minted.store_key(), format!("handle/{handle}"));
        assert_eq!(
            minted.owned_by(Some(&alice)).store_key(),
            format!("handle/{handle}@{}", alice.as_str())
        );
    }

    #[test]
    fn store_keys_parse_back_to_their_instance() {
        let session = SessionId::new();
        for key in [
            InstanceKey::mint("invoice"),
            InstanceKey::for_session(&session, "invoice"),
            InstanceKey::for_session(&session, "db/migration"),
        ] {
            assert_eq!(InstanceKey::parse_store_key(&key.store_key()), Some(key));
        }
        for foreign in [
            "",
            "k",
            "handle/nope",
            "session/",
            "session/abc",
            "session//w",
        ] {
            assert_eq!(InstanceKey::parse_store_key(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn workflow_ids_with_dashes_keep_their_dashes() {
        let key = InstanceKey::mint("db-migration");
        assert_eq!(
            &*InstanceKey::from_handle(&key.handle()).unwrap().workflow,
            "db-migration"
        );
    }

    #[test]
    fn malformed_handles_are_refused() {
        for bad in [
            "",
            "invoice",
            "invoice-",
            "-0123456789abcdef0123456789abcdef",
            "invoice-xyz",
            "invoice-0123456789ABCDEF0123456789ABCDEF",
            "invoice-0123456789abcdef0123456789abcde",
        ] {
            assert!(
                InstanceKey::from_handle(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }
}
