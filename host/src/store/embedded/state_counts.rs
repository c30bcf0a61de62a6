//! The embedded store's counts by state (`store/state_counts.rs`): kept in the file, in the
//! transaction that writes the records they count, and in process for reads.
//!
//! In the file, [`COUNTED_AS`] holds each record's tally beside it and [`STATE_COUNTS`] the
//! counts; a checkpoint ([`Counting::put`]) moves a record's tally and its counts in the same
//! redb transaction as its row, and so does the replay of a crashed server's journal, so the
//! file's counts always agree with the file's records. [`BUILT`] says which rule built them: a
//! file without the mark (written before the index, or by another rule) is counted once, from its
//! records, when it opens; after that an open reads the counts, a table of a few hundred rows,
//! and never the records.
//!
//! In process, the writer thread keeps the counts of everything acknowledged, the journal's
//! changes included: it takes each change's old tally from the overlay or [`COUNTED_AS`] and
//! moves the count once the change is durable, as it does the per-owner counts.
//!
//! It must not count by a rule of its own: the tallies are `Tally`'s.

use std::collections::BTreeMap;

use redb::{
    ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction,
};

use super::{FORMATS, INSTANCES, Overlay};
use crate::store::{STATE_COUNTS_VERSION, StateCounts, Tally, format};

/// Key: instance key. Value: the tally the record is counted under ([`Tally::encode`]). A record
/// without a row here is counted nowhere (its snapshot could not be read when the index was
/// built).
pub const COUNTED_AS: TableDefinition<&str, &str> = TableDefinition::new("instance_counted_as_v1");

/// Key: (workflow, machine version, state path, `""` for the whole workflow). Value: how many
/// records are counted there; a line at zero is removed.
pub const STATE_COUNTS: TableDefinition<(&str, &str, &str), u64> =
    TableDefinition::new("state_counts_v1");

/// Key: an index's name ([`STATE_COUNTS_BUILT`]). Value: the version of the rule that built it.
pub const BUILT: TableDefinition<&str, u64> = TableDefinition::new("indexes_built_v1");
const STATE_COUNTS_BUILT: &str = "state_counts";

/// The tally of a stored row, read from its text: the machine version from its format's added
/// fields. `None` when either cannot be read (counted nowhere, at the build and at every later
/// write alike).
pub fn tally_of_row(
    key: &str,
    workflow: &str,
    format: Option<u64>,
    extras_json: Option<&str>,
    snapshot_json: &str,
) -> Option<Tally> {
    let (_, extras) = format::decode(key, format, extras_json).ok()?;
    Tally::of_text(workflow, extras.machine.as_deref(), snapshot_json)
}

/// The two tables a write transaction moves counts in.
pub struct Counting<'txn> {
    counted_as: Table<'txn, &'static str, &'static str>,
    counts: Table<'txn, (&'static str, &'static str, &'static str), u64>,
}

impl<'txn> Counting<'txn> {
    pub fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Self {
            counted_as: txn.open_table(COUNTED_AS)?,
            counts: txn.open_table(STATE_COUNTS)?,
        })
    }

    /// The record under `key` is now counted under `tally` (`None`: it is gone, or cannot be
    /// counted): its old tally comes off the counts, the new one goes on.
    pub fn put(&mut self, key: &str, tally: Option<&Tally>) -> Result<(), redb::Error> {
        let old = self
            .counted_as
            .get(key)?
            .and_then(|text| Tally::decode(text.value()));
        if old.as_ref() == tally {
            return Ok(());
        }
        if let Some(old) = &old {
            self.moved(old, -1)?;
        }
        match tally {
            Some(tally) => {
                self.moved(tally, 1)?;
                self.counted_as.insert(key, tally.encode().as_str())?;
            }
            None => {
                self.counted_as.remove(key)?;
            }
        }
        Ok(())
    }

    /// Adds `by` to each line `tally` counts on.
    fn moved(&mut self, tally: &Tally, by: i64) -> Result<(), redb::Error> {
        for state in tally.lines() {
            let line = (tally.workflow(), tally.machine(), state);
            let now = self.counts.get(line)?.map_or(0, |n| n.value());
            match now.saturating_add_signed(by) {
                0 => {
                    self.counts.remove(line)?;
                }
                n => {
                    self.counts.insert(line, n)?;
                }
            }
        }
        Ok(())
    }
}

/// The counts of the file, built from its records first if its index is not marked built by
/// this rule. Run at open, once the journal is replayed and before the writer starts.
pub fn open(db: &redb::Database) -> Result<StateCounts, redb::Error> {
    let built = {
        let txn = db.begin_read()?;
        let table = txn.open_table(BUILT)?;
        table
            .get(STATE_COUNTS_BUILT)?
            .map(|version| version.value())
    };
    if built == Some(STATE_COUNTS_VERSION) {
        return read(&db.begin_read()?);
    }
    let txn = super::durable_write(db)?;
    let counts = rebuild(&txn)?;
    txn.commit()?;
    // A new file has nothing to count, and nothing worth a line in the log.
    if !counts.is_empty() {
        tracing::info!(
            lines = counts.lines().count(),
            "counted the embedded store's instances by state once, for the index this build keeps"
        );
    }
    Ok(counts)
}

/// Counts every record of the file again, rewrites both tables with what it finds and marks
/// the index built by this rule, in `txn`; returns the counts.
pub fn rebuild(txn: &WriteTransaction) -> Result<StateCounts, redb::Error> {
    let mut counted_as = txn.open_table(COUNTED_AS)?;
    let mut table = txn.open_table(STATE_COUNTS)?;
    counted_as.retain(|_, _| false)?;
    table.retain(|_, _| false)?;
    let instances = txn.open_table(INSTANCES)?;
    let formats = txn.open_table(FORMATS)?;
    let mut counts = StateCounts::default();
    for entry in instances.iter()? {
        let (key, row) = entry?;
        let key = key.value();
        let (_, _, workflow, snapshot_json) = row.value();
        let format = formats.get(key)?;
        let (format, extras) = match &format {
            Some(guard) => {
                let (format, extras) = guard.value();
                (Some(format), Some(extras))
            }
            None => (None, None),
        };
        if let Some(tally) = tally_of_row(key, workflow, format, extras, snapshot_json) {
            counted_as.insert(key, tally.encode().as_str())?;
            counts.add(&tally);
        }
    }
    for (workflow, machine, state, n) in counts.lines() {
        table.insert((workflow, machine, state), n)?;
    }
    txn.open_table(BUILT)?
        .insert(STATE_COUNTS_BUILT, STATE_COUNTS_VERSION)?;
    Ok(counts)
}

/// The counts `txn` sees in the file.
fn read(txn: &ReadTransaction) -> Result<StateCounts, redb::Error> {
    let mut counts = StateCounts::default();
    for entry in txn.open_table(STATE_COUNTS)?.iter()? {
        let (line, n) = entry?;
        let (workflow, machine, state) = line.value();
        counts.add_line(
            workflow,
            machine,
            state,
            i64::try_from(n.value()).unwrap_or(i64::MAX),
        );
    }
    Ok(counts)
}

/// The counts of everything acknowledged: the file's, with each key the overlay knows counted
/// as the overlay says rather than as the file does. The overlay is read first and the file
/// after (see `overlay.rs`): a checkpoint folding a key in between leaves the file counting it
/// as the overlay does, which this takes off and puts on alike.
pub fn live(
    db: &redb::Database,
    overlay: &std::sync::RwLock<Overlay>,
) -> Result<StateCounts, redb::Error> {
    let newest: BTreeMap<String, Option<Tally>> = super::read_lock(overlay).tallies();
    let txn = db.begin_read()?;
    let mut counts = read(&txn)?;
    let counted_as = txn.open_table(COUNTED_AS)?;
    for (key, tally) in &newest {
        let in_file = counted_as
            .get(key.as_str())?
            .and_then(|text| Tally::decode(text.value()));
        counts.replace(in_file.as_ref(), tally.as_ref());
    }
    Ok(counts)
}

#[cfg(test)]
impl super::EmbeddedStore {
    /// Makes the closed file at `path` what `older` says older code left (see the contract).
    pub(in crate::store) fn as_older_code_left_it(
        path: &std::path::Path,
        older: crate::store::contract::Older,
    ) {
        let db = redb::Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(STATE_COUNTS)
            .unwrap()
            .retain(|_, _| false)
            .unwrap();
        if older == crate::store::contract::Older::WithoutTheIndex {
            txn.open_table(COUNTED_AS)
                .unwrap()
                .retain(|_, _| false)
                .unwrap();
            txn.open_table(BUILT).unwrap().retain(|_, _| false).unwrap();
        }
        txn.commit().unwrap();
    }
}
