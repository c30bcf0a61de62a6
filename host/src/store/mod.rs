//! The store layer: where workflow instances live between transitions.
//!
//! This module owns the [`StateStore`] contract, the [`InstanceRecord`] it stores, and [`open`],
//! which picks an implementation from a URL. It must not know about actors, MCP or the
//! statechart: a snapshot is an opaque JSON value here, and a key is an opaque string but for the
//! owner a handle-keyed one names (`owned.rs`), which every store counts.
//!
//! # Layout
//!
//! - `error.rs`: [`StoreError`], the one error type.
//! - `format.rs`: the record format number and the fields added since format 1.
//! - `migrate.rs`: [`migrate`], rewriting format-1 records as the current format on start, and
//!   records whose due time is not the one their snapshot gives.
//! - `lease.rs`: [`Fence`], [`LeaseGrant`] and [`LeaseRenewal`], the lease contract of the stores other processes
//!   share: one holder per record at a time, and writes fenced by the lease they name.
//! - `changes.rs`: [`ChangeFeed`], how a process hears another's changes of the instances it
//!   watches, and only those.
//! - `memory.rs`: [`MemoryStore`], in-process, for tests and throwaway servers.
//! - `embedded.rs`: [`EmbeddedStore`], one redb file with a journal in front of it, synced once
//!   per batch of saves (group commit), and folded into the file by checkpoints
//!   (`embedded/writer.rs`: the writer thread; `embedded/journal.rs`: the journal's format;
//!   `embedded/overlay.rs`: what is acknowledged but not yet in the file;
//!   `embedded/checkpoint.rs`: folding it in; `embedded/tests.rs`: its own tests;
//!   `embedded/files.rs`: its files `0600`, its data directory `0700`).
//! - `redis/`: [`RedisStore`], shared by several server processes (one Redis, or a Redis
//!   Cluster: `redis/layout.rs` names the keys, `redis/link.rs` connects); CAS in a Lua script.
//! - `postgres.rs`: [`PostgresStore`], one table; CAS in `UPDATE … WHERE version = $n`.
//! - `owned.rs`: the owner a key names, and the per-owner counts behind
//!   [`StateStore::count_owned`].
//! - `state_counts.rs`: the rule a record is counted by per workflow, machine version and state,
//!   and [`StateCounts`], behind [`StateStore::count_by_state`] (each store keeps them in a room
//!   of its own: `embedded/state_counts.rs`, `redis/state_counts.rs`, `postgres/state_counts.rs`).
//! - `unanswered.rs`: what a save that got no answer did, learned by reading the record again.
//! - `tombstone.rs`: [`Tombstone`], what a delete leaves of an instance (who, when, its last
//!   state and version), kept beside the records and pruned by age
//!   ([`StateStore::delete_leaving`], [`StateStore::tombstones`],
//!   [`StateStore::prune_tombstones`]; each store's room: `embedded/tombstones.rs`,
//!   `redis/tombstones.rs`, `postgres/tombstones.rs`).
//! - `contract.rs` (tests, and the cargo feature `testkit`): the one suite every store must
//!   pass, published as a kit ([`contract::check`]) for stores written outside this crate.
//! - `outage.rs` (tests only): servers killed, stalled and restarted under the remote stores.
//!
//! # The record format
//!
//! A stored [`InstanceRecord`] carries a format number ([`CURRENT_FORMAT`], now 3):
//!
//! - **Format 1** (what servers before the number existed wrote): workflow id, snapshot,
//!   version, time. No format number is stored. Such a record is read as running the machine
//!   version the catalog serves now for its workflow (the only one those servers knew), with no
//!   idempotency entries.
//! - **Format 2** adds, as optional fields, the machine version the instance runs (`machine`)
//!   and its recent idempotency entries. Each store keeps the number and the added fields
//!   ([`format::Extras`], as JSON text) beside the format-1 columns, so format-1 code that
//!   still runs during a rolling deploy reads format-2 records unchanged.
//! - **Format 3** adds the instance's tasks (`tasks`, in the same extras): the one running,
//!   which holds the instance, and those ended within their `ttl`. A format-2 record reads as
//!   format 3 with no tasks, so nothing is rewritten for it; format-2 code refuses a format-3
//!   record rather than drop its tasks.
//! - **A newer format** than this build knows is refused with [`StoreError::UnsupportedFormat`]
//!   for that instance only: never read as something else, never overwritten.
//!
//! Every save writes the current format. **Migration** ([`migrate`], run by `serve` on
//! start): every format-1 record is rewritten as format 2 with the compare-and-set save
//! (`expected` = the version read, so a record another server moves meanwhile is left to that
//! server), its machine version being the catalog's; a record that cannot be parsed is logged and
//! left alone, never deleted. Format-1 records are readable without it, so a server that
//! cannot migrate still serves. A walk that finished marks the store with the rule it ran by
//! ([`migrate_unless_done`], [`StateStore::save_mark`]), and a start under the same rule does
//! not walk again: start-up time does not grow with the store.
//!
//! # Due times
//!
//! A record may carry a **due time** ([`InstanceRecord::due_at_ms`]): when the server must look
//! at the instance without being called (its next timer deadline, or when retention deletes
//! it; the caller works it out, the store only keeps it). Each store indexes it, so "the keys due
//! by T, earliest first" ([`StateStore::due`]) is one indexed query, never a scan: a redb table
//! keyed by (due, key), a Redis sorted set, a PostgreSQL column with a partial index. It is
//! written in the same atomic step as the record, and a delete removes it.
//!
//! The due time is derived data, not part of what a record means, so it did not need a new
//! format: a format-2 record written by code that predates due times simply has none (or keeps
//! a stale one beside a newer snapshot). The reader tolerates both: whoever acts on a due key
//! rereads the record and re-saves it with the right due time when the stored one is wrong, and
//! [`migrate`] fills in missing due times on start.
//!
//! # The state counts
//!
//! Every store keeps how many records each workflow has, by machine version and by state
//! ([`StateStore::count_by_state`]; the rule is `state_counts.rs`'s), in the same atomic write as
//! each record, so reading them reads no record. Like the due time, they are derived data, not
//! part of what a record means, so they did not need a new record format: each store keeps, beside
//! a record, the tally it is counted under, and a mark saying which version of the rule
//! ([`STATE_COUNTS_VERSION`]) built its index (`indexes_built_v1` in the embedded file,
//! `ns:counts_built` per Redis shard, `{namespace}_indexes_built` in PostgreSQL). A store opened
//! without the mark (written by code that predates the index) or with another is counted once,
//! from its records, as it opens; later opens read the counts. A record with no tally beside it
//! (written by older code since) is counted nowhere until [`StateStore::recount_by_state`]
//! (`turnstile instances repair`) counts every record again.
//!
//! Machine definitions are stored too ([`StateStore::save_machine`]), by workflow and version,
//! so an instance pinned to an old machine can be restored after the plugin that brought the
//! machine is gone.
//!
//! **Architecture Invariant:** a save that returns `Ok` is stored as durably as the backend
//! promises (on disk for the embedded store, acknowledged by the server for Redis/PostgreSQL);
//! no store ever overwrites a record whose version is not the one the writer read.

mod audit;
mod changes;
mod checks;
mod embedded;
mod error;
mod format;
mod lease;
mod memory;
mod migrate;
mod open;
mod options;
mod owned;
mod postgres;
mod record;
mod redact;
mod redis;
mod state_counts;
mod state_store;
mod tombstone;
mod unanswered;

#[cfg(any(test, feature = "testkit"))]
pub mod contract;
#[cfg(test)]
mod outage;

pub use self::{
    audit::AuditEntry,
    changes::{ChangeFeed, ChangeStream, FeedSubscriptions},
    checks::{MAX_KEY_LEN, chain as error_chain, check_key, check_save},
    embedded::{BatchStats, EmbeddedStore, files::private_dir as private_data_dir},
    error::StoreError,
    format::{CURRENT_FORMAT, CURRENT_SINCE, IdempotencyEntry, TaskEntry, TaskEntryStatus},
    lease::{Fence, LeaseGrant, LeaseRenewal, WANTED_FOR},
    memory::MemoryStore,
    migrate::{MigrationReport, migrate, migrate_unless_done},
    open::{Stores, open},
    options::{DEFAULT_AUDIT_KEEP, Durability, StoreOptions},
    owned::{HANDLE_PREFIX, OWNER_SEPARATOR, OwnedCounts, owner_of},
    postgres::PostgresStore,
    record::{DEFAULT_MAX_RECORD_BYTES, Due, InstanceRecord, MAX_DUE_MS, json_bytes, now_ms},
    redact::{redact, redact_context},
    redis::RedisStore,
    state_counts::{STATE_COUNTS_VERSION, StateCounts, Tally, WorkflowCount, active_paths},
    state_store::{StateStore, due_by_scan},
    tombstone::{DEFAULT_TOMBSTONE_DAYS, DeleteKind, Tombstone},
    unanswered::settle as settle_unanswered_save,
};
// The checks every store makes the same way, for the stores' rooms.
use self::checks::{chain, conflict, invalid, machine_key, versions_match};
