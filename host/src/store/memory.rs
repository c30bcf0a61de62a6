//! `MemoryStore`: the in-process [`StateStore`], for tests, demos and single-process servers that
//! accept losing every instance on restart.
//!
//! This module owns an ordered map behind a mutex. It must not pretend to be durable: nothing is
//! written anywhere, and two processes never share it.

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::{Mutex, MutexGuard},
};

use async_trait::async_trait;

use super::{InstanceRecord, StateStore, StoreError, check_save, conflict, versions_match};

/// In-memory store. Cloning is not offered: share it as `Arc<dyn StateStore>`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    // A std Mutex, not a tokio one: no await happens while it is held, and every critical
    // section is a map lookup. A BTreeMap so listing by prefix is a range scan in key order.
    records: Mutex<BTreeMap<String, InstanceRecord>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn records(&self) -> MutexGuard<'_, BTreeMap<String, InstanceRecord>> {
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

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        Ok(self.records().get(key).cloned())
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        let mut records = self.records();
        let current = records.get(key).map(|r| r.version);
        if !versions_match(current, expected) {
            return Err(conflict(key, expected, current));
        }
        records.insert(key.to_owned(), record.clone());
        Ok(())
    }

    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        let mut records = self.records();
        let current = records.get(key).map(|r| r.version);
        if let Some(expected) = expected
            && current != Some(expected)
        {
            return Err(conflict(key, expected, current));
        }
        Ok(records.remove(key).is_some())
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
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .count();
        Ok(n as u64)
    }
}
