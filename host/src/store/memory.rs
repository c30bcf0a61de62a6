//! `MemoryStore`: the in-process [`StateStore`], for tests, demos and single-process servers that
//! accept losing every instance on restart.
//!
//! This module owns an ordered map behind a mutex. It must not pretend to be durable: nothing is
//! written anywhere, and two processes never share it.
//!
//! Records are kept as JSON text, not as `serde_json::Value` trees: a tree costs an allocation
//! per key and value, and with this store every instance ever created stays in memory, passivated
//! or not. A record is parsed only when an instance is activated.
//!
//! Due times are indexed in an ordered set of (due, key) beside the records, under the same lock,
//! so a save changes both at once; so are the counts by state (`state_counts.rs`), each record
//! keeping the tally it is counted under, so a save or delete takes off what was put on. Leases are kept there too, with the full contract of
//! `lease.rs`, though only a store made with [`MemoryStore::shared`] says it is shared (so that
//! instance actors take leases): tests run several "servers" on one such store.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    ops::Bound,
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use async_trait::async_trait;

use super::{
    AuditEntry, Due, Fence, InstanceRecord, LeaseGrant, LeaseRenewal, OwnedCounts, StateCounts,
    StateStore, StoreError, Tally, Tombstone, check_save, conflict, format, machine_key,
    tombstone::TombstoneIndex, versions_match,
};

/// In-memory store. Cloning is not offered: share it as `Arc<dyn StateStore>`.
#[derive(Debug)]
pub struct MemoryStore {
    // A std Mutex, not a tokio one: no await happens while it is held, and every critical
    // section is a map lookup.
    records: Mutex<Records>,
    /// Machine definitions by `workflow@version`, as JSON text.
    machines: Mutex<BTreeMap<String, Box<str>>>,
    /// Marks by name ([`StateStore::save_mark`]).
    marks: Mutex<BTreeMap<String, u64>>,
    /// Whether it says it is shared ([`MemoryStore::shared`]).
    shared: bool,
    /// The audit entries kept per instance (`StoreOptions::audit_keep`).
    audit_keep: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            records: Mutex::default(),
            machines: Mutex::default(),
            marks: Mutex::default(),
            shared: false,
            audit_keep: super::DEFAULT_AUDIT_KEEP,
        }
    }
}

/// The records and their due-time index, kept consistent under one lock.
#[derive(Debug, Default)]
struct Records {
    /// A BTreeMap so listing by prefix is a range scan in key order.
    by_key: BTreeMap<String, StoredRecord>,
    /// (due time, key) of every record that has a due time.
    due: BTreeSet<(u64, String)>,
    /// Each instance's audit trail, oldest first; removed with the record by `delete`.
    audit: HashMap<String, Vec<AuditEntry>>,
    /// The last lease granted on each record (alive until `until`), kept after it lapses for
    /// its token; removed with the record by `delete`.
    leases: HashMap<String, Lease>,
    /// How many records each owner has ([`StateStore::count_owned`]).
    owned: OwnedCounts,
    /// How many records each workflow has in each state ([`StateStore::count_by_state`]).
    counts: StateCounts,
    /// What deletes left ([`StateStore::delete_leaving`]), under the records' lock so a delete
    /// and its tombstone are one step.
    tombstones: TombstoneIndex,
}

/// A lease as this store keeps it.
#[derive(Debug)]
struct Lease {
    token: u64,
    holder: Box<str>,
    until: Instant,
    /// Ended by its holder rather than lapsed.
    released: bool,
    /// Who asked for it while another held it, and until when the mark lives.
    wanted: Option<(Box<str>, Instant)>,
}

impl Records {
    /// Removes `key`'s record and its due-time entry; returns whether there was a record.
    fn remove(&mut self, key: &str) -> bool {
        let Some(old) = self.by_key.remove(key) else {
            return false;
        };
        if let Some(due) = old.due_at_ms {
            self.due.remove(&(due, key.to_owned()));
        }
        self.owned.removed(key);
        self.counts.remove(&old.tally);
        true
    }

    /// The lease on `key` alive at `now`, if any.
    fn live_lease(&self, key: &str, now: Instant) -> Option<&Lease> {
        self.leases.get(key).filter(|lease| lease.until > now)
    }

    /// Whether a write under `fence` may change `key` now (see `lease.rs`).
    fn check_fence(&self, key: &str, fence: Option<&Fence>) -> Result<(), StoreError> {
        let now = Instant::now();
        let live = self.live_lease(key, now);
        let allowed = match (fence, live) {
            (Some(fence), Some(lease)) => {
                lease.token == fence.token && *lease.holder == *fence.holder
            }
            (None, None) => true,
            _ => false,
        };
        if allowed {
            return Ok(());
        }
        Err(StoreError::Fenced {
            key: key.to_owned(),
            remaining_ms: live.map(|lease| remaining_ms(lease, now)),
        })
    }
}

/// `asker` asked for `lease` while another holds it: mark it wanted by `asker`, unless another
/// asker's mark still lives.
fn mark_wanted(lease: &mut Lease, asker: &str, now: Instant) {
    let theirs = lease
        .wanted
        .as_ref()
        .is_some_and(|(by, until)| *until > now && **by != *asker);
    if !theirs {
        lease.wanted = Some((asker.into(), now + super::WANTED_FOR));
    }
}

fn remaining_ms(lease: &Lease, now: Instant) -> u64 {
    lease.until.saturating_duration_since(now).as_millis() as u64
}

/// An [`InstanceRecord`] as this store holds it: the snapshot as compact JSON text.
#[derive(Debug, Clone)]
struct StoredRecord {
    format: u32,
    /// [`format::Extras`] as JSON text.
    extras: Box<str>,
    workflow: Box<str>,
    snapshot: Box<str>,
    version: u64,
    updated_at_ms: u64,
    due_at_ms: Option<u64>,
    /// What the record is counted under in [`Records::counts`].
    tally: Tally,
}

impl StoredRecord {
    fn new(record: &InstanceRecord) -> Self {
        Self {
            tally: Tally::of(record),
            format: record.format,
            extras: format::encode(&record.extras()).into_boxed_str(),
            workflow: record.workflow.as_str().into(),
            snapshot: record.snapshot.to_string().into_boxed_str(),
            version: record.version,
            updated_at_ms: record.updated_at_ms,
            due_at_ms: record.due_at_ms,
        }
    }

    fn to_record(&self, key: &str) -> Result<InstanceRecord, StoreError> {
        let (format, extras) = format::decode(key, Some(self.format.into()), Some(&self.extras))?;
        Ok(InstanceRecord::assemble(
            format,
            extras,
            self.workflow.to_string(),
            // The text was written from a `Value` by `new`, so this fails only on a bug.
            serde_json::from_str(&self.snapshot).map_err(|e| StoreError::Corrupt {
                key: key.to_owned(),
                reason: format!("snapshot is not JSON: {e}"),
            })?,
            self.version,
            self.updated_at_ms,
        )
        .due(self.due_at_ms))
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store, keeping the last `audit_keep` audit entries of each instance.
    pub fn keeping_audit(self, audit_keep: u64) -> Self {
        Self { audit_keep, ..self }
    }

    /// An empty store that says it is shared ([`StateStore::is_shared`]), so instance actors
    /// take leases on it and reread what they do not hold: for tests that run several server
    /// processes' actors on one store.
    pub fn shared() -> Self {
        Self {
            shared: true,
            ..Self::default()
        }
    }

    fn records(&self) -> MutexGuard<'_, Records> {
        // A panic while holding the lock can only come from a bug in this file (the sections
        // below do not panic); the map is still consistent then, so keep serving it.
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    fn describe(&self) -> String {
        "memory:".to_owned()
    }

    fn is_shared(&self) -> bool {
        self.shared
    }

    /// Kept whether shared or not: tests run several servers' actors on one memory store.
    fn keeps_leases(&self) -> bool {
        true
    }

    fn indexes_due_times(&self) -> bool {
        true
    }

    async fn acquire_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        let now = Instant::now();
        let mut records = self.records();
        let Some(version) = records.by_key.get(key).map(|record| record.version) else {
            return Ok(LeaseGrant::Absent);
        };
        let (token, took_over, wanted) = match records.leases.get_mut(key) {
            Some(lease) if lease.until > now && *lease.holder != *holder => {
                let remaining_ms = remaining_ms(lease, now);
                mark_wanted(lease, holder, now);
                return Ok(LeaseGrant::Busy { remaining_ms });
            }
            Some(lease) if lease.until > now => {
                lease.until = now + ttl;
                let wanted = lease.wanted.as_ref().is_some_and(|(_, until)| *until > now);
                (lease.token, false, wanted)
            }
            Some(lease) => {
                // Free, but kept for the asker who marked it wanted while the mark lives.
                if let Some((asker, until)) = &lease.wanted
                    && *until > now
                    && **asker != *holder
                {
                    return Ok(LeaseGrant::Busy {
                        remaining_ms: until.saturating_duration_since(now).as_millis() as u64,
                    });
                }
                let took_over = !lease.released;
                lease.token += 1;
                lease.holder = holder.into();
                lease.released = false;
                lease.wanted = None;
                lease.until = now + ttl;
                (lease.token, took_over, false)
            }
            None => {
                records.leases.insert(
                    key.to_owned(),
                    Lease {
                        token: 1,
                        holder: holder.into(),
                        until: now + ttl,
                        released: false,
                        wanted: None,
                    },
                );
                (1, false, false)
            }
        };
        Ok(LeaseGrant::Held {
            token,
            took_over,
            version,
            wanted,
        })
    }

    async fn renew_lease(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        let now = Instant::now();
        let mut records = self.records();
        match records.leases.get_mut(key) {
            Some(lease)
                if lease.until > now
                    && lease.token == fence.token
                    && *lease.holder == *fence.holder =>
            {
                lease.until = now + ttl;
                let wanted = lease.wanted.as_ref().is_some_and(|(_, until)| *until > now);
                Ok(LeaseRenewal::Renewed { wanted })
            }
            _ => Ok(LeaseRenewal::Lost),
        }
    }

    async fn release_lease(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut records = self.records();
        if let Some(lease) = records.leases.get_mut(key)
            && lease.token == fence.token
            && *lease.holder == *fence.holder
            && lease.until > now
        {
            lease.until = now;
            lease.released = true;
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // In this process: reachable as long as the process is.
        Ok(())
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        // Copy the text out under the lock, parse it after.
        let stored = self.records().by_key.get(key).cloned();
        stored.map(|stored| stored.to_record(key)).transpose()
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        // Serialized before the lock is taken, so the critical section stays a map lookup.
        let stored = StoredRecord::new(record);
        let mut records = self.records();
        records.check_fence(key, record.fence.as_ref())?;
        let current = records.by_key.get(key).map(|r| r.version);
        if !versions_match(current, expected) {
            return Err(conflict(key, expected, current));
        }
        records.remove(key);
        if let Some(due) = stored.due_at_ms {
            records.due.insert((due, key.to_owned()));
        }
        records.counts.add(&stored.tally);
        records.by_key.insert(key.to_owned(), stored);
        records.owned.added(key);
        if let Some(entry) = &record.audit {
            let trail = records.audit.entry(key.to_owned()).or_default();
            trail.push(entry.clone());
            let over = trail.len().saturating_sub(self.audit_keep as usize);
            trail.drain(..over);
        }
        Ok(())
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        let mut records = self.records();
        records.check_fence(key, fence)?;
        let current = records.by_key.get(key).map(|r| r.version);
        if let Some(expected) = expected
            && current != Some(expected)
        {
            return Err(conflict(key, expected, current));
        }
        records.audit.remove(key);
        records.leases.remove(key);
        Ok(records.remove(key))
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.records().audit.get(key).cloned().unwrap_or_default())
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let text = definition.to_string().into_boxed_str();
        self.machines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(machine_key(workflow, version))
            .or_insert(text);
        Ok(())
    }

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let marks = self.marks.lock();
        Ok(marks
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .copied())
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        self.marks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_owned(), value);
        Ok(())
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let text = self
            .machines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&machine_key(workflow, version))
            .cloned();
        text.map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                key: machine_key(workflow, version),
                reason: format!("machine is not JSON: {e}"),
            })
        })
        .transpose()
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let records = self.records();
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        Ok(records
            .by_key
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let records = self.records();
        let n = records
            .by_key
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .count();
        Ok(n as u64)
    }

    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        Ok(self.records().owned.of(owner))
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        Ok(self.records().counts.clone())
    }

    /// Nothing here outlives the process or is written by other code, so the counts never
    /// drift; counted again all the same, under the lock, for the contract's sake.
    async fn recount_by_state(&self) -> Result<StateCounts, StoreError> {
        let mut records = self.records();
        let mut counts = StateCounts::default();
        for stored in records.by_key.values() {
            counts.add(&stored.tally);
        }
        records.counts = counts.clone();
        Ok(counts)
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let records = self.records();
        let start = match after {
            Some(after) => Bound::Excluded((after.at_ms, after.key.clone())),
            None => Bound::Unbounded,
        };
        Ok(records
            .due
            .range((start, Bound::Unbounded))
            .take_while(|(at_ms, _)| *at_ms <= until)
            .take(limit)
            .map(|(at_ms, key)| Due {
                at_ms: *at_ms,
                key: key.clone(),
            })
            .collect())
    }
    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        let mut records = self.records();
        records.check_fence(key, fence)?;
        let current = records.by_key.get(key).map(|r| r.version);
        if current != Some(expected) {
            return Err(conflict(key, expected, current));
        }
        records.audit.remove(key);
        records.leases.remove(key);
        records.remove(key);
        records.tombstones.put(tombstone.clone());
        Ok(true)
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        let records = self.records();
        Ok(records
            .tombstones
            .listed(prefix, limit, |key| records.by_key.contains_key(key)))
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        Ok(self.records().tombstones.prune(until_ms, limit))
    }
}
