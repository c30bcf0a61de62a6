//! `RedisStore`: instances in Redis (one server, or a Redis Cluster), so several server
//! processes can share them.
//!
//! This module owns the Lua scripts that make save and delete compare-and-set (and keep the
//! due-time index with them) and what each command means; `layout.rs` owns the key names,
//! `link.rs` the connection and the change feed, `due.rs` the due query. It must not cache
//! records (another process may have written since) and must not report success for a write
//! Redis did not confirm.
//!
//! Layout on one server, with `ns` the configured namespace (on a cluster every `ns:` below but
//! the machines' is a shard's hash tag instead, `{ns:b07}:`, one of 64 that a key hashes to; see
//! `layout.rs`):
//! - `ns:i:<key>`: a hash with fields `v` (version, decimal), `w` (workflow), `s` (snapshot JSON),
//!   `t` (updated_at_ms), and since record format 2 `f` (format, decimal) and `x` (the format's
//!   added fields as JSON; see `format.rs`). A hash without `f` was written by format-1 code.
//!   `d`, when present, is the record's due time (decimal unix milliseconds);
//! - `ns:m:<workflow>@<version>`: a machine definition (JSON), written once;
//! - `ns:index`: a sorted set of every key, all scores 0, so listing by prefix is a lexical range
//!   (`ZRANGEBYLEX`) instead of a `SCAN` over the keyspace;
//! - `ns:due`: the due-time index, a sorted set with all scores 0 whose members are the due time
//!   as 20 zero-padded decimal digits followed by the key, so lexical order is (due, key) order
//!   and a page boundary is exact even among keys due in the same millisecond. The save and
//!   delete scripts update it with the record. Code that predates due times does not: the
//!   query script drops a member whose record is gone or has another due time;
//! - `ns:owned`: the owner index, a sorted set with all scores 0 whose members are `<owner>\0<key>`
//!   for every record whose key names an owner (`owned.rs`), so an owner's count is one
//!   `ZLEXCOUNT`. The save script adds a created record, the delete script removes it; records
//!   saved before the index existed are added once, at open, page by page, in scripts that read
//!   the key index and write this one in one step (`ns:owned_v1` marks it done);
//! - `ns:counts`: the counts by state, a hash of count lines moved by the save and delete
//!   scripts with the record, whose field `c` holds the tally it is counted under;
//!   `ns:counts_built`, `ns:recount` and `ns:recounted` are how they are counted again (see
//!   `state_counts.rs`);
//! - `ns:lease:<key>`: the instance's lease (see `lease.rs`), `"<token> <holder>"`, expiring by
//!   itself (`PX`, Redis's clock). The record hash's field `n` counts the grants: the fencing
//!   token. The save and delete scripts check the lease in the same step as the version, and
//!   the renewal script extends it only while it is still the `"<token> <holder>"` named;
//!   delete removes it with the record;
//! - `ns:wanted:<key>`: the holder that asked for the lease while another held it, for
//!   `WANTED_FOR`; the holder learns so when it renews, and the free lease is kept for the asker
//!   while it lives (see `lease.rs`);
//! - `ns:changed:<key>`: the pub/sub channel of one instance, carrying the name of the server
//!   process that changed it (see `changes.rs`); a process subscribes to the channels of the
//!   instances it watches, so a change reaches only those;
//! - `ns:tomb:<key>`, `ns:tombs`, `ns:tomb_keys`: what deletes left, by time and by key (see
//!   `tombstones.rs`).
//!
//! Outages: see `link.rs`. Every operation runs under `op_timeout`, so a caller waiting on a
//! reconnect gets [`StoreError::Unavailable`] instead of hanging.

mod due;
mod layout;
mod link;
mod places;
mod state_counts;
mod tombstones;

use std::{future::Future, time::Duration};

use async_trait::async_trait;
use redis::{AsyncCommands, RedisError, Script};

use self::{
    layout::Layout,
    link::{FeedOpener, Link},
    state_counts::{DELETE_COUNTS_LUA, RecountScripts, SAVE_COUNTS_LUA, TALLY_LUA},
};
use super::{
    AuditEntry, ChangeFeed, Due, Durability, Fence, InstanceRecord, LeaseGrant, LeaseRenewal,
    StateCounts, StateStore, StoreError, StoreOptions, Tally, Tombstone, WANTED_FOR, chain,
    check_key, check_save, conflict, format, machine_key, owner_of, redact,
};

/// Digits of a due time in a `ns:due` member: enough for every `u64`.
const DUE_DIGITS: usize = 20;

/// The lease check every write script starts with (see `lease.rs`): KEYS[5] is the lease key,
/// ARGV[LEASE] the writer's `"<token> <holder>"` or "" for none. Refuses with "fenced <ms>"
/// (the live lease's remaining time, -2 when none lives).
const LEASE_CHECK_LUA: &str = r"
local lease = redis.call('GET', KEYS[5])
if lease ~= (ARGV[LEASE] ~= '' and ARGV[LEASE] or false) then
  return 'fenced ' .. redis.call('PTTL', KEYS[5])
end
";

/// CAS save. KEYS: record hash, index, due index, audit list, lease, owner index, counts, the
/// count generation's token and counts (`state_counts.rs`). ARGV: expected, version, workflow,
/// snapshot, updated_at_ms, key, format, extras, due time (decimal, or "" for none), audit entry
/// (JSON, or "" for none: appended to the audit list with the record, which then keeps its last
/// `audit_keep` entries), fence (`"<token> <holder>"`, or "" for none), `audit_keep`, owner
/// index member (or "" for a key with no owner), tally. Returns "ok" (once the counts moved too:
/// [`SAVE_COUNTS_LUA`] follows), "fenced <ms>" when the lease refuses it, or the stored version
/// ("none" when absent) on conflict. Versions are compared as decimal
/// strings: Lua numbers are doubles and would round above 2^53; due times are padded as strings
/// too.
const SAVE_LUA: &str = r"
local cur = redis.call('HGET', KEYS[1], 'v')
if cur then
  if cur ~= ARGV[1] then return cur end
elseif ARGV[1] ~= '0' then
  return 'none'
end
local old = redis.call('HGET', KEYS[1], 'd')
if old then
  redis.call('ZREM', KEYS[3], string.rep('0', 20 - #old) .. old .. ARGV[6])
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'w', ARGV[3], 's', ARGV[4], 't', ARGV[5],
  'f', ARGV[7], 'x', ARGV[8])
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'd', ARGV[9])
  redis.call('ZADD', KEYS[3], 0, string.rep('0', 20 - #ARGV[9]) .. ARGV[9] .. ARGV[6])
else
  redis.call('HDEL', KEYS[1], 'd')
end
redis.call('ZADD', KEYS[2], 0, ARGV[6])
if ARGV[13] ~= '' then
  redis.call('ZADD', KEYS[6], 0, ARGV[13])
end
if ARGV[10] and ARGV[10] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[10])
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[12]), -1)
end
local was = redis.call('HGET', KEYS[1], 'c')
";

/// Delete, conditional when ARGV[1] is not empty. KEYS: record hash, index, due index, audit
/// list and lease (deleted with the record), owner index, and the counts as for a save. ARGV:
/// expected or "", key, fence or "", owner index member or "". Returns "deleted" or "absent"
/// (once the counts moved: [`DELETE_COUNTS_LUA`] follows), "fenced <ms>", or the stored version
/// ("none") on conflict.
const DELETE_LUA: &str = r"
local cur = redis.call('HGET', KEYS[1], 'v')
if ARGV[1] ~= '' and cur ~= ARGV[1] then
  if cur then return cur else return 'none' end
end
local old = redis.call('HGET', KEYS[1], 'd')
if old then
  redis.call('ZREM', KEYS[3], string.rep('0', 20 - #old) .. old .. ARGV[2])
end
local was = redis.call('HGET', KEYS[1], 'c')
local was_gen = redis.call('HGET', KEYS[1], 'g')
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[4], KEYS[5])
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[6], ARGV[4])
end
";

/// What the delete script answers, once the counts moved.
const DELETE_ANSWER_LUA: &str = r"
if n == 1 then return 'deleted' else return 'absent' end
";

/// One page of filling the owner index with records saved before it existed. KEYS: index,
/// owner index. ARGV: the last key of the previous page ("" at first), page size, the shard's
/// record prefix (a key in the index whose record is gone, as code that predates the index
/// leaves when it deletes, is not added). Adds the
/// page's owned keys (`handle/…@owner`) and returns the page's last key, or "" when no keys
/// are left. Reading the key index and writing the owner index in one step means a record
/// deleted meanwhile is never added back.
const OWNED_FILL_LUA: &str = r"
local min = ARGV[1] == '' and '[handle/' or ('(' .. ARGV[1])
local page = redis.call('ZRANGEBYLEX', KEYS[1], min, '(handle0', 'LIMIT', 0, tonumber(ARGV[2]))
for _, key in ipairs(page) do
  local at = string.find(key, '@', 8, true)
  if at and at < #key and redis.call('EXISTS', ARGV[3] .. key) == 1 then
    redis.call('ZADD', KEYS[2], 0, string.sub(key, at + 1) .. '\0' .. key)
  end
end
if #page == 0 then return '' end
return page[#page]
";

/// One owner's members of a shard's owner index, each checked against its record: a member
/// whose record is gone (deleted by code that predates the index) is removed. KEYS: owner
/// index. ARGV: the owner's lexical range (min, max), the shard's record prefix. Returns how
/// many stand.
const OWNED_RECOUNT_LUA: &str = r"
local n = 0
for _, member in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2])) do
  local key = string.sub(member, string.find(member, '\0', 1, true) + 1)
  if redis.call('EXISTS', ARGV[3] .. key) == 1 then
    n = n + 1
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return n
";

/// Grants or renews a lease (see `lease.rs`). KEYS: record hash, lease, wanted mark. ARGV:
/// holder, time to live (ms), how long an ask marks the lease wanted (ms). Returns {"held",
/// token, "1" for a takeover else "0", version, "1" when wanted else "0"}, {"busy", remaining
/// ms, "", "", ""} (marking the lease wanted by the asker unless another's mark lives; a free
/// lease another asker's mark keeps is busy too) or {"absent", "", "", "", ""}. The record's
/// field `r` is the token last released: a grant after any other token lapsed is a takeover.
const ACQUIRE_LUA: &str = r"
local lease = redis.call('GET', KEYS[2])
local want = redis.call('GET', KEYS[3])
if lease then
  local space = string.find(lease, ' ', 1, true)
  if string.sub(lease, space + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    return {'held', string.sub(lease, 1, space - 1), '0', redis.call('HGET', KEYS[1], 'v'),
      want and '1' or '0'}
  end
  if not want or want == ARGV[1] then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  end
  return {'busy', tostring(redis.call('PTTL', KEYS[2])), '', '', ''}
end
local version = redis.call('HGET', KEYS[1], 'v')
if not version then return {'absent', '', '', '', ''} end
if want and want ~= ARGV[1] then
  return {'busy', tostring(redis.call('PTTL', KEYS[3])), '', '', ''}
end
local token = redis.call('HINCRBY', KEYS[1], 'n', 1)
local released = redis.call('HGET', KEYS[1], 'r')
local took_over = (token > 1 and released ~= tostring(token - 1)) and '1' or '0'
redis.call('SET', KEYS[2], token .. ' ' .. ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
return {'held', tostring(token), took_over, version, '0'}
";

/// Renews a lease if it is still the one named, never granting one (see `lease.rs`). KEYS:
/// lease, wanted mark. ARGV: `"<token> <holder>"`, time to live (ms). Returns 1 when renewed and
/// wanted, 0 when renewed, -1 when the lease named is not the live one (nothing changed).
const RENEW_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('EXISTS', KEYS[2])
";

/// Releases a lease if it is still the one named. KEYS: lease, record hash. ARGV:
/// `"<token> <holder>"`, token.
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'r', ARGV[2])
end
return 'ok'
";

/// Redis-backed store. Cheap to share: the connection is multiplexed.
pub struct RedisStore {
    name: String,
    feeds: FeedOpener,
    con: Link,
    layout: Layout,
    options: StoreOptions,
    op_timeout: Duration,
    save_script: Script,
    delete_script: Script,
    owned_fill_script: Script,
    owned_recount_script: Script,
    recount_scripts: RecountScripts,
    due_script: Script,
    /// The due query sent to every master of a cluster (`due.rs`).
    master_due_script: Script,
    acquire_script: Script,
    renew_script: Script,
    release_script: Script,
}

impl RedisStore {
    /// Connects to `url` and checks the server answers `PING`: `redis://…` is one server,
    /// `redis+cluster://h1:p1,h2:p2,…` a Redis Cluster (any of its nodes; the rest are found).
    ///
    /// Fails with [`StoreError::Unavailable`] (naming the URL, password removed) when the server
    /// cannot be reached within `connect_timeout + op_timeout`, and with
    /// [`StoreError::Config`] when the URL does not parse.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        options.check_namespace()?;
        let name = redact(url);
        if options.redis_wait_replicas > 0 && url.starts_with("redis+cluster://") {
            return Err(StoreError::Config(format!(
                "{name}: --redis-wait-replicas is for one Redis server with replicas, not a \
                 cluster (each master's WAIT would be asked of every master)"
            )));
        }
        let (con, feeds, layout) = if url.starts_with("redis+cluster://") {
            let nodes = layout::cluster_nodes(url)
                .map_err(|e| StoreError::Config(format!("{name}: {e}")))?;
            let (con, feeds) = link::cluster(&name, nodes, options).await?;
            (con, feeds, Layout::cluster(&options.namespace))
        } else {
            let (con, feeds) = link::single(&name, url, options).await?;
            (con, feeds, Layout::single(&options.namespace))
        };
        let store = Self {
            name,
            feeds,
            con,
            layout,
            options: options.clone(),
            op_timeout: options.op_timeout,
            save_script: Script::new(&lease_checked(
                &[TALLY_LUA, SAVE_LUA, SAVE_COUNTS_LUA, "return 'ok'\n"].concat(),
                11,
            )),
            owned_fill_script: Script::new(OWNED_FILL_LUA),
            owned_recount_script: Script::new(OWNED_RECOUNT_LUA),
            delete_script: Script::new(&lease_checked(
                &[TALLY_LUA, DELETE_LUA, DELETE_COUNTS_LUA, DELETE_ANSWER_LUA].concat(),
                3,
            )),
            recount_scripts: RecountScripts::default(),
            due_script: Script::new(&due::shard_due_lua()),
            master_due_script: Script::new(&due::master_due_lua()),
            acquire_script: Script::new(ACQUIRE_LUA),
            renew_script: Script::new(RENEW_LUA),
            release_script: Script::new(RELEASE_LUA),
        };
        let mut con = store.con.clone();
        store
            .bounded("ping", async move {
                redis::cmd("PING").query_async::<String>(&mut con).await
            })
            .await
            .map_err(StoreError::when_connecting)?;
        store
            .fill_owner_index()
            .await
            .map_err(StoreError::when_connecting)?;
        store
            .build_state_counts()
            .await
            .map_err(StoreError::when_connecting)?;
        Ok(store)
    }

    /// Puts every record saved before the owner index existed into it, once per shard (see the
    /// module docs). Servers starting together may both fill a shard: adding a member twice
    /// changes nothing.
    async fn fill_owner_index(&self) -> Result<(), StoreError> {
        /// Keys per script run: each run holds Redis for a few milliseconds at most.
        const PAGE: usize = 1000;
        for shard in self.layout.shards() {
            let mut con = self.con.clone();
            let done_key = Layout::owned_complete(shard);
            let done: Option<String> = self
                .bounded("owner index", async move {
                    con.get::<_, Option<String>>(done_key).await
                })
                .await?;
            if done.is_some() {
                continue;
            }
            let mut after = String::new();
            loop {
                let mut con = self.con.clone();
                let mut invocation = self.owned_fill_script.key(Layout::index(shard));
                invocation
                    .key(Layout::owned(shard))
                    .arg(&after)
                    .arg(PAGE)
                    .arg(Layout::record_prefix(shard));
                after = self
                    .bounded("owner index", async move {
                        invocation.invoke_async::<String>(&mut con).await
                    })
                    .await?;
                if after.is_empty() {
                    break;
                }
            }
            let mut con = self.con.clone();
            let done_key = Layout::owned_complete(shard);
            self.bounded("owner index", async move {
                con.set::<_, _, ()>(done_key, 1).await
            })
            .await?;
        }
        Ok(())
    }

    /// Runs one Redis round trip under `op_timeout`, turning every failure into `Unavailable`.
    async fn bounded<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        bounded(&self.name, self.op_timeout, what, op).await
    }

    /// Tells the subscribers of `key`'s channel (in any server process) that `origin` changed
    /// it. Returns once Redis accepted the message; delivery is at most once.
    pub async fn publish_changed(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let publishing = redis::cmd(link::publish_command(&self.layout))
            .arg(self.layout.changed(key))
            .arg(origin)
            .to_owned();
        self.bounded("publish", async move {
            publishing.query_async::<i64>(&mut con).await
        })
        .await
        .map(|_| ())
    }

    /// A feed of the changes announced on the channels it is told to watch, on a dedicated
    /// connection (see `link.rs` for what happens when it drops).
    pub async fn subscribe_changed(&self) -> Result<ChangeFeed, StoreError> {
        link::open_feed(&self.feeds, &self.layout, &self.name, &self.options).await
    }

    /// With `--redis-wait-replicas N`, waits (within `op_timeout`) until N replicas have the
    /// save just made on this connection. Fewer: the primary has it and a failover may lose it,
    /// which is neither a success nor a failure ([`StoreError::Ambiguous`]).
    async fn replicated(&self, key: &str) -> Result<(), StoreError> {
        let wanted = self.options.redis_wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let mut con = self.con.clone();
        // Redis answers `WAIT` after `wait_ms` at worst: three quarters of the connection's own
        // reply timeout, so the answer comes before the connection gives up on it. The save
        // is on the primary whatever happens to the wait, so a failed wait is not "not saved".
        let wait_ms = (self.op_timeout.as_millis() as u64 * 3 / 4).max(1);
        let waiting = redis::cmd("WAIT").arg(wanted).arg(wait_ms).to_owned();
        let acked: u64 = bounded(
            &self.name,
            self.op_timeout,
            "wait for replicas",
            async move { waiting.query_async(&mut con).await },
        )
        .await
        .map_err(|error| StoreError::Ambiguous {
            key: key.to_owned(),
            reason: error.to_string(),
        })?;
        if acked >= u64::from(wanted) {
            return Ok(());
        }
        Err(StoreError::Ambiguous {
            key: key.to_owned(),
            reason: format!(
                "{} of the {wanted} replicas asked for (--redis-wait-replicas) have it",
                acked
            ),
        })
    }

    /// Runs `query` once per shard, at once (a cluster connection sends each to its master),
    /// and returns the answers in shard order.
    async fn each_shard<T, F, Fut>(&self, what: &str, query: F) -> Result<Vec<T>, StoreError>
    where
        F: Fn(String, Link) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        self.in_shards(&self.layout.shards(), what, query).await
    }

    /// An invocation of `script` (one that writes the record under `key`: a save, a delete) with
    /// the keys every such script names first, in this order: the record hash; its shard's key
    /// index and due index; its audit list and lease; its shard's owner index, counts and the two
    /// keys of a recount under way. A script names its own keys after these.
    fn record_script<'a>(&self, script: &'a Script, key: &str) -> redis::ScriptInvocation<'a> {
        let shard = self.layout.shard_of(key);
        let mut invocation = script.key(self.layout.record(key));
        invocation
            .key(Layout::index(shard))
            .key(Layout::due(shard))
            .key(self.layout.audit(key))
            .key(self.layout.lease(key))
            .key(Layout::owned(shard))
            .key(Layout::counts(shard))
            .key(Layout::recount(shard))
            .key(Layout::recounted(shard));
        invocation
    }

    /// The first `limit` members of each shard's sorted set `set_of(shard)` in the lexical range
    /// (`min`, `max`), one page per shard (what [`first_in_order`] merges).
    async fn first_in_each_shard(
        &self,
        what: &str,
        set_of: fn(&str) -> String,
        (min, max): (&[u8], &[u8]),
        limit: usize,
    ) -> Result<Vec<Vec<String>>, StoreError> {
        self.each_shard(what, |shard, mut con| {
            let query = redis::cmd("ZRANGEBYLEX")
                .arg(set_of(&shard))
                .arg(min)
                .arg(max)
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .to_owned();
            async move { query.query_async::<Vec<String>>(&mut con).await }
        })
        .await
    }

    /// Runs `query` once for each of `shards`, as [`Self::each_shard`] does for all.
    async fn in_shards<T, F, Fut>(
        &self,
        shards: &[&str],
        what: &str,
        query: F,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Fn(String, Link) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let queries = shards
            .iter()
            .map(|shard| query((*shard).to_owned(), self.con.clone()));
        self.bounded(what, futures_util::future::try_join_all(queries))
            .await
    }

    /// How many members between `min` and `max` (lexical bounds) the sorted set `set` names
    /// holds, summed over every shard.
    async fn count_in_shards(
        &self,
        what: &str,
        set: fn(&str) -> String,
        min: &[u8],
        max: &[u8],
    ) -> Result<u64, StoreError> {
        let counts = self
            .each_shard(what, |shard, mut con| {
                let query = redis::cmd("ZLEXCOUNT")
                    .arg(set(&shard))
                    .arg(min)
                    .arg(max)
                    .to_owned();
                async move { query.query_async::<u64>(&mut con).await }
            })
            .await?;
        Ok(counts.into_iter().sum())
    }

    /// Deletes every key of this store's namespace. For tests: a namespace per test keeps
    /// parallel runs apart, and this removes what the test left.
    #[cfg(test)]
    pub(super) async fn destroy_namespace(&self) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let patterns = self.layout.pattern();
        self.bounded("cleanup", async move {
            let mut keys: Vec<String> = Vec::new();
            for pattern in patterns {
                // KEYS, not SCAN: a cluster connection asks every master for KEYS and
                // gathers the answers; this is a test namespace of a few keys.
                let found: Vec<String> = redis::cmd("KEYS")
                    .arg(pattern)
                    .query_async(&mut con)
                    .await?;
                keys.extend(found);
            }
            for key in keys {
                con.del::<_, ()>(key).await?;
            }
            Ok(())
        })
        .await
    }
}

/// `script` behind the lease check, which reads the writer's fence from `ARGV[lease_arg]`.
fn lease_checked(script: &str, lease_arg: usize) -> String {
    LEASE_CHECK_LUA.replace("ARGV[LEASE]", &format!("ARGV[{lease_arg}]")) + script
}

/// `key`'s member in the owner index (see the module docs), or "" for a key with no owner.
fn owned_member(key: &str) -> String {
    owner_of(key).map_or_else(String::new, |owner| format!("{owner}\0{key}"))
}

/// A fence as the scripts compare it with the lease key's value.
fn fence_arg(fence: Option<&Fence>) -> String {
    fence.map_or_else(String::new, |fence| {
        format!("{} {}", fence.token, fence.holder)
    })
}

/// The refusal a script answered `"fenced <ms>"` with, if it did.
fn fenced(key: &str, answer: &str) -> Option<StoreError> {
    let ms: i64 = answer.strip_prefix("fenced ")?.parse().ok()?;
    Some(StoreError::Fenced {
        key: key.to_owned(),
        remaining_ms: u64::try_from(ms).ok(),
    })
}

/// Runs one Redis round trip of the store named `name` under `op_timeout`, turning every
/// failure into `Unavailable`.
async fn bounded<T>(
    name: &str,
    op_timeout: Duration,
    what: &str,
    op: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(op_timeout, op).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(unavailable(name, what, &e)),
        Err(_) => Err(StoreError::NoAnswer(format!(
            "{name}: {what} timed out after {op_timeout:?}"
        ))),
    }
}

/// A failed request as a store error: one whose reply timed out may have reached Redis
/// ([`StoreError::NoAnswer`]); any other failure is [`StoreError::Unavailable`]. (A connection
/// that breaks while a request waits is counted with the others: redis-rs does not say
/// whether the request had been written.)
fn unavailable(name: &str, what: &str, e: &RedisError) -> StoreError {
    let message = format!("{name}: {what} failed: {}", chain(e));
    if e.is_timeout() {
        StoreError::NoAnswer(message)
    } else {
        StoreError::Unavailable(message)
    }
}

/// [`bounded`] for a save: a connection that broke (reset, broken pipe, closed) while the
/// script was in flight may have delivered it, and Redis runs what it received, so the save
/// may be applied ([`StoreError::Dropped`]). Only a refused connection proves that nothing was
/// sent; redis-rs does not say whether a request was written, so a broken link is taken to
/// have carried it.
async fn bounded_save<T>(
    name: &str,
    op_timeout: Duration,
    op: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(op_timeout, op).await {
        Ok(Err(e))
            if (e.is_io_error() || e.is_connection_dropped())
                && !e.is_connection_refusal()
                && !e.is_timeout() =>
        {
            Err(StoreError::Dropped(format!(
                "{name}: the connection broke while a save was in flight: {}",
                chain(&e)
            )))
        }
        Ok(answered) => answered.map_err(|e| unavailable(name, "save", &e)),
        Err(_) => Err(StoreError::NoAnswer(format!(
            "{name}: save timed out after {op_timeout:?}"
        ))),
    }
}

/// Lexical bounds for `ZRANGEBYLEX`/`ZLEXCOUNT` covering keys that start with `prefix` (and are
/// after `after`). Keys are UTF-8, which never contains byte 0xFF, so `prefix + 0xFF` is above
/// every key with that prefix.
fn lex_bounds(prefix: &str, after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let min = match after {
        Some(after) if after >= prefix => [b"(", after.as_bytes()].concat(),
        _ if prefix.is_empty() => b"-".to_vec(),
        _ => [b"[", prefix.as_bytes()].concat(),
    };
    let max = if prefix.is_empty() {
        b"+".to_vec()
    } else {
        [b"(", prefix.as_bytes(), &[0xFF]].concat()
    };
    (min, max)
}

/// A `ns:due` member: `at_ms` as [`DUE_DIGITS`] zero-padded digits, then the key.
fn due_member(at_ms: u64, key: &str) -> String {
    format!("{at_ms:0width$}{key}", width = DUE_DIGITS)
}

/// The entry a `ns:due` member stands for.
fn parse_due_member(member: &str) -> Result<Due, StoreError> {
    let corrupt = || StoreError::Corrupt {
        key: member.to_owned(),
        reason: "not a due-time index entry".to_owned(),
    };
    let digits = member.get(..DUE_DIGITS).ok_or_else(corrupt)?;
    let key = member.get(DUE_DIGITS..).filter(|key| !key.is_empty());
    Ok(Due {
        at_ms: digits.parse().map_err(|_| corrupt())?,
        key: key.ok_or_else(corrupt)?.to_owned(),
    })
}

/// Reads the conflict answer of a script ("none" or a decimal version).
fn parse_current(key: &str, answer: &str) -> Result<Option<u64>, StoreError> {
    if answer == "none" {
        return Ok(None);
    }
    answer.parse().map(Some).map_err(|_| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("stored version {answer:?} is not a number"),
    })
}

#[async_trait]
impl StateStore for RedisStore {
    fn is_shared(&self) -> bool {
        true
    }

    fn keeps_leases(&self) -> bool {
        true
    }

    fn indexes_due_times(&self) -> bool {
        true
    }

    /// One multiplexed connection (per master, on a cluster): a reread travels behind the save.
    fn answers_in_order(&self) -> bool {
        true
    }

    async fn announce_change(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        self.publish_changed(origin, key).await
    }

    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        Some(self.subscribe_changed().await)
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    /// `CONFIG GET appendonly appendfsync`: without the append-only file, Redis keeps writes in
    /// memory only (snapshots, if configured, are minutes apart).
    async fn durability(&self) -> Option<Durability> {
        let mut con = self.con.clone();
        let config: Vec<String> = self
            .bounded("config get", async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("append*")
                    .query_async(&mut con)
                    .await
            })
            .await
            .ok()?;
        let setting = |name: &str| {
            config
                .chunks(2)
                .find(|pair| pair[0] == name)
                .and_then(|pair| pair.get(1).cloned())
        };
        let name = &self.name;
        Some(
            match (setting("appendonly")?.as_str(), setting("appendfsync")) {
                ("no", _) => Durability::Lost(format!(
                    "{name} has appendonly no: an acknowledged transition lives in its memory only, \
                 and a restart of Redis loses it (set appendonly yes)"
                )),
                (_, Some(fsync)) if fsync == "always" => Durability::Kept(format!(
                    "{name} writes every change to its append-only file before answering"
                )),
                (_, fsync) => Durability::Kept(format!(
                    "{name} keeps an append-only file (appendfsync {}): a crash of its host may lose \
                 about the last second of acknowledged transitions",
                    fsync.as_deref().unwrap_or("?")
                )),
            },
        )
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let _: String = self
            .bounded("ping", async move {
                redis::cmd("PING").query_async(&mut con).await
            })
            .await?;
        Ok(())
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let mut con = self.con.clone();
        let rkey = self.layout.record(key);
        let fields: Vec<Option<String>> = self
            .bounded("load", async move {
                redis::cmd("HMGET")
                    .arg(rkey)
                    .arg(&["v", "w", "s", "t", "f", "x", "d"])
                    .query_async(&mut con)
                    .await
            })
            .await?;
        let corrupt = |reason: String| StoreError::Corrupt {
            key: key.to_owned(),
            reason,
        };
        match fields.as_slice() {
            [None, None, None, None, _, _, _] => Ok(None),
            [Some(v), Some(w), Some(s), Some(t), f, x, d] => {
                let format = f
                    .as_deref()
                    .map(|f| f.parse().map_err(|_| corrupt(format!("format {f:?}"))))
                    .transpose()?;
                let (format, extras) = format::decode(key, format, x.as_deref())?;
                Ok(Some(
                    InstanceRecord::assemble(
                        format,
                        extras,
                        w.clone(),
                        serde_json::from_str(s)
                            .map_err(|e| corrupt(format!("snapshot is not JSON: {e}")))?,
                        v.parse().map_err(|_| corrupt(format!("version {v:?}")))?,
                        t.parse()
                            .map_err(|_| corrupt(format!("updated_at {t:?}")))?,
                    )
                    .due(
                        d.as_deref()
                            .map(|d| d.parse().map_err(|_| corrupt(format!("due time {d:?}"))))
                            .transpose()?,
                    ),
                ))
            }
            _ => Err(corrupt(format!("hash fields missing: {fields:?}"))),
        }
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        let mut con = self.con.clone();
        let mut invocation = self.record_script(&self.save_script, key);
        invocation
            .arg(expected)
            .arg(record.version)
            .arg(&record.workflow)
            .arg(record.snapshot.to_string())
            .arg(record.updated_at_ms)
            .arg(key)
            .arg(record.format)
            .arg(format::encode(&record.extras()))
            .arg(
                record
                    .due_at_ms
                    .map(|due| due.to_string())
                    .unwrap_or_default(),
            )
            .arg(
                record
                    .audit
                    .as_ref()
                    .map(AuditEntry::encode)
                    .unwrap_or_default(),
            )
            .arg(fence_arg(record.fence.as_ref()))
            .arg(self.options.audit_keep.max(1))
            .arg(owned_member(key))
            .arg(Tally::of(record).encode());
        let answer: String = bounded_save(&self.name, self.op_timeout, async move {
            invocation.invoke_async(&mut con).await
        })
        .await?;
        if answer == "ok" {
            return self.replicated(key).await;
        }
        if let Some(refusal) = fenced(key, &answer) {
            return Err(refusal);
        }
        Err(conflict(key, expected, parse_current(key, &answer)?))
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        check_key(key)?;
        let mut con = self.con.clone();
        let list = self.layout.audit(key);
        let lines: Vec<String> = self
            .bounded("audit", async move { con.lrange(list, 0, -1).await })
            .await?;
        lines
            .iter()
            .map(|line| AuditEntry::decode(key, line))
            .collect()
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let mkey = self.layout.machine(&machine_key(workflow, version));
        let text = definition.to_string();
        // NX: a version names one definition; the first one kept stays.
        self.bounded("save machine", async move {
            redis::cmd("SET")
                .arg(mkey)
                .arg(text)
                .arg("NX")
                .query_async::<Option<String>>(&mut con)
                .await
        })
        .await
        .map(|_| ())
    }

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let mut con = self.con.clone();
        let key = self.layout.mark(name);
        self.bounded("load mark", async move { con.get(key).await })
            .await
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let key = self.layout.mark(name);
        self.bounded(
            "save mark",
            async move { con.set::<_, _, ()>(key, value).await },
        )
        .await
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let mut con = self.con.clone();
        let mkey = self.layout.machine(&machine_key(workflow, version));
        let text: Option<String> = self
            .bounded("load machine", async move { con.get(mkey).await })
            .await?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                key: machine_key(workflow, version),
                reason: format!("machine is not JSON: {e}"),
            })
        })
        .transpose()
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let mut con = self.con.clone();
        let mut invocation = self.record_script(&self.delete_script, key);
        invocation
            .arg(expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(key)
            .arg(fence_arg(fence))
            .arg(owned_member(key));
        let answer: String = self
            .bounded(
                "delete",
                async move { invocation.invoke_async(&mut con).await },
            )
            .await?;
        if let Some(refusal) = fenced(key, &answer) {
            return Err(refusal);
        }
        match (answer.as_str(), expected) {
            ("deleted", _) => Ok(true),
            ("absent", _) => Ok(false),
            (other, Some(expected)) => Err(conflict(key, expected, parse_current(key, other)?)),
            (other, None) => Err(StoreError::Corrupt {
                key: key.to_owned(),
                reason: format!("unexpected delete answer {other:?}"),
            }),
        }
    }

    async fn acquire_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        check_key(key)?;
        let mut con = self.con.clone();
        let mut invocation = self.acquire_script.key(self.layout.record(key));
        invocation
            .key(self.layout.lease(key))
            .key(self.layout.lease_wanted(key))
            .arg(holder)
            .arg(ttl.as_millis().max(1) as u64)
            .arg(WANTED_FOR.as_millis() as u64);
        let answer: (String, String, String, String, String) = self
            .bounded("acquire lease", async move {
                invocation.invoke_async(&mut con).await
            })
            .await?;
        let number = |text: &str| {
            text.parse::<i64>().map_err(|_| StoreError::Corrupt {
                key: key.to_owned(),
                reason: format!("lease answer {answer:?}"),
            })
        };
        match answer.0.as_str() {
            "held" => Ok(LeaseGrant::Held {
                token: number(&answer.1)?.max(0) as u64,
                took_over: answer.2 == "1",
                version: parse_current(key, &answer.3)?.unwrap_or(0),
                wanted: answer.4 == "1",
            }),
            "busy" => Ok(LeaseGrant::Busy {
                remaining_ms: number(&answer.1)?.max(0) as u64,
            }),
            _ => Ok(LeaseGrant::Absent),
        }
    }

    async fn renew_lease(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        check_key(key)?;
        let mut con = self.con.clone();
        let mut invocation = self.renew_script.key(self.layout.lease(key));
        invocation
            .key(self.layout.lease_wanted(key))
            .arg(fence_arg(Some(fence)))
            .arg(ttl.as_millis().max(1) as u64);
        let answer: i64 = self
            .bounded("renew lease", async move {
                invocation.invoke_async(&mut con).await
            })
            .await?;
        Ok(match answer {
            -1 => LeaseRenewal::Lost,
            wanted => LeaseRenewal::Renewed { wanted: wanted > 0 },
        })
    }

    async fn release_lease(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let mut invocation = self.release_script.key(self.layout.lease(key));
        invocation
            .key(self.layout.record(key))
            .arg(fence_arg(Some(fence)))
            .arg(fence.token);
        self.bounded("release lease", async move {
            invocation.invoke_async::<String>(&mut con).await
        })
        .await
        .map(|_| ())
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (min, max) = lex_bounds(prefix, after);
        let pages = self
            .first_in_each_shard("list", Layout::index, (&min, &max), limit)
            .await?;
        Ok(first_in_order(pages, limit))
    }

    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        let (min, max) = (format!("[{owner}\0"), format!("({owner}\u{1}"));
        self.count_in_shards("count owned", Layout::owned, min.as_bytes(), max.as_bytes())
            .await
    }

    async fn reserve_place(
        &self,
        scope: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        self.reserve(scope, id, ttl).await.map(Some)
    }

    async fn release_place(&self, scope: &str, id: &str) -> Result<(), StoreError> {
        self.release(scope, id).await
    }

    /// Each shard's owner index from the owner's first member past `after`, merged.
    async fn list_owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let min = match after {
            Some(after) => format!("({owner}\0{after}"),
            None => format!("[{owner}\0"),
        };
        let max = format!("({owner}\u{1}");
        let pages = self
            .first_in_each_shard(
                "list owned",
                Layout::owned,
                (min.as_bytes(), max.as_bytes()),
                limit,
            )
            .await?;
        let skip = owner.len() + 1;
        let pages = pages
            .into_iter()
            .map(|page| {
                page.into_iter()
                    .map(|member| member[skip..].to_owned())
                    .collect()
            })
            .collect();
        Ok(first_in_order(pages, limit))
    }

    async fn recount_owned(&self, owner: &str) -> Result<u64, StoreError> {
        let (min, max) = (format!("[{owner}\0"), format!("({owner}\u{1}"));
        let counts = self
            .each_shard("recount owned", |shard, mut con| {
                let mut invocation = self.owned_recount_script.key(Layout::owned(&shard));
                invocation
                    .arg(&min)
                    .arg(&max)
                    .arg(Layout::record_prefix(&shard));
                async move { invocation.invoke_async::<u64>(&mut con).await }
            })
            .await?;
        Ok(counts.into_iter().sum())
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.read_state_counts().await
    }

    async fn recount_by_state(&self) -> Result<StateCounts, StoreError> {
        let shards = self.layout.shards();
        futures_util::future::try_join_all(shards.iter().map(|shard| self.recount_shard(shard)))
            .await?;
        self.read_state_counts().await
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let (min, max) = lex_bounds(prefix, None);
        self.count_in_shards("count", Layout::index, &min, &max)
            .await
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        self.due_query(until, after, limit).await
    }

    /// One script: the delete script with the tombstone kept in the same step (`tombstones.rs`).
    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        self.bury(key, expected, fence, tombstone).await
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        self.tombstones_of(prefix, limit).await
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.prune(until_ms, limit).await
    }
}

/// The first `limit` of the shards' answers, each already in order, in one order; a member two
/// answers gave (on a cluster, a shard two masters answered for: `due.rs`) once.
fn first_in_order(pages: Vec<Vec<String>>, limit: usize) -> Vec<String> {
    let mut all: Vec<String> = pages.into_iter().flatten().collect();
    // Bytewise, as Redis orders a lexical range.
    all.sort_unstable();
    all.dedup();
    all.truncate(limit);
    all
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::contract::builtin::{redis_url, unique_options};
    use super::{InstanceRecord, Layout, RedisStore, StateStore};

    /// The scripts run by hash (EVALSHA); a server that forgot them gets them loaded again.
    /// The verdict follows the server's own `appendonly`, read here independently.
    #[tokio::test]
    async fn durability_says_whether_a_restart_keeps_a_transition() {
        let url = redis_url();
        let store = RedisStore::connect(&url, &unique_options()).await.unwrap();
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let config: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async(&mut con)
            .await
            .unwrap();
        match (config[1].as_str(), store.durability().await) {
            ("no", Some(super::Durability::Lost(what))) => assert!(what.contains("appendonly no")),
            ("yes", Some(super::Durability::Kept(_))) => {}
            (setting, verdict) => panic!("appendonly {setting}, verdict {verdict:?}"),
        }
    }

    #[tokio::test]
    async fn scripts_survive_a_script_flush() {
        let url = redis_url();
        let store = RedisStore::connect(&url, &unique_options())
            .await
            .unwrap_or_else(|e| panic!("Redis at {url}: {e}"));
        let v1 = InstanceRecord::first("w", json!(1));
        store.save("k", &v1, 0).await.unwrap();
        let mut con = store.con.clone();
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut con)
            .await
            .unwrap();
        store.save("k", &v1.next(json!(2)), 1).await.unwrap();
        assert!(store.delete("k", Some(2), None).await.unwrap());
        store.destroy_namespace().await.unwrap();
    }

    /// Records saved before the owner index existed are put in it when a server next connects,
    /// and only once per namespace.
    #[tokio::test]
    async fn records_older_than_the_owner_index_are_counted_at_connect() {
        let url = redis_url();
        let options = unique_options();
        let store = RedisStore::connect(&url, &options).await.unwrap();
        for key in [
            "handle/a-1@t1",
            "handle/a-2@t1",
            "handle/a-3",
            "session/s/a",
        ] {
            store
                .save(key, &InstanceRecord::first("w", json!(1)), 0)
                .await
                .unwrap();
        }
        // As code that predates the index would have left it: no index, no mark.
        let mut con = store.con.clone();
        let shard = store.layout.shard_of("");
        redis::cmd("DEL")
            .arg(Layout::owned(shard))
            .arg(Layout::owned_complete(shard))
            .exec_async(&mut con)
            .await
            .unwrap();
        assert_eq!(store.count_owned("t1").await.unwrap(), 0);
        let again = RedisStore::connect(&url, &options).await.unwrap();
        assert_eq!(again.count_owned("t1").await.unwrap(), 2);
        assert!(again.delete("handle/a-1@t1", None, None).await.unwrap());
        // Marked done: a later connect does not fill the index again.
        let third = RedisStore::connect(&url, &options).await.unwrap();
        assert_eq!(third.count_owned("t1").await.unwrap(), 1);
        // An entry older code left when it deleted the record: counted until a recount.
        redis::cmd("ZADD")
            .arg(Layout::owned(shard))
            .arg(0)
            .arg("t1\0handle/a-9@t1")
            .exec_async(&mut con)
            .await
            .unwrap();
        assert_eq!(third.count_owned("t1").await.unwrap(), 2);
        assert_eq!(third.recount_owned("t1").await.unwrap(), 1);
        assert_eq!(third.count_owned("t1").await.unwrap(), 1);
        store.destroy_namespace().await.unwrap();
    }

    /// Code that predates due times deletes a hash without its `ns:due` member, and saves one
    /// without changing it: the due query drops (and removes) such members, and lists the rest.
    #[tokio::test]
    async fn due_entries_older_code_left_behind_are_dropped() {
        let store = RedisStore::connect(&redis_url(), &unique_options())
            .await
            .unwrap();
        for (key, due) in [("kept", 10), ("deleted", 20), ("moved", 30)] {
            let record = InstanceRecord {
                due_at_ms: Some(due),
                ..InstanceRecord::first("w", json!(1))
            };
            store.save(key, &record, 0).await.unwrap();
        }
        let mut con = store.con.clone();
        // What a delete by older code does, and a save that changed `d` but not the index.
        redis::cmd("DEL")
            .arg(store.layout.record("deleted"))
            .exec_async(&mut con)
            .await
            .unwrap();
        redis::cmd("HSET")
            .arg(store.layout.record("moved"))
            .arg(&["d", "40"])
            .exec_async(&mut con)
            .await
            .unwrap();
        let due = store.due(u64::MAX, None, 1).await.unwrap();
        assert_eq!(
            due,
            [super::Due {
                at_ms: 10,
                key: "kept".into()
            }]
        );
        let due = store.due(u64::MAX, due.last(), 10).await.unwrap();
        assert!(due.is_empty(), "{due:?}");
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(Layout::due(store.layout.shard_of("kept")))
            .arg(0)
            .arg(-1)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(members, [super::due_member(10, "kept")]);
        store.destroy_namespace().await.unwrap();
    }

    /// Hashes written by format-1 code (no `f`, no `x`) are read and migrated.
    #[tokio::test]
    async fn format_1_records_are_migrated() {
        let store = RedisStore::connect(
            &super::super::contract::builtin::redis_url(),
            &super::super::contract::builtin::unique_options(),
        )
        .await
        .unwrap();
        let mut con = store.con.clone();
        for (key, snapshot) in [("old", r#"{"value":"draft"}"#), ("broken", "{not json")] {
            let version = if key == "old" { "3" } else { "1" };
            redis::cmd("HSET")
                .arg(store.layout.record(key))
                .arg(&[
                    "v",
                    version,
                    "w",
                    "invoice",
                    "s",
                    snapshot,
                    "t",
                    "1600000000000",
                ])
                .query_async::<()>(&mut con)
                .await
                .unwrap();
            redis::cmd("ZADD")
                .arg(Layout::index(store.layout.shard_of(key)))
                .arg(0)
                .arg(key)
                .query_async::<()>(&mut con)
                .await
                .unwrap();
        }
        crate::store::migrate::check_format_1_migration(&store).await;
        redis::cmd("HSET")
            .arg(store.layout.record("old"))
            .arg(&["f", "4"])
            .query_async::<()>(&mut con)
            .await
            .unwrap();
        assert!(matches!(
            store.load("old").await,
            Err(crate::store::StoreError::UnsupportedFormat { format: 4, .. })
        ));
        store.destroy_namespace().await.unwrap();
    }
}
