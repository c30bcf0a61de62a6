//! The store layer: where workflow instances live between transitions.
//!
//! This module owns the [`StateStore`] contract, the [`InstanceRecord`] it stores, and [`open`],
//! which picks an implementation from a URL. It must not know about actors, MCP or the
//! statechart: a snapshot is an opaque JSON value here, and a key is an opaque string but for the
//! owner a handle-keyed one names (`owned.rs`), which every store counts.
//!
//! # Layout
//!
//! - `error.rs`: [`StoreError`], the one error type.
//! - `format.rs`: the record format number and the fields added since format 1.
//! - `migrate.rs`: [`migrate`], rewriting format-1 records as the current format on start, and
//!   records whose due time is not the one their snapshot gives.
//! - `lease.rs`: [`Fence`] and [`LeaseGrant`], the lease contract of the stores other processes
//!   share: one holder per record at a time, and writes fenced by the lease they name.
//! - `changes.rs`: [`ChangeFeed`], how a process hears another's changes of the instances it
//!   watches, and only those.
//! - `memory.rs`: [`MemoryStore`], in-process, for tests and throwaway servers.
//! - `embedded.rs`: [`EmbeddedStore`], one redb file with a journal in front of it, synced once
//!   per batch of saves (group commit), and folded into the file by checkpoints
//!   (`embedded/writer.rs`: the writer thread; `embedded/journal.rs`: the journal's format;
//!   `embedded/overlay.rs`: what is acknowledged but not yet in the file;
//!   `embedded/checkpoint.rs`: folding it in; `embedded/tests.rs`: its own tests;
//!   `embedded/files.rs`: its files `0600`, its data directory `0700`).
//! - `redis/`: [`RedisStore`], shared by several server processes (one Redis, or a Redis
//!   Cluster: `redis/layout.rs` names the keys, `redis/link.rs` connects); CAS in a Lua script.
//! - `postgres.rs`: [`PostgresStore`], one table; CAS in `UPDATE … WHERE version = $n`.
//! - `owned.rs`: the owner a key names, and the per-owner counts behind
//!   [`StateStore::count_owned`].
//! - `unanswered.rs`: what a save that got no answer did, learned by reading the record again.
//! - `contract.rs` (tests only): the one suite every store must pass.
//! - `outage.rs` (tests only): servers killed, stalled and restarted under the remote stores.
//!
//! # The record format
//!
//! A stored [`InstanceRecord`] carries a format number ([`CURRENT_FORMAT`], now 2):
//!
//! - **Format 1** (what servers before the number existed wrote): workflow id, snapshot,
//!   version, time. No format number is stored. Such a record is read as running the machine
//!   version the catalog serves now for its workflow (the only one those servers knew), with no
//!   idempotency entries.
//! - **Format 2** adds, as optional fields, the machine version the instance runs (`machine`)
//!   and its recent idempotency entries. Each store keeps the number and the added fields
//!   ([`format::Extras`], as JSON text) beside the format-1 columns, so format-1 code that
//!   still runs during a rolling deploy reads format-2 records unchanged.
//! - **A newer format** than this build knows is refused with [`StoreError::UnsupportedFormat`]
//!   for that instance only: never read as something else, never overwritten.
//!
//! Every save writes the current format. **Migration** ([`migrate`], run by `serve` on
//! start): every format-1 record is rewritten as format 2 with the compare-and-set save
//! (`expected` = the version read, so a record another server moves meanwhile is left to that
//! server), its machine version being the catalog's; a record that cannot be parsed is logged and
//! left alone, never deleted. Format-1 records are readable without it, so a server that
//! cannot migrate still serves.
//!
//! # Due times
//!
//! A record may carry a **due time** ([`InstanceRecord::due_at_ms`]): when the server must look
//! at the instance without being called (its next timer deadline, or when retention deletes
//! it; the caller works it out, the store only keeps it). Each store indexes it, so "the keys due
//! by T, earliest first" ([`StateStore::due`]) is one indexed query, never a scan: a redb table
//! keyed by (due, key), a Redis sorted set, a PostgreSQL column with a partial index. It is
//! written in the same atomic step as the record, and a delete removes it.
//!
//! The due time is derived data, not part of what a record means, so it did not need a new
//! format: a format-2 record written by code that predates due times simply has none (or keeps
//! a stale one beside a newer snapshot). The reader tolerates both: whoever acts on a due key
//! rereads the record and re-saves it with the right due time when the stored one is wrong, and
//! [`migrate`] fills in missing due times on start.
//!
//! Machine definitions are stored too ([`StateStore::save_machine`]), by workflow and version,
//! so an instance pinned to an old machine can be restored after the plugin that brought the
//! machine is gone.
//!
//! **Architecture Invariant:** a save that returns `Ok` is stored as durably as the backend
//! promises (on disk for the embedded store, acknowledged by the server for Redis/PostgreSQL);
//! no store ever overwrites a record whose version is not the one the writer read.

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

mod audit;
mod changes;
mod embedded;
mod error;
mod format;
mod lease;
mod memory;
mod migrate;
mod owned;
mod postgres;
mod redis;
mod unanswered;

#[cfg(test)]
mod contract;
#[cfg(test)]
mod outage;

pub use self::{
    audit::AuditEntry,
    changes::{ChangeFeed, ChangeStream, FeedSubscriptions},
    embedded::{BatchStats, EmbeddedStore, files::private_dir as private_data_dir},
    error::StoreError,
    format::{CURRENT_FORMAT, IdempotencyEntry},
    lease::{Fence, LeaseGrant, WANTED_FOR},
    memory::MemoryStore,
    migrate::{MigrationReport, migrate},
    owned::{HANDLE_PREFIX, OWNER_SEPARATOR, OwnedCounts, owner_of},
    postgres::PostgresStore,
    redis::RedisStore,
    unanswered::settle as settle_unanswered_save,
};

/// One workflow instance as stored: what an instance actor needs to come back to life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The record format (see the module docs): what the store found when loading, and always
    /// [`CURRENT_FORMAT`] when saving.
    #[serde(default = "format_1")]
    pub format: u32,
    /// Id of the workflow definition this instance runs.
    pub workflow: String,
    /// The engine's snapshot, opaque to the store.
    pub snapshot: serde_json::Value,
    /// Number of saves so far: 1 after the first save. Never 0 in a stored record.
    pub version: u64,
    /// When this version was written, in unix milliseconds (informational; never compared).
    pub updated_at_ms: u64,
    /// The machine version the instance runs on (`None` in a format-1 record: the one served
    /// now).
    #[serde(default)]
    pub machine: Option<String>,
    /// Results of recent calls that carried an idempotency key, oldest first.
    #[serde(default)]
    pub idempotency: Vec<IdempotencyEntry>,
    /// When the server must next look at this instance unaided, in unix milliseconds (`None`:
    /// never): the store indexes it for [`StateStore::due`]. At most [`MAX_DUE_MS`].
    #[serde(default)]
    pub due_at_ms: Option<u64>,
    /// The transition this save records, appended to the instance's audit trail by the same
    /// atomic write (see `audit.rs`); `None` for a save that moves nothing. Never read back as
    /// part of the record: [`StateStore::audit`] reads the trail.
    #[serde(skip)]
    pub audit: Option<AuditEntry>,
    /// The lease this save is made under (see `lease.rs`): checked by the same atomic write,
    /// never stored. `None`: the save is refused while anyone holds a lease on the record.
    #[serde(skip)]
    pub fence: Option<Fence>,
}

/// The latest due time any store accepts: PostgreSQL keeps it as a `bigint`. (A deadline that
/// far out, some 292 million years, is "never" for every practical purpose; callers clamp.)
pub const MAX_DUE_MS: u64 = i64::MAX as u64;

/// One entry of [`StateStore::due`]: a key and its due time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    /// The due time, in unix milliseconds.
    pub at_ms: u64,
    /// The record's key.
    pub key: String,
}

fn format_1() -> u32 {
    1
}

/// The largest record an instance may save unless configured otherwise (`--max-record-bytes`).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

/// Counts the bytes written to it, keeping none.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of `value` as JSON, counted without building the text.
pub fn json_bytes(value: &impl Serialize) -> usize {
    let mut count = ByteCount(0);
    // Writing to a counter cannot fail; a value that cannot be serialized counts as empty.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

impl InstanceRecord {
    /// About what the record takes in a store: its snapshot (state and context) and its
    /// remembered idempotent results as JSON, which are all that grow with what callers send.
    pub fn stored_bytes(&self) -> usize {
        json_bytes(&self.snapshot) + json_bytes(&self.idempotency)
    }

    /// A record for a new instance (version 1, stamped now): save it with `expected = 0`.
    pub fn first(workflow: impl Into<String>, snapshot: serde_json::Value) -> Self {
        Self {
            format: CURRENT_FORMAT,
            workflow: workflow.into(),
            snapshot,
            version: 1,
            updated_at_ms: now_ms(),
            machine: None,
            idempotency: Vec::new(),
            due_at_ms: None,
            audit: None,
            fence: None,
        }
    }

    /// The record that follows `self` with a new snapshot, in the current format, keeping its
    /// machine version and idempotency entries, with no due time (it belongs to the old
    /// snapshot: set the new one's): save it with `expected = self.version`.
    pub fn next(&self, snapshot: serde_json::Value) -> Self {
        Self {
            format: CURRENT_FORMAT,
            workflow: self.workflow.clone(),
            snapshot,
            version: self.version + 1,
            updated_at_ms: now_ms(),
            machine: self.machine.clone(),
            idempotency: self.idempotency.clone(),
            due_at_ms: None,
            audit: None,
            fence: None,
        }
    }

    /// `self`, saved under `fence` (see [`InstanceRecord::fence`]).
    pub fn fenced(self, fence: Option<Fence>) -> Self {
        Self { fence, ..self }
    }

    /// The fields added since format 1, as a store keeps them.
    fn extras(&self) -> format::Extras {
        format::Extras {
            machine: self.machine.clone(),
            idempotency: self.idempotency.clone(),
        }
    }

    /// A record of `format` with `extras` and the format-1 fields, and no due time (see
    /// [`InstanceRecord::due`]).
    fn assemble(
        format: u32,
        extras: format::Extras,
        workflow: String,
        snapshot: serde_json::Value,
        version: u64,
        updated_at_ms: u64,
    ) -> Self {
        Self {
            format,
            workflow,
            snapshot,
            version,
            updated_at_ms,
            machine: extras.machine,
            idempotency: extras.idempotency,
            due_at_ms: None,
            audit: None,
            fence: None,
        }
    }

    /// `self` with the due time a store kept beside it.
    fn due(self, due_at_ms: Option<u64>) -> Self {
        Self { due_at_ms, ..self }
    }
}

/// Current wall-clock time in unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Persistence for workflow instances, keyed by the instance's handle.
///
/// Every implementation is `Send + Sync` and is used as `Arc<dyn StateStore>`. Writes are
/// compare-and-set on the record's version, so two writers that read the same version can never
/// both succeed: the loser gets [`StoreError::Conflict`] and the stored record is the winner's.
/// Remote stores bound every operation by a timeout and report [`StoreError::Unavailable`]
/// instead of hanging; they reconnect on their own once the server is back.
#[async_trait::async_trait]
pub trait StateStore: Send + Sync {
    /// Where this store keeps its data, for logs and errors ("memory:", "embedded:/var/…",
    /// "redis://host:6379"). Never contains a password.
    fn describe(&self) -> String;

    /// Whether other server processes may write to this store too (Redis, PostgreSQL). An
    /// instance actor then cannot trust its in-memory copy and rereads the record before every
    /// call, so the gate is checked against the state every process agrees on.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether a read sent after a write that got no answer is answered after that write was
    /// applied or dropped for good (one connection, requests answered in order: Redis). Then a
    /// reread settles what an unanswered save did (`unanswered.rs`).
    fn answers_in_order(&self) -> bool {
        false
    }

    /// Tells the other server processes sharing this store that the record under `key` changed,
    /// so that those watching it can notify their own sessions (see `changes.rs`: it reaches
    /// only the processes whose feed watches `key`). `origin` names the announcing process, so
    /// it can skip its own announcements. Stores no other process reads do nothing.
    async fn announce_change(&self, _origin: &str, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// A feed of the changes other processes announce for the keys it is told to watch; `None`
    /// for a store no other process shares. The feed ends when its connection drops: open
    /// another and watch again (changes announced meanwhile are lost, so a subscriber must not
    /// rely on them for correctness).
    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        None
    }

    /// The record stored under `key`. Returns `Ok(None)` when no record exists.
    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError>;

    /// Stores `record` under `key` if and only if the stored version is `expected` (`0`: no
    /// record may exist yet). `record.version` must be `expected + 1`, else
    /// [`StoreError::Invalid`] and nothing is written.
    ///
    /// Returns `Ok(())` only once the record is stored as durably as the backend promises.
    /// A stale writer gets [`StoreError::Conflict`] with the version it should have read.
    /// After [`StoreError::Unavailable`], or if the future is dropped before it completes, the
    /// save may or may not have been applied: load before deciding what to do next.
    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError>;

    /// Removes the record under `key`, and its lease. With `expected = Some(v)` only if the
    /// stored version is `v` (else [`StoreError::Conflict`], also when the record is absent);
    /// with `None` whatever its version. Under `fence` only if that lease is alive, and without
    /// one only if no lease is (else [`StoreError::Fenced`]; see `lease.rs`). Returns whether a
    /// record was removed.
    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError>;

    /// Grants `holder` the lease on the record under `key` for `ttl`, or renews it (see
    /// `lease.rs` for the contract): [`LeaseGrant::Busy`] while another holder's lease lives,
    /// [`LeaseGrant::Absent`] when there is no record. Stores no other process shares grant
    /// every lease at once, with token 0 (they are not asked: nobody needs a lease there).
    async fn acquire_lease(
        &self,
        key: &str,
        _holder: &str,
        _ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        let version = self.load(key).await?.map_or(0, |record| record.version);
        Ok(LeaseGrant::Held {
            token: 0,
            took_over: false,
            version,
            wanted: false,
        })
    }

    /// Ends the lease `fence` names, if it is still alive, so another holder need not wait for
    /// it to lapse. A lease that lapsed or passed to another holder is left alone.
    async fn release_lease(&self, _key: &str, _fence: &Fence) -> Result<(), StoreError> {
        Ok(())
    }

    /// Up to `limit` keys starting with `prefix`, in ascending byte order, strictly after
    /// `after` when given. Page through everything by passing the last key of one page as
    /// `after` for the next; an empty page means the end. For operators, not for hot paths.
    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;

    /// How many records have a key starting with `prefix` (`""`: all of them).
    async fn count(&self, prefix: &str) -> Result<u64, StoreError>;

    /// How many records belong to `owner` ([`owner_of`] their key): what
    /// `--max-instances-per-principal` counts. Every store keeps a per-owner index, written in
    /// the same atomic step as the records, so this is one lookup (one per shard on a Redis
    /// Cluster), never a scan.
    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError>;

    /// [`StateStore::count_owned`], checking each counted record still exists: for a count that
    /// reached a limit, where an index entry older code left behind would otherwise hold a
    /// place for good. Stores whose index cannot go stale count again.
    async fn recount_owned(&self, owner: &str) -> Result<u64, StoreError> {
        self.count_owned(owner).await
    }

    /// The audit trail of the instance under `key`, oldest first: one entry per save that
    /// carried one ([`InstanceRecord::audit`]). Empty for an instance that never moved or does
    /// not exist.
    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError>;

    /// Up to `limit` records whose due time ([`InstanceRecord::due_at_ms`]) is at or before
    /// `until`, earliest first (equal times in ascending key order), strictly after `after` (the
    /// last entry of the previous page) when given. An indexed query in every store: what the
    /// timer task and retention ask, often. Records without a due time are never listed.
    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError>;

    /// Keeps the definition of `workflow`'s machine `version` (a hash of `definition`, so a
    /// version names one definition forever: saving it again changes nothing). Saved before any
    /// record names the version, so a pinned instance can be restored after its plugin is gone.
    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError>;

    /// The definition saved by [`StateStore::save_machine`]; `Ok(None)` when none was.
    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;

    /// Whether the store answers now, for a readiness probe (`/readyz`): one cheap round trip
    /// (Redis `PING`, PostgreSQL `SELECT 1`, a read transaction on the embedded file), bounded
    /// like every other operation. Returns `Ok(())` when it answered; reads and writes nothing.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Makes everything acknowledged so far part of the store's main file, for a store that
    /// keeps a journal in front of it (the embedded store), so that a clean stop leaves nothing
    /// to replay and the file alone holds every instance. Stores without a journal have nothing
    /// to do. Not needed for durability: an acknowledged save is durable already.
    async fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// What an acknowledged save survives, as the store's server is configured, when it can
    /// say (read once at start and logged: a WARN for a transition a restart of the store's
    /// server would lose). `None`: nothing to report (the memory and embedded stores are what
    /// their names say), or the server would not tell.
    async fn durability(&self) -> Option<Durability> {
        None
    }
}

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
    fn check_namespace(&self) -> Result<(), StoreError> {
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

/// Opens the store a URL names:
///
/// - `memory:` — [`MemoryStore`];
/// - `embedded:/path/to/file.redb`, or a plain path (absolute, `./…`, or ending in `.redb`) —
///   [`EmbeddedStore`], creating the file and its parent directories on first start;
/// - `redis://…` — [`RedisStore`] on one server; `redis+cluster://h1:p1,h2:p2,…` on a Redis
///   Cluster (`rediss://` is recognised but refused with [`StoreError::Config`]: no TLS support
///   is built in);
/// - `postgres://…`, `postgresql://…` — [`PostgresStore`], creating or migrating its table
///   (plain TCP or a Unix socket; no TLS).
///
/// Remote stores are contacted before this returns: a server that is down gives
/// [`StoreError::Unavailable`] within `options.connect_timeout` (plus one op timeout).
pub async fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn StateStore>, StoreError> {
    options.check_namespace()?;
    if url == "memory:" || url == "memory" {
        return Ok(Arc::new(
            MemoryStore::new().keeping_audit(options.audit_keep),
        ));
    }
    if let Some(path) = url.strip_prefix("embedded:") {
        return Ok(Arc::new(
            EmbeddedStore::open_keeping(path, options.audit_keep).await?,
        ));
    }
    if url.starts_with("redis://")
        || url.starts_with("rediss://")
        || url.starts_with("redis+cluster://")
    {
        return Ok(Arc::new(RedisStore::connect(url, options).await?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::connect(url, options).await?));
    }
    if !url.contains("://")
        && (url.starts_with('/') || url.starts_with("./") || url.ends_with(".redb"))
    {
        return Ok(Arc::new(
            EmbeddedStore::open_keeping(url, options.audit_keep).await?,
        ));
    }
    Err(StoreError::Config(format!(
        "unknown state store URL {url:?}: expected memory:, embedded:PATH, a path, redis://, redis+cluster:// or postgres://"
    )))
}

/// Longest key any store accepts, in bytes. Handles are far shorter; the bound keeps a bug from
/// writing megabyte keys into Redis or a PostgreSQL index.
pub const MAX_KEY_LEN: usize = 1024;

/// The checks every store makes before a save, so all stores reject the same requests.
fn check_save(key: &str, record: &InstanceRecord, expected: u64) -> Result<(), StoreError> {
    check_key(key)?;
    if record.format != CURRENT_FORMAT {
        return Err(invalid(
            key,
            format!(
                "record.format is {} but only format {CURRENT_FORMAT} is written",
                record.format
            ),
        ));
    }
    if record.due_at_ms.is_some_and(|due| due > MAX_DUE_MS) {
        return Err(invalid(
            key,
            format!("record.due_at_ms is over the largest due time, {MAX_DUE_MS}"),
        ));
    }
    if expected.checked_add(1) != Some(record.version) {
        return Err(invalid(
            key,
            format!(
                "record.version is {} but must be expected + 1 = {}",
                record.version,
                expected.saturating_add(1)
            ),
        ));
    }
    Ok(())
}

/// The key a store files machine `version` of `workflow` under.
fn machine_key(workflow: &str, version: &str) -> String {
    format!("{workflow}@{version}")
}

fn check_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(invalid(key, format!("key must be 1..={MAX_KEY_LEN} bytes")));
    }
    Ok(())
}

/// Whether a save with `expected` may replace what is stored (`current`: stored version).
/// Stored versions are never 0, so `expected == 0` means "must not exist".
fn versions_match(current: Option<u64>, expected: u64) -> bool {
    current.unwrap_or(0) == expected
}

fn conflict(key: &str, expected: u64, current: Option<u64>) -> StoreError {
    StoreError::Conflict {
        key: key.to_owned(),
        expected,
        current,
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// An error and its causes, "outer: inner: root", since driver errors often keep the useful
/// part ("Connection refused") in their source. Skips a cause whose text the outer already has.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `url` without its password, for messages, logs and `--print-config`:
/// `redis://user:secret@h/0` → `redis://user:***@h/0`; a `password` query parameter
/// (`postgres://u@h/db?password=secret`, which PostgreSQL accepts) is masked too.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let masked = if user.len() == userinfo.len() {
                user.to_owned()
            } else {
                format!("{user}:***")
            };
            format!("{masked}{}", &rest[at..])
        }
        None => rest.to_owned(),
    };
    let Some(query) = query else {
        return format!("{scheme}://{rest}");
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{scheme}://{rest}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::{StoreError, StoreOptions, open, redact};

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(
            redact("postgres://postgres@h/test"),
            "postgres://postgres@h/test"
        );
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("memory:"), "memory:");
        assert_eq!(
            redact("postgres://u:pw@h/db?sslmode=require&password=pw2"),
            "postgres://u:***@h/db?sslmode=require&password=***"
        );
        assert_eq!(redact("redis://h?db=1"), "redis://h?db=1");
        assert_eq!(
            redact("redis+cluster://u:pw@h1:1,h2:2"),
            "redis+cluster://u:***@h1:1,h2:2"
        );
    }

    #[tokio::test]
    async fn open_picks_the_store_from_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions::default();
        assert_eq!(
            open("memory:", &options).await.unwrap().describe(),
            "memory:"
        );
        let explicit = dir.path().join("x/one.redb");
        let store = open(&format!("embedded:{}", explicit.display()), &options)
            .await
            .unwrap();
        assert!(store.describe().ends_with("x/one.redb"));
        assert!(explicit.exists());
        let plain = dir.path().join("two.redb");
        open(plain.to_str().unwrap(), &options).await.unwrap();
        assert!(plain.exists());
        for bad in [
            "ftp://x",
            "relative-name",
            "",
            "embedded:",
            "rediss://127.0.0.1:1",
        ] {
            assert!(
                matches!(open(bad, &options).await, Err(StoreError::Config(_))),
                "{bad}"
            );
        }
        let bad_ns = StoreOptions {
            namespace: "Bad-Name".into(),
            ..StoreOptions::default()
        };
        assert!(matches!(
            open("memory:", &bad_ns).await,
            Err(StoreError::Config(_))
        ));
    }
}
