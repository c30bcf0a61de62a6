//! The checks made before a write, so this store refuses what every store of the contract
//! refuses, before a round trip: a key's length, a record's format, version and due time.

use turnstile::store::{CURRENT_FORMAT, InstanceRecord, MAX_DUE_MS, StoreError};

/// Longest key accepted, in bytes: the width of the key columns (`schema.rs`).
pub(crate) const MAX_KEY_LEN: usize = 1024;

pub(crate) fn key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(invalid(key, format!("key must be 1..={MAX_KEY_LEN} bytes")));
    }
    Ok(())
}

/// A save of `record` over version `expected` (0: none) is one the contract allows.
pub(crate) fn save(key: &str, record: &InstanceRecord, expected: u64) -> Result<(), StoreError> {
    self::key(key)?;
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

pub(crate) fn invalid(key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

pub(crate) fn conflict(key: &str, expected: u64, current: Option<u64>) -> StoreError {
    StoreError::Conflict {
        key: key.to_owned(),
        expected,
        current,
    }
}
