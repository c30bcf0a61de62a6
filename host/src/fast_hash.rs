//! The hasher of the tables a call looks things up in on its way (the instance routes, who
//! watches what, the HTTP sessions, the calls in flight, the call metrics), and of the
//! notifier's, which a fan-out to N sessions looks up N times.
//!
//! std's default hasher, SipHash-1-3, resists chosen-key collisions at some tens of nanoseconds
//! per short string, and a call hashes a key in these tables a dozen times. foldhash (the hasher
//! hashbrown itself defaults to) is much cheaper per key and is seeded at random per process, so
//! a client still cannot choose handles or session ids that collide.
//!
//! It must not hold tables itself: it only names their hasher.

/// The hasher builder of the hot tables.
pub type RandomState = foldhash::fast::RandomState;

/// A concurrent map hashed with [`RandomState`].
pub type ConcurrentMap<K, V> = dashmap::DashMap<K, V, RandomState>;

/// A concurrent set hashed with [`RandomState`].
pub type ConcurrentSet<K> = dashmap::DashSet<K, RandomState>;

/// A set hashed with [`RandomState`].
pub type Set<K> = std::collections::HashSet<K, RandomState>;

/// A map hashed with [`RandomState`].
pub type Map<K, V> = std::collections::HashMap<K, V, RandomState>;
