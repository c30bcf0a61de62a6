//! The embedded store's tombstones (`store/tombstone.rs`): two redb tables, written straight
//! into the file like marks and machines (deletes are rare; they skip the journal), by the
//! writer thread, so that a delete that leaves one is checked, buried and journalled with no
//! other write in between.
//!
//! Order of a delete that leaves a tombstone (`Writer::bury`, in `writer.rs`): the writer checks
//! the version, commits the tombstone (a durable redb commit, one for all the batch's burials),
//! then journals the delete like any other. A crash between
//! the two leaves a tombstone beside the live record, which reads never show (they leave out a
//! key with a record, read after the tombstone); never a delete without its trace.

use std::ops::Bound;

use redb::{Database, ReadTransaction, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use super::storage;
use crate::store::{StoreError, Tombstone};

/// Key: instance key. Value: (deleted at, ms; the tombstone as JSON text).
const TOMBSTONES: TableDefinition<&str, (u64, &str)> = TableDefinition::new("tombstones_v1");

/// Key: (deleted at, ms; instance key). No value: the index pruning reads, oldest first.
const TOMBSTONES_BY_TIME: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("tombstones_by_time_v1");

/// Delete `key` at `expected`, leaving `tombstone`.
pub(in crate::store::embedded) struct Burial {
    pub(in crate::store::embedded) key: String,
    pub(in crate::store::embedded) expected: u64,
    pub(in crate::store::embedded) tombstone: Tombstone,
    pub(in crate::store::embedded) reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// A tombstone write for the writer thread.
pub(in crate::store::embedded) enum TombstoneOp {
    /// Delete a record, leaving a tombstone.
    Bury(Burial),
    /// Remove up to `limit` tombstones deleted at or before `until_ms`.
    Prune {
        until_ms: u64,
        limit: usize,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
}

impl TombstoneOp {
    /// Answers a tombstone op that could not be run.
    pub(in crate::store::embedded) fn fail(self, error: StoreError) {
        match self {
            TombstoneOp::Bury(Burial { reply, .. }) => {
                let _ = reply.send(Err(error));
            }
            TombstoneOp::Prune { reply, .. } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// Keeps each tombstone, replacing its key's earlier one, in one durable commit.
pub(in crate::store::embedded) fn bury<'a>(
    db: &Database,
    buried: impl Iterator<Item = &'a Tombstone>,
) -> Result<(), redb::Error> {
    let txn = super::durable_write(db)?;
    {
        let mut by_key = txn.open_table(TOMBSTONES)?;
        let mut by_time = txn.open_table(TOMBSTONES_BY_TIME)?;
        for tombstone in buried {
            let key = tombstone.key.as_str();
            let old = by_key.get(key)?.map(|old| old.value().0);
            if let Some(at) = old {
                by_time.remove((at, key))?;
            }
            by_key.insert(key, (tombstone.deleted_at_ms, tombstone.encode().as_str()))?;
            by_time.insert((tombstone.deleted_at_ms, key), ())?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// Removes up to `limit` tombstones deleted at or before `until_ms`, oldest first.
pub(in crate::store::embedded) fn prune(
    db: &Database,
    until_ms: u64,
    limit: usize,
) -> Result<usize, redb::Error> {
    let txn = super::durable_write(db)?;
    let pruned = {
        let mut by_key = txn.open_table(TOMBSTONES)?;
        let mut by_time = txn.open_table(TOMBSTONES_BY_TIME)?;
        let mut expired = Vec::new();
        for entry in by_time.range::<(u64, &str)>(..)? {
            if expired.len() >= limit {
                break;
            }
            let (entry, _) = entry?;
            let (at, key) = entry.value();
            if at > until_ms {
                break;
            }
            expired.push((at, key.to_owned()));
        }
        for (at, key) in &expired {
            by_time.remove((*at, key.as_str()))?;
            by_key.remove(key.as_str())?;
        }
        expired.len()
    };
    if pruned == 0 {
        txn.abort()?;
    } else {
        txn.commit()?;
    }
    Ok(pruned)
}

/// Up to `limit` tombstones of keys starting with `prefix`, in key order (live keys included:
/// the caller leaves them out, reading the records after this).
pub(in crate::store::embedded) fn listed(
    txn: &ReadTransaction,
    name: &str,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Tombstone>, StoreError> {
    let table = match txn.open_table(TOMBSTONES) {
        Ok(table) => table,
        // A file no delete ever left a tombstone in.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(storage(name, e)),
    };
    let mut found = Vec::new();
    for entry in table
        .range::<&str>((Bound::Included(prefix), Bound::Unbounded))
        .map_err(|e| storage(name, e))?
    {
        let (key, value) = entry.map_err(|e| storage(name, e))?;
        let key = key.value();
        if !key.starts_with(prefix) || found.len() >= limit {
            break;
        }
        found.push(Tombstone::decode(key, value.value().1)?);
    }
    Ok(found)
}
