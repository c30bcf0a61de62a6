//! Counting a store's instances again: what `turnstile instances repair` does for the counts by
//! state the store keeps (`store/state_counts.rs`), when they drifted from the records (written
//! by older code beside this one, say).
//!
//! It owns the comparison of the counts before and after, for the operator to see what was
//! wrong; the counting itself is the store's ([`StateStore::recount_by_state`]), which servers
//! sharing the store may go on writing through.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::{StateCounts, StateStore};

/// A count line the recount corrected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Corrected {
    pub workflow: String,
    /// The machine version (`""` for records that name none).
    pub machine: String,
    /// The state path; `""` for the workflow's whole count.
    pub state: String,
    pub was: u64,
    pub now: u64,
}

/// What a recount found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recounted {
    /// Instances counted.
    pub instances: u64,
    /// The lines that were wrong, in order.
    pub corrected: Vec<Corrected>,
}

/// Counts `store`'s instances again, rewriting its index, and says which lines were wrong.
pub async fn recount(store: &dyn StateStore) -> anyhow::Result<Recounted> {
    let before = store.count_by_state().await?;
    let after = store.recount_by_state().await?;
    Ok(Recounted {
        instances: after
            .lines()
            .filter(|line| line.2.is_empty())
            .map(|line| line.3)
            .sum(),
        corrected: differences(&before, &after),
    })
}

/// Each line whose count differs between `before` and `after`.
fn differences(before: &StateCounts, after: &StateCounts) -> Vec<Corrected> {
    let mut lines: BTreeMap<(&str, &str, &str), (u64, u64)> = BTreeMap::new();
    for (workflow, machine, state, n) in before.lines() {
        lines.entry((workflow, machine, state)).or_default().0 = n;
    }
    for (workflow, machine, state, n) in after.lines() {
        lines.entry((workflow, machine, state)).or_default().1 = n;
    }
    lines
        .into_iter()
        .filter(|(_, (was, now))| was != now)
        .map(|((workflow, machine, state), (was, now))| Corrected {
            workflow: workflow.to_owned(),
            machine: machine.to_owned(),
            state: state.to_owned(),
            was,
            now,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{InstanceRecord, Tally};

    #[test]
    fn only_the_lines_that_changed_are_corrected() {
        let record = InstanceRecord::first("doc", json!({"value": "draft"}));
        let moved = record.next(json!({"value": "review"}));
        let mut before = StateCounts::default();
        before.add(&Tally::of(&record));
        let mut after = StateCounts::default();
        after.add(&Tally::of(&moved));
        let corrected = differences(&before, &after);
        let lines: Vec<_> = corrected
            .iter()
            .map(|c| (c.state.as_str(), c.was, c.now))
            .collect();
        assert_eq!(lines, [("draft", 1, 0), ("review", 0, 1)]);
    }
}
