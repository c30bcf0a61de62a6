//! `EmbeddedStore`: the durable default, one redb file on local disk, with group commit.
//!
//! This module owns the file, the one writer thread that commits to it, and the batching that
//! lets many instances share one fsync. It must not acknowledge a save before the transaction
//! holding it is committed with `Durability::Immediate`, and must not let one record's conflict
//! fail another record's save in the same batch.
//!
//! How a save travels: the caller serializes the snapshot on its own task, sends an [`Op`] down a
//! channel with a oneshot for the answer, and awaits it. The writer thread takes every op that
//! is waiting (up to [`MAX_BATCH`]), applies them in order inside one write transaction, commits
//! once, and only then answers each caller. While one batch is being fsync'd the next one
//! queues up, so the batch size grows with the load without any timer.
//!
//! Reads (`load`, `list_keys`, `count`, `due`) do not go through the writer: redb serves read
//! transactions concurrently with the writer, and they run on tokio's blocking pool.
//!
//! Due times live in two tables written in the save's transaction: [`DUE`], keyed by
//! (due, key) so that "due by T, earliest first" is a range scan, and [`DUE_OF`], the due time
//! a key has now, so that a save or delete finds the entry to remove.

use std::{
    ops::Bound,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    thread::JoinHandle,
};

use async_trait::async_trait;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition};
use tokio::sync::oneshot;

use super::{
    AuditEntry, Due, InstanceRecord, StateStore, StoreError, check_key, check_save, conflict,
    format, machine_key, versions_match,
};
use crate::metrics;

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

/// Most ops committed in one transaction. Bounds the latency one batch adds to the next and
/// the memory a transaction holds; large enough that the fsync, not the batch size, limits
/// throughput.
const MAX_BATCH: usize = 1024;

/// A write request for the writer thread. Every op answers exactly once on `reply`.
enum Op {
    Save {
        key: String,
        expected: u64,
        version: u64,
        updated_at_ms: u64,
        workflow: String,
        snapshot_json: String,
        format: u64,
        extras_json: String,
        due_at_ms: Option<u64>,
        /// The audit entry this save appends (JSON text), if it records a transition.
        audit_json: Option<String>,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    /// Keep a machine definition unless one is kept under that key already.
    SaveMachine {
        key: String,
        definition_json: String,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Delete {
        key: String,
        expected: Option<u64>,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
}

impl Op {
    fn key(&self) -> &str {
        match self {
            Op::Save { key, .. } | Op::SaveMachine { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    fn answer(self, result: Result<bool, StoreError>) {
        let reply = match self {
            Op::Save { reply, .. } | Op::SaveMachine { reply, .. } | Op::Delete { reply, .. } => {
                reply
            }
        };
        // The caller may have given up (its future was dropped); nobody is left to tell.
        let _ = reply.send(result);
    }
}

/// What the writer thread has done, for tests, benchmarks and operators: `ops / commits` is
/// the average group-commit batch size.
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Write transactions committed (one fsync each).
    pub commits: AtomicU64,
    /// Saves and deletes answered, conflicts included.
    pub ops: AtomicU64,
}

/// Durable store in one redb file. Dropping it waits for the writer thread to finish the batch
/// in hand (milliseconds: one commit) and closes the file, so the same path can be opened again
/// right after.
///
/// The channel to the writer is unbounded, but every caller awaits its own op, so the queue
/// never holds more ops than there are concurrent callers.
pub struct EmbeddedStore {
    name: String,
    db: Arc<Database>,
    stats: Arc<BatchStats>,
    /// `Some` until `Drop` takes it to close the channel and join the thread.
    writer: Option<(mpsc::Sender<Op>, JoinHandle<()>)>,
}

impl EmbeddedStore {
    /// Most bytes of file pages redb keeps in memory. redb's default (1 GiB) caches every page
    /// it writes until the cache is full, so the server's memory would grow with the number of
    /// instances ever saved, passivated or not. Instances are read once per activation and
    /// written once per transition, so a cache that holds the b-tree's upper levels and the pages
    /// being written is enough; the rest is served from the OS page cache. BENCHMARKS.md compares
    /// mint rates with and without the bound.
    pub const PAGE_CACHE_BYTES: usize = 4 << 20;

    /// Opens (or creates) the store file at `path`, creating missing parent directories. A new
    /// file is `0600` and a new directory `0700`; an existing file is tightened to `0600` (see
    /// [`files`]).
    ///
    /// Fails with [`StoreError::Unavailable`] when the directory cannot be created, the file is
    /// not a redb file, or another process (or another `EmbeddedStore`) has it open.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() {
            return Err(StoreError::Config(
                "embedded store needs a file path (embedded:/path/to/state.redb)".to_owned(),
            ));
        }
        let name = format!("embedded:{}", path.display());
        let opened = {
            let name = name.clone();
            tokio::task::spawn_blocking(move || open_file(&path, &name)).await
        };
        let db = Arc::new(opened.map_err(|e| {
            StoreError::Unavailable(format!("{name}: opening the file panicked: {e}"))
        })??);
        let (tx, rx) = mpsc::channel();
        let writer_db = Arc::clone(&db);
        let stats = Arc::new(BatchStats::default());
        let writer_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("store-writer".to_owned())
            .spawn(move || run_writer(&writer_db, &rx, &writer_stats))
            .map_err(|e| StoreError::Unavailable(format!("{name}: cannot start writer: {e}")))?;
        Ok(Self {
            name,
            db,
            stats,
            writer: Some((tx, thread)),
        })
    }

    /// Counters of the writer thread since open.
    pub fn batch_stats(&self) -> &BatchStats {
        &self.stats
    }

    async fn write(
        &self,
        op: Op,
        reply: oneshot::Receiver<Result<bool, StoreError>>,
    ) -> Result<bool, StoreError> {
        let stopped = || StoreError::Unavailable(format!("{}: writer thread stopped", self.name));
        let (tx, _) = self.writer.as_ref().ok_or_else(stopped)?;
        tx.send(op).map_err(|_| stopped())?;
        reply.await.map_err(|_| stopped())?
    }

    /// Runs `f` on a read transaction of the instances table, on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::ReadOnlyTable<&str, (u64, u64, &str, &str)>) -> Result<T, StoreError>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        let db = Arc::clone(&self.db);
        let name = self.name.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            let table = txn.open_table(INSTANCES).map_err(|e| storage(&name, e))?;
            f(&table)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Some((tx, thread)) = self.writer.take() {
            // Closing the channel ends the writer loop once it has answered what it holds.
            drop(tx);
            // A panicked writer has already failed its callers; nothing more to report here.
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
    let db = redb::Builder::new()
        .set_cache_size(EmbeddedStore::PAGE_CACHE_BYTES)
        .create(path)
        .map_err(|e| storage(name, e))?;
    // Create the tables once, so read transactions never meet a missing table (a file written
    // by format-1 code has only the first).
    let txn = db.begin_write().map_err(|e| storage(name, e))?;
    txn.open_table(INSTANCES).map_err(|e| storage(name, e))?;
    txn.open_table(FORMATS).map_err(|e| storage(name, e))?;
    txn.open_table(DUE).map_err(|e| storage(name, e))?;
    txn.open_table(DUE_OF).map_err(|e| storage(name, e))?;
    txn.open_table(AUDIT).map_err(|e| storage(name, e))?;
    txn.open_table(MACHINES).map_err(|e| storage(name, e))?;
    txn.commit().map_err(|e| storage(name, e))?;
    Ok(db)
}

fn storage(name: &str, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Unavailable(format!("{name}: {}", e.into()))
}

/// The writer thread: take what is waiting, commit it as one transaction, answer, repeat.
/// Returns when every sender is gone (the store was dropped).
fn run_writer(db: &Database, rx: &mpsc::Receiver<Op>, stats: &BatchStats) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        stats.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
        match commit_batch(db, &batch, stats) {
            Ok(results) => {
                for (op, result) in batch.into_iter().zip(results) {
                    op.answer(result);
                }
            }
            Err(e) => {
                // Nothing in the batch is on disk: every caller hears it, none hears success.
                let reason = e.to_string();
                for op in batch {
                    let msg = format!("embedded store write of {:?} failed: {reason}", op.key());
                    op.answer(Err(StoreError::Unavailable(msg)));
                }
            }
        }
    }
}

/// Applies `batch` in order in one write transaction and commits it durably. The outer error
/// (storage failure) fails the whole batch; the inner results are per op (a conflict for one
/// key does not touch the others).
fn commit_batch(
    db: &Database,
    batch: &[Op],
    stats: &BatchStats,
) -> Result<Vec<Result<bool, StoreError>>, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let mut writes = 0;
    let results = {
        let mut tables = Tables {
            instances: txn.open_table(INSTANCES)?,
            formats: txn.open_table(FORMATS)?,
            due: txn.open_table(DUE)?,
            due_of: txn.open_table(DUE_OF)?,
            audit: txn.open_table(AUDIT)?,
            machines: txn.open_table(MACHINES)?,
        };
        let mut results = Vec::with_capacity(batch.len());
        for op in batch {
            let result = apply(&mut tables, op)?;
            writes += usize::from(matches!(
                (op, &result),
                (Op::Save { .. }, Ok(_))
                    | (Op::SaveMachine { .. }, Ok(true))
                    | (Op::Delete { .. }, Ok(true))
            ));
            results.push(result);
        }
        results
    };
    if writes > 0 {
        txn.commit()?;
        stats.commits.fetch_add(1, Ordering::Relaxed);
        metrics::store_committed(writes);
    } else {
        // Only conflicts and no-op deletes: skip the fsync.
        txn.abort()?;
    }
    Ok(results)
}

/// The tables one write transaction has open.
struct Tables<'txn> {
    instances: Table<'txn, &'static str, (u64, u64, &'static str, &'static str)>,
    formats: Table<'txn, &'static str, (u64, &'static str)>,
    due: Table<'txn, (u64, &'static str), ()>,
    due_of: Table<'txn, &'static str, u64>,
    audit: Table<'txn, (&'static str, u64), &'static str>,
    machines: Table<'txn, &'static str, &'static str>,
}

impl Tables<'_> {
    /// Removes `key`'s due-time entry, if it has one.
    fn clear_due(&mut self, key: &str) -> Result<(), redb::Error> {
        if let Some(old) = self.due_of.remove(key)? {
            let old = old.value();
            self.due.remove((old, key))?;
        }
        Ok(())
    }
}

fn apply(tables: &mut Tables<'_>, op: &Op) -> Result<Result<bool, StoreError>, redb::Error> {
    let key = op.key();
    if let Op::SaveMachine {
        definition_json, ..
    } = op
    {
        // A version names one definition: the first one kept stays.
        if tables.machines.get(key)?.is_some() {
            return Ok(Ok(false));
        }
        tables.machines.insert(key, definition_json.as_str())?;
        return Ok(Ok(true));
    }
    let current = tables.instances.get(key)?.map(|guard| guard.value().0);
    match op {
        Op::SaveMachine { .. } => unreachable!("answered above"),
        Op::Save {
            expected,
            version,
            updated_at_ms,
            workflow,
            snapshot_json,
            format,
            extras_json,
            due_at_ms,
            audit_json,
            ..
        } => {
            if !versions_match(current, *expected) {
                return Ok(Err(conflict(key, *expected, current)));
            }
            tables.clear_due(key)?;
            if let Some(due) = *due_at_ms {
                tables.due.insert((due, key), ())?;
                tables.due_of.insert(key, due)?;
            }
            tables
                .formats
                .insert(key, (*format, extras_json.as_str()))?;
            let table = &mut tables.instances;
            table.insert(
                key,
                (
                    *version,
                    *updated_at_ms,
                    workflow.as_str(),
                    snapshot_json.as_str(),
                ),
            )?;
            if let Some(entry) = audit_json {
                tables.audit.insert((key, *version), entry.as_str())?;
            }
            Ok(Ok(true))
        }
        Op::Delete { expected, .. } => {
            if let Some(expected) = expected
                && current != Some(*expected)
            {
                return Ok(Err(conflict(key, *expected, current)));
            }
            tables.formats.remove(key)?;
            tables.clear_due(key)?;
            tables
                .audit
                .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)?;
            Ok(Ok(tables.instances.remove(key)?.is_some()))
        }
    }
}

#[async_trait]
impl StateStore for EmbeddedStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Opening the table in a read transaction touches the file's header and root pages.
        self.read(|_| Ok(())).await?;
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

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let key = key.to_owned();
        let name = self.name.clone();
        let db = Arc::clone(&self.db);
        let read = tokio::task::spawn_blocking(move || {
            // One read transaction for both tables: the row and its format are one snapshot.
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            let table = txn.open_table(INSTANCES).map_err(|e| storage(&name, e))?;
            let formats = txn.open_table(FORMATS).map_err(|e| storage(&name, e))?;
            let due_of = txn.open_table(DUE_OF).map_err(|e| storage(&name, e))?;
            let Some(guard) = table.get(key.as_str()).map_err(|e| storage(&name, e))? else {
                return Ok(None);
            };
            let due = due_of
                .get(key.as_str())
                .map_err(|e| storage(&name, e))?
                .map(|due| due.value());
            let format_guard = formats.get(key.as_str()).map_err(|e| storage(&name, e))?;
            let (format, extras) = match &format_guard {
                Some(guard) => {
                    let (format, extras) = guard.value();
                    format::decode(&key, Some(format), Some(extras))?
                }
                None => format::decode(&key, None, None)?,
            };
            let (version, updated_at_ms, workflow, snapshot_json) = guard.value();
            let snapshot =
                serde_json::from_str(snapshot_json).map_err(|e| StoreError::Corrupt {
                    key: key.clone(),
                    reason: format!("snapshot is not JSON: {e}"),
                })?;
            Ok(Some(
                InstanceRecord::assemble(
                    format,
                    extras,
                    workflow.to_owned(),
                    snapshot,
                    version,
                    updated_at_ms,
                )
                .due(due),
            ))
        });
        read.await
            .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        // Serialized here, on the caller's task, so the writer thread only copies bytes.
        let snapshot_json = record.snapshot.to_string();
        let (reply, answer) = oneshot::channel();
        let op = Op::Save {
            key: key.to_owned(),
            expected,
            version: record.version,
            updated_at_ms: record.updated_at_ms,
            workflow: record.workflow.clone(),
            snapshot_json,
            format: record.format.into(),
            extras_json: format::encode(&record.extras()),
            due_at_ms: record.due_at_ms,
            audit_json: record.audit.as_ref().map(AuditEntry::encode),
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

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let key = machine_key(workflow, version);
        let name = self.name.clone();
        let db = Arc::clone(&self.db);
        let read = tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            let table = txn.open_table(MACHINES).map_err(|e| storage(&name, e))?;
            let Some(guard) = table.get(key.as_str()).map_err(|e| storage(&name, e))? else {
                return Ok(None);
            };
            serde_json::from_str(guard.value())
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: key.clone(),
                    reason: format!("machine is not JSON: {e}"),
                })
        });
        read.await
            .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }

    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<bool, StoreError> {
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
        let prefix = prefix.to_owned();
        let after = after.map(str::to_owned);
        let name = self.name.clone();
        self.read(move |table| {
            let start = match &after {
                Some(after) if after.as_str() >= prefix.as_str() => Bound::Excluded(after.as_str()),
                _ => Bound::Included(prefix.as_str()),
            };
            let mut keys = Vec::new();
            for entry in table
                .range::<&str>((start, Bound::Unbounded))
                .map_err(|e| storage(&name, e))?
            {
                let (key, _) = entry.map_err(|e| storage(&name, e))?;
                let key = key.value();
                if !key.starts_with(prefix.as_str()) || keys.len() >= limit {
                    break;
                }
                keys.push(key.to_owned());
            }
            Ok(keys)
        })
        .await
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let prefix = prefix.to_owned();
        let name = self.name.clone();
        self.read(move |table| {
            let mut n = 0;
            for entry in table
                .range::<&str>(prefix.as_str()..)
                .map_err(|e| storage(&name, e))?
            {
                let (key, _) = entry.map_err(|e| storage(&name, e))?;
                if !key.value().starts_with(prefix.as_str()) {
                    break;
                }
                n += 1;
            }
            Ok(n)
        })
        .await
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let key = key.to_owned();
        let name = self.name.clone();
        let db = Arc::clone(&self.db);
        let read = tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            let table = txn.open_table(AUDIT).map_err(|e| storage(&name, e))?;
            let mut trail = Vec::new();
            for entry in table
                .range((key.as_str(), 0)..=(key.as_str(), u64::MAX))
                .map_err(|e| storage(&name, e))?
            {
                let (_, text) = entry.map_err(|e| storage(&name, e))?;
                trail.push(AuditEntry::decode(&key, text.value())?);
            }
            Ok(trail)
        });
        read.await
            .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let after = after.cloned();
        let name = self.name.clone();
        let db = Arc::clone(&self.db);
        let read = tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(|e| storage(&name, e))?;
            let table = txn.open_table(DUE).map_err(|e| storage(&name, e))?;
            let start = match &after {
                Some(after) => Bound::Excluded((after.at_ms, after.key.as_str())),
                None => Bound::Unbounded,
            };
            let mut due = Vec::new();
            for entry in table
                .range::<(u64, &str)>((start, Bound::Unbounded))
                .map_err(|e| storage(&name, e))?
            {
                let (entry, _) = entry.map_err(|e| storage(&name, e))?;
                let (at_ms, key) = entry.value();
                if at_ms > until || due.len() >= limit {
                    break;
                }
                due.push(Due {
                    at_ms,
                    key: key.to_owned(),
                });
            }
            Ok(due)
        });
        read.await
            .map_err(|e| StoreError::Unavailable(format!("{}: read task failed: {e}", self.name)))?
    }
}

pub mod files;
#[cfg(test)]
mod tests;
