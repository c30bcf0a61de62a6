//! [`Routes`]: the registry's table of live instance actors, readable without asking the
//! registry.
//!
//! Every call needs the address of its instance's actor. Asking the registry actor for it costs
//! a message round trip to the registry's thread on every call, although the answer is almost
//! always "the actor you used last time". So the registry keeps its table here, in a concurrent
//! map that callers read directly ([`Routes::live`]); only a miss (an instance not in memory, or
//! whose actor died) goes to the registry, which starts the actor and inserts it. The registry
//! stays the only writer: it alone decides which actor serves a key, so there is still exactly
//! one live actor per instance.
//!
//! Passivation reads the time of the last use, which callers stamp as they read. An address a
//! caller already holds keeps its actor alive until the call is answered (actix stops an actor
//! only when no address is left), so dropping an entry never cuts off a call under way.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use actix::Addr;

use super::{InstanceKey, instance::InstanceActor, tables::shrink_shared_if_sparse};
use crate::fast_hash::ConcurrentMap;

pub(super) struct Routes {
    table: ConcurrentMap<InstanceKey, Route>,
    /// Last-use stamps are milliseconds since this instant, so they fit an atomic.
    epoch: Instant,
}

struct Route {
    addr: Addr<InstanceActor>,
    last_used_ms: AtomicU64,
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            table: ConcurrentMap::default(),
            epoch: Instant::now(),
        }
    }
}

impl Routes {
    /// The address of `key`'s actor if it is live, stamped as used now.
    pub(super) fn live(&self, key: &InstanceKey) -> Option<Addr<InstanceActor>> {
        let route = self.table.get(key)?;
        if !route.addr.connected() {
            return None;
        }
        route.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
        Some(route.addr.clone())
    }

    /// Makes `addr` the actor of `key`. Returns whether the key was new to the table (rather
    /// than replacing a dead actor).
    pub(super) fn insert(&self, key: InstanceKey, addr: Addr<InstanceActor>) -> bool {
        let route = Route {
            addr,
            last_used_ms: AtomicU64::new(self.now_ms()),
        };
        self.table.insert(key, route).is_none()
    }

    /// Drops `key`'s entry, handing back its address if it had one.
    pub(super) fn remove(&self, key: &InstanceKey) -> Option<Addr<InstanceActor>> {
        let removed = self.table.remove(key).map(|(_, route)| route.addr);
        shrink_shared_if_sparse(&self.table);
        removed
    }

    /// Drops every entry not used for `idle_after`; returns how many went.
    pub(super) fn drop_idle(&self, idle_after: Duration) -> usize {
        let now = self.now_ms();
        let idle_ms = u64::try_from(idle_after.as_millis()).unwrap_or(u64::MAX);
        let before = self.table.len();
        self.table.retain(|_, route| {
            now.saturating_sub(route.last_used_ms.load(Ordering::Relaxed)) < idle_ms
        });
        let dropped = before.saturating_sub(self.table.len());
        if dropped > 0 {
            shrink_shared_if_sparse(&self.table);
        }
        dropped
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn contains(&self, key: &InstanceKey) -> bool {
        self.table.contains_key(key)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
