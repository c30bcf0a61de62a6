//! The Redis store's tombstones (`store/tombstone.rs`). Each lives in its instance's shard
//! (`layout.rs`: `<shard>:tomb:<key>`, JSON text), with two indexes per shard: `<shard>:tombs`,
//! scored by the time of the delete, which pruning reads oldest first, and `<shard>:tomb_keys`,
//! a lexical index for a lookup by prefix. The delete script writes all three in the same step
//! as the delete (one shard: one slot on a cluster), so a delete never goes without its trace
//! and a tombstone never stands for a live record; a lookup checks each key's record in the
//! same script that reads the tombstone.

use std::sync::LazyLock;

use redis::Script;

use super::{
    DELETE_ANSWER_LUA, DELETE_COUNTS_LUA, DELETE_LUA, Layout, RedisStore, TALLY_LUA, check_key,
    conflict, fence_arg, fenced, lease_checked, lex_bounds, owned_member, parse_current,
};
use crate::store::{Fence, StoreError, Tombstone};

/// Keeps the tombstone once the record is gone: KEYS[10] the tombstone, KEYS[11] the shard's
/// time index, KEYS[12] its key index; ARGV[5] the tombstone's JSON, ARGV[6] its time.
const BURY_LUA: &str = r"
if n == 1 then
  redis.call('SET', KEYS[10], ARGV[5])
  redis.call('ZADD', KEYS[11], ARGV[6], ARGV[2])
  redis.call('ZADD', KEYS[12], 0, ARGV[2])
end
";

/// The delete script (see `DELETE_LUA`: conditional, fenced, the counts moved) with
/// [`BURY_LUA`] before its answer. ARGV[1] (the expected version) is never empty here.
static BURY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&lease_checked(
        &[
            TALLY_LUA,
            DELETE_LUA,
            DELETE_COUNTS_LUA,
            BURY_LUA,
            DELETE_ANSWER_LUA,
        ]
        .concat(),
        3,
    ))
});

/// A shard's tombstones whose key is in a lexical range, leaving out keys with a record. KEYS:
/// the key index. ARGV: min, max, limit, the shard's record prefix and tombstone prefix.
static LISTED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = {}
for _, key in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0,
    tonumber(ARGV[3]))) do
  if redis.call('EXISTS', ARGV[4] .. key) == 0 then
    local body = redis.call('GET', ARGV[5] .. key)
    if body then table.insert(found, body) end
  end
end
return found
",
    )
});

/// Removes a shard's tombstones deleted at or before ARGV[1], at most ARGV[2], oldest first.
/// KEYS: the time index, the key index. ARGV[3]: the shard's tombstone prefix. Returns how many.
static PRUNE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, key in ipairs(gone) do
  redis.call('DEL', ARGV[3] .. key)
  redis.call('ZREM', KEYS[1], key)
  redis.call('ZREM', KEYS[2], key)
end
return #gone
",
    )
});

impl RedisStore {
    /// [`crate::store::StateStore::delete_leaving`].
    pub(super) async fn bury(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let mut con = self.con.clone();
        let shard = self.layout.shard_of(key);
        let mut invocation = self.record_script(&BURY, key);
        invocation
            .key(self.layout.tombstone(key))
            .key(Layout::tombstones_by_time(shard))
            .key(Layout::tombstone_keys(shard))
            .arg(expected.to_string())
            .arg(key)
            .arg(fence_arg(fence))
            .arg(owned_member(key))
            .arg(tombstone.encode())
            .arg(tombstone.deleted_at_ms);
        let answer: String = self
            .bounded(
                "delete",
                async move { invocation.invoke_async(&mut con).await },
            )
            .await?;
        if let Some(refusal) = fenced(key, &answer) {
            return Err(refusal);
        }
        match answer.as_str() {
            "deleted" => Ok(true),
            "absent" => Ok(false),
            other => Err(conflict(key, expected, parse_current(key, other)?)),
        }
    }

    /// [`crate::store::StateStore::tombstones`]: each shard's first `limit`, merged.
    pub(super) async fn tombstones_of(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Tombstone>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (min, max) = lex_bounds(prefix, None);
        let pages = self
            .each_shard("tombstones", |shard, mut con| {
                let mut invocation = LISTED.prepare_invoke();
                invocation
                    .key(Layout::tombstone_keys(&shard))
                    .arg(&min)
                    .arg(&max)
                    .arg(limit)
                    .arg(Layout::record_prefix(&shard))
                    .arg(Layout::tombstone_prefix(&shard));
                async move { invocation.invoke_async::<Vec<String>>(&mut con).await }
            })
            .await?;
        let mut found = pages
            .into_iter()
            .flatten()
            .map(|text| Tombstone::decode(prefix, &text))
            .collect::<Result<Vec<_>, _>>()?;
        found.sort_by(|a, b| a.key.cmp(&b.key));
        found.truncate(limit);
        Ok(found)
    }

    /// [`crate::store::StateStore::prune_tombstones`]: up to `limit` in each shard.
    pub(super) async fn prune(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let pruned = self
            .each_shard("prune tombstones", |shard, mut con| {
                let mut invocation = PRUNE.prepare_invoke();
                invocation
                    .key(Layout::tombstones_by_time(&shard))
                    .key(Layout::tombstone_keys(&shard))
                    .arg(until_ms)
                    .arg(limit)
                    .arg(Layout::tombstone_prefix(&shard));
                async move { invocation.invoke_async::<usize>(&mut con).await }
            })
            .await?;
        Ok(pruned.into_iter().sum())
    }
}
