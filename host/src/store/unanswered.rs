//! A save that got no answer: the store timed out, or the connection dropped, after the request
//! was sent. The store may still apply it after the caller stopped waiting, so "failed" would be
//! a lie as often as not, and a client told its transition failed would run it again.
//!
//! This module owns the one rule for learning what happened: read the record again, once the
//! store answers (a few bounded reads over a few seconds: a broken link is opened again), and
//! compare.
//! - The record is the one the save wrote (its version, time and snapshot): it committed, and
//!   the caller is told so.
//! - The record is still at the version the save expected, on a store that answers one
//!   connection's requests in order (Redis), after a timeout on a connection that lives on: the
//!   reread travels behind the save, so the save was applied before it or never will be. It did
//!   not commit, and the failure stands ([`StoreError::Unavailable`]).
//! - Anything else: [`StoreError::Ambiguous`]. The reread fails too; or the connection broke
//!   ([`StoreError::Dropped`]), so the reread went on another one, which a save still in the
//!   store's buffers may follow; or a store whose reread may overtake the save (a PostgreSQL
//!   pool, whose statement may still be running on another connection); or another writer
//!   moved the record on since. The client is told it may have been saved, and that a retry
//!   with the same idempotency key cannot run it twice.

use std::time::Duration;

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
    let (reason, link_lives) = match failure {
        StoreError::NoAnswer(reason) => (reason, true),
        StoreError::Dropped(reason) => (reason, false),
        other => return Err(other),
    };
    match reread(store, key).await {
        Ok(Some(stored)) if is_the_save(&stored, record) => {
            tracing::info!(
                key,
                version = record.version,
                "a save that got no answer had been applied"
            );
            Ok(())
        }
        Ok(stored)
            if link_lives
                && store.answers_in_order()
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

/// How long [`reread`] waits between tries: a link the failure broke is opened again meanwhile.
const REREAD_PAUSES_MS: [u64; 6] = [50, 100, 250, 500, 1000, 1000];

/// The record under `key`, read once the store answers: tried again after each pause of
/// [`REREAD_PAUSES_MS`] while the store is unreachable (about three seconds in all, each read
/// bounded by the store's own timeout).
async fn reread(store: &dyn StateStore, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
    let mut pauses = REREAD_PAUSES_MS.iter();
    loop {
        match store.load(key).await {
            Err(error) if error.is_unavailable() => match pauses.next() {
                Some(&pause) => tokio::time::sleep(Duration::from_millis(pause)).await,
                None => return Err(error),
            },
            read => return read,
        }
    }
}

/// Whether `stored` is what the save of `record` wrote.
fn is_the_save(stored: &InstanceRecord, record: &InstanceRecord) -> bool {
    stored.version == record.version
        && stored.updated_at_ms == record.updated_at_ms
        && stored.snapshot == record.snapshot
}
