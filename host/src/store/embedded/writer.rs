//! The embedded store's writer thread: it takes the saves and deletes that are waiting, checks
//! each one's expected version, appends the accepted ones to the journal in one write, syncs it
//! once, adds them to the overlay, and only then answers each caller (see `embedded.rs` for how
//! a save travels). One thread, so the checks and the journal's order are one sequence.
//!
//! It must not acknowledge an op before the journal frame holding it is synced, and must not let
//! one record's conflict fail another record's save in the same batch.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, RwLock, atomic::Ordering, mpsc},
};

use redb::{Database, ReadableDatabase, ReadableTable};
use tokio::sync::oneshot;

use super::checkpoint::{CHECKPOINT_BYTES, Job};
use super::priority::yield_to_requests;
use super::tombstones::{self, Burial, TombstoneOp};
use super::{
    BatchStats, Change, Checkpointer, INSTANCES, Layer, MACHINES, MARKS, Overlay, OwnedCounts, Row,
    Segment, StateCounts, StoreError, Tally, checkpoint, conflict, durable_write, journal,
    lock_counts, lock_owned, owner_of, read_lock, state_counts, storage, versions_match,
    write_lock,
};
use crate::metrics;

/// Most ops made durable by one sync. Bounds the latency one batch adds to the next and the
/// memory a batch holds; large enough that the sync, not the batch size, limits throughput.
const MAX_BATCH: usize = 1024;

/// How long the writer waits with nothing to write before it folds what the journal holds into
/// redb: an idle server keeps no changes in memory, and a crash then has nothing to replay.
const IDLE_CHECKPOINT: std::time::Duration = std::time::Duration::from_secs(1);

/// A write request for the writer thread. Every op answers exactly once on `reply`.
pub(super) enum Op {
    Save {
        key: String,
        expected: u64,
        row: Row,
        /// The audit entry this save appends (JSON text), if it records a transition.
        audit: Option<String>,
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
    /// Fold everything acknowledged so far into the file ([`StateStore::checkpoint`]).
    Checkpoint {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Count every record again ([`StateStore::recount_by_state`]).
    Recount {
        reply: oneshot::Sender<Result<StateCounts, StoreError>>,
    },
    /// Give a mark a value ([`StateStore::save_mark`]): committed straight into redb, like a
    /// machine, after the batch it came with.
    SaveMark {
        name: String,
        value: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A delete that leaves a tombstone, or a pruning (`tombstones.rs`): after the batch.
    Tombstones(TombstoneOp),
}

/// A key's record as a batch's checks see it: its version, and what it is counted under.
type Current = Option<(u64, Option<Tally>)>;

/// What a batch's checks let through: the changes to journal, each with the reply that waits
/// for it, and what they do to the counts once durable.
#[derive(Default)]
struct Checked {
    changes: Vec<(Change, Reply)>,
    /// Keys of owned records the changes create (`true`) or remove (`false`), for
    /// [`OwnedCounts`].
    owners: Vec<(String, bool)>,
    /// Each change's old and new tally, for the counts by state.
    tallies: Vec<(Option<Tally>, Option<Tally>)>,
}

/// The writer thread's state: the segment it appends to and the checkpoint thread it feeds.
pub(super) struct Writer {
    pub(super) name: String,
    pub(super) path: PathBuf,
    pub(super) db: Arc<Database>,
    pub(super) overlay: Arc<RwLock<Overlay>>,
    pub(super) stats: Arc<BatchStats>,
    pub(super) segment: Segment,
    /// `None` only while closing.
    pub(super) checkpointer: Option<Checkpointer>,
    /// A batch's frames, kept between batches so its buffer is reused.
    pub(super) frames: Vec<u8>,
    /// For the last checkpoint, when the store closes.
    pub(super) audit_keep: u64,
    /// The store's per-owner counts, which this thread alone changes.
    pub(super) owned: Arc<Mutex<OwnedCounts>>,
    /// The store's counts by state, which this thread alone changes.
    pub(super) counts: Arc<Mutex<StateCounts>>,
}

impl Writer {
    /// Take what is waiting, make it durable, answer, repeat; when every sender is gone (the
    /// store was dropped), make the last checkpoint.
    pub(super) fn run(mut self, rx: &mpsc::Receiver<Op>) {
        yield_to_requests();
        loop {
            let first = match rx.recv_timeout(IDLE_CHECKPOINT) {
                Ok(op) => op,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.start_checkpoint();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            let (asked, batch): (Vec<Op>, Vec<Op>) = batch.into_iter().partition(|op| {
                matches!(
                    op,
                    Op::Checkpoint { .. }
                        | Op::Recount { .. }
                        | Op::SaveMark { .. }
                        | Op::Tombstones(_)
                )
            });
            self.stats
                .ops
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.commit(batch);
            // After this batch's saves, which the checkpoint and the count then cover.
            let mut checkpoints = Vec::new();
            let mut burials = Vec::new();
            for op in asked {
                match op {
                    Op::Checkpoint { reply } => checkpoints.push(reply),
                    Op::Recount { reply } => {
                        let _ = reply.send(self.recount());
                    }
                    Op::SaveMark { name, value, reply } => {
                        let _ = reply.send(self.save_mark(&name, value));
                    }
                    Op::Tombstones(TombstoneOp::Bury(burial)) => burials.push(burial),
                    Op::Tombstones(TombstoneOp::Prune {
                        until_ms,
                        limit,
                        reply,
                    }) => {
                        let pruned = tombstones::prune(&self.db, until_ms, limit)
                            .map_err(|e| storage(&self.name, e));
                        let _ = reply.send(pruned);
                    }
                    _ => unreachable!("partitioned above"),
                }
            }
            if !burials.is_empty() {
                self.bury(burials);
            }
            if !checkpoints.is_empty() {
                self.checkpoint_now(checkpoints);
            } else if self.segment.len() >= CHECKPOINT_BYTES {
                self.start_checkpoint();
            }
        }
        self.close();
    }

    /// Makes `batch` durable and answers each op.
    fn commit(&mut self, batch: Vec<Op>) {
        let mut instance_ops = Vec::with_capacity(batch.len());
        let mut machines = Vec::new();
        for op in batch {
            match op {
                Op::SaveMachine {
                    key,
                    definition_json,
                    reply,
                } => machines.push((key, definition_json, reply)),
                Op::Checkpoint { .. }
                | Op::Recount { .. }
                | Op::SaveMark { .. }
                | Op::Tombstones(_) => {
                    unreachable!("taken out of the batch by `run`")
                }
                op => instance_ops.push(op),
            }
        }
        if !machines.is_empty() {
            self.commit_machines(machines);
        }
        let checked = self.check(instance_ops);
        let mut changes = Vec::with_capacity(checked.changes.len());
        let mut replies = Vec::with_capacity(checked.changes.len());
        self.frames.clear();
        for (change, reply) in checked.changes {
            journal::encode(&change, &mut self.frames);
            changes.push(change);
            replies.push(reply);
        }
        if changes.is_empty() {
            // Only conflicts and no-op deletes: nothing to sync.
            return;
        }
        if let Err(e) = self.segment.append(&self.frames) {
            // Nothing of the batch counts: every caller hears it, none hears success.
            let reason = format!("{}: journal write failed: {e}", self.name);
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(reason.clone())));
            }
            if self.segment.is_broken() {
                // Its unacknowledged tail could not be cut off: move on to a new segment, and
                // let a checkpoint put the broken one behind `folded_through`.
                let _ = self.checkpoint(Vec::new());
            }
            return;
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        metrics::store_committed(changes.len());
        write_lock(&self.overlay).apply(changes);
        {
            let mut owned = lock_owned(&self.owned);
            for (key, created) in &checked.owners {
                if *created {
                    owned.added(key);
                } else {
                    owned.removed(key);
                }
            }
        }
        {
            let mut counts = lock_counts(&self.counts);
            for (old, new) in &checked.tallies {
                counts.replace(old.as_ref(), new.as_ref());
            }
        }
        for reply in replies {
            // The caller may have given up (its future was dropped); nobody is left to tell.
            let _ = reply.send(Ok(true));
        }
    }

    /// Checks each save's and delete's expected version against the key's current one, in
    /// order, so a later op in the batch sees what an earlier one did. Answers the ops that
    /// write nothing (a conflict, a delete of a key that is not there, a failed read of the
    /// current version); the others come back as changes to journal, each with the reply that
    /// waits for it to be synced, and beside them what they do to the counts once durable.
    fn check(&self, ops: Vec<Op>) -> Checked {
        let mut in_batch: HashMap<String, Current> = HashMap::new();
        let mut checked = Checked {
            changes: Vec::with_capacity(ops.len()),
            ..Checked::default()
        };
        for op in ops {
            let key = match &op {
                Op::Save { key, .. } | Op::Delete { key, .. } => key.as_str(),
                Op::SaveMachine { .. }
                | Op::Checkpoint { .. }
                | Op::Recount { .. }
                | Op::SaveMark { .. }
                | Op::Tombstones(_) => {
                    unreachable!("machines, checkpoints, counts and marks are taken apart")
                }
            };
            let stored = match in_batch.remove(key) {
                Some(stored) => Ok(stored),
                None => self.stored(key),
            };
            let stored = match stored {
                Ok(stored) => stored,
                Err(e) => {
                    op.answer(Err(e));
                    continue;
                }
            };
            let current = stored.as_ref().map(|(version, _)| *version);
            match op {
                Op::Save {
                    key,
                    expected,
                    row,
                    audit,
                    reply,
                } => {
                    if versions_match(current, expected) {
                        in_batch.insert(key.clone(), Some((row.version, row.tally.clone())));
                        if current.is_none() && owner_of(&key).is_some() {
                            checked.owners.push((key.clone(), true));
                        }
                        let old = stored.and_then(|(_, tally)| tally);
                        checked.tallies.push((old, row.tally.clone()));
                        checked
                            .changes
                            .push((Change::Save { key, row, audit }, reply));
                    } else {
                        in_batch.insert(key.clone(), stored);
                        let _ = reply.send(Err(conflict(&key, expected, current)));
                    }
                }
                Op::Delete {
                    key,
                    expected,
                    reply,
                } => {
                    if let Some(expected) = expected
                        && current != Some(expected)
                    {
                        in_batch.insert(key.clone(), stored);
                        let _ = reply.send(Err(conflict(&key, expected, current)));
                    } else if current.is_none() {
                        in_batch.insert(key.clone(), None);
                        let _ = reply.send(Ok(false));
                    } else {
                        in_batch.insert(key.clone(), None);
                        if owner_of(&key).is_some() {
                            checked.owners.push((key.clone(), false));
                        }
                        let old = stored.and_then(|(_, tally)| tally);
                        checked.tallies.push((old, None));
                        checked.changes.push((Change::Delete { key }, reply));
                    }
                }
                Op::SaveMachine { .. }
                | Op::Checkpoint { .. }
                | Op::Recount { .. }
                | Op::SaveMark { .. }
                | Op::Tombstones(_) => {
                    unreachable!("machines, checkpoints, counts and marks are taken apart")
                }
            }
        }
        checked
    }

    /// The version and tally `key` has now, outside the batch in hand: the overlay's if it knows
    /// the key, else redb's.
    pub(super) fn stored(&self, key: &str) -> Result<Current, StoreError> {
        // The overlay first, redb after, in a read transaction opened after the overlay said it
        // does not know the key (see `overlay.rs`): a transaction opened earlier in the batch
        // could predate the checkpoint that took the key out of the overlay.
        if let Some(row) = read_lock(&self.overlay).row(key) {
            return Ok(row.map(|row| (row.version, row.tally.clone())));
        }
        let read = || -> Result<Current, redb::Error> {
            let txn = self.db.begin_read()?;
            let Some(version) = txn
                .open_table(INSTANCES)?
                .get(key)?
                .map(|row| row.value().0)
            else {
                return Ok(None);
            };
            let tally = txn
                .open_table(state_counts::COUNTED_AS)?
                .get(key)?
                .and_then(|text| Tally::decode(text.value()));
            Ok(Some((version, tally)))
        };
        read().map_err(|e| storage(&self.name, e))
    }

    /// Counts every record again (see [`StateStore::recount_by_state`]): the file's counts are
    /// rebuilt from its records in one transaction, and the ones in process made from those
    /// and the overlay. On this thread, so no batch moves a count meanwhile.
    fn recount(&self) -> Result<StateCounts, StoreError> {
        let recounted = || -> Result<StateCounts, redb::Error> {
            let txn = durable_write(&self.db)?;
            state_counts::rebuild(&txn)?;
            txn.commit()?;
            state_counts::live(&self.db, &self.overlay)
        };
        let counts = recounted().map_err(|e| storage(&self.name, e))?;
        *lock_counts(&self.counts) = counts.clone();
        Ok(counts)
    }

    /// Deletes each burial's record at its expected version, leaving its tombstone: the
    /// versions checked, then every tombstone in one durable redb commit, then every delete in
    /// one journal batch; two syncs for the batch, not two per delete (a retention burst
    /// deletes thousands at once). Nothing runs in between: this thread is the only writer.
    fn bury(&mut self, burials: Vec<Burial>) {
        let mut checked: Vec<Burial> = Vec::with_capacity(burials.len());
        for burial in burials {
            // A key buried earlier in this batch is gone by the time this one would run.
            let current = if checked.iter().any(|earlier| earlier.key == burial.key) {
                Ok(None)
            } else {
                self.stored(&burial.key)
                    .map(|current| current.map(|(version, _)| version))
            };
            match current {
                Ok(current) if current == Some(burial.expected) => checked.push(burial),
                Ok(current) => {
                    let error = conflict(&burial.key, burial.expected, current);
                    let _ = burial.reply.send(Err(error));
                }
                Err(error) => {
                    let _ = burial.reply.send(Err(error));
                }
            }
        }
        if checked.is_empty() {
            return;
        }
        if let Err(error) = tombstones::bury(&self.db, checked.iter().map(|b| &b.tombstone)) {
            let reason = format!("{}: {error}", self.name);
            for burial in checked {
                let _ = burial
                    .reply
                    .send(Err(StoreError::Unavailable(reason.clone())));
            }
            return;
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let deletes = checked
            .into_iter()
            .map(|burial| Op::Delete {
                key: burial.key,
                expected: Some(burial.expected),
                reply: burial.reply,
            })
            .collect();
        self.commit(deletes);
    }

    /// Gives the mark `name` the value `value`, in one durable redb commit.
    fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        let saved = || -> Result<(), redb::Error> {
            let txn = durable_write(&self.db)?;
            txn.open_table(MARKS)?.insert(name, value)?;
            txn.commit()?;
            Ok(())
        };
        saved().map_err(|e| storage(&self.name, e))?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Keeps each machine definition not kept yet, in one durable redb commit, and answers.
    fn commit_machines(&self, machines: Vec<(String, String, Reply)>) {
        let committed = (|| -> Result<Vec<bool>, redb::Error> {
            let txn = durable_write(&self.db)?;
            let mut kept = Vec::with_capacity(machines.len());
            {
                let mut table = txn.open_table(MACHINES)?;
                for (key, definition, _) in &machines {
                    // A version names one definition: the first one kept stays.
                    let new = table.get(key.as_str())?.is_none();
                    if new {
                        table.insert(key.as_str(), definition.as_str())?;
                    }
                    kept.push(new);
                }
            }
            if kept.contains(&true) {
                txn.commit()?;
            } else {
                txn.abort()?;
            }
            Ok(kept)
        })();
        match committed {
            Ok(kept) => {
                let writes = kept.iter().filter(|&&new| new).count();
                if writes > 0 {
                    self.stats.commits.fetch_add(1, Ordering::Relaxed);
                    metrics::store_committed(writes);
                }
                for ((_, _, reply), new) in machines.into_iter().zip(kept) {
                    let _ = reply.send(Ok(new));
                }
            }
            Err(e) => {
                let reason = format!("{}: keeping a machine definition failed: {e}", self.name);
                for (_, _, reply) in machines {
                    let _ = reply.send(Err(StoreError::Unavailable(reason.clone())));
                }
            }
        }
    }

    /// Starts a checkpoint if one is worth it: none is under way, and the overlay holds
    /// something to fold (else the next batch, or the next idle second, asks again).
    fn start_checkpoint(&mut self) {
        if read_lock(&self.overlay).can_freeze() {
            // It can only fail to start, which it logs; the next batch tries again.
            let _ = self.checkpoint(Vec::new());
        }
    }

    /// Folds everything acknowledged so far into the file, answering each of `replies` when it
    /// is done: after the checkpoints already under way, whether or not there is anything new.
    fn checkpoint_now(&mut self, replies: Vec<oneshot::Sender<Result<(), StoreError>>>) {
        if let Err(replies) = self.checkpoint(replies) {
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(format!(
                    "{}: cannot start a checkpoint (see the log)",
                    self.name
                ))));
            }
        }
    }

    /// Moves saves to a new segment and hands the changes of the older ones to the checkpoint
    /// thread, which answers `done` when redb has them. Gives `done` back when it cannot start
    /// one (a new segment cannot be made).
    #[allow(clippy::type_complexity)]
    fn checkpoint(
        &mut self,
        done: Vec<oneshot::Sender<Result<(), StoreError>>>,
    ) -> Result<(), Vec<oneshot::Sender<Result<(), StoreError>>>> {
        let Some(checkpointer) = &self.checkpointer else {
            return Err(done);
        };
        let next = match Segment::create(&self.path, self.segment.number() + 1) {
            Ok(next) => next,
            Err(e) => {
                // Saves go on into the segment in hand; the next batch tries again.
                tracing::error!(store = %self.name, error = %e, "cannot start a journal segment for a checkpoint");
                return Err(done);
            }
        };
        let layer = write_lock(&self.overlay).freeze();
        self.segment = next;
        let job = Job {
            layer,
            segments_below: self.segment.number(),
            done,
        };
        if checkpointer.jobs.send(job).is_ok() {
            self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The last checkpoint, when the store closes: waits for the one under way, folds
    /// everything still in the overlay into redb and deletes the journal. If that fails the
    /// journal stays, and the next open replays it.
    fn close(mut self) {
        if let Some(checkpointer) = self.checkpointer.take() {
            drop(checkpointer.jobs);
            let _ = checkpointer.thread.join();
        }
        let layers = write_lock(&self.overlay).take_all();
        let layers: Vec<&Layer> = layers.iter().map(|layer| &**layer).collect();
        match checkpoint::fold(&self.db, &layers, self.segment.number(), self.audit_keep) {
            Ok(()) => {
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                checkpoint::delete_segments(&self.path, u64::MAX);
            }
            Err(e) => tracing::error!(store = %self.name, error = %e,
                "the last checkpoint failed; the journal stays for the next open to replay"),
        }
    }
}

pub(super) type Reply = oneshot::Sender<Result<bool, StoreError>>;

impl Op {
    fn answer(self, result: Result<bool, StoreError>) {
        let reply = match self {
            Op::Save { reply, .. } | Op::SaveMachine { reply, .. } | Op::Delete { reply, .. } => {
                reply
            }
            Op::Checkpoint { reply } => {
                let _ = reply.send(result.map(drop));
                return;
            }
            Op::Recount { reply } => {
                // Only a failure is answered this way; a count answers with what it counted.
                let _ = reply.send(result.map(|_| StateCounts::default()));
                return;
            }
            Op::SaveMark { reply, .. } => {
                let _ = reply.send(result.map(drop));
                return;
            }
            Op::Tombstones(op) => {
                if let Err(error) = result {
                    op.fail(error);
                }
                return;
            }
        };
        // The caller may have given up (its future was dropped); nobody is left to tell.
        let _ = reply.send(result);
    }
}
