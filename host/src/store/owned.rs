//! Whose a record is: the owner a key names, and the per-owner counts the stores keep, so that
//! "how many instances does this principal hold" (`--max-instances-per-principal`) is one
//! lookup rather than a scan of every key.
//!
//! This module owns the one rule by which an owner is read off a key (`actors/key.rs` builds
//! keys with the same constants), and [`OwnedCounts`], the in-process count the memory and
//! embedded stores keep. The shared stores keep theirs in the backend (a per-owner set in each
//! Redis shard, an expression index in PostgreSQL), written by the same atomic step as the
//! record.

use std::collections::HashMap;

/// The prefix of every handle-keyed instance's key.
pub const HANDLE_PREFIX: &str = "handle/";

/// Separates a handle from its owner (a tenant) in a key; never part of a handle.
pub const OWNER_SEPARATOR: char = '@';

/// The owner the record under `key` belongs to: what follows the first [`OWNER_SEPARATOR`] in a
/// key that starts with [`HANDLE_PREFIX`]. `None` for every other key (an instance made with
/// authentication off belongs to no one: its handle alone names it; a session-keyed instance
/// belongs to its session, which is bounded by other means).
pub fn owner_of(key: &str) -> Option<&str> {
    let (_, owner) = key
        .strip_prefix(HANDLE_PREFIX)?
        .split_once(OWNER_SEPARATOR)?;
    (!owner.is_empty()).then_some(owner)
}

/// How many records each owner has, for a store whose records all live in this process. Kept
/// beside the records, under the same lock or by the one writer, so it never disagrees with
/// them.
#[derive(Debug, Default)]
pub struct OwnedCounts(HashMap<Box<str>, u64>);

impl OwnedCounts {
    /// A record was stored under `key`, which held none.
    pub fn added(&mut self, key: &str) {
        if let Some(owner) = owner_of(key) {
            *self.0.entry(owner.into()).or_default() += 1;
        }
    }

    /// The record under `key` was removed.
    pub fn removed(&mut self, key: &str) {
        let Some(owner) = owner_of(key) else {
            return;
        };
        if let Some(count) = self.0.get_mut(owner) {
            *count -= 1;
            if *count == 0 {
                self.0.remove(owner);
            }
        }
    }

    /// How many records `owner` has.
    pub fn of(&self, owner: &str) -> u64 {
        self.0.get(owner).copied().unwrap_or(0)
    }

    /// Says `owner` has `n` records, as an index kept elsewhere counted them.
    pub fn set(&mut self, owner: &str, n: u64) {
        if n == 0 {
            self.0.remove(owner);
        } else {
            self.0.insert(owner.into(), n);
        }
    }

    /// Each owner with records, and how many.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(owner, n)| (&**owner, *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_handle_keys_with_an_owner_have_one() {
        assert_eq!(owner_of("handle/doc-1@0123"), Some("0123"));
        assert_eq!(owner_of("handle/doc-1"), None);
        assert_eq!(owner_of("handle/doc-1@"), None);
        assert_eq!(owner_of("session/ab/doc"), None);
        assert_eq!(owner_of("machine/doc@v1"), None);
    }

    #[test]
    fn counts_follow_adds_and_removes() {
        let mut counts = OwnedCounts::default();
        counts.added("handle/a-1@t1");
        counts.added("handle/a-2@t1");
        counts.added("handle/a-3@t2");
        counts.added("handle/a-4");
        assert_eq!((counts.of("t1"), counts.of("t2")), (2, 1));
        counts.removed("handle/a-1@t1");
        counts.removed("handle/a-3@t2");
        counts.removed("handle/a-4");
        assert_eq!((counts.of("t1"), counts.of("t2")), (1, 0));
        assert_eq!(counts.0.len(), 1, "an owner with nothing left is forgotten");
    }
}
