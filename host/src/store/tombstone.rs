//! Tombstones: what a delete leaves of an instance, so that an operator asking after a deleted
//! handle learns who deleted it, when, and what it was, rather than "not found". The audit
//! trail goes with the record, so without this a delete would leave no trace at all.
//!
//! This module owns the [`Tombstone`] type, its stored encoding (JSON text, the same in every
//! store) and [`TombstoneIndex`], the in-process index the memory store keeps them in. Each
//! store keeps tombstones beside its records, written by [`super::StateStore::delete_leaving`]
//! in the same atomic step as the delete where the store allows it, and indexed by the time of
//! the delete, so [`super::StateStore::prune_tombstones`] reads only the expired ones.
//!
//! A tombstone is never shown for a live record: a handle saved again under the same key hides
//! its tombstone ([`super::StateStore::tombstones`] leaves it out) until the next delete that
//! leaves one replaces it, or pruning removes it.

use std::{
    collections::{BTreeMap, BTreeSet},
    ops::Bound,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{InstanceRecord, StoreError};

/// How many days a tombstone is kept by default (`--tombstone-days`).
pub const DEFAULT_TOMBSTONE_DAYS: u64 = 30;

/// What deleted an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeleteKind {
    /// An operator, through the console (or `turnstile instances --server`, which asks it).
    Console,
    /// `turnstile instances delete` on the store directly.
    Cli,
    /// Retention (`--retain-final`, `--instance-ttl`).
    Retention,
}

impl DeleteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteKind::Console => "console",
            DeleteKind::Cli => "cli",
            DeleteKind::Retention => "retention",
        }
    }
}

/// What is kept of a deleted instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The store key the instance was deleted under.
    pub key: String,
    pub workflow: String,
    /// The state value of its last snapshot (`"review"`, or an object for nested states).
    pub state: Value,
    /// The version deleted.
    pub version: u64,
    /// When, in unix milliseconds.
    pub deleted_at_ms: u64,
    /// Who: the console operator's principal, the OS user behind the CLI, `retention`.
    pub deleted_by: String,
    pub kind: DeleteKind,
}

impl Tombstone {
    /// The tombstone of `record`, stored under `key`, deleted now-ish (`at_ms`) by `by`.
    pub fn of(
        key: &str,
        record: &InstanceRecord,
        by: impl Into<String>,
        kind: DeleteKind,
        at_ms: u64,
    ) -> Self {
        Tombstone {
            key: key.to_owned(),
            workflow: record.workflow.clone(),
            state: record.snapshot["value"].clone(),
            version: record.version,
            deleted_at_ms: at_ms,
            deleted_by: by.into(),
            kind,
        }
    }

    /// The stored form: JSON text.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a tombstone serializes")
    }

    /// A tombstone read back from what [`Self::encode`] wrote under `key`.
    pub fn decode(key: &str, text: &str) -> Result<Self, StoreError> {
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
            key: key.to_owned(),
            reason: format!("tombstone is not readable: {e}"),
        })
    }
}

/// Tombstones by key and by the time of their delete, for a store that keeps them in process
/// (the memory store): listing by prefix is a range, pruning reads only the expired.
#[derive(Debug, Default)]
pub(super) struct TombstoneIndex {
    by_key: BTreeMap<String, Tombstone>,
    by_time: BTreeSet<(u64, String)>,
}

impl TombstoneIndex {
    /// Keeps `tombstone`, replacing the key's earlier one.
    pub(super) fn put(&mut self, tombstone: Tombstone) {
        if let Some(old) = self.by_key.get(&tombstone.key) {
            self.by_time.remove(&(old.deleted_at_ms, old.key.clone()));
        }
        self.by_time
            .insert((tombstone.deleted_at_ms, tombstone.key.clone()));
        self.by_key.insert(tombstone.key.clone(), tombstone);
    }

    /// Up to `limit` tombstones of keys starting with `prefix`, in key order, leaving out those
    /// `live` says have a record.
    pub(super) fn listed(
        &self,
        prefix: &str,
        limit: usize,
        live: impl Fn(&str) -> bool,
    ) -> Vec<Tombstone> {
        self.by_key
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter(|(key, _)| !live(key))
            .take(limit)
            .map(|(_, tombstone)| tombstone.clone())
            .collect()
    }

    /// Removes up to `limit` tombstones deleted at or before `until_ms`, oldest first.
    pub(super) fn prune(&mut self, until_ms: u64, limit: usize) -> usize {
        let expired: Vec<(u64, String)> = self
            .by_time
            .iter()
            .take_while(|(at, _)| *at <= until_ms)
            .take(limit)
            .cloned()
            .collect();
        for entry in &expired {
            self.by_time.remove(entry);
            self.by_key.remove(&entry.1);
        }
        expired.len()
    }
}
