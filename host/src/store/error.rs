//! `StoreError`: the one error type every [`super::StateStore`] returns.
//!
//! This module owns the error vocabulary of the store layer. It must not know about MCP or the
//! client: what a caller of `tools/call` sees is built elsewhere, from these variants.

use thiserror::Error;

/// Why a store operation failed.
///
/// The variants are split by what the caller should do next: `Conflict` means "re-read and
/// decide", `Unavailable` means "the write did not happen (or may not have); try later",
/// `Corrupt` and `Invalid` are bugs or damage that retrying will not fix.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A compare-and-set save or delete lost: the stored version is not the one the writer read.
    /// `current` is the version found (`None`: no record exists).
    #[error("version conflict on {key:?}: expected version {expected}, store has {}", fmt_version(.current))]
    Conflict {
        /// The record's key.
        key: String,
        /// The version the writer read (`0`: it expected no record).
        expected: u64,
        /// The version stored now (`None`: no record).
        current: Option<u64>,
    },

    /// A save or delete was refused by the instance's lease (see `lease.rs`): the fence it
    /// named is no longer the live lease (it lapsed, or another server holds it now), or it
    /// named none while another server holds one. Nothing was written.
    #[error("the lease on {key:?} is {}", fmt_lease(.remaining_ms))]
    Fenced {
        /// The record's key.
        key: String,
        /// How long the lease that refused the write still lives (`None`: none lives; the
        /// writer's own lapsed).
        remaining_ms: Option<u64>,
    },

    /// The store could not be reached or did not answer in time. The message names the store
    /// and what happened ("redis://127.0.0.1:6379: timed out after 2s", "connection refused").
    /// The request was not sent, or was refused: nothing was applied.
    #[error("state store unavailable: {0}")]
    Unavailable(String),

    /// The request may have reached the store, which did not answer: it timed out, or the
    /// connection dropped after the request was sent. A write may or may not have been applied
    /// (see `unanswered.rs`); the message names the store and what happened.
    #[error("state store unavailable: {0}")]
    NoAnswer(String),

    /// The connection broke (reset, broken pipe, closed) after a write was sent on it: the
    /// store may have applied it. Unlike [`StoreError::NoAnswer`] on a connection that lives
    /// on, a reread cannot travel behind the write, so the record as read again proves that it
    /// was applied, never that it was not (see `unanswered.rs`). Only a save reports this.
    #[error("state store unavailable: {0}")]
    Dropped(String),

    /// A save got no answer (the store timed out, or the connection dropped) and reading the
    /// record again could not tell whether it was applied (see `unanswered.rs`): it may have
    /// been. A retry with the same idempotency key is safe either way.
    #[error(
        "state store unavailable: the save of {key:?} got no answer ({reason}), and whether it \
         was applied could not be learned"
    )]
    Ambiguous {
        /// The record's key.
        key: String,
        /// What happened to the save.
        reason: String,
    },

    /// A stored record could not be decoded.
    #[error("corrupt record {key:?}: {reason}")]
    Corrupt {
        /// The record's key (the prefix, for a listing).
        key: String,
        /// What could not be decoded.
        reason: String,
    },

    /// The caller asked for something the contract forbids (empty key, `record.version` not
    /// `expected + 1`, a version too large for the backend). A bug in the caller, not an outage.
    #[error("invalid store request for {key:?}: {reason}")]
    Invalid {
        /// The key of the request.
        key: String,
        /// Which rule the request broke.
        reason: String,
    },

    /// The record was written in a format newer than this build reads (a newer server wrote
    /// it). It is neither read nor overwritten here.
    #[error(
        "record {key:?} is in format {format}, newer than this server reads (up to \
         {reads_up_to}): upgrade the server to use it"
    )]
    UnsupportedFormat {
        /// The record's key.
        key: String,
        /// The format number found.
        format: u64,
        /// The newest format this build reads (`format.rs` says, where the error is made).
        reads_up_to: u32,
    },

    /// The store URL or options are wrong (unknown scheme, bad namespace, unparsable URL).
    #[error("state store configuration: {0}")]
    Config(String),
}

fn fmt_lease(remaining_ms: &Option<u64>) -> String {
    match remaining_ms {
        Some(ms) => format!("held by another server for about {ms} ms more"),
        None => "no longer held by this writer".to_owned(),
    }
}

fn fmt_version(current: &Option<u64>) -> String {
    match current {
        Some(v) => format!("version {v}"),
        None => "no record".to_owned(),
    }
}

impl StoreError {
    /// This error as a connect reports it: a store that does not answer while it is being
    /// opened is unavailable, whatever the request was (whether a write may have been applied
    /// matters only to a save).
    pub(super) fn when_connecting(self) -> StoreError {
        match self {
            StoreError::NoAnswer(reason) | StoreError::Dropped(reason) => {
                StoreError::Unavailable(reason)
            }
            other => other,
        }
    }

    /// True for errors worth retrying later without changing the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::NoAnswer(_)
                | StoreError::Dropped(_)
                | StoreError::Ambiguous { .. }
        )
    }
}
