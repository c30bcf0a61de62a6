//! Checkpoints: folding the journal's changes into redb, so its segments can be deleted.
//!
//! The writer thread starts one when the segment it appends to has grown past
//! [`CHECKPOINT_BYTES`]: it opens a new segment, freezes the overlay's active layer (the changes
//! of every older segment) and hands it to the checkpoint thread here. That thread writes the
//! layer into redb in one durable transaction, drops it from the overlay, and deletes the older
//! segments. Saves go on meanwhile, into the new segment and a new active layer.
//!
//! A checkpoint that fails (the disk is full, say) loses nothing: the layer stays in the overlay
//! and the segments stay on disk. It is retried, at growing intervals, until it succeeds or the
//! store closes; the last checkpoint, on close, tries once more, and replay on the next open
//! covers whatever is still in the journal.

use std::{
    collections::VecDeque,
    path::PathBuf,
    sync::{Arc, RwLock, mpsc},
    thread::JoinHandle,
    time::Duration,
};

use redb::{Database, ReadableDatabase, ReadableTable, Table, WriteTransaction};
use tokio::sync::oneshot;

use super::{
    AUDIT, DUE, DUE_OF, FOLDED_THROUGH, FORMATS, INSTANCES, JOURNAL, durable_write, journal,
    overlay::{Layer, Overlay, Pending},
    owners::Owning,
    priority::yield_to_requests,
    state_counts::Counting,
    write_lock,
};
use crate::store::StoreError;

/// How large a segment grows before a checkpoint folds it into redb. It bounds the memory the
/// overlay holds (about this much, less what later saves of the same key replace) and the time a
/// replay takes on open, and it is large enough that redb's commits are rare.
///
/// Tests use 64 KiB, so that the shared store contract crosses checkpoints under concurrent
/// reads and writes.
pub const CHECKPOINT_BYTES: u64 = if cfg!(test) { 64 << 10 } else { 16 << 20 };

/// The first wait before a failed checkpoint is tried again; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The tables a fold writes.
struct Tables<'txn> {
    instances: Table<'txn, &'static str, (u64, u64, &'static str, &'static str)>,
    formats: Table<'txn, &'static str, (u64, &'static str)>,
    due: Table<'txn, (u64, &'static str), ()>,
    due_of: Table<'txn, &'static str, u64>,
    audit: Table<'txn, (&'static str, u64), &'static str>,
    /// The counts by state, moved with each row (`state_counts.rs`).
    counting: Counting<'txn>,
    /// The owner index, moved with each row that comes or goes (`owners.rs`).
    owning: Owning<'txn>,
    audit_keep: u64,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction, audit_keep: u64) -> Result<Self, redb::Error> {
        Ok(Self {
            audit_keep: audit_keep.max(1),
            instances: txn.open_table(INSTANCES)?,
            formats: txn.open_table(FORMATS)?,
            due: txn.open_table(DUE)?,
            due_of: txn.open_table(DUE_OF)?,
            audit: txn.open_table(AUDIT)?,
            counting: Counting::open(txn)?,
            owning: Owning::open(txn)?,
        })
    }

    /// Makes redb say of `key` what `pending` says: the same as applying, in order, the changes
    /// that were folded into it.
    fn put(&mut self, key: &str, pending: &Pending) -> Result<(), redb::Error> {
        if pending.audit_cleared {
            self.audit
                .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)?;
        }
        if let Some(old) = self.due_of.remove(key)? {
            let old = old.value();
            self.due.remove((old, key))?;
        }
        self.counting
            .put(key, pending.row.as_ref().and_then(|row| row.tally.as_ref()))?;
        let (existed, exists) = match &pending.row {
            None => {
                self.formats.remove(key)?;
                (self.instances.remove(key)?.is_some(), false)
            }
            Some(row) => {
                if let Some(due) = row.due_at_ms {
                    self.due.insert((due, key), ())?;
                    self.due_of.insert(key, due)?;
                }
                self.formats
                    .insert(key, (row.format, row.extras_json.as_str()))?;
                let existed = self
                    .instances
                    .insert(
                        key,
                        (
                            row.version,
                            row.updated_at_ms,
                            row.workflow.as_str(),
                            row.snapshot_json.as_str(),
                        ),
                    )?
                    .is_some();
                (existed, true)
            }
        };
        self.owning.put(key, existed, exists)?;
        for (version, entry) in &pending.audit {
            self.audit.insert((key, *version), entry.as_str())?;
        }
        // The trail keeps the last `audit_keep` versions' entries.
        if let Some((last, _)) = pending.audit.last()
            && *last > self.audit_keep
        {
            self.audit
                .retain_in((key, 0)..=(key, last - self.audit_keep), |_, _| false)?;
        }
        Ok(())
    }
}

/// Writes `layers`, oldest first, into redb in one durable transaction, which also records that
/// every segment up to `through` is folded in.
/// Each instance's audit trail keeps the entries of its last `audit_keep` versions.
pub fn fold(
    db: &Database,
    layers: &[&Layer],
    through: u64,
    audit_keep: u64,
) -> Result<(), redb::Error> {
    let txn = durable_write(db)?;
    {
        let mut tables = Tables::open(&txn, audit_keep)?;
        for layer in layers {
            for (key, pending) in layer.iter() {
                tables.put(key, pending)?;
            }
        }
        // Never backwards: replay passes over a leftover older segment without folding it.
        let mut journal = txn.open_table(JOURNAL)?;
        let before = journal.get(FOLDED_THROUGH)?.map(|value| value.value());
        journal.insert(
            FOLDED_THROUGH,
            before.map_or(through, |before| before.max(through)),
        )?;
    }
    txn.commit()?;
    Ok(())
}

/// The last segment a checkpoint folded into `db`, if any ever did.
pub fn folded_through(db: &Database) -> Result<Option<u64>, redb::Error> {
    let txn = db.begin_read()?;
    let table = txn.open_table(JOURNAL)?;
    Ok(table.get(FOLDED_THROUGH)?.map(|through| through.value()))
}

/// Deletes every segment of `store`'s journal numbered below `below`. A segment that cannot be
/// deleted is only logged: replaying it again is harmless (see `journal.rs`).
pub fn delete_segments(store: &std::path::Path, below: u64) {
    let segments = match journal::segments(store) {
        Ok(segments) => segments,
        Err(e) => {
            tracing::warn!(store = %store.display(), error = %e, "cannot list the journal's segments");
            return;
        }
    };
    for (number, path) in segments {
        if number >= below {
            continue;
        }
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(segment = %path.display(), error = %e, "cannot delete a checkpointed journal segment");
        }
    }
}

/// A frozen layer to fold, and the number of the segment the writer moved on to: every segment
/// below it is covered by the layer and the ones before it.
pub struct Job {
    pub layer: Arc<Layer>,
    pub segments_below: u64,
    /// Who asked for this checkpoint ([`StateStore::checkpoint`]), to hear when it is done.
    ///
    /// [`StateStore::checkpoint`]: crate::store::StateStore::checkpoint
    pub done: Vec<oneshot::Sender<Result<(), StoreError>>>,
}

/// The checkpoint thread. It folds jobs in the order they came; dropping the sender ends it
/// once the job in hand is done (or, if it keeps failing, given up for the last checkpoint to
/// retry).
pub struct Checkpointer {
    pub jobs: mpsc::Sender<Job>,
    pub thread: JoinHandle<()>,
}

impl Checkpointer {
    pub fn start(
        name: String,
        store: PathBuf,
        db: Arc<Database>,
        overlay: Arc<RwLock<Overlay>>,
        audit_keep: u64,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("store-checkpoint".to_owned())
            .spawn(move || {
                yield_to_requests();
                let mut waiting = VecDeque::new();
                loop {
                    let job = match waiting.pop_front() {
                        Some(job) => job,
                        None => match rx.recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        },
                    };
                    if !run(
                        &name,
                        &store,
                        &db,
                        audit_keep,
                        &overlay,
                        job,
                        &rx,
                        &mut waiting,
                    ) {
                        return;
                    }
                }
            })?;
        Ok(Self { jobs, thread })
    }
}

/// Folds `job`'s layer into redb, retrying at growing intervals until it succeeds; jobs that
/// come meanwhile wait in `waiting`. Returns `false` when the store closed first.
#[allow(clippy::too_many_arguments)] // The checkpoint thread's whole state, each part named.
fn run(
    name: &str,
    store: &std::path::Path,
    db: &Database,
    audit_keep: u64,
    overlay: &RwLock<Overlay>,
    mut job: Job,
    rx: &mpsc::Receiver<Job>,
    waiting: &mut VecDeque<Job>,
) -> bool {
    let mut wait = FIRST_RETRY;
    loop {
        match fold(db, &[&job.layer], job.segments_below - 1, audit_keep) {
            Ok(()) => {
                write_lock(overlay).checkpointed();
                delete_segments(store, job.segments_below);
                for done in job.done {
                    let _ = done.send(Ok(()));
                }
                return true;
            }
            Err(e) => {
                tracing::error!(store = %name, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "checkpoint failed; the changes stay in the journal");
                // Whoever asked, for this job or one queued behind it, hears of the failure now
                // (a stopping server must not wait on retries); the retries go on without them.
                for done in job
                    .done
                    .drain(..)
                    .chain(waiting.iter_mut().flat_map(|queued| queued.done.drain(..)))
                {
                    let _ = done.send(Err(StoreError::Unavailable(format!(
                        "{name}: checkpoint failed: {e}"
                    ))));
                }
            }
        }
        // Waiting on the channel rather than sleeping: a closing store ends the wait at once and
        // leaves the layer to the last checkpoint.
        match rx.recv_timeout(wait) {
            Ok(next) => waiting.push_back(next),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
        wait = (wait * 2).min(MAX_RETRY);
    }
}
