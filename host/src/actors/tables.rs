//! Keeping the actors' tables sized for what they hold now, not for the largest burst they saw.
//!
//! A `HashMap` never gives capacity back by itself. After 100,000 instances are passivated or
//! 10,000 sessions end, the registry's and notifier's tables would otherwise stay sized for the
//! burst for the life of the process, and the server would not fall back to its resting memory.

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hash},
};

use dashmap::DashMap;

/// Below this capacity a table is left alone: shrinking it would save too little to matter.
const SMALL: usize = 64;

/// Shrinks `map` once it uses under a quarter of its capacity. The quarter (rather than any
/// slack at all) keeps a table that is emptying from being reallocated at every removal.
pub(super) fn shrink_if_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > SMALL && map.capacity() > 4 * map.len() {
        map.shrink_to_fit();
    }
}

/// [`shrink_if_sparse`] for the concurrent tables callers read directly (`routes.rs`,
/// `watching.rs`).
pub(super) fn shrink_shared_if_sparse<K: Eq + Hash, V, S: BuildHasher + Clone>(
    map: &DashMap<K, V, S>,
) {
    let capacity = map.capacity();
    if capacity > SMALL && capacity > 4 * map.len() {
        map.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_table_gives_its_capacity_back() {
        let mut map: HashMap<u32, u32> = (0..10_000).map(|i| (i, i)).collect();
        map.retain(|k, _| *k < 10);
        shrink_if_sparse(&mut map);
        assert!(map.capacity() < 64, "capacity {}", map.capacity());
        assert_eq!(map.len(), 10);
    }

    #[test]
    fn a_table_in_use_keeps_its_capacity() {
        let mut map: HashMap<u32, u32> = (0..10_000).map(|i| (i, i)).collect();
        map.retain(|k, _| *k < 5_000);
        shrink_if_sparse(&mut map);
        // Shrunk to fit, 5,000 entries would leave well under twice that.
        assert!(
            map.capacity() >= 2 * map.len(),
            "capacity {}",
            map.capacity()
        );
    }
}
