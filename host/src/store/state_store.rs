//! The store contract: [`StateStore`], which every store implements and the contract suite
//! (`contract.rs`) checks on each.

use std::time::Duration;

use super::{
    AuditEntry, ChangeFeed, Due, Durability, Fence, InstanceRecord, LeaseGrant, LeaseRenewal,
    StateCounts, StoreError, Tally, Tombstone,
};

/// Persistence for workflow instances, keyed by the instance's handle.
///
/// Every implementation is `Send + Sync` and is used as `Arc<dyn StateStore>`. Writes are
/// compare-and-set on the record's version, so two writers that read the same version can never
/// both succeed: the loser gets [`StoreError::Conflict`] and the stored record is the winner's.
/// Remote stores bound every operation by a timeout and report [`StoreError::Unavailable`]
/// instead of hanging; they reconnect on their own once the server is back.
#[async_trait::async_trait]
pub trait StateStore: Send + Sync {
    /// Where this store keeps its data, for logs and errors ("memory:", "embedded:/var/…",
    /// "redis://host:6379"). Never contains a password.
    fn describe(&self) -> String;

    /// Whether other server processes may write to this store too (Redis, PostgreSQL). An
    /// instance actor then cannot trust its in-memory copy and rereads the record before every
    /// call, so the gate is checked against the state every process agrees on.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether this store keeps leases (acquire, renew, release, and writes fenced by the lease
    /// they name, as `lease.rs` says). Required of every shared store: without leases two servers
    /// could run one instance's handler at once, so `serve` refuses, at start, a store that says
    /// it is shared and not this. Stores no other process shares need none (the defaults grant
    /// every lease at once).
    fn keeps_leases(&self) -> bool {
        false
    }

    /// Whether [`Self::due`] reads an index of due times (a sorted set, an indexed column).
    /// A store that says not gets the default [`Self::due`], a scan of every record, and `serve`
    /// says so at start: correct, and as slow as the store is large, on every timer poll.
    fn indexes_due_times(&self) -> bool {
        false
    }

    /// Whether a read sent after a write that got no answer is answered after that write was
    /// applied or dropped for good (one connection, requests answered in order: Redis). Then a
    /// reread settles what an unanswered save did (`unanswered.rs`).
    fn answers_in_order(&self) -> bool {
        false
    }

    /// Tells the other server processes sharing this store that the record under `key` changed,
    /// so that those watching it can notify their own sessions (see `changes.rs`: it reaches
    /// only the processes whose feed watches `key`). `origin` names the announcing process, so
    /// it can skip its own announcements. Stores no other process reads do nothing.
    async fn announce_change(&self, _origin: &str, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// A feed of the changes other processes announce for the keys it is told to watch; `None`
    /// for a store no other process shares. The feed ends when its connection drops: open
    /// another and watch again (changes announced meanwhile are lost, so a subscriber must not
    /// rely on them for correctness).
    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        None
    }

    /// The record stored under `key`. Returns `Ok(None)` when no record exists.
    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError>;

    /// Stores `record` under `key` if and only if the stored version is `expected` (`0`: no
    /// record may exist yet). `record.version` must be `expected + 1`, else
    /// [`StoreError::Invalid`] and nothing is written.
    ///
    /// Returns `Ok(())` only once the record is stored as durably as the backend promises.
    /// A stale writer gets [`StoreError::Conflict`] with the version it should have read.
    /// After [`StoreError::Unavailable`], or if the future is dropped before it completes, the
    /// save may or may not have been applied: load before deciding what to do next.
    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError>;

    /// Removes the record under `key`, and its lease. With `expected = Some(v)` only if the
    /// stored version is `v` (else [`StoreError::Conflict`], also when the record is absent);
    /// with `None` whatever its version. Under `fence` only if that lease is alive, and without
    /// one only if no lease is (else [`StoreError::Fenced`]; see `lease.rs`). Returns whether a
    /// record was removed.
    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError>;

    /// Grants `holder` the lease on the record under `key` for `ttl` (see `lease.rs` for the
    /// contract; a holder keeping a lease it holds renews it with [`Self::renew_lease`]): [`LeaseGrant::Busy`] while another holder's lease lives,
    /// [`LeaseGrant::Absent`] when there is no record. Stores no other process shares grant
    /// every lease at once, with token 0 (they are not asked: nobody needs a lease there).
    async fn acquire_lease(
        &self,
        key: &str,
        _holder: &str,
        _ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        let version = self.load(key).await?.map_or(0, |record| record.version);
        Ok(LeaseGrant::Held {
            token: 0,
            took_over: false,
            version,
            wanted: false,
        })
    }

    /// Renews the lease `fence` names for `ttl`, only if it is the lease alive now (its token
    /// and its holder), checked and extended in one atomic step; else [`LeaseRenewal::Lost`],
    /// changing nothing (see `lease.rs`: a late renewal must not take a lease back). Stores no
    /// other process shares renew every lease (they are not asked).
    async fn renew_lease(
        &self,
        _key: &str,
        _fence: &Fence,
        _ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        Ok(LeaseRenewal::Renewed { wanted: false })
    }

    /// Ends the lease `fence` names, if it is still alive, so another holder need not wait for
    /// it to lapse. A lease that lapsed or passed to another holder is left alone.
    async fn release_lease(&self, _key: &str, _fence: &Fence) -> Result<(), StoreError> {
        Ok(())
    }

    /// Up to `limit` keys starting with `prefix`, in ascending byte order, strictly after
    /// `after` when given. Page through everything by passing the last key of one page as
    /// `after` for the next; an empty page means the end. For operators, not for hot paths.
    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;

    /// How many records have a key starting with `prefix` (`""`: all of them).
    ///
    /// The default pages through [`Self::list_keys`]: correct, and as slow as the store is large.
    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let mut counted = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self.list_keys(prefix, after.as_deref(), SCAN_PAGE).await?;
            let Some(last) = page.last().cloned() else {
                return Ok(counted);
            };
            counted += page.len() as u64;
            after = Some(last);
        }
    }

    /// How many records belong to `owner` ([`owner_of`] their key): what
    /// `--max-instances-per-principal` counts. Every store keeps a per-owner index, written in
    /// the same atomic step as the records, so this is one lookup (one per shard on a Redis
    /// Cluster), never a scan.
    ///
    /// The default counts the pages of [`Self::list_owned`]: correct, and as slow as the store is
    /// large.
    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        let mut counted = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self.list_owned(owner, after.as_deref(), SCAN_PAGE).await?;
            let Some(last) = page.last().cloned() else {
                return Ok(counted);
            };
            counted += page.len() as u64;
            after = Some(last);
        }
    }

    /// [`StateStore::count_owned`], checking each counted record still exists: for a count that
    /// reached a limit, where an index entry older code left behind would otherwise hold a
    /// place for good. Stores whose index cannot go stale count again.
    async fn recount_owned(&self, owner: &str) -> Result<u64, StoreError> {
        self.count_owned(owner).await
    }

    /// Up to `limit` keys of `owner`'s records ([`owner_of`] their key), in ascending byte
    /// order, strictly after `after` when given: one tenant's instances, a page at a time
    /// (`turnstile instances list --owner`, the console). The embedded, Redis and PostgreSQL
    /// stores read the per-owner index [`Self::count_owned`] counts, so a page costs what it
    /// holds, whatever else the store holds.
    ///
    /// The default pages through every handle-keyed key ([`Self::list_keys`]) and keeps the
    /// owner's: correct, and as slow as the store is large (the memory store, which holds few).
    async fn list_owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        let mut cursor = after.map(str::to_owned);
        while found.len() < limit {
            let page = self
                .list_keys(super::HANDLE_PREFIX, cursor.as_deref(), 1000)
                .await?;
            let Some(last) = page.last().cloned() else {
                break;
            };
            found.extend(
                page.into_iter()
                    .filter(|key| super::owner_of(key) == Some(owner)),
            );
            cursor = Some(last);
        }
        found.truncate(limit);
        Ok(found)
    }

    /// Holds a place, named `id`, under `scope` (what a limit counts: one principal's instances,
    /// or its tasks), alive for `ttl` unless [`Self::release_place`] gives it back first; asked
    /// again with the same `id`, renews it. Returns how many places `scope` holds, this one
    /// included, counted in the same atomic step that adds it (expired ones dropped): racing
    /// places are counted in one order, each seeing those before it.
    ///
    /// What the per-principal limits of servers sharing the store count with. A mint under
    /// `--max-instances-per-principal` takes its place first, then counts the owner's records
    /// ([`Self::count_owned`]), and goes on only if the records and the places together stay
    /// within the limit (else it gives its place back): two racing mints on any two servers then
    /// count each other, as a place or, once saved, as a record, and a race lost near the limit
    /// refuses rather than passes. A task under `--max-tasks-per-principal` holds its place
    /// until it ends. A holder renews its place while it lives, so a place lapses only when its
    /// server died.
    ///
    /// `None`: the store keeps no places. The default, right for a store no other process
    /// shares (memory, embedded), where the server counts its own; a shared store without them
    /// bounds each server alone.
    async fn reserve_place(
        &self,
        _scope: &str,
        _id: &str,
        _ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// Gives back the place [`Self::reserve_place`] held under `scope` as `id` (already gone, or
    /// never held: nothing to do).
    async fn release_place(&self, _scope: &str, _id: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// How many records each workflow has, by machine version and by state, as the rule of
    /// `state_counts.rs` counts them (a record once under its workflow, and once under each state
    /// path active in it). Every store keeps these counts in the same atomic write as each
    /// record (a save, a delete, a retention delete, a migration's rewrite), so this reads an
    /// index that grows with the workflows and states there are, never a record: what the
    /// console's counts and `/metrics` read, as often as they like.
    ///
    /// The default reads every record ([`count_every_record`]): for a store that keeps
    /// no index (a test's stand-in); every store here overrides it.
    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        count_every_record(self).await
    }

    /// Counts every record again by that rule and rewrites the index [`Self::count_by_state`]
    /// reads with what it finds, marking it built by this build's rule
    /// ([`super::STATE_COUNTS_VERSION`]); returns the counts it made. Each store does it when it
    /// opens an index built by no rule (records written before the index existed) or another
    /// one, and `turnstile instances repair` asks for it when the index drifted (older code
    /// writing beside this one). Writes made while it runs are counted once. Reads every record:
    /// for operators and start-up, never for a hot path.
    ///
    /// The default counts by reading every record, having no index to rewrite.
    async fn recount_by_state(&self) -> Result<StateCounts, StoreError> {
        count_every_record(self).await
    }

    /// The audit trail of the instance under `key`, oldest first: one entry per save that
    /// carried one ([`InstanceRecord::audit`]). Empty for an instance that never moved or does
    /// not exist.
    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError>;

    /// Up to `limit` records whose due time ([`InstanceRecord::due_at_ms`]) is at or before
    /// `until`, earliest first (equal times in ascending key order), strictly after `after` (the
    /// last entry of the previous page) when given. An indexed query in every store: what the
    /// timer task and retention ask, often. Records without a due time are never listed.
    ///
    /// The default reads every record ([`due_by_scan`]), and the store says so through
    /// [`Self::indexes_due_times`]: for a store with no index to ask (a key-value store).
    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        due_by_scan(self, until, after, limit).await
    }

    /// Keeps the definition of `workflow`'s machine `version` (a hash of `definition`, so a
    /// version names one definition forever: saving it again changes nothing). Saved before any
    /// record names the version, so a pinned instance can be restored after its plugin is gone.
    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError>;

    /// The definition saved by [`StateStore::save_machine`]; `Ok(None)` when none was.
    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;

    /// The value the mark `name` was last given ([`Self::save_mark`]); `None` when it never was.
    /// A mark says by which rule a job over every record last ran to its end (the start-up
    /// migration's fingerprint, `store::migrate`), so that a start under the same rule can skip
    /// the job instead of reading every record. Marks live with the records, so every server
    /// sharing the store reads the same ones.
    ///
    /// The default keeps no mark: every start does the job again, which is correct, only slow
    /// once a store holds many records.
    async fn load_mark(&self, _name: &str) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// Gives the mark `name` the value `value` (below 2^63: PostgreSQL keeps it as a `bigint`),
    /// durably, whatever it was. The default keeps nothing (see [`Self::load_mark`]).
    async fn save_mark(&self, _name: &str, _value: u64) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether the store answers now, for a readiness probe (`/readyz`): one cheap round trip
    /// (Redis `PING`, PostgreSQL `SELECT 1`, a read transaction on the embedded file), bounded
    /// like every other operation. Returns `Ok(())` when it answered; reads and writes nothing.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Makes everything acknowledged so far part of the store's main file, for a store that
    /// keeps a journal in front of it (the embedded store), so that a clean stop leaves nothing
    /// to replay and the file alone holds every instance. Stores without a journal have nothing
    /// to do. Not needed for durability: an acknowledged save is durable already.
    async fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// What an acknowledged save survives, as the store's server is configured, when it can
    /// say (read once at start and logged: a WARN for a transition a restart of the store's
    /// server would lose). `None`: nothing to report (the memory and embedded stores are what
    /// their names say), or the server would not tell.
    async fn durability(&self) -> Option<Durability> {
        None
    }

    /// Deletes the record under `key` as [`Self::delete`] does with `Some(expected)` and
    /// `fence`, and keeps `tombstone` (made from the record read at `expected`, so it tells the
    /// deleted version's state) under `key`, replacing any earlier one. Written in the same
    /// atomic step as the delete where the store can (memory: one lock; Redis: the delete
    /// script; PostgreSQL: one statement); the embedded store commits the tombstone just before
    /// the delete, on its one writer thread, so a crash between the two leaves a tombstone
    /// beside a live record, which [`Self::tombstones`] never shows. Returns whether a record
    /// was removed (`false`: none was, and no tombstone is kept).
    ///
    /// No default: a default without the tombstone would silently lose the trace.
    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` tombstones of keys starting with `prefix`, in key order, none of a key that
    /// has a record now (a handle saved again hides its tombstone: it is not deleted). For
    /// operators asking after a deleted instance, not for hot paths; fewer than `limit` may come
    /// back when hidden ones were among the first `limit`.
    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError>;

    /// Removes tombstones whose delete was at or before `until_ms`, oldest first, at most
    /// `limit` (per shard, on a Redis Cluster); returns how many. Every store indexes
    /// tombstones by that time, so this reads only the expired ones: the server's sweep calls
    /// it until it returns 0 (`tombstones.rs` in the host).
    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError>;
}

/// Keys read per page by the defaults that scan.
const SCAN_PAGE: usize = 500;

/// [`StateStore::due`] for a store with no index of due times: reads every record, keeps those
/// due by `until` (and after `after`), earliest first, equal times in key order. A record that
/// cannot be read (damaged, or in a newer format) is left out, as an index would have left it.
pub async fn due_by_scan<S: StateStore + ?Sized>(
    store: &S,
    until: u64,
    after: Option<&Due>,
    limit: usize,
) -> Result<Vec<Due>, StoreError> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let keys = store.list_keys("", cursor.as_deref(), SCAN_PAGE).await?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        for key in keys {
            let at_ms = match store.load(&key).await {
                Ok(Some(record)) => record.due_at_ms,
                Ok(None)
                | Err(StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. }) => None,
                Err(error) => return Err(error),
            };
            let Some(at_ms) = at_ms.filter(|at| *at <= until) else {
                continue;
            };
            let due = Due { at_ms, key };
            if after.is_none_or(|after| due > *after) {
                found.push(due);
            }
        }
        cursor = Some(last);
    }
    found.sort_unstable();
    found.truncate(limit);
    Ok(found)
}

/// Counts every record `store` holds by reading each one, by the rule of `state_counts.rs`: what
/// an index is checked against, and what a store that keeps none answers. (Here rather than in
/// `state_counts.rs`, which the trait names: the rule must not name the trait back.) A record that cannot be read (damaged, or in a
/// newer format) is counted nowhere, as each store's index leaves it.
pub async fn count_every_record<S: StateStore + ?Sized>(
    store: &S,
) -> Result<StateCounts, StoreError> {
    let mut counts = StateCounts::default();
    let mut after: Option<String> = None;
    loop {
        let keys = store.list_keys("", after.as_deref(), SCAN_PAGE).await?;
        let Some(last) = keys.last().cloned() else {
            return Ok(counts);
        };
        for key in &keys {
            match store.load(key).await {
                Ok(Some(record)) => counts.add(&Tally::of(&record)),
                Ok(None)
                | Err(StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        after = Some(last);
    }
}
