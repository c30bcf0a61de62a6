//! A Turnstile state store on MariaDB or MySQL, written outside the host against its public
//! store contract (`turnstile::store::StateStore`): what issue 53 ("Bring your own store")
//! asks a user to be able to do.
//!
//! ```text
//! turnstile-mariadb serve --store mysql://app:secret@db:3306/turnstile ...
//! ```
//!
//! # What it promises
//!
//! - **Compare-and-set saves**, each one SQL statement: `INSERT` for a first save (a duplicate
//!   key is the conflict), `UPDATE … WHERE k = ? AND version = ? AND <lease>` after that.
//!   InnoDB's row lock makes the version check, the lease check and the write one step.
//! - **Shared by several servers** (`is_shared`), with **leases and fencing** in columns of the
//!   record's row, timed by the database's clock (`NOW(6)`, in UTC), so servers' clocks need
//!   not agree: a fenced save is applied only while its lease lives
//!   (`fence = ? AND lease_holder = ? AND lease_until > NOW(6)` in the same `UPDATE`).
//! - **A change feed** by polling a change table (`changes.rs`): at most once, as the contract
//!   allows, heard within about [`POLL_EVERY`].
//! - **Indexes** for the due times (`(due_at, k)`), for owners (`(owner, k)`) and for
//!   tombstones by age, so timers, per-owner limits and pruning never scan the records.
//!   Counting by state is the contract's default: it reads every record (for operators and
//!   `/metrics`, not for a call's path).
//! - An acknowledged save is committed by InnoDB; what a restart keeps then is
//!   `innodb_flush_log_at_trx_commit`'s, which the store reports at start.
//!
//! # What it costs
//!
//! Round trips to the server (a statement's prepare, once per pooled connection, not counted):
//!
//! | operation | round trips |
//! |---|---|
//! | load | 1 |
//! | save without an audit entry | 1 |
//! | save with an audit entry (a transition) | 5: begin, write, append, trim, commit |
//! | a save or delete refused | 1 more, to say why (conflict or lease) |
//! | delete; delete leaving a tombstone | 1; 4 |
//! | acquire a lease | 4: begin, read `FOR UPDATE`, write, commit |
//! | renew a lease | 2: the renewal, then the wanted mark |
//! | announce a change | 1 (2 once a minute per server: pruning) |
//!
//! Each change feed polls once per [`POLL_EVERY`] (100 ms), one primary-key range read
//! whether or not anything changed: about ten cheap queries a second per server. Announcements
//! are kept [`KEPT_FOR`] (a minute) and pruned by the announcing servers, at most once a minute
//! each, with a bounded `DELETE` on an index of their time.
//!
//! # Layout
//!
//! - `store.rs`: [`MariaDbStore`], opening, and the `StateStore` methods, each handing over to:
//! - `records.rs`: the records, the compare-and-set, deletes, the audit trail, listings, the
//!   due index;
//! - `leases.rs`: grants, renewals, releases, and the condition a write names its lease by;
//! - `changes.rs`: announcing and the polled feed;
//! - `keeps.rs`: machine definitions, marks, tombstones;
//! - `schema.rs`: the tables of a namespace; `link.rs`: the URL, the pool, timeouts and errors;
//!   `checks.rs`: what a write must be before it is sent.

mod changes;
mod checks;
mod keeps;
mod leases;
mod link;
mod records;
mod schema;
mod store;

pub use self::{
    changes::{KEPT_FOR, POLL_EVERY},
    store::MariaDbStore,
};
