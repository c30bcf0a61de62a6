//! The Redis store's places under the per-principal limits ([`StateStore::reserve_place`]): one
//! sorted set per scope (`layout.rs`: `ns:places:<scope>`, in no shard), each member a place
//! scored by when it lapses, in Redis's own clock so that servers whose clocks differ agree. One
//! script drops the lapsed members, adds (or renews) the new one and counts, so two servers'
//! places are counted in one order. The set expires with its last member (its time to live is
//! only ever lengthened: a short place must not take longer ones with it), so a scope no one
//! holds places in leaves no key behind.
//!
//! [`StateStore::reserve_place`]: crate::store::StateStore::reserve_place

use std::{sync::LazyLock, time::Duration};

use redis::{AsyncCommands, Script};

use super::RedisStore;
use crate::store::StoreError;

/// KEYS[1] the scope's set; ARGV[1] the place, ARGV[2] its time to live in ms. Returns how many
/// live members the set holds with it.
static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return redis.call('ZCARD', KEYS[1])
",
    )
});

impl RedisStore {
    /// [`crate::store::StateStore::reserve_place`].
    pub(super) async fn reserve(
        &self,
        scope: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let mut con = self.con.clone();
        let mut invocation = RESERVE.key(self.layout.places(scope));
        invocation.arg(id).arg(ttl.as_millis().max(1) as u64);
        self.bounded("reserve a place", async move {
            invocation.invoke_async(&mut con).await
        })
        .await
    }

    /// [`crate::store::StateStore::release_place`].
    pub(super) async fn release(&self, scope: &str, id: &str) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let key = self.layout.places(scope);
        self.bounded("release a place", async move {
            con.zrem::<_, _, ()>(key, id).await
        })
        .await
    }
}
