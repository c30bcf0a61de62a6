//! `EmbeddedStore`: the durable default, one redb file on local disk with a journal in front of
//! it, and group commit.
//!
//! This module owns the store's files, the one writer thread that makes saves durable, and the
//! batching that lets many instances share one sync. It must not acknowledge a save before the
//! journal frame holding it is synced, and must not let one record's conflict fail another
//! record's save in the same batch.
//!
//! How a save travels: the caller serializes the snapshot on its own task, sends an [`Op`] down a
//! channel with a oneshot for the answer, and awaits it. The writer thread takes every op that
//! is waiting (up to [`MAX_BATCH`]), checks each one's expected version, appends the accepted
//! changes to the journal (`embedded/journal.rs`) in one write, syncs it once, adds them to the
//! overlay (`embedded/overlay.rs`), and only then answers each caller. While one batch is being
//! synced the next one queues up, so the batch size grows with the load without any timer.
//!
//! Why a journal rather than a durable redb commit per batch: such a commit wrote some three
//! scattered 4 KiB pages per save, and its CPU cost held the store at half the memory store's
//! rate (BENCHMARKS.md's history, session 20). A journal frame is the save's bytes, written once,
//! in order. redb gets the changes at a checkpoint (`embedded/checkpoint.rs`), one entry per key
//! however often it was saved since, in a transaction of its own beside the saves.
//!
//! Reads (`load`, `list_keys`, `count`, `due`, `audit`) do not go through the writer: they ask
//! the overlay, then a redb read transaction for the keys the overlay does not know. A `load`
//! the overlay answers returns at once; redb reads run on tokio's blocking pool.
//!
//! Due times live in two tables: [`DUE`], keyed by (due, key) so that "due by T, earliest first"
//! is a range scan, and [`DUE_OF`], the due time a key has now, so that a save or delete finds
//! the entry to remove. Machine definitions are rare and small: they skip the journal and are
//! committed straight into redb.
//!
//! The counts by state (`embedded/state_counts.rs`) are in the file beside the records, moved
//! by the checkpoint that writes each row, and in process for reads, moved by the writer as each
//! batch becomes durable: an open reads them, and never the records, once they are built.

use std::{
    collections::BTreeMap,
    ops::Bound,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, atomic::AtomicU64, mpsc},
    thread::JoinHandle,
};

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, TableDefinition};
use tokio::sync::oneshot;

use self::{
    checkpoint::Checkpointer,
    journal::Segment,
    overlay::{Change, Layer, Overlay, Row},
    tombstones::{Burial, TombstoneOp},
    writer::{Op, Writer},
};
use super::{
    AuditEntry, Due, Fence, HANDLE_PREFIX, InstanceRecord, OwnedCounts, StateCounts, StateStore,
    StoreError, Tally, Tombstone, check_key, check_save, conflict, format, machine_key, owner_of,
    versions_match,
};

/// Key: instance key. Value: (version, updated_at_ms, workflow, snapshot as JSON text). The
/// version comes first and stands apart so a save checks it without parsing the snapshot.
/// The `_v1` suffix leaves room for a later layout beside this one.
const INSTANCES: TableDefinition<&str, (u64, u64, &str, &str)> =
    TableDefinition::new("instances_v1");

/// Key: instance key. Value: (record format, [`format::Extras`] as JSON text), written in the
/// same transaction as the record's row in [`INSTANCES`]. A record with no row here was
/// written by format-1 code, which knew only [`INSTANCES`].
const FORMATS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("instance_formats_v1");

/// Key: (due time, instance key). No value: the key is the index entry (see
/// [`StateStore::due`]). Written in the same transaction as the record.
const DUE: TableDefinition<(u64, &str), ()> = TableDefinition::new("instance_due_v1");

/// Key: instance key. Value: its entry's due time in [`DUE`]. A record without a row here has
/// no due time (or was written by code that predates them).
const DUE_OF: TableDefinition<&str, u64> = TableDefinition::new("instance_due_of_v1");

/// Key: (instance key, record version). Value: the audit entry as JSON text (see `audit.rs`),
/// written in the same transaction as the record it describes; removed with the record.
const AUDIT: TableDefinition<(&str, u64), &str> = TableDefinition::new("instance_audit_v1");

/// Key: `workflow@version`. Value: the machine's definition as JSON text.
const MACHINES: TableDefinition<&str, &str> = TableDefinition::new("machines_v1");

/// Key: a mark's name. Value: its value ([`StateStore::save_mark`]).
const MARKS: TableDefinition<&str, u64> = TableDefinition::new("marks_v1");

/// Key: [`FOLDED_THROUGH`]. Value: the number of the last journal segment whose changes are all
/// in the file, written by each checkpoint in the transaction that folds them in. Replay skips
/// segments up to it, so a segment whose deletion failed is never applied twice, over newer
/// state.
const JOURNAL: TableDefinition<&str, u64> = TableDefinition::new("journal_v1");
const FOLDED_THROUGH: &str = "folded_through";

/// What the writer thread has done, for tests, benchmarks and operators: `ops / commits` is
/// the average group-commit batch size.
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Durable commits: journal syncs, and redb commits of machine definitions.
    pub commits: AtomicU64,
    /// Saves and deletes answered, conflicts included.
    pub ops: AtomicU64,
    /// Checkpoints that folded the journal into redb, the last one on close included.
    pub checkpoints: AtomicU64,
}

/// Durable store in one redb file and its journal. Dropping it waits for the writer thread to
/// finish the batch in hand and for a last checkpoint, which folds the journal into the file and
/// deletes it, then closes the file, so the same path can be opened again right after.
///
/// The channel to the writer is unbounded, but every caller awaits its own op, so the queue
/// never holds more ops than there are concurrent callers.
pub struct EmbeddedStore {
    name: String,
    db: Arc<Database>,
    overlay: Arc<RwLock<Overlay>>,
    stats: Arc<BatchStats>,
    /// `Some` until `Drop` takes it to close the channel and join the thread.
    writer: Option<(mpsc::Sender<Op>, JoinHandle<()>)>,
    /// The audit entries kept per instance (`StoreOptions::audit_keep`): the last this many
    /// versions' entries.
    audit_keep: u64,
    /// How many records each owner has: counted from redb at open, then kept by the writer as
    /// it makes creates and deletes durable.
    owned: Arc<Mutex<OwnedCounts>>,
    /// How many records each workflow has in each state: read from the file at open, then kept
    /// by the writer as it makes changes durable (`embedded/state_counts.rs`).
    counts: Arc<Mutex<StateCounts>>,
}

impl EmbeddedStore {
    /// Most bytes of file pages redb keeps in memory. redb's default (1 GiB) caches every page
    /// it writes until the cache is full, so the server's memory would grow with the number of
    /// instances ever saved, passivated or not. Instances are read once per activation and
    /// written once per checkpoint, so a cache that holds the b-tree's upper levels and the pages
    /// being written is enough; the rest is served from the OS page cache. BENCHMARKS.md's history
    /// (in git) compares mint rates with and without the bound.
    pub const PAGE_CACHE_BYTES: usize = 4 << 20;

    /// Opens (or creates) the store file at `path`, creating missing parent directories, and
    /// replays its journal if the last server to use it did not close it (a crash). A new file is
    /// `0600` and a new directory `0700`; an existing file is tightened to `0600` (see
    /// [`files`]).
    ///
    /// Fails with [`StoreError::Unavailable`] when the directory cannot be created, the file is
    /// not a redb file, a journal segment is not readable, or another process (or another
    /// `EmbeddedStore`) has it open.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_keeping(path, super::DEFAULT_AUDIT_KEEP).await
    }

    /// [`EmbeddedStore::open`], keeping the last `audit_keep` versions' audit entries of each
    /// instance.
    pub async fn open_keeping(path: impl AsRef<Path>, audit_keep: u64) -> Result<Self, StoreError> {
        let audit_keep = audit_keep.max(1);
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() {
            return Err(StoreError::Config(
                "embedded store needs a file path (embedded:/path/to/state.redb)".to_owned(),
            ));
        }
        let name = format!("embedded:{}", path.display());
        let opened = {
            let name = name.clone();
            tokio::task::spawn_blocking(move || {
                let db = open_file(&path, &name)?;
                let segment = replay(&db, &path, &name, audit_keep)?;
                let owned = owners::open(&db).map_err(|e| storage(&name, e))?;
                let counts = state_counts::open(&db).map_err(|e| storage(&name, e))?;
                Ok::<_, StoreError>((db, segment, owned, counts, path))
            })
            .await
        };
        let (db, segment, owned, counts, path) = opened.map_err(|e| {
            StoreError::Unavailable(format!("{name}: opening the file panicked: {e}"))
        })??;
        let db = Arc::new(db);
        let owned = Arc::new(Mutex::new(owned));
        let counts = Arc::new(Mutex::new(counts));
        let overlay = Arc::new(RwLock::new(Overlay::default()));
        let stats = Arc::new(BatchStats::default());
        let cannot_start = |e: std::io::Error| {
            StoreError::Unavailable(format!("{name}: cannot start writer: {e}"))
        };
        let checkpointer = Checkpointer::start(
            name.clone(),
            path.clone(),
            Arc::clone(&db),
            Arc::clone(&overlay),
            audit_keep,
        )
        .map_err(cannot_start)?;
        let writer = Writer {
            audit_keep,
            name: name.clone(),
            path,
            db: Arc::clone(&db),
            overlay: Arc::clone(&overlay),
            stats: Arc::clone(&stats),
            segment,
            checkpointer: Some(checkpointer),
            frames: Vec::new(),
            owned: Arc::clone(&owned),
            counts: Arc::clone(&counts),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("store-writer".to_owned())
            .spawn(move || writer.run(&rx))
            .map_err(cannot_start)?;
        Ok(Self {
            name,
            db,
            overlay,
            stats,
            writer: Some((tx, thread)),
            audit_keep,
            owned,
            counts,
        })
    }

    /// Counters of the writer thread since open.
    pub fn batch_stats(&self) -> &BatchStats {
        &self.stats
    }

    async fn write<T>(
        &self,
        op: Op,
        reply: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let stopped = || StoreError::Unavailable(format!("{}: writer thread stopped", self.name));
        let (tx, _) = self.writer.as_ref().ok_or_else(stopped)?;
        tx.send(op).map_err(|_| stopped())?;
        reply.await.map_err(|_| stopped())?
    }

    /// Runs `f` on a redb read transaction, on the blocking pool. Call it after reading the
    /// overlay, never before (see `overlay.rs`).
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        let name = self.name.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            f(&txn, &name)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }

    fn overlay(&self) -> RwLockReadGuard<'_, Overlay> {
        read_lock(&self.overlay)
    }
}

/// The overlay, for reading (see [`write_lock`] on a poisoned lock).
fn read_lock(overlay: &RwLock<Overlay>) -> RwLockReadGuard<'_, Overlay> {
    overlay
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The overlay, for writing. A panic while it was held cannot leave it half-changed (each change
/// is one map operation), so a poisoned lock is used as it is.
fn write_lock(overlay: &RwLock<Overlay>) -> RwLockWriteGuard<'_, Overlay> {
    overlay
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Some((tx, thread)) = self.writer.take() {
            // Closing the channel ends the writer loop once it has answered what it holds; it
            // then makes the last checkpoint.
            drop(tx);
            // A panicked writer has already failed its callers; the journal keeps what it
            // acknowledged, for the next open to replay.
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("name", &self.name)
            .finish()
    }
}

fn open_file(path: &PathBuf, name: &str) -> Result<Database, StoreError> {
    // Created (or tightened) `0600` before redb writes a byte, in a `0700` directory if it makes one.
    files::private_file(path).map_err(|e| {
        StoreError::Unavailable(format!("{name}: cannot create {}: {e}", path.display()))
    })?;
    let repairing = {
        let (name, told) = (name.to_owned(), std::sync::atomic::AtomicBool::new(false));
        move |_: &mut redb::RepairSession| {
            if !told.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    store = %name,
                    "the store file has no record of its free pages (its last write came from a \
                     build older than this one, and its server did not stop cleanly): reading \
                     every page of it to make one, which takes time in proportion to the file"
                );
            }
        }
    };
    let db = redb::Builder::new()
        .set_cache_size(EmbeddedStore::PAGE_CACHE_BYTES)
        .set_repair_callback(repairing)
        .create(path)
        .map_err(|e| storage(name, e))?;
    // Create the tables once, so read transactions never meet a missing table (a file written
    // by format-1 code has only the first).
    let txn = durable_write(&db).map_err(|e| storage(name, e))?;
    txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
    txn.open_table(FORMATS).map_err(|e| storage(name, e))?;
    txn.open_table(DUE).map_err(|e| storage(name, e))?;
    txn.open_table(DUE_OF).map_err(|e| storage(name, e))?;
    txn.open_table(AUDIT).map_err(|e| storage(name, e))?;
    txn.open_table(MACHINES).map_err(|e| storage(name, e))?;
    txn.open_table(MARKS).map_err(|e| storage(name, e))?;
    txn.open_table(owners::OWNED_KEYS)
        .map_err(|e| storage(name, e))?;
    txn.open_table(owners::OWNER_COUNTS)
        .map_err(|e| storage(name, e))?;
    txn.open_table(JOURNAL).map_err(|e| storage(name, e))?;
    txn.open_table(state_counts::COUNTED_AS)
        .map_err(|e| storage(name, e))?;
    txn.open_table(state_counts::STATE_COUNTS)
        .map_err(|e| storage(name, e))?;
    txn.open_table(state_counts::BUILT)
        .map_err(|e| storage(name, e))?;
    txn.commit().map_err(|e| storage(name, e))?;
    Ok(db)
}

/// Folds what the journal on disk holds past the last checkpoint (a server that stopped without
/// closing the store left it) into redb, deletes its segments, and starts the next one.
fn replay(db: &Database, path: &Path, name: &str, audit_keep: u64) -> Result<Segment, StoreError> {
    let unavailable = |what: String| StoreError::Unavailable(format!("{name}: {what}"));
    let segments = journal::segments(path)
        .map_err(|e| unavailable(format!("cannot list the journal's segments: {e}")))?;
    let folded_through = checkpoint::folded_through(db).map_err(|e| storage(name, e))?;
    let mut layer = Layer::default();
    let mut replayed = 0;
    for (number, segment) in &segments {
        if folded_through.is_some_and(|folded| *number <= folded) {
            continue;
        }
        let read = journal::read(segment).map_err(unavailable)?;
        if let Some(bytes) = read.torn_tail {
            tracing::info!(store = %name, segment = %segment.display(), bytes,
                "the journal ends in a write cut short; it was never acknowledged");
        }
        replayed += read.changes.len();
        for change in read.changes {
            layer.apply(change);
        }
    }
    if let Some((last, _)) = segments.last() {
        checkpoint::fold(db, &[&layer], *last, audit_keep).map_err(|e| storage(name, e))?;
    }
    if replayed > 0 {
        tracing::info!(store = %name, changes = replayed, segments = segments.len(),
            "replayed the journal of a server that did not close the store");
    }
    let next = segments
        .last()
        .map(|(number, _)| number + 1)
        .max(folded_through.map(|folded| folded + 1))
        .unwrap_or(0);
    checkpoint::delete_segments(path, next);
    Segment::create(path, next)
        .map_err(|e| unavailable(format!("cannot create a journal segment: {e}")))
}

/// A write transaction that is durable once committed and records redb's allocator state with
/// its commit ("quick repair"). Every write here is one, so that the next open loads that state
/// instead of rebuilding it by reading every page of the file: what an open after a crash must
/// do otherwise, and after a clean stop too, since the server exits without the last handle on
/// the file being dropped (its actors keep one). An open then costs what the journal holds, not
/// what the file holds (issue 51, item 5). The price is a few pages more per commit, and commits
/// are checkpoints, not saves.
fn durable_write(db: &Database) -> Result<redb::WriteTransaction, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(redb::Durability::Immediate)?;
    txn.set_quick_repair(true);
    Ok(txn)
}

/// The per-owner counts, whatever a panicking holder left (a count is never half-changed).
fn lock_owned(owned: &Mutex<OwnedCounts>) -> std::sync::MutexGuard<'_, OwnedCounts> {
    owned
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The counts by state, whatever a panicking holder left (each change is whole before the next).
fn lock_counts(counts: &Mutex<StateCounts>) -> std::sync::MutexGuard<'_, StateCounts> {
    counts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn storage(name: &str, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Unavailable(format!("{name}: {}", e.into()))
}

/// The record a stored row describes. `format` and `extras` are `None` for a row format-1 code
/// wrote (it has no row in [`FORMATS`]).
#[allow(clippy::too_many_arguments)]
fn record_of(
    key: &str,
    format: Option<u64>,
    extras: Option<&str>,
    version: u64,
    updated_at_ms: u64,
    workflow: &str,
    snapshot_json: &str,
    due_at_ms: Option<u64>,
) -> Result<InstanceRecord, StoreError> {
    let (format, extras) = format::decode(key, format, extras)?;
    let snapshot = serde_json::from_str(snapshot_json).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("snapshot is not JSON: {e}"),
    })?;
    Ok(InstanceRecord::assemble(
        format,
        extras,
        workflow.to_owned(),
        snapshot,
        version,
        updated_at_ms,
    )
    .due(due_at_ms))
}

#[async_trait]
impl StateStore for EmbeddedStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn indexes_due_times(&self) -> bool {
        true
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Opening the table in a read transaction touches the file's header and root pages.
        self.read(|txn, name| {
            txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
            Ok(())
        })
        .await?;
        if self
            .writer
            .as_ref()
            .is_some_and(|(_, thread)| thread.is_finished())
        {
            return Err(StoreError::Unavailable(format!(
                "{}: writer thread stopped",
                self.name
            )));
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.write(Op::Checkpoint { reply }, answer).await
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let known = self.overlay().row(key).map(|row| row.cloned());
        if let Some(row) = known {
            return row
                .map(|row| {
                    record_of(
                        key,
                        Some(row.format),
                        Some(&row.extras_json),
                        row.version,
                        row.updated_at_ms,
                        &row.workflow,
                        &row.snapshot_json,
                        row.due_at_ms,
                    )
                })
                .transpose();
        }
        let key = key.to_owned();
        self.read(move |txn, name| {
            // One read transaction for the three tables: the row, its format and its due time
            // are one snapshot.
            let table = txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
            let formats = txn.open_table(FORMATS).map_err(|e| storage(name, e))?;
            let due_of = txn.open_table(DUE_OF).map_err(|e| storage(name, e))?;
            let Some(guard) = table.get(key.as_str()).map_err(|e| storage(name, e))? else {
                return Ok(None);
            };
            let due = due_of
                .get(key.as_str())
                .map_err(|e| storage(name, e))?
                .map(|due| due.value());
            let format_guard = formats.get(key.as_str()).map_err(|e| storage(name, e))?;
            let (format, extras) = match &format_guard {
                Some(guard) => {
                    let (format, extras) = guard.value();
                    (Some(format), Some(extras))
                }
                None => (None, None),
            };
            let (version, updated_at_ms, workflow, snapshot_json) = guard.value();
            record_of(
                &key,
                format,
                extras,
                version,
                updated_at_ms,
                workflow,
                snapshot_json,
                due,
            )
            .map(Some)
        })
        .await
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        // Serialized here, on the caller's task, so the writer thread only copies bytes.
        let (reply, answer) = oneshot::channel();
        let op = Op::Save {
            key: key.to_owned(),
            expected,
            row: Row {
                version: record.version,
                updated_at_ms: record.updated_at_ms,
                workflow: record.workflow.clone(),
                snapshot_json: record.snapshot.to_string(),
                format: record.format.into(),
                extras_json: format::encode(&record.extras()),
                due_at_ms: record.due_at_ms,
                tally: Some(Tally::of(record)),
            },
            audit: record.audit.as_ref().map(AuditEntry::encode),
            reply,
        };
        self.write(op, answer).await.map(|_| ())
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = Op::SaveMachine {
            key: machine_key(workflow, version),
            definition_json: definition.to_string(),
            reply,
        };
        self.write(op, answer).await.map(|_| ())
    }

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let name = name.to_owned();
        self.read(move |txn, store| {
            let table = txn.open_table(MARKS).map_err(|e| storage(store, e))?;
            let value = table.get(name.as_str()).map_err(|e| storage(store, e))?;
            Ok(value.map(|value| value.value()))
        })
        .await
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = Op::SaveMark {
            name: name.to_owned(),
            value,
            reply,
        };
        self.write(op, answer).await
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let key = machine_key(workflow, version);
        self.read(move |txn, name| {
            let table = txn.open_table(MACHINES).map_err(|e| storage(name, e))?;
            let Some(guard) = table.get(key.as_str()).map_err(|e| storage(name, e))? else {
                return Ok(None);
            };
            serde_json::from_str(guard.value())
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: key.clone(),
                    reason: format!("machine is not JSON: {e}"),
                })
        })
        .await
    }

    /// One process owns the file, so there are no leases to honour: `fence` is not checked.
    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        _fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let (reply, answer) = oneshot::channel();
        let op = Op::Delete {
            key: key.to_owned(),
            expected,
            reply,
        };
        self.write(op, answer).await
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let known = self.overlay().known(prefix);
        let prefix = prefix.to_owned();
        let after = after
            .filter(|after| *after >= prefix.as_str())
            .map(str::to_owned);
        let past_start = |key: &str| after.as_deref().is_none_or(|after| key > after);
        // The first `limit` keys redb has that the overlay does not decide, merged with the live
        // keys the overlay has: together they hold the first `limit` keys there are.
        let from_overlay: Vec<String> = known
            .iter()
            .filter(|(key, known)| known.live && past_start(key))
            .map(|(key, _)| key.clone())
            .collect();
        let mut keys = self
            .read(move |txn, name| {
                let table = txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
                let mut keys = Vec::new();
                let start = match &after {
                    Some(after) => Bound::Excluded(after.as_str()),
                    None => Bound::Included(prefix.as_str()),
                };
                for entry in table
                    .range::<&str>((start, Bound::Unbounded))
                    .map_err(|e| storage(name, e))?
                {
                    let (key, _) = entry.map_err(|e| storage(name, e))?;
                    let key = key.value();
                    if !key.starts_with(prefix.as_str()) || keys.len() >= limit {
                        break;
                    }
                    if !known.contains_key(key) {
                        keys.push(key.to_owned());
                    }
                }
                Ok(keys)
            })
            .await?;
        keys.extend(from_overlay);
        keys.sort_unstable();
        keys.truncate(limit);
        Ok(keys)
    }

    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        Ok(lock_owned(&self.owned).of(owner))
    }

    /// The file's owner index (`embedded/owners.rs`), merged with what the overlay knows of
    /// the owner's keys, as [`StateStore::list_keys`] merges the file's keys.
    async fn list_owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let past_start = |key: &str| after.is_none_or(|after| key > after);
        let known: BTreeMap<String, bool> = self
            .overlay()
            .known(HANDLE_PREFIX)
            .into_iter()
            .filter(|(key, _)| owner_of(key) == Some(owner))
            .map(|(key, known)| (key, known.live))
            .collect();
        let from_overlay: Vec<String> = known
            .iter()
            .filter(|(key, live)| **live && past_start(key))
            .map(|(key, _)| key.clone())
            .collect();
        let (owner, after) = (owner.to_owned(), after.map(str::to_owned));
        let mut keys = self
            .read(move |txn, name| {
                owners::list(txn, &owner, after.as_deref(), limit, |key| {
                    known.contains_key(key)
                })
                .map_err(|e| storage(name, e))
            })
            .await?;
        keys.extend(from_overlay);
        keys.sort_unstable();
        keys.truncate(limit);
        Ok(keys)
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        Ok(lock_counts(&self.counts).clone())
    }

    /// Through the writer, so no save moves a count while the file's are rebuilt and the ones
    /// in process made again from them.
    async fn recount_by_state(&self) -> Result<StateCounts, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.write(Op::Recount { reply }, answer).await
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let known = self.overlay().known(prefix);
        let live_in_overlay = known.values().filter(|known| known.live).count() as u64;
        let prefix = prefix.to_owned();
        let in_redb = self
            .read(move |txn, name| {
                let table = txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
                let mut n = 0;
                for entry in table
                    .range::<&str>(prefix.as_str()..)
                    .map_err(|e| storage(name, e))?
                {
                    let (key, _) = entry.map_err(|e| storage(name, e))?;
                    let key = key.value();
                    if !key.starts_with(prefix.as_str()) {
                        break;
                    }
                    n += u64::from(!known.contains_key(key));
                }
                Ok(n)
            })
            .await?;
        Ok(in_redb + live_in_overlay)
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let (stored_first, pending) = self.overlay().audit(key);
        let key = key.to_owned();
        let audit_keep = self.audit_keep;
        self.read(move |txn, name| {
            // By version: an entry a checkpoint committed while this read ran is in both.
            let mut trail = BTreeMap::new();
            if stored_first {
                let table = txn.open_table(AUDIT).map_err(|e| storage(name, e))?;
                for entry in table
                    .range((key.as_str(), 0)..=(key.as_str(), u64::MAX))
                    .map_err(|e| storage(name, e))?
                {
                    let (at, text) = entry.map_err(|e| storage(name, e))?;
                    trail.insert(at.value().1, AuditEntry::decode(&key, text.value())?);
                }
            }
            for (version, text) in pending {
                trail.insert(version, AuditEntry::decode(&key, &text)?);
            }
            // The last `audit_keep` versions' entries: what a checkpoint keeps.
            let last = trail.keys().next_back().copied().unwrap_or(0);
            Ok(trail
                .into_iter()
                .filter(|(version, _)| version + audit_keep > last)
                .map(|(_, entry)| entry)
                .collect())
        })
        .await
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let known = self.overlay().known("");
        let after = after.cloned();
        let past_start = |at_ms: u64, key: &str| {
            after
                .as_ref()
                .is_none_or(|after| (at_ms, key) > (after.at_ms, after.key.as_str()))
        };
        let mut due: Vec<Due> = known
            .iter()
            .filter_map(|(key, known)| Some((key, known.due_at_ms?)))
            .filter(|(key, at_ms)| *at_ms <= until && past_start(*at_ms, key))
            .map(|(key, at_ms)| Due {
                at_ms,
                key: key.clone(),
            })
            .collect();
        let stored = self
            .read(move |txn, name| {
                let table = txn.open_table(DUE).map_err(|e| storage(name, e))?;
                let start = match &after {
                    Some(after) => Bound::Excluded((after.at_ms, after.key.as_str())),
                    None => Bound::Unbounded,
                };
                let mut due = Vec::new();
                for entry in table
                    .range::<(u64, &str)>((start, Bound::Unbounded))
                    .map_err(|e| storage(name, e))?
                {
                    let (entry, _) = entry.map_err(|e| storage(name, e))?;
                    let (at_ms, key) = entry.value();
                    if at_ms > until || due.len() >= limit {
                        break;
                    }
                    // The overlay decides the keys it knows: their stored entries may be stale.
                    if !known.contains_key(key) {
                        due.push(Due {
                            at_ms,
                            key: key.to_owned(),
                        });
                    }
                }
                Ok(due)
            })
            .await?;
        due.extend(stored);
        due.sort_unstable();
        due.truncate(limit);
        Ok(due)
    }

    /// Through the writer: see `embedded/tombstones.rs` for the order (tombstone, then delete).
    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        _fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let (reply, answer) = oneshot::channel();
        let op = Op::Tombstones(TombstoneOp::Bury(Burial {
            key: key.to_owned(),
            expected,
            tombstone: tombstone.clone(),
            reply,
        }));
        self.write(op, answer).await
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        let owned_prefix = prefix.to_owned();
        let found = self
            .read(move |txn, name| tombstones::listed(txn, name, &owned_prefix, limit))
            .await?;
        // Read after the tombstones: a key saved again meanwhile is left out.
        let mut shown = Vec::with_capacity(found.len());
        for tombstone in found {
            if self.load(&tombstone.key).await?.is_none() {
                shown.push(tombstone);
            }
        }
        Ok(shown)
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = Op::Tombstones(TombstoneOp::Prune {
            until_ms,
            limit,
            reply,
        });
        self.write(op, answer).await
    }
}

mod checkpoint;
pub mod files;
mod journal;
mod overlay;
mod owners;
mod priority;
mod state_counts;
#[cfg(test)]
mod tests;
mod tombstones;
mod writer;
