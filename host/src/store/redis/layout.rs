//! Where a [`super::RedisStore`] keeps each thing: the key names, one Redis server or a cluster.
//!
//! This module owns the names and the rule that puts an instance's keys together. It must not
//! talk to Redis.
//!
//! Every key of an instance (record, audit list, lease, wanted mark, change channel) starts
//! with its *shard*, and so do the two indexes that list it (`index`, `due`). On one Redis
//! server there is one shard, the namespace itself (`ns:i:<key>`, `ns:index`, …): the layout
//! every earlier version wrote. On Redis Cluster there are [`CLUSTER_SHARDS`] shards, each a
//! hash tag (`{ns:b07}:i:<key>`, `{ns:b07}:index`, …): a key's shard is a fixed hash of the key,
//! so each script (a save touches the record, both indexes, the audit list and the lease) names
//! keys of one slot, as Redis Cluster requires. Queries over every instance (list, count, due)
//! ask each shard and merge.
//!
//! The shard count is fixed: changing it would move every instance to another key. 64 spreads
//! the shards over the masters of any cluster worth having (each master has several, so load
//! follows the slot layout the operator chose). A query over every shard is 64 small reads; the
//! one every server makes every second, the due query, is one script per master instead
//! (`due.rs`), which is why a shard's hash slot is named here too ([`Layout::slot`]).

/// Shards of a namespace on Redis Cluster (see the module docs: fixed for good).
pub const CLUSTER_SHARDS: u32 = 64;

/// The key names of one namespace.
#[derive(Clone, Debug)]
pub struct Layout {
    namespace: String,
    /// `None` on one Redis server; on a cluster, the shard prefixes by number.
    shards: Option<Vec<String>>,
}

impl Layout {
    /// The layout of one Redis server: every key starts with `namespace:`.
    pub fn single(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            shards: None,
        }
    }

    /// The layout of a Redis Cluster: an instance's keys share the hash tag of its shard.
    pub fn cluster(namespace: &str) -> Self {
        let shards = (0..CLUSTER_SHARDS)
            .map(|n| format!("{{{namespace}:b{n:02}}}"))
            .collect();
        Self {
            namespace: namespace.to_owned(),
            shards: Some(shards),
        }
    }

    pub fn is_cluster(&self) -> bool {
        self.shards.is_some()
    }

    /// Every shard prefix, in order: one on a single server.
    pub fn shards(&self) -> Vec<&str> {
        match &self.shards {
            None => vec![self.namespace.as_str()],
            Some(shards) => shards.iter().map(String::as_str).collect(),
        }
    }

    /// The shard prefix `key`'s keys start with.
    pub fn shard_of(&self, key: &str) -> &str {
        match &self.shards {
            None => &self.namespace,
            Some(shards) => &shards[shard_number(key) as usize],
        }
    }

    /// The Redis Cluster hash slot of `shard`'s keys: CRC16 (XMODEM) of its hash tag, the
    /// text between its braces, modulo 16384, as Redis computes it. (On one server, of the
    /// whole name: unused there.)
    pub fn slot(shard: &str) -> u16 {
        let tag = shard
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or(shard, |(tag, _)| tag);
        crc16_xmodem(tag.as_bytes()) % 16384
    }

    /// The record hash of `key`.
    pub fn record(&self, key: &str) -> String {
        format!("{}:i:{key}", self.shard_of(key))
    }

    /// What every record hash of `shard` starts with (the due script reads records by name).
    pub fn record_prefix(shard: &str) -> String {
        format!("{shard}:i:")
    }

    /// The audit list of `key`, oldest first.
    pub fn audit(&self, key: &str) -> String {
        format!("{}:audit:{key}", self.shard_of(key))
    }

    /// The lease of `key`.
    pub fn lease(&self, key: &str) -> String {
        format!("{}:lease:{key}", self.shard_of(key))
    }

    /// The mark saying another holder wants `key`'s lease (it expires by itself).
    pub fn lease_wanted(&self, key: &str) -> String {
        format!("{}:wanted:{key}", self.shard_of(key))
    }

    /// The sorted set listing every key of `shard` (all scores 0: a lexical index).
    pub fn index(shard: &str) -> String {
        format!("{shard}:index")
    }

    /// The due-time index of `shard`.
    pub fn due(shard: &str) -> String {
        format!("{shard}:due")
    }

    /// The owner index of `shard`: a sorted set, all scores 0, of `<owner>\0<key>` for every
    /// record whose key names an owner (`owned.rs`), so one owner's records are a lexical range.
    pub fn owned(shard: &str) -> String {
        format!("{shard}:owned")
    }

    /// Set once `shard`'s owner index holds every record saved before the index existed.
    pub fn owned_complete(shard: &str) -> String {
        format!("{shard}:owned_v1")
    }

    /// The counts by state of `shard`: a hash of count lines (see `state_counts.rs`).
    pub fn counts(shard: &str) -> String {
        format!("{shard}:counts")
    }

    /// The version of the counting rule `shard`'s counts were last built by.
    pub fn counts_built(shard: &str) -> String {
        format!("{shard}:counts_built")
    }

    /// The token of the count of `shard` under way, if one is (it expires by itself).
    pub fn recount(shard: &str) -> String {
        format!("{shard}:recount")
    }

    /// The counts the count under way has made so far.
    pub fn recounted(shard: &str) -> String {
        format!("{shard}:recounted")
    }

    /// A machine definition (one key each, in no shard: read and written alone).
    pub fn machine(&self, machine_key: &str) -> String {
        format!("{}:m:{machine_key}", self.namespace)
    }

    /// A mark ([`crate::store::StateStore::save_mark`]): one key each, in no shard, like a
    /// machine.
    pub fn mark(&self, name: &str) -> String {
        format!("{}:mark:{name}", self.namespace)
    }

    /// The places held under `scope` (`places.rs`): one key, in no shard, like a mark.
    pub fn places(&self, scope: &str) -> String {
        format!("{}:places:{scope}", self.namespace)
    }

    /// The change channel of `key`: sharded pub/sub on a cluster, so a message goes to the
    /// master owning the key's slot and to the servers subscribed there, not to every node.
    pub fn changed(&self, key: &str) -> String {
        format!("{}:changed:{key}", self.shard_of(key))
    }

    /// The key a change channel is for, if it is one of this namespace's.
    pub fn key_of_channel<'a>(&self, channel: &'a str) -> Option<&'a str> {
        match &self.shards {
            None => channel
                .strip_prefix(self.namespace.as_str())?
                .strip_prefix(":changed:"),
            Some(_) => {
                let (shard, key) = channel.split_once(":changed:")?;
                (self.shard_of(key) == shard).then_some(key)
            }
        }
    }

    /// The tombstone of `key` (`store/tombstone.rs`): JSON text, in the key's shard so the
    /// delete script writes it with the delete.
    pub fn tombstone(&self, key: &str) -> String {
        format!("{}:tomb:{key}", self.shard_of(key))
    }

    /// What every tombstone of `shard` is named with, before its key.
    pub fn tombstone_prefix(shard: &str) -> String {
        format!("{shard}:tomb:")
    }

    /// The tombstones of `shard` by the time of their delete: a sorted set scored by it, which
    /// pruning reads oldest first.
    pub fn tombstones_by_time(shard: &str) -> String {
        format!("{shard}:tombs")
    }

    /// The keys of `shard`'s tombstones, all scores 0: a lexical index, for a lookup by prefix.
    pub fn tombstone_keys(shard: &str) -> String {
        format!("{shard}:tomb_keys")
    }

    /// Every key of the namespace matches this pattern (for tests' cleanup).
    #[cfg(test)]
    pub fn pattern(&self) -> Vec<String> {
        match &self.shards {
            None => vec![format!("{}:*", self.namespace)],
            Some(_) => vec![
                format!("{}:*", self.namespace),
                format!("{{{}:b*", self.namespace),
            ],
        }
    }
}

/// A key's shard on a cluster: FNV-1a (32 bits) of its bytes, modulo [`CLUSTER_SHARDS`]. Any
/// fixed hash would do; this one is written here so that it can never change under us.
fn shard_number(key: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in key.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % CLUSTER_SHARDS
}

/// CRC16 with the XMODEM parameters (polynomial 0x1021, no reflection, starting at 0): the
/// checksum Redis Cluster hashes keys with.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The node URLs of a `redis+cluster://[user:password@]h1:p1,h2:p2[/…][?…]` URL, each a plain
/// `redis://` URL with the same credentials, path and query.
pub fn cluster_nodes(url: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("redis+cluster://")
        .ok_or("a Redis Cluster URL starts with redis+cluster://")?;
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{userinfo}{host}{tail}"))
        .collect();
    if nodes.is_empty() {
        return Err(
            "a Redis Cluster URL names at least one node: redis+cluster://h1:p1,h2:p2".into(),
        );
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_keeps_the_layout_earlier_versions_wrote() {
        let layout = Layout::single("ns");
        assert_eq!(layout.shards(), ["ns"]);
        assert_eq!(layout.record("invoice-1"), "ns:i:invoice-1");
        assert_eq!(Layout::index(layout.shard_of("k")), "ns:index");
        assert_eq!(Layout::due(layout.shard_of("k")), "ns:due");
        assert_eq!(layout.lease("k"), "ns:lease:k");
        assert_eq!(layout.changed("k"), "ns:changed:k");
        assert_eq!(layout.key_of_channel("ns:changed:a:b"), Some("a:b"));
        assert_eq!(layout.key_of_channel("other:changed:a"), None);
    }

    #[test]
    fn a_cluster_puts_an_instance_and_its_indexes_in_one_hash_tag() {
        let layout = Layout::cluster("ns");
        assert_eq!(layout.shards().len(), CLUSTER_SHARDS as usize);
        let key = "invoice-{odd}:key";
        let shard = layout.shard_of(key);
        assert!(
            shard.starts_with("{ns:b") && shard.ends_with('}'),
            "{shard}"
        );
        for name in [
            layout.record(key),
            layout.audit(key),
            layout.lease(key),
            layout.lease_wanted(key),
            layout.changed(key),
            Layout::index(shard),
            Layout::due(shard),
            Layout::counts(shard),
            Layout::recount(shard),
            Layout::recounted(shard),
        ] {
            // Redis hashes the first `{…}`: the shard's tag, whatever the key holds.
            assert!(name.starts_with(shard), "{name}");
        }
        assert_eq!(layout.key_of_channel(&layout.changed(key)), Some(key));
        // A channel whose tag is not its key's shard is no instance's.
        let elsewhere = layout.shards().into_iter().find(|s| *s != shard).unwrap();
        assert_eq!(
            layout.key_of_channel(&format!("{elsewhere}:changed:{key}")),
            None
        );
    }

    /// The slots Redis itself gives (`CLUSTER KEYSLOT`), and the CRC16 check value.
    #[test]
    fn a_shard_hashes_to_the_slot_redis_gives_it() {
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        assert_eq!(Layout::slot("{t:b00}"), 5647);
        let layout = Layout::cluster("t");
        assert_eq!(Layout::slot(layout.shards()[0]), 5647);
        assert_eq!(
            Layout::slot(&layout.record("k")),
            Layout::slot(layout.shard_of("k"))
        );
    }

    #[test]
    fn keys_spread_over_every_shard() {
        let layout = Layout::cluster("ns");
        let used: std::collections::HashSet<&str> = (0..5000)
            .map(|n| layout.shard_of(&format!("invoice-{n}")))
            .collect();
        assert_eq!(used.len(), CLUSTER_SHARDS as usize);
    }

    #[test]
    fn cluster_urls_name_each_node_with_the_same_credentials() {
        assert_eq!(
            cluster_nodes("redis+cluster://u:pw@h1:7001,h2:7002/?protocol=resp3").unwrap(),
            [
                "redis://u:pw@h1:7001/?protocol=resp3",
                "redis://u:pw@h2:7002/?protocol=resp3"
            ]
        );
        assert_eq!(
            cluster_nodes("redis+cluster://127.0.0.1:7001").unwrap(),
            ["redis://127.0.0.1:7001"]
        );
        assert!(cluster_nodes("redis+cluster://").is_err());
        assert!(cluster_nodes("redis://h").is_err());
    }
}
