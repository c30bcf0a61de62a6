//! Idempotency keys: what a retried `tools/call` gets instead of running again.
//!
//! This module owns the decisions on an instance's stored entries: whether a key was seen within
//! the window and for the same call ([`lookup`]), and which entries a save keeps ([`remember`]).
//! It must not run anything or touch the store: the instance actor asks it before the gate and
//! saves its answer in the same compare-and-set save as the call's transition, so a stored
//! result and the state it led to are never apart.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{catalog::canonical, store::IdempotencyEntry};

/// Most entries kept per instance: the newest ones. Retries come soon after the call they
/// repeat, so a handful is plenty; the bound keeps a record small however many keyed calls an
/// instance takes.
pub const MAX_ENTRIES: usize = 32;

/// The largest output remembered whole, in bytes of JSON: a larger one is remembered as having
/// been answered, not with what it answered, so one call cannot make every later read and save
/// of its instance carry megabytes.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// The most bytes of output remembered per instance, over all its entries: the oldest outputs
/// are dropped first.
pub const MAX_TOTAL_OUTPUT_BYTES: usize = 64 * 1024;

/// What an instance's entries say about a call carrying `key`.
#[derive(Debug, PartialEq)]
pub enum Lookup<'a> {
    /// Not seen within the window: run the call.
    Miss,
    /// The same call ran already: answer with its result.
    Replay(&'a IdempotencyEntry),
    /// The same call ran already, but its result was too large to keep: say so, run nothing.
    Expired(&'a IdempotencyEntry),
    /// The key was used for another tool or other arguments.
    Conflict,
}

/// A digest of a call's arguments that does not depend on how their JSON was laid out.
pub fn digest(arguments: &Value) -> String {
    let hash = Sha256::digest(canonical(arguments).as_bytes());
    hash.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether `entries` hold `key` from within `window` before `now_ms`, and for this call.
pub fn lookup<'a>(
    entries: &'a [IdempotencyEntry],
    key: &str,
    tool: &str,
    arguments: &str,
    window: Duration,
    now_ms: u64,
) -> Lookup<'a> {
    let cutoff = now_ms.saturating_sub(window.as_millis() as u64);
    match entries
        .iter()
        .rev()
        .find(|entry| entry.key == key && entry.at_ms >= cutoff)
    {
        None => Lookup::Miss,
        Some(entry) if entry.tool == tool && entry.arguments == arguments => {
            if entry.output_dropped {
                Lookup::Expired(entry)
            } else {
                Lookup::Replay(entry)
            }
        }
        Some(_) => Lookup::Conflict,
    }
}

/// The entries to save: `entries` without those older than `window` (or with `entry`'s key),
/// then `entry`, at most [`MAX_ENTRIES`] of the newest.
pub fn remember(
    entries: &[IdempotencyEntry],
    entry: Option<IdempotencyEntry>,
    window: Duration,
    now_ms: u64,
) -> Vec<IdempotencyEntry> {
    let cutoff = now_ms.saturating_sub(window.as_millis() as u64);
    let added = entry.is_some();
    let replaced = entry.as_ref().map(|new| new.key.clone());
    let mut kept: Vec<IdempotencyEntry> = entries
        .iter()
        .filter(|old| old.at_ms >= cutoff && replaced.as_ref() != Some(&old.key))
        .cloned()
        .chain(entry)
        .collect();
    let excess = kept.len().saturating_sub(MAX_ENTRIES);
    kept.drain(..excess);
    // Newest first: each output is kept while it fits the entry's bound and the total's. Only
    // an added entry can break a bound: the others kept to them when they were saved.
    if !added {
        return kept;
    }
    let mut total = 0;
    for entry in kept.iter_mut().rev() {
        if entry.output_dropped {
            continue;
        }
        let size = serde_json::to_string(&entry.output).map_or(usize::MAX, |text| text.len());
        if size > MAX_OUTPUT_BYTES || total + size > MAX_TOTAL_OUTPUT_BYTES {
            entry.output = Value::Null;
            entry.output_dropped = true;
        } else {
            total += size;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(key: &str, at_ms: u64) -> IdempotencyEntry {
        IdempotencyEntry {
            key: key.into(),
            tool: "t".into(),
            arguments: digest(&json!({"a": 1, "b": 2})),
            at_ms,
            output: json!({"n": at_ms}),
            moved: true,
            state: json!("review"),
            output_dropped: false,
        }
    }

    const WINDOW: Duration = Duration::from_secs(10);

    #[test]
    fn the_digest_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"a": 1, "b": 3})));
    }

    #[test]
    fn a_key_replays_the_same_call_and_refuses_another() {
        let entries = vec![entry("k", 50_000)];
        let same = digest(&json!({"b": 2, "a": 1}));
        assert_eq!(
            lookup(&entries, "k", "t", &same, WINDOW, 55_000),
            Lookup::Replay(&entries[0])
        );
        let other = digest(&json!({"a": 2}));
        assert_eq!(
            lookup(&entries, "k", "t", &other, WINDOW, 55_000),
            Lookup::Conflict
        );
        assert_eq!(
            lookup(&entries, "k", "u", &same, WINDOW, 55_000),
            Lookup::Conflict
        );
        assert_eq!(
            lookup(&entries, "j", "t", &same, WINDOW, 55_000),
            Lookup::Miss
        );
        // Past the window the key is free again.
        assert_eq!(
            lookup(&entries, "k", "t", &other, WINDOW, 60_001),
            Lookup::Miss
        );
    }

    #[test]
    fn remembering_drops_old_and_excess_entries() {
        let old = entry("old", 1_000);
        let recent: Vec<IdempotencyEntry> = (0..MAX_ENTRIES as u64)
            .map(|n| entry(&format!("k{n}"), 50_000 + n))
            .collect();
        let mut entries = vec![old];
        entries.extend(recent);
        let kept = remember(&entries, Some(entry("new", 60_000)), WINDOW, 60_000);
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert_eq!(kept.last().unwrap().key, "new");
        assert!(kept.iter().all(|e| e.key != "old" && e.key != "k0"));
        let pruned = remember(&kept, None, WINDOW, 70_000);
        assert_eq!(
            pruned.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
            ["new"]
        );
    }

    #[test]
    fn large_outputs_are_remembered_as_having_run() {
        let big = |key: &str, at_ms: u64, bytes: usize| IdempotencyEntry {
            output: json!({"blob": "x".repeat(bytes)}),
            ..entry(key, at_ms)
        };
        // One over the per-entry bound: kept as run, without its output; a retry hears so.
        let kept = remember(&[], Some(big("huge", 1, MAX_OUTPUT_BYTES)), WINDOW, 1);
        assert!(kept[0].output_dropped && kept[0].output.is_null());
        let arguments = digest(&json!({"a": 1, "b": 2}));
        assert!(matches!(
            lookup(&kept, "huge", "t", &arguments, WINDOW, 2),
            Lookup::Expired(_)
        ));
        // Many within it: the newest are kept whole up to the total, the oldest lose theirs.
        let mut entries = Vec::new();
        for at in 0..10u64 {
            entries = remember(
                &entries,
                Some(big(&format!("k{at}"), at, 10_000)),
                WINDOW,
                at,
            );
        }
        let whole = entries.iter().filter(|entry| !entry.output_dropped).count();
        let one = serde_json::to_string(&big("k", 0, 10_000).output)
            .unwrap()
            .len();
        assert_eq!(whole, MAX_TOTAL_OUTPUT_BYTES / one);
        assert!(entries.last().is_some_and(|newest| !newest.output_dropped));
        assert!(entries[0].output_dropped);
    }
}
