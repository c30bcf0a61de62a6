//! The due time every save stores: when the server must next look at an instance unaided (its
//! next timer deadline, or when retention deletes it). Pure, so that the instance actor, the
//! timer task and the start-up migration compute it the same way.

use crate::{
    catalog::Catalog,
    retention::Retention,
    statechart::{Snapshot, Status},
    store::{InstanceRecord, MAX_DUE_MS},
};

/// When the server must next look at an instance in `snapshot` that last moved at
/// `updated_at_ms`, unaided: its next timer deadline, or when `retention` (given for
/// handle-keyed instances only) deletes it, whichever is first; `None` when neither will happen.
/// This is the due time every save stores.
pub fn due_at(
    snapshot: &Snapshot,
    updated_at_ms: u64,
    retention: Option<&Retention>,
) -> Option<u64> {
    let expires = retention.and_then(|retention| {
        retention.expires_at(updated_at_ms, snapshot.status() == Status::Done)
    });
    let due = match (snapshot.next_deadline(), expires) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A deadline past what every store can keep is as good as never: wake then anyway.
    due.map(|due| due.min(MAX_DUE_MS))
}

/// [`due_at`] for a stored record under `key`, as the start-up migration checks it; `None` when
/// it cannot tell (no plugin serves the workflow, or the snapshot does not fit its machine).
pub fn record_due(
    catalog: &Catalog,
    retention: &Retention,
    key: &str,
    record: &InstanceRecord,
) -> Option<Option<u64>> {
    let workflow = catalog.workflow(&record.workflow)?;
    // A record from before timers were persisted starts its timers when it last moved, as the
    // instance actor restores it.
    let snapshot = workflow
        .machine
        .restore_at(&record.snapshot, record.updated_at_ms)
        .ok()?;
    let handle_keyed = crate::actors::InstanceKey::from_store_key(key).is_some();
    Some(due_at(
        &snapshot,
        record.updated_at_ms,
        handle_keyed.then_some(retention),
    ))
}

/// A fingerprint of everything [`record_due`] answers by for a given record: the retention
/// settings and each served workflow's machine version (a hash of its definition, timers
/// included). Two servers with the same fingerprint work out the same due time for every
/// record, so the start-up migration done under one need not be done again under the other
/// (`store::migrate_unless_done`). Below 2^63, as a store's mark must be.
pub fn due_rule(catalog: &Catalog, retention: &Retention) -> u64 {
    use sha2::{Digest, Sha256};
    let mut workflows: Vec<(&str, &str)> = catalog
        .workflows()
        .map(|workflow| (workflow.id.as_str(), workflow.version.as_str()))
        .collect();
    workflows.sort_unstable();
    let mut hasher = Sha256::new();
    // The rule itself, so that a build computing due times otherwise names a new one.
    hasher.update(b"due times v1\n");
    hasher.update(format!("{:?} {:?}\n", retention.final_state, retention.idle).as_bytes());
    for (id, version) in workflows {
        hasher.update(format!("{id:?} {version:?}\n").as_bytes());
    }
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) >> 1
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::statechart::{Event, Machine};

    fn machine() -> Machine {
        Machine::from_json(&json!({
            "id": "m", "initial": "a",
            "states": {
                "a": {"after": {"1000": "b"}, "on": {"GO": "c"}},
                "b": {"on": {"GO": "c"}},
                "c": {"type": "final"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_due_time_is_the_next_deadline_or_the_expiry_whichever_is_first() {
        let m = machine();
        let waiting = m.initial_snapshot_at(10_000);
        let done = m
            .step(&waiting, &Event::new("GO"), 10_500)
            .unwrap()
            .snapshot;
        let idle = m.fire_due(&waiting, 11_000).snapshot;
        let keep = Retention {
            final_state: Some(Duration::from_secs(5)),
            idle: Some(Duration::from_millis(500)),
        };
        assert_eq!(due_at(&waiting, 10_000, None), Some(11_000));
        assert_eq!(due_at(&waiting, 10_000, Some(&keep)), Some(10_500));
        assert_eq!(due_at(&idle, 11_000, None), None);
        assert_eq!(due_at(&idle, 11_000, Some(&keep)), Some(11_500));
        assert_eq!(due_at(&done, 10_500, Some(&Retention::default())), None);
        let final_only = Retention {
            final_state: Some(Duration::from_secs(5)),
            idle: None,
        };
        assert_eq!(due_at(&done, 10_500, Some(&final_only)), Some(15_500));
        assert_eq!(due_at(&waiting, 10_000, Some(&final_only)), Some(11_000));
    }

    #[test]
    fn the_due_rule_changes_with_retention_and_machines_only() {
        let definition = |after: &str| json!({"id": "m", "initial": "a", "states": {"a": {"after": {after: "b"}}, "b": {}}});
        let catalog = Catalog::with_machines(vec![definition("1000")]);
        let keep = Retention {
            final_state: Some(Duration::from_secs(5)),
            idle: None,
        };
        let rule = due_rule(&catalog, &keep);
        assert!(rule < 1 << 63);
        assert_eq!(
            rule,
            due_rule(&Catalog::with_machines(vec![definition("1000")]), &keep)
        );
        assert_ne!(rule, due_rule(&catalog, &Retention::default()));
        assert_ne!(
            rule,
            due_rule(&Catalog::with_machines(vec![definition("2000")]), &keep)
        );
        assert_ne!(rule, due_rule(&Catalog::with_machines(vec![]), &keep));
    }

    #[test]
    fn a_deadline_beyond_every_store_is_clamped() {
        let forever = Retention {
            final_state: None,
            idle: Some(Duration::MAX),
        };
        let idle = machine().fire_due(&machine().initial_snapshot_at(0), 5_000);
        assert_eq!(due_at(&idle.snapshot, 0, Some(&forever)), Some(MAX_DUE_MS));
    }
}
