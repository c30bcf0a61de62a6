//! The Redis store's places held for mints in flight ([`StateStore::reserve_owned`]): one
//! sorted set per owner (`layout.rs`: `ns:reserved:<owner>`, in no shard), each member a
//! reservation scored by when it expires, in Redis's own clock so that servers whose clocks
//! differ agree. One script drops the expired members, adds the new one and counts, so two
//! servers' reservations are counted in one order. The set expires with its last member (its
//! time to live is only ever lengthened: a short place must not take longer ones with it), so
//! an owner that stopped minting leaves no key behind.
//!
//! [`StateStore::reserve_owned`]: crate::store::StateStore::reserve_owned

use std::{sync::LazyLock, time::Duration};

use redis::{AsyncCommands, Script};

use super::RedisStore;
use crate::store::StoreError;

/// KEYS[1] the owner's set; ARGV[1] the reservation, ARGV[2] its time to live in ms. Returns
/// how many live members the set holds with it.
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
    /// [`crate::store::StateStore::reserve_owned`].
    pub(super) async fn reserve(
        &self,
        owner: &str,
        reservation: &str,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let mut con = self.con.clone();
        let mut invocation = RESERVE.key(self.layout.reserved(owner));
        invocation
            .arg(reservation)
            .arg(ttl.as_millis().max(1) as u64);
        self.bounded(
            "reserve",
            async move { invocation.invoke_async(&mut con).await },
        )
        .await
    }

    /// [`crate::store::StateStore::release_owned`].
    pub(super) async fn release(&self, owner: &str, reservation: &str) -> Result<(), StoreError> {
        let mut con = self.con.clone();
        let key = self.layout.reserved(owner);
        self.bounded("release reservation", async move {
            con.zrem::<_, _, ()>(key, reservation).await
        })
        .await
    }
}
