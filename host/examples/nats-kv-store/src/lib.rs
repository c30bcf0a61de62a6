//! A Turnstile state store on a NATS JetStream key-value bucket, written outside the host
//! against its public store contract (`turnstile::store::StateStore`): the edge-KV store.
//!
//! Open it with `--store nats://host:4222` (the `turnstile-nats` binary of this crate, which is
//! `turnstile` with this scheme registered); `?bucket=name` picks the bucket, else it is named
//! by the store namespace. The bucket is created if missing (file storage, one value per key).
//!
//! # What it promises
//!
//! Everything the contract suite checks (`tests/contract.rs` runs its 43 cases), including what
//! a store shared by several server processes must keep: leases with fencing, a change feed.
//!
//! - **One key, one value, one compare-and-set.** NATS KV compares and sets one key at a time
//!   (a write names the revision it read) and has no transaction over several. So everything
//!   the contract changes together lives in the record's own value (`entry.rs`): the record,
//!   its audit trail, its lease and its tombstone. A save checks the version and the fence and
//!   appends the audit entry in one write; a delete leaves its tombstone in the same write.
//! - **Versions.** The record's version is kept in the value; the KV revision only guards the
//!   write. A write that finds the revision moved reads again and decides again, so a renewed
//!   lease does not look like a conflict; a moved version is [`StoreError::Conflict`] with the
//!   version read back.
//! - **Leases** live in the value too, so a fenced write is checked in the same atomic step as
//!   its version (`lease.rs`). NATS 2.9 has no per-key time to live, so a lease's expiry is a
//!   time written in the value, and judged by **the wall clock of the process reading it**, not
//!   the store's: the servers sharing the bucket must keep their clocks in step (NTP) to well
//!   within a lease's time to live. A clock ahead sees a lease lapse early and takes it over;
//!   the holder's next write then finds a new token and is fenced. So skew never lets two
//!   writers commit on one version, but it can cut a lease short (or, behind, keep a crashed
//!   holder's lease alive longer). Per-key TTL (NATS 2.11) would let the server expire a
//!   lease kept as a key of its own, by the server's one clock, but a fenced write could not
//!   check that key in the same atomic step as the record's revision (there is no multi-key
//!   transaction), so it would trade the clock assumption for an unfenced window; 2.12's
//!   atomic batch publish, which can make one write depend on another key's revision, is what
//!   would allow it.
//! - **The change feed** is core NATS: an announcement is one message on the key's subject,
//!   stored nowhere, and a feed subscribes to the subjects of the keys it watches (`feed.rs`).
//!   It is not a KV watch of the records: that would carry every record to every watcher and
//!   cannot say which process made the change.
//!
//! # What it costs
//!
//! - `load`, `audit`: one read (a JetStream direct get of the key's last value).
//! - `save`, `delete`, a lease grant, renewal or release: one read and one compare-and-set
//!   write, again each time another writer moved the value in between. The whole value moves
//!   both ways, so its size grows with the audit trail kept (`--audit-keep`): keep it small, and
//!   within the server's largest message (1 MB by default) with the record.
//! - An announcement: one message, no storage. A watched key: one subscription.
//! - No index. A page of `list_keys` reads the last value of every key in the bucket (one
//!   ordered consumer), and so do `tombstones` and `prune_tombstones`. The contract's defaults
//!   this store keeps page through `list_keys`: `count` and `count_owned` cost a scan per page
//!   of keys, the counts by state and `due` a load per record besides. So timers and retention
//!   read the whole bucket on every poll (the host logs at start that timers go by a scan).
//!   Fine for the thousands of instances an edge node keeps; not for millions.
//! - Durability is JetStream's: file storage, as many replicas as the bucket was given.
//!
//! [`StoreError::Conflict`]: turnstile::store::StoreError::Conflict

mod address;
mod entry;
mod feed;
mod lease;
mod store;

pub use store::NatsKvStore;
