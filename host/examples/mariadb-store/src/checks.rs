//! The checks made before a write, so this store refuses what every store of the contract
//! refuses, before a round trip (the host's own: a key's length, a record's format, version and
//! due time), and the errors a refused write gives.

use turnstile::store::StoreError;

/// The host's checks of a key and of a save, made before a round trip.
pub(crate) use turnstile::store::{check_key as key, check_save as save};

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
