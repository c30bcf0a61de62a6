//! `turnstile check --store URL`: what serving this plugin directory would do to the instances
//! a store holds, said before it happens. The rule it applies is the one `serve` follows on a
//! replacement (docs/plugins.md, "Hot plugins"; `Catalog::follow`): an instance whose machine
//! version is the one served continues; one on another version whose current state exists in the
//! served machine moves over to it; one whose state the served machine lacks stays pinned to its
//! version (with that version's tools while a plugin still brings them, else answering
//! `VERSION_UNAVAILABLE`) until it can move; an instance of a workflow no plugin serves answers
//! `VERSION_UNAVAILABLE`.

use std::{collections::BTreeMap, io::Write};

use crate::{
    catalog::Catalog,
    store::{InstanceRecord, StateStore},
};

/// How many keys one page of the scan reads.
const PAGE: usize = 500;

/// What serving the catalog does to one instance.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// It already runs the machine version that would be served.
    Current,
    /// Its version differs, and its state exists in the served machine: it moves over.
    Moves { from: String },
    /// Its state is not in the served machine: it keeps its version until it can move.
    Pinned { version: String, state: String },
    /// No plugin in the directory brings its workflow.
    Unserved,
}

/// What would happen to the instance in `record`, were `catalog` served.
pub fn fate(catalog: &Catalog, record: &InstanceRecord) -> Fate {
    let Some(served) = catalog.workflow(&record.workflow) else {
        return Fate::Unserved;
    };
    // A format-1 record names no version: it runs what is served.
    let Some(version) = record.machine.as_ref().filter(|v| **v != served.version) else {
        return Fate::Current;
    };
    match served.machine.restore(&record.snapshot) {
        Ok(_) => Fate::Moves {
            from: version.clone(),
        },
        Err(_) => Fate::Pinned {
            version: version.clone(),
            state: record.snapshot["value"].to_string(),
        },
    }
}

/// Reads every instance in `store`, and prints, per workflow, how many would continue, move or
/// stay pinned (and in which states) if `catalog` were served. Returns how many would not run
/// on the served version (pinned or unserved).
pub async fn report(
    catalog: &Catalog,
    store: &dyn StateStore,
    out: &mut impl Write,
) -> anyhow::Result<usize> {
    let mut fates: BTreeMap<String, BTreeMap<Fate, usize>> = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let keys = store.list_keys("", after.as_deref(), PAGE).await?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        for key in keys {
            if !(key.starts_with("handle/") || key.starts_with(crate::actors::SESSION_PREFIX)) {
                continue;
            }
            // A record that cannot be read is `serve`'s to report; it is not counted here.
            let Ok(Some(record)) = store.load(&key).await else {
                continue;
            };
            *fates
                .entry(record.workflow.clone())
                .or_default()
                .entry(fate(catalog, &record))
                .or_default() += 1;
        }
        after = Some(last);
    }
    let mut stranded = 0;
    if fates.is_empty() {
        writeln!(out, "store: no instances")?;
    }
    for (workflow, fates) in &fates {
        for (fate, count) in fates {
            let line = match fate {
                Fate::Current => "continue on the machine version served".to_string(),
                Fate::Moves { from } => {
                    format!("move from machine version {from} to the served one")
                }
                Fate::Pinned { version, state } => {
                    stranded += count;
                    format!(
                        "stay on machine version {version}: their state {state} is not in the \
                         served machine (they move once in a state it has, or finish there)"
                    )
                }
                Fate::Unserved => {
                    stranded += count;
                    "answer VERSION_UNAVAILABLE: no plugin here brings this workflow".to_string()
                }
            };
            writeln!(
                out,
                "store workflow \"{workflow}\": {count} instance(s) would {line}"
            )?;
        }
    }
    Ok(stranded)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::statechart::Machine;

    fn record(workflow: &str, machine: Option<&str>, value: &str) -> InstanceRecord {
        let def = json!({"id": workflow, "initial": value, "states": {value: {}}});
        let snapshot = Machine::from_json(&def)
            .unwrap()
            .initial_snapshot()
            .to_persisted();
        let mut record = InstanceRecord::first(workflow, snapshot);
        record.machine = machine.map(str::to_string);
        record
    }

    #[test]
    fn each_instance_gets_the_rule_serve_applies() {
        let catalog = Catalog::with_machines(vec![json!({"id": "doc", "initial": "draft",
            "states": {"draft": {"on": {"GO": "done"}}, "done": {"type": "final"}}})]);
        let served = catalog.workflow("doc").unwrap().version.clone();
        assert_eq!(
            fate(&catalog, &record("doc", Some(&served), "draft")),
            Fate::Current
        );
        assert_eq!(fate(&catalog, &record("doc", None, "draft")), Fate::Current);
        assert_eq!(
            fate(&catalog, &record("doc", Some("old"), "draft")),
            Fate::Moves { from: "old".into() }
        );
        assert_eq!(
            fate(&catalog, &record("doc", Some("old"), "review")),
            Fate::Pinned {
                version: "old".into(),
                state: "\"review\"".into()
            }
        );
        assert_eq!(
            fate(&catalog, &record("other", Some("v"), "x")),
            Fate::Unserved
        );
    }
}
