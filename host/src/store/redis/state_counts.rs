//! The Redis store's counts by state (`store/state_counts.rs`): a hash per shard, moved by the
//! save and delete scripts in the step that writes the record, summed over the shards on read.
//!
//! Each record hash keeps, in field `c`, the tally it is counted under ([`Tally::encode`]); the
//! save script takes the old one off `ns:counts` and puts the new one on, the delete script
//! takes it off, both with [`TALLY_LUA`], which splits the tally's text and never parses JSON.
//! `ns:counts`'s fields are the count lines, `<workflow>\0<machine>\0<state>` (the state `""`
//! for the whole workflow), and its values the counts. A record without `c` (saved by code that
//! predates the index) is counted nowhere until it is counted again.
//!
//! Counting again ([`RedisStore::recount_shard`]) runs while servers save, without stopping
//! them, and misses and doubles nothing: it opens a *generation* (`ns:recount`, a token that
//! lives while the count goes on), and counts each record of the shard into `ns:recounted`
//! once, marking it with the token (field `g`). The Rust side reads each page of records,
//! works out their tallies and hands them to [`RECOUNT_PAGE_LUA`], which sets `c` where it is
//! missing or wrong (moving the live counts) and counts every record the generation has not
//! counted yet. Meanwhile the save script counts what it writes into the generation too (a
//! record counted already: old tally off, new on; one not yet: its new tally, and the mark),
//! and the delete script takes off what the generation counted. At the end, `ns:recounted`
//! replaces `ns:counts`. `ns:counts_built` then holds the rule's version: a shard without it
//! (or with another) is counted again when a server connects.
//!
//! It must not count by a rule of its own: the tallies are made in Rust, by `Tally`.

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
};

use futures_util::future::{join_all, try_join_all};
use redis::{AsyncCommands, Script};

use super::{Layout, RedisStore};
use crate::store::{STATE_COUNTS_VERSION, StateCounts, StateStore, StoreError, Tally, now_ms};

/// `tally(hash, text, by)`: adds `by` to every line of `hash` the tally `text` counts on (none
/// for `false` or `""`), removing a line that comes to zero. Prepended to the scripts that
/// move counts.
pub const TALLY_LUA: &str = r"
local function tally(hash, text, by)
  if not text or text == '' then return end
  local function line(field)
    if redis.call('HINCRBY', hash, field, by) == 0 then redis.call('HDEL', hash, field) end
  end
  local at = string.find(text, '\0', 1, true)
  if not at then return end
  local sep = string.find(text, '\0', at + 1, true)
  local base = sep and string.sub(text, 1, sep) or (text .. '\0')
  line(base)
  while sep do
    local next_sep = string.find(text, '\0', sep + 1, true)
    line(base .. string.sub(text, sep + 1, next_sep and next_sep - 1 or #text))
    sep = next_sep
  end
end
";

/// The lines of the save script that move the counts, once the record is written. KEYS[7]
/// counts, KEYS[8] the generation's token, KEYS[9] the generation's counts; ARGV[14] the new
/// tally; `was` the old one (read before the record was written).
pub const SAVE_COUNTS_LUA: &str = r"
if was ~= ARGV[14] then
  tally(KEYS[7], was, -1)
  tally(KEYS[7], ARGV[14], 1)
  redis.call('HSET', KEYS[1], 'c', ARGV[14])
end
local gen = redis.call('GET', KEYS[8])
if gen then
  if redis.call('HGET', KEYS[1], 'g') == gen then
    if was ~= ARGV[14] then
      tally(KEYS[9], was, -1)
      tally(KEYS[9], ARGV[14], 1)
    end
  else
    tally(KEYS[9], ARGV[14], 1)
    redis.call('HSET', KEYS[1], 'g', gen)
  end
end
";

/// The lines of the delete script that take the record's tally off, once it is deleted: KEYS[7]
/// to KEYS[9] as for a save; `was` and `was_gen` its `c` and `g`, read before.
pub const DELETE_COUNTS_LUA: &str = r"
tally(KEYS[7], was, -1)
local gen = redis.call('GET', KEYS[8])
if gen and was_gen == gen then
  tally(KEYS[9], was, -1)
end
";

/// Opens a generation on a shard. KEYS: its token, its counts. ARGV: token, time to live (ms).
const RECOUNT_START_LUA: &str = r"
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 'ok'
";

/// One page of a generation. KEYS: counts, the generation's token, its counts. ARGV: token,
/// time to live (ms), the shard's record prefix, then for each record its key, the version its
/// tally was made from and the tally (`""`: counted nowhere). Sets each record's `c` to its
/// tally if it is still at that version (moving the live counts), and counts into the
/// generation every record it has not counted yet. Returns "ok", or "gone" when the
/// generation is no longer this one (another count took over, or it lapsed).
const RECOUNT_PAGE_LUA: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'gone' end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
for i = 4, #ARGV, 3 do
  local record = ARGV[3] .. ARGV[i]
  local v = redis.call('HGET', record, 'v')
  if v then
    local was = redis.call('HGET', record, 'c')
    if v == ARGV[i + 1] and was ~= ARGV[i + 2] then
      tally(KEYS[1], was, -1)
      tally(KEYS[1], ARGV[i + 2], 1)
      if ARGV[i + 2] == '' then
        redis.call('HDEL', record, 'c')
      else
        redis.call('HSET', record, 'c', ARGV[i + 2])
      end
    end
    if redis.call('HGET', record, 'g') ~= ARGV[1] then
      tally(KEYS[3], redis.call('HGET', record, 'c'), 1)
      redis.call('HSET', record, 'g', ARGV[1])
    end
  end
end
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 'ok'
";

/// Ends a generation: its counts replace the live ones and the shard is marked built. KEYS:
/// its token, its counts, counts, the built mark. ARGV: token, the rule's version. Returns
/// "ok", or "gone" as a page does.
const RECOUNT_END_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'gone' end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PERSIST', KEYS[2])
  redis.call('RENAME', KEYS[2], KEYS[3])
else
  redis.call('DEL', KEYS[3])
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[4], ARGV[2])
return 'ok'
";

/// How long a generation lives without a page: a count that died (its process killed) stops
/// costing the saves of its shard after this.
const GENERATION_TTL_MS: u64 = 60_000;

/// Records read and counted per page: each page script holds Redis a few milliseconds.
const PAGE: usize = 500;

/// The scripts of a count.
pub struct RecountScripts {
    start: Script,
    page: Script,
    end: Script,
}

impl Default for RecountScripts {
    fn default() -> Self {
        Self {
            start: Script::new(RECOUNT_START_LUA),
            page: Script::new(&format!("{TALLY_LUA}{RECOUNT_PAGE_LUA}")),
            end: Script::new(RECOUNT_END_LUA),
        }
    }
}

/// A token no other generation has: this process, the time, and a counter.
fn new_generation() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl RedisStore {
    /// Counts every shard whose index is not marked built by this rule (see the module docs):
    /// at connect, once per namespace. Servers starting together may count a shard both: the
    /// later generation takes over, and the earlier one leaves it to it.
    pub(super) async fn build_state_counts(&self) -> Result<(), StoreError> {
        let shards = self.layout.shards();
        let marks = self
            .each_shard("state counts", |shard, mut con| async move {
                con.get::<_, Option<u64>>(Layout::counts_built(&shard))
                    .await
            })
            .await?;
        let unbuilt: Vec<&str> = shards
            .into_iter()
            .zip(marks)
            .filter(|(_, mark)| *mark != Some(STATE_COUNTS_VERSION))
            .map(|(shard, _)| shard)
            .collect();
        if unbuilt.is_empty() {
            return Ok(());
        }
        try_join_all(unbuilt.iter().map(|shard| self.recount_shard(shard))).await?;
        // A new namespace has nothing to count, and nothing worth a line in the log.
        if !self.read_state_counts().await?.is_empty() {
            tracing::info!(store = %self.name, shards = unbuilt.len(),
                "counted the instances by state once, for the index this build keeps");
        }
        Ok(())
    }

    /// Counts `shard`'s records again, in a generation of their own (see the module docs).
    /// Returns once the shard's counts are replaced, or another count took the shard over.
    pub(super) async fn recount_shard(&self, shard: &str) -> Result<(), StoreError> {
        let generation = new_generation();
        let mut con = self.con.clone();
        let mut start = self.recount_scripts.start.key(Layout::recount(shard));
        start
            .key(Layout::recounted(shard))
            .arg(&generation)
            .arg(GENERATION_TTL_MS);
        self.bounded("recount", async move {
            start.invoke_async::<String>(&mut con).await
        })
        .await?;
        let mut after: Option<String> = None;
        loop {
            let (min, max) = super::lex_bounds("", after.as_deref());
            let mut con = self.con.clone();
            let index = Layout::index(shard);
            let keys: Vec<String> = self
                .bounded("recount", async move {
                    redis::cmd("ZRANGEBYLEX")
                        .arg(index)
                        .arg(min)
                        .arg(max)
                        .arg("LIMIT")
                        .arg(0)
                        .arg(PAGE)
                        .query_async(&mut con)
                        .await
                })
                .await?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            if !self.recount_page(shard, &generation, &keys).await? {
                return Ok(());
            }
            after = Some(last);
        }
        let mut con = self.con.clone();
        let mut end = self.recount_scripts.end.key(Layout::recount(shard));
        end.key(Layout::recounted(shard))
            .key(Layout::counts(shard))
            .key(Layout::counts_built(shard))
            .arg(&generation)
            .arg(STATE_COUNTS_VERSION);
        let answer: String = self
            .bounded("recount", async move { end.invoke_async(&mut con).await })
            .await?;
        if answer != "ok" {
            tracing::info!(store = %self.name, %shard, "another count of the instances took this shard over");
        }
        Ok(())
    }

    /// Reads `keys`' records, works out their tallies and counts them into `generation`.
    /// Returns `false` when the generation is over (see [`RECOUNT_PAGE_LUA`]).
    async fn recount_page(
        &self,
        shard: &str,
        generation: &str,
        keys: &[String],
    ) -> Result<bool, StoreError> {
        let loaded = join_all(keys.iter().map(|key| self.load_for_count(key))).await;
        let mut con = self.con.clone();
        let mut page = self.recount_scripts.page.key(Layout::counts(shard));
        page.key(Layout::recount(shard))
            .key(Layout::recounted(shard))
            .arg(generation)
            .arg(GENERATION_TTL_MS)
            .arg(Layout::record_prefix(shard));
        for (key, loaded) in keys.iter().zip(loaded) {
            // Gone since the page was listed: the script passes over it.
            let Some((version, tally)) = loaded? else {
                continue;
            };
            page.arg(key)
                .arg(version)
                .arg(tally.map(|tally| tally.encode()).unwrap_or_default());
        }
        let answer: String = self
            .bounded("recount", async move { page.invoke_async(&mut con).await })
            .await?;
        Ok(answer == "ok")
    }

    /// The version and tally of the record under `key` (`None` for the tally: it cannot be read,
    /// and is counted nowhere); `None` when there is no record.
    async fn load_for_count(&self, key: &str) -> Result<Option<(u64, Option<Tally>)>, StoreError> {
        match self.load(key).await {
            Ok(record) => Ok(record.map(|record| (record.version, Some(Tally::of(&record))))),
            Err(StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. }) => {
                let mut con = self.con.clone();
                let record = self.layout.record(key);
                let version: Option<u64> = self
                    .bounded("recount", async move { con.hget(record, "v").await })
                    .await
                    .unwrap_or(None);
                Ok(version.map(|version| (version, None)))
            }
            Err(error) => Err(error),
        }
    }

    /// The counts of every shard, summed.
    pub(super) async fn read_state_counts(&self) -> Result<StateCounts, StoreError> {
        let shards = self
            .each_shard("count by state", |shard, mut con| async move {
                con.hgetall::<_, Vec<(String, i64)>>(Layout::counts(&shard))
                    .await
            })
            .await?;
        // Every shard holds the lines of every workflow it has instances of: summed by name
        // first, so the counts are built once per line rather than once per line and shard.
        let mut sums: HashMap<String, i64> = HashMap::new();
        for (line, n) in shards.into_iter().flatten() {
            *sums.entry(line).or_default() += n;
        }
        let mut counts = StateCounts::default();
        for (line, n) in &sums {
            counts.add_named_line(line, *n);
        }
        Ok(counts)
    }
}

#[cfg(test)]
impl RedisStore {
    /// Makes the store what `older` says older code left (see the contract).
    pub(in crate::store) async fn as_older_code_left_it(
        &self,
        older: crate::store::contract::Older,
    ) {
        let mut con = self.con.clone();
        for shard in self.layout.shards() {
            let mut doomed = vec![Layout::counts(shard)];
            if older == crate::store::contract::Older::WithoutTheIndex {
                doomed.extend([
                    Layout::counts_built(shard),
                    Layout::recount(shard),
                    Layout::recounted(shard),
                ]);
                let keys: Vec<String> = con.zrange(Layout::index(shard), 0, -1).await.unwrap();
                for key in keys {
                    let _: () = con
                        .hdel(self.layout.record(&key), &["c", "g"])
                        .await
                        .unwrap();
                }
            }
            for key in doomed {
                let _: () = con.del(key).await.unwrap();
            }
        }
    }
}
