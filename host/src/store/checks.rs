//! The checks every store makes the same way before a write: a key's length, a record's
//! version against the one read, and the errors they give.

use super::{CURRENT_FORMAT, InstanceRecord, MAX_DUE_MS, StoreError};

/// Longest key any store accepts, in bytes. Handles are far shorter; the bound keeps a bug from
/// writing megabyte keys into Redis or a PostgreSQL index.
pub const MAX_KEY_LEN: usize = 1024;

/// The checks every store makes before a save, so all stores reject the same requests: the key
/// ([`check_key`]), the record's format (only [`CURRENT_FORMAT`] is written), its due time (at
/// most [`MAX_DUE_MS`]) and its version (`expected + 1`), each refused as
/// [`StoreError::Invalid`] naming the rule. Public for stores written outside this crate.
pub fn check_save(key: &str, record: &InstanceRecord, expected: u64) -> Result<(), StoreError> {
    check_key(key)?;
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

/// The key a store files machine `version` of `workflow` under.
pub(super) fn machine_key(workflow: &str, version: &str) -> String {
    format!("{workflow}@{version}")
}

/// A key every store accepts: 1 to [`MAX_KEY_LEN`] bytes, else [`StoreError::Invalid`].
pub fn check_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(invalid(key, format!("key must be 1..={MAX_KEY_LEN} bytes")));
    }
    Ok(())
}

/// Whether a save with `expected` may replace what is stored (`current`: stored version).
/// Stored versions are never 0, so `expected == 0` means "must not exist".
pub(super) fn versions_match(current: Option<u64>, expected: u64) -> bool {
    current.unwrap_or(0) == expected
}

pub(super) fn conflict(key: &str, expected: u64, current: Option<u64>) -> StoreError {
    StoreError::Conflict {
        key: key.to_owned(),
        expected,
        current,
    }
}

pub(super) fn invalid(key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// An error and its causes, "outer: inner: root", since driver errors often keep the useful
/// part ("Connection refused") in their source. Skips a cause whose text the outer already has.
/// Public as `store::error_chain`, for a store written outside the host to word its
/// [`StoreError`](super::StoreError)s as the built-in stores do.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
