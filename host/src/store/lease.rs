//! Leases: which server process may run calls on an instance, and the fencing token that keeps
//! a process whose lease lapsed from committing.
//!
//! This module owns the vocabulary of the lease contract ([`Fence`], [`LeaseGrant`],
//! [`LeaseRenewal`]); each
//! shared store keeps leases beside its records (Redis: a `PX` key per instance and a counter in
//! the record's hash; PostgreSQL: three columns of the instance's row). It must not decide when
//! to take or give up a lease: that is the instance actor's (`actors/tenure.rs`).
//!
//! # The contract
//!
//! - [`super::StateStore::acquire_lease`] grants the lease on an existing record to one holder
//!   at a time, for a time to live the store's own clock counts (so servers' clocks need not
//!   agree). Asked again by the holder while it lives, it is given back with the same token.
//!   Once it lapses, the next grant (to anyone, the old holder included) carries a larger token:
//!   the token is the record's **fencing token**, and never goes back while the record exists.
//! - [`super::StateStore::renew_lease`] names the [`Fence`] it renews, token and holder, and
//!   extends the lease only if that fence is the lease alive now, in one atomic step; anything
//!   else ([`LeaseRenewal::Lost`]: lapsed, released, granted to another, or the record gone) is
//!   refused and changes nothing: no grant, no wanted mark. A renewal is never a grant, so one
//!   held back by a partition and delivered after the lease passed on cannot take it back
//!   from the server that moved on. A holder that learns it lost the lease asks anew with
//!   `acquire_lease`, knowing that what it read may be stale.
//! - A save or delete that names a [`Fence`] is applied only if that fence is the lease alive
//!   now, in the same atomic step as the version check. One that names none is applied only if
//!   no lease is alive. Either refusal is [`super::StoreError::Fenced`], and writes nothing.
//! - Asking for a lease another holds marks it wanted by the asker, for [`WANTED_FOR`] (each
//!   further ask renews the mark; a second asker leaves the first one's mark alone). The holder
//!   learns so when it next renews ([`LeaseGrant::Held::wanted`]) and gives it up after its
//!   current call. While the mark lives, the free lease is granted to the asker who made it and
//!   to nobody else (the others are told it is busy), so the holder that gave it up cannot take
//!   it straight back: servers sharing an instance take turns instead of one keeping it while
//!   its own calls keep coming. A grant clears the mark.
//! - A record that does not exist has no lease ([`LeaseGrant::Absent`]): its first save (with
//!   `expected = 0`) needs none, and a delete removes the lease with the record.
//!
//! Stores that no other process shares (memory, embedded) grant every lease at once with token 0
//! and check nothing: one process cannot race itself past the instance actor's mailbox.

use std::{sync::Arc, time::Duration};

/// How long an ask marks a lease wanted (see the module docs): several of a waiting call's
/// polls (at most 50 ms apart), so a waiter that gives up holds no lease back for long.
pub const WANTED_FOR: Duration = Duration::from_millis(250);

/// A lease as a writer names it: the token it was granted and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The fencing token of the grant.
    pub token: u64,
    /// The holder the lease was granted to (a server process's node name).
    pub holder: Arc<str>,
}

/// The answer to [`super::StateStore::renew_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseRenewal {
    /// The lease named is the one alive, and now lives the time to live asked for.
    Renewed {
        /// Another holder asked for the lease (see [`LeaseGrant::Held::wanted`]).
        wanted: bool,
    },
    /// The lease named is not alive any more (lapsed, released, passed to another holder, or
    /// deleted with its record): nothing was changed.
    Lost,
}

/// The answer to [`super::StateStore::acquire_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The asker holds the lease now.
    Held {
        /// The fencing token: the one it had when the lease was renewed, a larger one when it
        /// was granted anew (whatever the asker cached may be stale then).
        token: u64,
        /// The lease was granted over one that lapsed without being released (its holder
        /// paused, crashed or was cut off): a takeover, which operators want to count.
        took_over: bool,
        /// The record's version when the lease was granted: a holder whose copy has this
        /// version need not read the record again.
        version: u64,
        /// Another holder asked for the lease since it was granted (a call waits for it at
        /// another server): the holder should give it up once its current call is done, rather
        /// than keep it for as long as its own calls keep coming.
        wanted: bool,
    },
    /// Another holder has it, for about `remaining_ms` more unless it is released sooner.
    Busy {
        /// Milliseconds the other holder's lease still lives, by the store's clock.
        remaining_ms: u64,
    },
    /// There is no record under the key: nothing to lease.
    Absent,
}
