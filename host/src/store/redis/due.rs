//! The due query on Redis ([`super::RedisStore`]'s `StateStore::due`): which records are due,
//! earliest first, read from each shard's due-time index.
//!
//! This module owns the scripts that read the index (and drop the entries older code left
//! behind) and how a query is spread over a cluster's masters. It must not name keys
//! (`layout.rs`) or decide when to ask (`timers.rs`).
//!
//! On one server there is one shard: one script run. A Redis Cluster has 64 shards, and every
//! server sharing it asks every second (`timers::SHARED_POLL`) whether anything is due, which
//! is nearly always nothing: one script per shard would be 64 commands a second per server for
//! an idle store. So the question goes to each master once instead ([`MASTER_DUE_LUA`]), with
//! every shard's name and slot: each master answers for the shards whose slot it owns, as its
//! own `CLUSTER NODES` says in the same atomic step, and leaves out a slot being migrated in or
//! out. A shard no master answered for (a slot moving, a failover the client has not followed
//! yet, a master that did not answer) is asked alone, the per-shard way, which follows the
//! cluster's redirects. A shard two masters answered for (each believing it owns the slot, the
//! one that gave it away holding none of its keys) is answered by both; their answers are
//! merged.

use redis::{Value, cluster_routing::ResponsePolicy};

use super::{
    DUE_DIGITS, Layout, RedisStore, StoreError, due_member, first_in_order, parse_due_member,
};
use crate::store::Due;

/// The due query of one shard, as a Lua function used by both scripts: up to `limit` members of
/// the due index `index` between the lexical bounds `min` and `max`, in order, dropping (and
/// removing) those whose record (`records` .. key) is gone or has another due time: members
/// code that predates due times left behind. It reads record hashes it cannot name in KEYS; on
/// a cluster they share the index's hash tag, so they live in its slot.
const SHARD_DUE_LUA: &str = r"
local function shard_due(index, records, min, max, limit, out)
  local taken = 0
  while taken < limit do
    local page = redis.call('ZRANGEBYLEX', index, min, max, 'LIMIT', 0, limit - taken)
    if #page == 0 then break end
    for _, member in ipairs(page) do
      local d = redis.call('HGET', records .. string.sub(member, 21), 'd')
      if d and string.rep('0', 20 - #d) .. d == string.sub(member, 1, 20) then
        table.insert(out, member)
        taken = taken + 1
      else
        redis.call('ZREM', index, member)
      end
    end
    min = '(' .. page[#page]
  end
  return out
end
";

/// The due query of one shard. KEYS: the shard's due index. ARGV: lexical min and max, limit,
/// the prefix of the shard's record hash keys (`ns:i:`). Returns up to `limit` members in order.
pub(super) fn shard_due_lua() -> String {
    [
        SHARD_DUE_LUA,
        "return shard_due(KEYS[1], ARGV[4], ARGV[1], ARGV[2], tonumber(ARGV[3]), {})\n",
    ]
    .concat()
}

/// The due query of the shards one cluster master owns, sent to every master with no keys
/// declared (which master owns which shard is the script's to find). ARGV: lexical min and
/// max, limit, then for each shard its due index, its record prefix and its hash slot. Returns
/// `{answered, members}`: the positions (from 0) of the shards this master answered for, those
/// whose slot its `CLUSTER NODES` line (`myself`) lists and not as migrating or importing, and
/// up to `limit` members of each, each shard's in order. Reading keys of several slots needs
/// the `allow-cross-slot-keys` flag; they are all this node's, so none is refused.
const MASTER_DUE_LUA: &str = r"
local ranges, moving = {}, {}
for line in string.gmatch(redis.call('CLUSTER', 'NODES'), '[^\n]+') do
  local fields = {}
  for field in string.gmatch(line, '%S+') do table.insert(fields, field) end
  if fields[3] and string.find(fields[3], 'myself', 1, true) then
    for i = 9, #fields do
      local first, last = string.match(fields[i], '^(%d+)%-(%d+)$')
      if not first then
        first = string.match(fields[i], '^(%d+)$')
        last = first
      end
      if first then
        table.insert(ranges, {tonumber(first), tonumber(last)})
      else
        local slot = string.match(fields[i], '^%[(%d+)')
        if slot then moving[tonumber(slot)] = true end
      end
    end
  end
end
local function owned(slot)
  if moving[slot] then return false end
  for _, range in ipairs(ranges) do
    if slot >= range[1] and slot <= range[2] then return true end
  end
  return false
end
local answered, out = {}, {}
local limit = tonumber(ARGV[3])
for i = 4, #ARGV, 3 do
  if owned(tonumber(ARGV[i + 2])) then
    table.insert(answered, (i - 4) / 3)
    shard_due(ARGV[i], ARGV[i + 1], ARGV[1], ARGV[2], limit, out)
  end
end
return {answered, out}
";

/// [`MASTER_DUE_LUA`] with its flags line and the shard query it calls.
pub(super) fn master_due_lua() -> String {
    [
        "#!lua flags=allow-cross-slot-keys\n",
        SHARD_DUE_LUA,
        MASTER_DUE_LUA,
    ]
    .concat()
}

impl RedisStore {
    /// `StateStore::due` (see the module docs).
    pub(super) async fn due_query(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let min = match after {
            Some(after) => format!("({}", due_member(after.at_ms, &after.key)),
            None => "-".to_owned(),
        };
        // Every member due at `until` is below the first one due a millisecond later.
        let max = match until.checked_add(1) {
            Some(next) => format!("({next:0width$}", width = DUE_DIGITS),
            None => "+".to_owned(),
        };
        let shards = self.layout.shards();
        let (mut pages, unanswered) = if self.layout.is_cluster() {
            self.due_on_masters(&shards, &min, &max, limit).await?
        } else {
            (Vec::new(), shards)
        };
        if !unanswered.is_empty() {
            pages.extend(
                self.in_shards(&unanswered, "due", |shard, mut con| {
                    let mut invocation = self.due_script.key(Layout::due(&shard));
                    invocation
                        .arg(&min)
                        .arg(&max)
                        .arg(limit)
                        .arg(Layout::record_prefix(&shard));
                    async move { invocation.invoke_async::<Vec<String>>(&mut con).await }
                })
                .await?,
            );
        }
        // Members sort as (due time, key): the zero-padded time comes first.
        first_in_order(pages, limit)
            .iter()
            .map(|m| parse_due_member(m))
            .collect()
    }

    /// Asks every master of the cluster for the due members of the shards it owns: their
    /// answers, one page per master, and the shards no master answered for. Fails only when
    /// the masters took `op_timeout` to answer: asking each shard would wait as long again.
    async fn due_on_masters<'a>(
        &self,
        shards: &[&'a str],
        min: &str,
        max: &str,
        limit: usize,
    ) -> Result<(Vec<Vec<String>>, Vec<&'a str>), StoreError> {
        let mut query = redis::cmd("EVALSHA");
        query
            .arg(self.master_due_script.get_hash())
            .arg(0)
            .arg(min)
            .arg(max)
            .arg(limit);
        for shard in shards {
            query
                .arg(Layout::due(shard))
                .arg(Layout::record_prefix(shard))
                .arg(Layout::slot(shard));
        }
        let mut answers = self.ask_every_master(&query).await?;
        if answers.iter().flatten().any(is_noscript) {
            // A master that forgot the script (a restart, a SCRIPT FLUSH, a new master).
            let mut loading = redis::cmd("SCRIPT");
            loading.arg("LOAD").arg(master_due_lua());
            let loaded = self
                .con
                .on_every_master(loading, Some(ResponsePolicy::AllSucceeded));
            if self.bounded("due", loaded).await.is_ok() {
                answers = self.ask_every_master(&query).await?;
            }
        }
        let mut answered = vec![false; shards.len()];
        let mut pages = Vec::new();
        for answer in answers.into_iter().flatten() {
            // An error answer (a replica the client still takes for a master, one that cannot
            // run the script) answers for no shard.
            if let Some((positions, members)) = parse_master_answer(answer, shards.len()) {
                for position in positions {
                    answered[position] = true;
                }
                pages.push(members);
            }
        }
        let unanswered: Vec<&str> = shards
            .iter()
            .zip(answered)
            .filter_map(|(shard, answered)| (!answered).then_some(*shard))
            .collect();
        if !unanswered.is_empty() {
            tracing::debug!(
                shards = unanswered.len(),
                "no master answered for some shards' due times; asking each alone"
            );
        }
        Ok((pages, unanswered))
    }

    /// Every master's answer to `query`, or none when one cannot be reached (a master that
    /// failed over, which the per-shard queries find by following the cluster's redirects, or
    /// an outage, which they report). A timeout is the caller's error.
    async fn ask_every_master(&self, query: &redis::Cmd) -> Result<Option<Vec<Value>>, StoreError> {
        let asking = self.con.on_every_master(query.clone(), None);
        match self.bounded("due", asking).await {
            Ok(Value::Map(answers)) => Ok(Some(
                answers.into_iter().map(|(_, answer)| answer).collect(),
            )),
            Ok(_) => Ok(None),
            Err(error @ StoreError::NoAnswer(_)) => Err(error),
            Err(error) => {
                tracing::debug!(%error, "could not ask every master for due times");
                Ok(None)
            }
        }
    }
}

fn is_noscript(answer: &Value) -> bool {
    matches!(answer, Value::ServerError(error) if error.code() == "NOSCRIPT")
}

/// A master's `{answered, members}` ([`MASTER_DUE_LUA`]), its positions checked against the
/// `shards` asked about; `None` for an error or anything else.
fn parse_master_answer(answer: Value, shards: usize) -> Option<(Vec<usize>, Vec<String>)> {
    let (positions, members): (Vec<usize>, Vec<String>) = redis::from_redis_value(answer).ok()?;
    positions
        .iter()
        .all(|&position| position < shards)
        .then_some((positions, members))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{super::layout, *};
    use crate::store::{
        InstanceRecord, StateStore,
        contract::builtin::{redis_cluster_url, unique_options},
    };

    async fn cluster_store() -> RedisStore {
        RedisStore::connect(&redis_cluster_url(), &unique_options())
            .await
            .expect("the tests' Redis Cluster")
    }

    async fn save_due(store: &RedisStore, key: &str, due: u64) {
        let record = InstanceRecord {
            due_at_ms: Some(due),
            ..InstanceRecord::first("w", json!(1))
        };
        store.save(key, &record, 0).await.unwrap();
    }

    /// Every shard is answered by the one master owning it, in one script per master (loaded
    /// again where it was forgotten); the answers merge into the store's order, page by page, and a member older code left behind
    /// is dropped there as by the per-shard script.
    #[tokio::test]
    async fn each_master_answers_for_the_shards_it_owns() {
        let store = cluster_store().await;
        let mut expected = Vec::new();
        for n in 0..200u64 {
            let key = format!("invoice-{n}");
            save_due(&store, &key, 1000 + n % 7).await;
            expected.push((1000 + n % 7, key));
        }
        save_due(&store, "gone", 5).await;
        redis::cmd("DEL")
            .arg(store.layout.record("gone"))
            .exec_async(&mut store.con.clone())
            .await
            .unwrap();
        expected.sort();

        // Masters that forgot the script are given it again.
        let mut flush = redis::cmd("SCRIPT");
        flush.arg("FLUSH");
        store
            .con
            .on_every_master(flush, Some(ResponsePolicy::AllSucceeded))
            .await
            .unwrap();
        let shards = store.layout.shards();
        let (_, unanswered) = store.due_on_masters(&shards, "-", "+", 10).await.unwrap();
        assert!(unanswered.is_empty(), "{unanswered:?}");

        let mut got = Vec::new();
        let mut after: Option<Due> = None;
        loop {
            let page = store.due(u64::MAX, after.as_ref(), 64).await.unwrap();
            let Some(last) = page.last().cloned() else {
                break;
            };
            got.extend(page.into_iter().map(|due| (due.at_ms, due.key)));
            after = Some(last);
        }
        assert_eq!(got, expected);
        assert_eq!(store.due(1002, None, 1000).await.unwrap().len(), 87);
        store.destroy_namespace().await.unwrap();
    }

    /// A master leaves out a slot it is migrating: no master answers for that shard, which is
    /// then asked alone, and its due record is still found.
    #[tokio::test]
    async fn a_shard_whose_slot_is_moving_is_asked_alone() {
        let store = cluster_store().await;
        save_due(&store, "moving", 10).await;
        let shard = store.layout.shard_of("moving");
        let slot = Layout::slot(shard);
        let mut nodes = Vec::new();
        for url in layout::cluster_nodes(&redis_cluster_url()).unwrap() {
            let client = redis::Client::open(url).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query_async(&mut con)
                .await
                .unwrap();
            let keys: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query_async(&mut con)
                .await
                .unwrap();
            nodes.push((con, id, keys > 0));
        }
        let owner = nodes.iter().position(|(_, _, has)| *has).unwrap();
        let other = nodes[(owner + 1) % nodes.len()].1.clone();
        let mut owner = nodes.swap_remove(owner).0;
        let set_slot = |state: &[&str]| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state);
            cmd
        };
        set_slot(&["MIGRATING", other.as_str()])
            .exec_async(&mut owner)
            .await
            .unwrap();

        let shards = store.layout.shards();
        let unanswered = store.due_on_masters(&shards, "-", "+", 10).await;
        let due = store.due(u64::MAX, None, 10).await;
        set_slot(&["STABLE"]).exec_async(&mut owner).await.unwrap();

        assert_eq!(unanswered.unwrap().1, [shard]);
        assert_eq!(
            due.unwrap(),
            [Due {
                at_ms: 10,
                key: "moving".into()
            }]
        );
        store.destroy_namespace().await.unwrap();
    }
}
