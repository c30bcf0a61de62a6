//! The embedded store's owner index (`store/owned.rs`): which records each owner has, kept in
//! the file, in the transaction that writes the records.
//!
//! [`OWNED_KEYS`] holds one entry per record whose key names an owner, ordered by owner and
//! then key, so one owner's records are a range (`turnstile instances --owner`, the console's
//! listing of one tenant, paged); [`OWNER_COUNTS`] holds how many each owner has, so an open
//! reads a row per owner rather than every record of the file (the quota of
//! `--max-instances-per-principal` is counted in process from there, by the writer). A
//! checkpoint ([`Owning::put`]) moves both with each row it writes, and so does the replay of a
//! crashed server's journal. A file without the mark in `BUILT` (written before the index) is
//! indexed once, from its records, when it opens.
//!
//! It must not decide who owns a key: that is `owner_of`'s.

use std::ops::Bound;

use redb::{
    ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction,
};

use super::{INSTANCES, state_counts::BUILT};
use crate::store::{HANDLE_PREFIX, OwnedCounts, owner_of};

/// Key: (owner, instance key). No value: the key is the entry.
pub const OWNED_KEYS: TableDefinition<(&str, &str), ()> = TableDefinition::new("owned_keys_v1");

/// Key: owner. Value: how many records it has; an owner with none has no row.
pub const OWNER_COUNTS: TableDefinition<&str, u64> = TableDefinition::new("owner_counts_v1");

/// The index's name in `BUILT`, and the version of the rule that built it.
const OWNERS_BUILT: &str = "owners";
const OWNERS_VERSION: u64 = 1;

/// The two tables a write transaction moves the index in.
pub struct Owning<'txn> {
    keys: Table<'txn, (&'static str, &'static str), ()>,
    counts: Table<'txn, &'static str, u64>,
}

impl<'txn> Owning<'txn> {
    pub fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Self {
            keys: txn.open_table(OWNED_KEYS)?,
            counts: txn.open_table(OWNER_COUNTS)?,
        })
    }

    /// The record under `key` was there before the write (`existed`) and is there after it
    /// (`exists`): a record that came or went moves its owner's entry and count.
    pub fn put(&mut self, key: &str, existed: bool, exists: bool) -> Result<(), redb::Error> {
        let Some(owner) = owner_of(key) else {
            return Ok(());
        };
        if existed == exists {
            return Ok(());
        }
        let now = self.counts.get(owner)?.map_or(0, |n| n.value());
        if exists {
            self.keys.insert((owner, key), ())?;
            self.counts.insert(owner, now + 1)?;
        } else {
            self.keys.remove((owner, key))?;
            match now.saturating_sub(1) {
                0 => self.counts.remove(owner)?,
                n => self.counts.insert(owner, n)?,
            };
        }
        Ok(())
    }
}

/// The per-owner counts of the file, indexing its records first if the index is not marked
/// built. Run at open, once the journal is replayed and before the writer starts.
pub fn open(db: &redb::Database) -> Result<OwnedCounts, redb::Error> {
    let built = {
        let txn = db.begin_read()?;
        let table = txn.open_table(BUILT)?;
        table.get(OWNERS_BUILT)?.map(|version| version.value())
    };
    if built != Some(OWNERS_VERSION) {
        let txn = super::durable_write(db)?;
        rebuild(&txn)?;
        txn.commit()?;
    }
    let txn = db.begin_read()?;
    let mut owned = OwnedCounts::default();
    for entry in txn.open_table(OWNER_COUNTS)?.iter()? {
        let (owner, n) = entry?;
        owned.set(owner.value(), n.value());
    }
    Ok(owned)
}

/// Indexes every owned record of the file again, in `txn`, and marks the index built.
fn rebuild(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let mut keys = txn.open_table(OWNED_KEYS)?;
    let mut counts = txn.open_table(OWNER_COUNTS)?;
    keys.retain(|_, _| false)?;
    counts.retain(|_, _| false)?;
    let instances = txn.open_table(INSTANCES)?;
    let mut owned = OwnedCounts::default();
    for entry in instances.range::<&str>(HANDLE_PREFIX..)? {
        let (key, _) = entry?;
        let key = key.value();
        if !key.starts_with(HANDLE_PREFIX) {
            break;
        }
        if let Some(owner) = owner_of(key) {
            keys.insert((owner, key), ())?;
            owned.added(key);
        }
    }
    for (owner, n) in owned.iter() {
        counts.insert(owner, n)?;
    }
    txn.open_table(BUILT)?
        .insert(OWNERS_BUILT, OWNERS_VERSION)?;
    Ok(())
}

/// Up to `limit` keys of `owner`'s records in the file, in key order, strictly after `after`,
/// skipping those `skip` says the caller knows better (the overlay's).
pub fn list(
    txn: &ReadTransaction,
    owner: &str,
    after: Option<&str>,
    limit: usize,
    skip: impl Fn(&str) -> bool,
) -> Result<Vec<String>, redb::Error> {
    let table = txn.open_table(OWNED_KEYS)?;
    let start = match after {
        Some(after) => Bound::Excluded((owner, after)),
        None => Bound::Included((owner, "")),
    };
    let mut keys = Vec::new();
    for entry in table.range::<(&str, &str)>((start, Bound::Unbounded))? {
        let (entry, _) = entry?;
        let (of, key) = entry.value();
        if of != owner || keys.len() >= limit {
            break;
        }
        if !skip(key) {
            keys.push(key.to_owned());
        }
    }
    Ok(keys)
}

#[cfg(test)]
pub fn forget(db: &redb::Database) {
    let txn = db.begin_write().unwrap();
    txn.open_table(OWNED_KEYS)
        .unwrap()
        .retain(|_, _| false)
        .unwrap();
    txn.open_table(OWNER_COUNTS)
        .unwrap()
        .retain(|_, _| false)
        .unwrap();
    txn.open_table(BUILT).unwrap().remove(OWNERS_BUILT).unwrap();
    txn.commit().unwrap();
}
