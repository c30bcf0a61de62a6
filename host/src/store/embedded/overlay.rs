//! The changes the embedded store has acknowledged (they are in the journal, synced) but not yet
//! folded into redb by a checkpoint.
//!
//! Reads look here before redb: a key the overlay knows is decided by the overlay (its latest
//! row, or its deletion), any other key by redb. It is a stack of layers: `active`, which the
//! writer thread adds each synced batch to, and below it the `frozen` layers that checkpoints are
//! folding into redb meanwhile, oldest first (usually none or one). A frozen layer is dropped only
//! after redb has committed it, and a reader consults the overlay before it opens its redb
//! transaction, so every acknowledged change is in one or the other whenever a reader looks.
//!
//! A layer keeps one entry per key (the latest row), so a key saved a thousand times between two
//! checkpoints costs redb one write, plus its audit entries, which are each kept.

use std::{
    collections::{BTreeMap, VecDeque},
    ops::Bound,
    sync::Arc,
};

use crate::store::Tally;

/// One instance's row: the columns of redb's instance, format, due and counted-as tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub version: u64,
    pub updated_at_ms: u64,
    pub workflow: String,
    pub snapshot_json: String,
    pub format: u64,
    pub extras_json: String,
    pub due_at_ms: Option<u64>,
    /// What the record is counted under (`state_counts.rs`; `None`: nowhere). Made from the
    /// record by the save, or read from the row's text ([`Row::counted`]); not journaled.
    pub tally: Option<Tally>,
}

impl Row {
    /// `self`, its tally read from its own text: for a row read back from the journal.
    pub fn counted(self, key: &str) -> Row {
        let tally = super::state_counts::tally_of_row(
            key,
            &self.workflow,
            Some(self.format),
            Some(&self.extras_json),
            &self.snapshot_json,
        );
        Row { tally, ..self }
    }
}

/// One acknowledged change to an instance: what the journal holds, frame by frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The key's row is now `row`; `audit`, if any, is appended to its trail under
    /// `row.version`.
    Save {
        key: String,
        row: Row,
        audit: Option<String>,
    },
    /// The key, its due time and its audit trail are gone.
    Delete { key: String },
}

/// What a layer knows of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// The key's row after the layer's last change to it; `None` once deleted.
    pub row: Option<Row>,
    /// Audit entries appended in this layer, `(version, entry as JSON text)`, oldest first.
    pub audit: Vec<(u64, String)>,
    /// A delete in this layer removed the trail that came before it.
    pub audit_cleared: bool,
}

/// The changes of a span of the journal, folded to one entry per key.
#[derive(Debug, Default)]
pub struct Layer {
    keys: BTreeMap<String, Pending>,
}

impl Layer {
    /// Folds `change` in.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Save { key, row, audit } => {
                let pending = self.keys.entry(key).or_default();
                if let Some(entry) = audit {
                    pending.audit.push((row.version, entry));
                }
                pending.row = Some(row);
            }
            Change::Delete { key } => {
                let pending = self.keys.entry(key).or_default();
                pending.row = None;
                pending.audit.clear();
                pending.audit_cleared = true;
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Pending> {
        self.keys.get(key)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Every key and what is known of it, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Pending)> {
        self.keys
            .iter()
            .map(|(key, pending)| (key.as_str(), pending))
    }

    /// The keys starting with `prefix`, in key order.
    fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a Pending)> {
        self.keys
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(key, _)| key.starts_with(prefix))
            .map(|(key, pending)| (key.as_str(), pending))
    }
}

/// What the overlay says of a key in a range read: whether it exists, and its due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub live: bool,
    pub due_at_ms: Option<u64>,
}

/// The layers above redb (see the module doc).
#[derive(Debug, Default)]
pub struct Overlay {
    active: Layer,
    /// Oldest first: the order checkpoints fold them in.
    frozen: VecDeque<Arc<Layer>>,
}

impl Overlay {
    /// Every layer, oldest first.
    fn layers(&self) -> impl DoubleEndedIterator<Item = &Layer> {
        self.frozen
            .iter()
            .map(|layer| &**layer)
            .chain([&self.active])
    }

    /// The newest layer that knows `key`.
    fn newest(&self, key: &str) -> Option<&Pending> {
        self.layers().rev().find_map(|layer| layer.get(key))
    }

    /// `key`'s row as the overlay knows it: `None` when it does not know the key (ask redb),
    /// `Some(None)` when the key was deleted.
    pub fn row(&self, key: &str) -> Option<Option<&Row>> {
        self.newest(key).map(|pending| pending.row.as_ref())
    }

    /// `key`'s current version as the overlay knows it (see [`Overlay::row`]).
    #[cfg(test)]
    pub fn version(&self, key: &str) -> Option<Option<u64>> {
        self.row(key).map(|row| row.map(|row| row.version))
    }

    /// The audit entries the overlay holds for `key`, oldest first, and whether the ones redb
    /// holds come before them (no delete in the overlay cut the trail).
    pub fn audit(&self, key: &str) -> (bool, Vec<(u64, String)>) {
        let mut entries = Vec::new();
        let mut redb_counts = true;
        for layer in self.layers() {
            if let Some(pending) = layer.get(key) {
                if pending.audit_cleared {
                    entries.clear();
                    redb_counts = false;
                }
                entries.extend(pending.audit.iter().cloned());
            }
        }
        (redb_counts, entries)
    }

    /// What each key the overlay knows is counted under now (`None`: nowhere, deleted included).
    pub fn tallies(&self) -> BTreeMap<String, Option<Tally>> {
        let mut tallies = BTreeMap::new();
        for layer in self.layers() {
            for (key, pending) in layer.iter() {
                // Newer layers come later and win.
                let tally = pending.row.as_ref().and_then(|row| row.tally.clone());
                tallies.insert(key.to_owned(), tally);
            }
        }
        tallies
    }

    /// Every key starting with `prefix` that the overlay knows, with what it knows of it.
    pub fn known(&self, prefix: &str) -> BTreeMap<String, Known> {
        let mut known = BTreeMap::new();
        for layer in self.layers() {
            for (key, pending) in layer.with_prefix(prefix) {
                let state = Known {
                    live: pending.row.is_some(),
                    due_at_ms: pending.row.as_ref().and_then(|row| row.due_at_ms),
                };
                // Newer layers come later and win.
                known.insert(key.to_owned(), state);
            }
        }
        known
    }

    /// Adds a synced batch to the active layer.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = Change>) {
        for change in changes {
            self.active.apply(change);
        }
    }

    /// Whether a checkpoint is worth starting now: none is under way, and the active layer holds
    /// something to fold.
    pub fn can_freeze(&self) -> bool {
        self.frozen.is_empty() && !self.active.is_empty()
    }

    /// Starts a checkpoint: the active layer is frozen (and returned, to be folded into redb),
    /// and a new, empty layer takes the writes.
    pub fn freeze(&mut self) -> Arc<Layer> {
        let frozen = Arc::new(std::mem::take(&mut self.active));
        self.frozen.push_back(Arc::clone(&frozen));
        frozen
    }

    /// Ends a checkpoint: redb has committed the oldest frozen layer, so it goes.
    pub fn checkpointed(&mut self) {
        self.frozen.pop_front();
    }

    /// Takes every layer, oldest first, leaving the overlay empty: for the last checkpoint, when
    /// the store closes.
    pub fn take_all(&mut self) -> Vec<Arc<Layer>> {
        let active = Arc::new(std::mem::take(&mut self.active));
        self.frozen.drain(..).chain([active]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn save(key: &str, version: u64, due: Option<u64>, audit: Option<&str>) -> Change {
        Change::Save {
            key: key.to_owned(),
            row: Row {
                version,
                updated_at_ms: 0,
                workflow: "w".to_owned(),
                snapshot_json: "{}".to_owned(),
                format: 2,
                extras_json: "{}".to_owned(),
                due_at_ms: due,
                tally: None,
            },
            audit: audit.map(str::to_owned),
        }
    }

    #[test]
    fn the_newest_layer_decides_a_key() {
        let mut overlay = Overlay::default();
        assert_eq!(overlay.version("a"), None);
        overlay.apply([
            save("a", 1, None, Some("1")),
            save("a", 2, Some(5), Some("2")),
        ]);
        assert_eq!(overlay.version("a"), Some(Some(2)));
        assert!(overlay.can_freeze());
        let frozen = overlay.freeze();
        assert!(!overlay.can_freeze(), "one checkpoint at a time");
        assert_eq!(frozen.get("a").unwrap().audit.len(), 2);
        // Still known while the checkpoint runs.
        assert_eq!(overlay.version("a"), Some(Some(2)));
        overlay.apply([
            Change::Delete { key: "a".into() },
            save("b", 1, Some(3), None),
        ]);
        assert_eq!(overlay.version("a"), Some(None));
        assert_eq!(overlay.audit("a"), (false, vec![]));
        overlay.apply([save("a", 1, None, Some("new"))]);
        assert_eq!(overlay.audit("a"), (false, vec![(1, "new".to_owned())]));
        let known = overlay.known("");
        assert_eq!(
            known.get("b"),
            Some(&Known {
                live: true,
                due_at_ms: Some(3)
            })
        );
        overlay.checkpointed();
        assert_eq!(overlay.version("a"), Some(Some(1)));
        assert_eq!(overlay.version("c"), None);
    }

    #[test]
    fn audit_entries_follow_the_stored_trail_until_a_delete() {
        let mut overlay = Overlay::default();
        overlay.apply([save("a", 4, None, Some("4"))]);
        overlay.freeze();
        overlay.apply([save("a", 5, None, Some("5"))]);
        overlay.freeze();
        overlay.apply([save("a", 6, None, Some("6"))]);
        assert_eq!(
            overlay.audit("a"),
            (
                true,
                vec![
                    (4, "4".to_owned()),
                    (5, "5".to_owned()),
                    (6, "6".to_owned())
                ]
            )
        );
        assert_eq!(overlay.version("a"), Some(Some(6)));
        assert_eq!(overlay.known("b"), BTreeMap::new());
        overlay.checkpointed();
        assert_eq!(overlay.audit("a").1.len(), 2);
        let layers = overlay.take_all();
        assert_eq!(layers.len(), 2);
        assert_eq!(overlay.version("a"), None);
    }
}
