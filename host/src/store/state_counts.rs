//! How many instances each workflow has in each state: the rule by which a record is counted,
//! and the counts every store keeps by it, so that [`super::StateStore::count_by_state`] reads
//! an index instead of every record (the console's counts and `/metrics`' `turnstile_instances`
//! at a million instances).
//!
//! This module owns the rule ([`Tally::of`]: a record counts once under its workflow and machine
//! version, and once more under every state path active in its snapshot's `value`, so an
//! instance in `review.checking` counts under `review` and `review.checking`, and one in a
//! parallel state under each region's path), its text form, and [`StateCounts`], the counts as
//! read and as the memory and embedded stores keep them in process.
//!
//! Each store keeps beside every record the tally it was counted under (its text form), and
//! writes it, and the counts, in the same atomic step as the record. A save then takes the old
//! tally off and puts the new one on without reading the old snapshot, and a delete takes off
//! exactly what was put on: a record with no tally beside it (written before the index, or one
//! that could not be read when the index was built) is counted nowhere, and taking it away
//! changes nothing. See "The state counts" in the module docs of `store`.
//!
//! It must not know how a store lays the counts out; the stores must not count by another rule.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::InstanceRecord;

/// The version of the counting rule. Each store marks its index with the version it was built
/// by; one built by another version (or none: records written before the index) is built again
/// from the records when the store opens.
pub const STATE_COUNTS_VERSION: u64 = 1;

/// Separates the parts of a tally's text and of a count line's name. No workflow id, machine
/// version or state name keeps one ([`Tally::of`] replaces it), so splitting on it is exact: the
/// Redis scripts split on it with a plain `string.find`. (PostgreSQL, whose `text` cannot hold
/// it, keeps the parts in columns of their own.)
pub const SEPARATOR: char = '\0';

/// The state path every count line of a whole workflow and machine version has: no state path
/// is empty ([`Tally::of`] counts none), so the line of "all of them" cannot be mistaken for a
/// state's.
pub const ALL: &str = "";

/// What one record is counted under: its workflow, its machine version (`""` for a format-1
/// record, which names none) and the state paths active in it, in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tally {
    workflow: Box<str>,
    machine: Box<str>,
    states: Box<[Box<str>]>,
}

impl Tally {
    /// The tally of `record`, by the rule this module owns.
    pub fn of(record: &InstanceRecord) -> Tally {
        Tally::of_parts(
            &record.workflow,
            record.machine.as_deref(),
            &record.snapshot["value"],
        )
    }

    /// The tally of a record of `workflow` on `machine`, whose snapshot's `value` is `value`.
    pub fn of_parts(workflow: &str, machine: Option<&str>, value: &Value) -> Tally {
        let mut states: Vec<Box<str>> = active_paths(value)
            .iter()
            .filter(|path| !path.is_empty())
            .map(|path| clean(path))
            .collect();
        states.sort_unstable();
        states.dedup();
        Tally {
            workflow: clean(workflow),
            machine: clean(machine.unwrap_or("")),
            states: states.into_boxed_slice(),
        }
    }

    /// The tally of a record kept as text: `snapshot_json` its snapshot. `None` when that is not
    /// JSON: such a record is counted nowhere. For a store that builds its index from what it
    /// holds, where no [`InstanceRecord`] is at hand.
    pub fn of_text(workflow: &str, machine: Option<&str>, snapshot_json: &str) -> Option<Tally> {
        let snapshot: Value = serde_json::from_str(snapshot_json).ok()?;
        Some(Tally::of_parts(workflow, machine, &snapshot["value"]))
    }

    /// The tally as the stores keep it beside a record: workflow, machine version and each state
    /// path, joined by [`SEPARATOR`].
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(
            self.workflow.len()
                + self.machine.len()
                + self.states.iter().map(|s| s.len() + 1).sum::<usize>()
                + 1,
        );
        text.push_str(&self.workflow);
        text.push(SEPARATOR);
        text.push_str(&self.machine);
        for state in &self.states {
            text.push(SEPARATOR);
            text.push_str(state);
        }
        text
    }

    /// The tally [`Tally::encode`] wrote; `None` for text it could not have written.
    pub fn decode(text: &str) -> Option<Tally> {
        let mut parts = text.split(SEPARATOR);
        let workflow = parts.next()?.into();
        let machine = parts.next()?.into();
        let states: Box<[Box<str>]> = parts.map(Into::into).collect();
        if states.iter().any(|state| state.is_empty()) {
            return None;
        }
        Some(Tally {
            workflow,
            machine,
            states,
        })
    }

    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// The state paths, in order.
    pub fn states(&self) -> impl Iterator<Item = &str> {
        self.states.iter().map(|state| &**state)
    }

    /// The count lines this tally adds one to: [`ALL`] and each state path.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        std::iter::once(ALL).chain(self.states())
    }
}

/// `text` with every [`SEPARATOR`] replaced, so it can stand between two.
fn clean(text: &str) -> Box<str> {
    if text.contains(SEPARATOR) {
        text.replace(SEPARATOR, "\u{FFFD}").into()
    } else {
        text.into()
    }
}

/// The state paths active in a state value: `"review"` → `review`; `{"a": "b"}` → `a`, `a.b`;
/// a parallel state's regions each with their own.
pub fn active_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}.{name}")
            }
        };
        match value {
            Value::String(name) => out.push(join(name)),
            Value::Object(children) => {
                for (name, child) in children {
                    let path = join(name);
                    out.push(path.clone());
                    walk(child, &path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// One workflow's instances (on one machine version, or on all of them): how many in all, and
/// how many in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkflowCount {
    pub total: u64,
    pub states: BTreeMap<String, u64>,
}

impl WorkflowCount {
    fn add(&mut self, state: &str, n: u64) {
        if state == ALL {
            self.total += n;
        } else if let Some(count) = self.states.get_mut(state) {
            *count += n;
        } else {
            self.states.insert(state.to_owned(), n);
        }
    }

    fn take(&mut self, state: &str) {
        if state == ALL {
            self.total = self.total.saturating_sub(1);
        } else if let Some(n) = self.states.get_mut(state) {
            *n -= 1;
            if *n == 0 {
                self.states.remove(state);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.total == 0 && self.states.is_empty()
    }
}

/// Instances by workflow, machine version and state: what
/// [`super::StateStore::count_by_state`] answers.
///
/// By workflow, then machine version: maps a `&str` finds its way through, so moving a record's
/// count allocates nothing once its lines exist (the memory store does it under its lock).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateCounts(BTreeMap<String, BTreeMap<String, WorkflowCount>>);

impl StateCounts {
    /// The count of `workflow` on `machine`, made if there is none.
    fn count_mut(&mut self, workflow: &str, machine: &str) -> &mut WorkflowCount {
        if !self.0.contains_key(workflow) {
            self.0.insert(workflow.to_owned(), BTreeMap::new());
        }
        let machines = self
            .0
            .get_mut(workflow)
            .expect("inserted above if it was missing");
        if !machines.contains_key(machine) {
            machines.insert(machine.to_owned(), WorkflowCount::default());
        }
        machines
            .get_mut(machine)
            .expect("inserted above if it was missing")
    }

    /// One more record counted under `tally`.
    pub fn add(&mut self, tally: &Tally) {
        let count = self.count_mut(&tally.workflow, &tally.machine);
        for state in tally.lines() {
            count.add(state, 1);
        }
    }

    /// A record counted under `tally` is no more.
    pub fn remove(&mut self, tally: &Tally) {
        let Some(machines) = self.0.get_mut(&*tally.workflow) else {
            return;
        };
        let Some(count) = machines.get_mut(&*tally.machine) else {
            return;
        };
        for state in tally.lines() {
            count.take(state);
        }
        if count.is_empty() {
            machines.remove(&*tally.machine);
            if machines.is_empty() {
                self.0.remove(&*tally.workflow);
            }
        }
    }

    /// A record counted under `old` (`None`: nowhere) is now counted under `new`.
    pub fn replace(&mut self, old: Option<&Tally>, new: Option<&Tally>) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            self.remove(old);
        }
        if let Some(new) = new {
            self.add(new);
        }
    }

    /// Adds `n` to the line of `state` ([`ALL`]: the whole workflow) of `workflow` on `machine`:
    /// for a store that reads its lines from a backend. A line at or below zero (an index that
    /// drifted) adds nothing.
    pub fn add_line(&mut self, workflow: &str, machine: &str, state: &str, n: i64) {
        let Ok(n @ 1..) = u64::try_from(n) else {
            return;
        };
        self.count_mut(workflow, machine).add(state, n);
    }

    /// Adds a line named by its workflow, machine version and state path joined by
    /// [`SEPARATOR`], as a tally's text joins them. A name that is not one is skipped.
    pub fn add_named_line(&mut self, name: &str, n: i64) {
        let mut parts = name.splitn(3, SEPARATOR);
        if let (Some(workflow), Some(machine), Some(state)) =
            (parts.next(), parts.next(), parts.next())
        {
            self.add_line(workflow, machine, state, n);
        }
    }

    /// Each workflow's count on each machine version, in order: workflow, machine, count.
    pub fn by_machine(&self) -> impl Iterator<Item = (&str, &str, &WorkflowCount)> {
        self.0.iter().flat_map(|(workflow, machines)| {
            machines
                .iter()
                .map(move |(machine, count)| (workflow.as_str(), machine.as_str(), count))
        })
    }

    /// Every line: workflow, machine version, state path ([`ALL`] for the whole), count.
    pub fn lines(&self) -> impl Iterator<Item = (&str, &str, &str, u64)> {
        self.by_machine().flat_map(|(workflow, machine, count)| {
            std::iter::once((workflow, machine, ALL, count.total)).chain(
                count
                    .states
                    .iter()
                    .map(move |(state, n)| (workflow, machine, state.as_str(), *n)),
            )
        })
    }

    /// Each workflow's count, all its machine versions together.
    pub fn by_workflow(&self) -> BTreeMap<String, WorkflowCount> {
        let mut workflows: BTreeMap<String, WorkflowCount> = BTreeMap::new();
        for (workflow, _, count) in self.by_machine() {
            let sum = workflows.entry(workflow.to_owned()).or_default();
            sum.total += count.total;
            for (state, n) in &count.states {
                *sum.states.entry(state.clone()).or_default() += n;
            }
        }
        workflows
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tally(workflow: &str, machine: Option<&str>, value: Value) -> Tally {
        Tally::of_parts(workflow, machine, &value)
    }

    #[test]
    fn a_record_counts_under_every_active_path() {
        assert_eq!(
            active_paths(&json!({"a": "b", "c": {"d": "e"}})),
            ["a", "a.b", "c", "c.d", "c.d.e"]
        );
        let nested = tally("doc", Some("v1"), json!({"review": "checking"}));
        assert_eq!(
            nested.states().collect::<Vec<_>>(),
            ["review", "review.checking"]
        );
        let parallel = tally(
            "doc",
            None,
            json!({"work": {"ship": "packing", "bill": "unpaid"}}),
        );
        assert_eq!(
            parallel.states().collect::<Vec<_>>(),
            [
                "work",
                "work.bill",
                "work.bill.unpaid",
                "work.ship",
                "work.ship.packing"
            ]
        );
        assert_eq!(parallel.machine(), "");
        // A snapshot without a state value counts under its workflow alone.
        assert_eq!(tally("doc", None, json!(null)).states().count(), 0);
    }

    #[test]
    fn the_text_form_round_trips_and_no_name_can_break_it() {
        let plain = tally("doc", Some("v1"), json!({"review": "checking"}));
        assert_eq!(plain.encode(), "doc\0v1\0review\0review.checking");
        assert_eq!(Tally::decode(&plain.encode()), Some(plain));
        let odd = tally("d\0c", Some(""), json!({"": "x\0y"}));
        assert_eq!(odd.workflow(), "d\u{FFFD}c");
        // The empty region name is no state; its child's path is.
        assert_eq!(odd.states().collect::<Vec<_>>(), ["x\u{FFFD}y"]);
        assert_eq!(Tally::decode(&odd.encode()), Some(odd));
        assert_eq!(Tally::decode("doc"), None);
        assert_eq!(Tally::decode("doc\0v1\0\0x"), None);
    }

    #[test]
    fn counts_follow_records_in_and_out_and_forget_what_is_empty() {
        let mut counts = StateCounts::default();
        let draft = tally("doc", Some("v1"), json!("draft"));
        let review = tally("doc", Some("v1"), json!({"review": "a"}));
        let newer = tally("doc", Some("v2"), json!("draft"));
        counts.add(&draft);
        counts.add(&draft);
        counts.replace(Some(&draft), Some(&review));
        counts.replace(None, Some(&newer));
        counts.replace(Some(&newer), Some(&newer));
        let lines: Vec<_> = counts.lines().collect();
        assert_eq!(
            lines,
            [
                ("doc", "v1", "", 2),
                ("doc", "v1", "draft", 1),
                ("doc", "v1", "review", 1),
                ("doc", "v1", "review.a", 1),
                ("doc", "v2", "", 1),
                ("doc", "v2", "draft", 1),
            ]
        );
        let doc = &counts.by_workflow()["doc"];
        assert_eq!((doc.total, doc.states["draft"]), (3, 2));
        counts.replace(Some(&review), None);
        counts.remove(&draft);
        counts.remove(&newer);
        assert!(counts.is_empty(), "{counts:?}");
        // Taking away what was never counted changes nothing.
        counts.remove(&draft);
        assert!(counts.is_empty());
    }

    #[test]
    fn lines_read_from_a_backend_skip_what_drifted_below_zero() {
        let mut counts = StateCounts::default();
        counts.add_named_line("doc\0v1\0", 3);
        counts.add_named_line("doc\0v1\0draft", 2);
        counts.add_named_line("doc\0v1\0review", 0);
        counts.add_named_line("doc\0v1\0gone", -1);
        counts.add_named_line("not a line", 5);
        counts.add_line("doc", "v1", "draft", 1);
        let (_, _, doc) = counts.by_machine().next().unwrap();
        assert_eq!(doc.total, 3);
        assert_eq!(doc.states, BTreeMap::from([("draft".to_owned(), 3)]));
    }
}
