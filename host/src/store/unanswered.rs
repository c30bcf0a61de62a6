//! A save that got no answer: the store timed out, or the connection dropped, after the request
//! was sent. The store may still apply it after the caller stopped waiting, so "failed" would be
//! a lie as often as not, and a client told its transition failed would run it again.
//!
//! This module owns the one rule for learning what happened: read the record again (one more
//! bounded read) and compare.
//! - The record is the one the save wrote (its version, time and snapshot): it committed, and
//!   the caller is told so.
//! - The record is still at the version the save expected, on a store that answers one
//!   connection's requests in order (Redis: the reread travels behind the save, so the save was
//!   applied before it or never will be): it did not commit, and the failure stands.
//! - Anything else (the reread fails too, or a store whose reread may overtake the save, like a
//!   PostgreSQL pool whose statement may still be running on another connection):
//!   [`StoreError::Ambiguous`]. The client is told it may have been saved, and that a retry with
//!   the same idempotency key cannot run it twice.

use super::{InstanceRecord, StateStore, StoreError};

/// What `store.save(key, record, expected)` failing with `failure` did, as far as a reread can
/// tell: `Ok` when it committed after all, else the error to report.
pub async fn settle(
    store: &dyn StateStore,
    key: &str,
    record: &InstanceRecord,
    expected: u64,
    failure: StoreError,
) -> Result<(), StoreError> {
    let StoreError::NoAnswer(reason) = failure else {
        return Err(failure);
    };
    match store.load(key).await {
        Ok(Some(stored)) if is_the_save(&stored, record) => {
            tracing::info!(
                key,
                version = record.version,
                "a save that got no answer had been applied"
            );
            Ok(())
        }
        Ok(stored)
            if store.answers_in_order()
                && stored.as_ref().map_or(0, |stored| stored.version) == expected =>
        {
            Err(StoreError::Unavailable(reason))
        }
        Ok(_) | Err(_) => Err(StoreError::Ambiguous {
            key: key.to_owned(),
            reason,
        }),
    }
}

/// Whether `stored` is what the save of `record` wrote.
fn is_the_save(stored: &InstanceRecord, record: &InstanceRecord) -> bool {
    stored.version == record.version
        && stored.updated_at_ms == record.updated_at_ms
        && stored.snapshot == record.snapshot
}
