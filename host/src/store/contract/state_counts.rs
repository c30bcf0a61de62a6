//! The contract cases of the counts by state ([`StateStore::count_by_state`]): after every
//! kind of write, the index says what reading every record says, and each line is the one
//! expected.

use std::sync::Arc;

use serde_json::{Value, json};

#[cfg(test)]
use super::builtin::{Fixture, Older};
use super::{fence, token_of};
use crate::store::{
    Fence, InstanceRecord, StateStore, StoreError, migrate, state_store::count_every_record as scan,
};

/// A count line: workflow, machine version, state path (`""` for all), count.
type Line = (String, String, String, u64);

fn line(workflow: &str, machine: &str, state: &str, n: u64) -> Line {
    (workflow.into(), machine.into(), state.into(), n)
}

/// The store's counts as lines, in order, once they are checked against every record.
async fn lines(store: &dyn StateStore) -> Vec<Line> {
    let counts = store.count_by_state().await.unwrap();
    assert_eq!(
        counts,
        scan(store).await.unwrap(),
        "the index disagrees with the records"
    );
    counts
        .lines()
        .map(|(workflow, machine, state, n)| line(workflow, machine, state, n))
        .collect()
}

/// Version `version` of an instance of `workflow` on machine `machine`, in state `value`.
fn at(workflow: &str, machine: &str, version: u64, value: Value) -> InstanceRecord {
    InstanceRecord {
        version,
        machine: Some(machine.into()),
        ..InstanceRecord::first(workflow, json!({"value": value, "context": {"v": version}}))
    }
}

/// The parallel state the cases use: two regions, one of them nested.
fn parallel() -> Value {
    json!({"work": {"ship": "packing", "bill": {"unpaid": "reminded"}}})
}

pub(super) async fn counts_by_state_follow_saves_moves_and_deletes(store: Arc<dyn StateStore>) {
    let store = &*store;
    assert!(lines(store).await.is_empty());
    for (key, record) in [
        ("handle/a", at("doc", "m1", 1, json!("draft"))),
        (
            "handle/b",
            at("doc", "m1", 1, json!({"review": "checking"})),
        ),
        ("session/s/doc", at("doc", "m1", 1, parallel())),
        ("handle/i", at("invoice", "m9", 1, json!("draft"))),
    ] {
        store.save(key, &record, 0).await.unwrap();
    }
    let parallel_lines = |n| {
        [
            "work",
            "work.bill",
            "work.bill.unpaid",
            "work.bill.unpaid.reminded",
            "work.ship",
            "work.ship.packing",
        ]
        .map(|state| line("doc", "m1", state, n))
    };
    let mut expected = vec![
        line("doc", "m1", "", 3),
        line("doc", "m1", "draft", 1),
        line("doc", "m1", "review", 1),
        line("doc", "m1", "review.checking", 1),
    ];
    expected.extend(parallel_lines(1));
    expected.extend([
        line("invoice", "m9", "", 1),
        line("invoice", "m9", "draft", 1),
    ]);
    assert_eq!(lines(store).await, expected);

    // A moves from draft into the nested state b is in.
    let moved = at("doc", "m1", 2, json!({"review": "checking"}));
    store.save("handle/a", &moved, 1).await.unwrap();
    // A save that moves nothing (another context) and a save that loses change no count.
    store
        .save(
            "handle/a",
            &at("doc", "m1", 3, json!({"review": "checking"})),
            2,
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .save("handle/a", &at("doc", "m1", 3, json!("draft")), 2)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    // B is saved under a newer machine version: its count moves there.
    store
        .save(
            "handle/b",
            &at("doc", "m2", 2, json!({"review": "signing"})),
            1,
        )
        .await
        .unwrap();
    let mut expected = vec![
        line("doc", "m1", "", 2),
        line("doc", "m1", "review", 1),
        line("doc", "m1", "review.checking", 1),
    ];
    expected.extend(parallel_lines(1));
    expected.extend([
        line("doc", "m2", "", 1),
        line("doc", "m2", "review", 1),
        line("doc", "m2", "review.signing", 1),
        line("invoice", "m9", "", 1),
        line("invoice", "m9", "draft", 1),
    ]);
    assert_eq!(lines(store).await, expected);

    // Deletes: whatever the version, at the version read, and ones that delete nothing.
    assert!(store.delete("session/s/doc", None, None).await.unwrap());
    assert!(store.delete("handle/i", Some(1), None).await.unwrap());
    assert!(matches!(
        store.delete("handle/a", Some(1), None).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(!store.delete("handle/i", None, None).await.unwrap());
    assert_eq!(
        lines(store).await,
        [
            line("doc", "m1", "", 1),
            line("doc", "m1", "review", 1),
            line("doc", "m1", "review.checking", 1),
            line("doc", "m2", "", 1),
            line("doc", "m2", "review", 1),
            line("doc", "m2", "review.signing", 1),
        ]
    );
    assert!(store.delete("handle/a", Some(3), None).await.unwrap());
    assert!(store.delete("handle/b", Some(2), None).await.unwrap());
    assert!(lines(store).await.is_empty());
    // A key deleted and made again is counted again, once.
    store
        .save("handle/a", &at("doc", "m1", 1, json!("draft")), 0)
        .await
        .unwrap();
    let again = [line("doc", "m1", "", 1), line("doc", "m1", "draft", 1)];
    assert_eq!(lines(store).await, again);
    // Counting again finds what the index says.
    let recounted = store.recount_by_state().await.unwrap();
    assert_eq!(recounted, store.count_by_state().await.unwrap());
    assert_eq!(lines(store).await, again);
}

/// Retention deletes what is due with a compare-and-delete; a migration rewrites records. Both
/// move the counts in their own write.
pub(super) async fn counts_by_state_follow_retention_and_migration(store: Arc<dyn StateStore>) {
    let store = &*store;
    for (n, due) in [(1, Some(10)), (2, Some(20)), (3, None)] {
        let record = InstanceRecord {
            due_at_ms: due,
            ..at("doc", "m1", 1, json!("done"))
        };
        store
            .save(&format!("handle/d-{n}"), &record, 0)
            .await
            .unwrap();
    }
    // What retention does with what is due: read it, delete it at the version read.
    for due in store.due(15, None, 10).await.unwrap() {
        let version = store.load(&due.key).await.unwrap().unwrap().version;
        assert!(store.delete(&due.key, Some(version), None).await.unwrap());
    }
    assert_eq!(
        lines(store).await,
        [line("doc", "m1", "", 2), line("doc", "m1", "done", 2)]
    );
    // A migration that rewrites every record (here, for its due time) counts none twice.
    let report = migrate(store, |_| None, |_, _| Some(Some(99)))
        .await
        .unwrap();
    assert_eq!(report.reindexed, 2);
    assert_eq!(
        lines(store).await,
        [line("doc", "m1", "", 2), line("doc", "m1", "done", 2)]
    );
}

/// Many writers at once, across keys and on the same keys: the index ends as the records do.
pub(super) async fn counts_by_state_agree_with_the_records_under_concurrent_writes(
    store: Arc<dyn StateStore>,
) {
    const WRITERS: u64 = 12;
    const KEYS: u64 = 6;
    let states = ["a", "b", "c"];
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for k in 0..KEYS {
                    // Writers pair up on the same keys, so some saves lose.
                    let key = format!("handle/c-{}-{k}", w / 2);
                    let mut version = match store.load(&key).await.unwrap() {
                        Some(record) => record.version,
                        None => 0,
                    };
                    for step in 0..4_usize {
                        let value = match (w + k + step as u64) % 4 {
                            3 => json!({"p": {"x": "y"}, "q": "z"}),
                            n => json!(states[n as usize]),
                        };
                        let record = at("doc", "m1", version + 1, value);
                        match store.save(&key, &record, version).await {
                            Ok(()) => version += 1,
                            Err(StoreError::Conflict { current, .. }) => {
                                version = current.unwrap_or(0)
                            }
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                    if (w + k) % 3 == 0 {
                        match store.delete(&key, Some(version), None).await {
                            Ok(_) | Err(StoreError::Conflict { .. }) => {}
                            Err(other) => panic!("{other:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let counted = lines(&*store).await;
    let total = counted
        .iter()
        .find(|(_, _, state, _)| state.is_empty())
        .map_or(0, |line| line.3);
    assert_eq!(total, store.count("handle/c-").await.unwrap());
}

/// Counting again while writers save and delete counts each record once: the index ends as the
/// records do, and no write made during a count is lost from it.
pub(super) async fn counts_by_state_are_recounted_while_writes_go_on(store: Arc<dyn StateStore>) {
    for n in 0..40 {
        store
            .save(
                &format!("handle/r-{n}"),
                &at("doc", "m1", 1, json!("draft")),
                0,
            )
            .await
            .unwrap();
    }
    let writers: Vec<_> = (0..4_u64)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for n in (w..40).step_by(4) {
                    let key = format!("handle/r-{n}");
                    store
                        .save(&key, &at("doc", "m1", 2, json!({"review": "a"})), 1)
                        .await
                        .unwrap();
                    if n % 3 == 0 {
                        assert!(store.delete(&key, Some(2), None).await.unwrap());
                    }
                    let new = format!("handle/r-new-{n}");
                    store
                        .save(&new, &at("doc", "m2", 1, parallel()), 0)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    // Counted again and again for as long as the writers write.
    loop {
        store.recount_by_state().await.unwrap();
        if writers.iter().all(|writer| writer.is_finished()) {
            break;
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let counted = lines(&*store).await;
    assert_eq!(
        counted
            .iter()
            .filter(|line| line.2.is_empty())
            .map(|line| line.3)
            .sum::<u64>(),
        40 - 14 + 40
    );
}

/// Writes under a lease move the counts; writes the lease refuses move none.
pub(super) async fn counts_by_state_follow_fenced_writes(store: Arc<dyn StateStore>) {
    let store = &*store;
    store
        .save("handle/f", &at("doc", "m1", 1, json!("draft")), 0)
        .await
        .unwrap();
    let token = token_of(super::acquire(store, "handle/f", "a", 30_000).await);
    let held = fence(token, "a");
    let stale = fence(token + 1, "b");
    let moved = at("doc", "m1", 2, json!("review"));
    assert!(matches!(
        store
            .save("handle/f", &moved.clone().fenced(stale.clone()), 1)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    store
        .save("handle/f", &moved.fenced(held.clone()), 1)
        .await
        .unwrap();
    let review = [line("doc", "m1", "", 1), line("doc", "m1", "review", 1)];
    assert_eq!(lines(store).await, review);
    for refused in [None, stale.as_ref()] {
        assert!(matches!(
            store.delete("handle/f", Some(2), refused).await,
            Err(StoreError::Fenced { .. })
        ));
    }
    assert_eq!(lines(store).await, review);
    let held: Option<&Fence> = held.as_ref();
    assert!(store.delete("handle/f", None, held).await.unwrap());
    assert!(lines(store).await.is_empty());
}

/// Records written before the index are counted once, when the store opens; a store whose
/// index is marked built is not counted again at open (its counts lost stay lost), and a
/// recount puts them right.
#[cfg(test)]
pub(super) async fn counts_by_state_are_built_once_for_records_older_than_the_index(
    fixture: Fixture,
) -> Fixture {
    let store = fixture.store();
    for (key, record) in [
        ("handle/o-1", at("doc", "m1", 1, json!("draft"))),
        (
            "handle/o-2",
            at("doc", "m2", 1, json!({"review": "checking"})),
        ),
        ("handle/o-3@t", at("doc", "m1", 1, parallel())),
        ("session/s/invoice", at("invoice", "m9", 1, json!("paid"))),
    ] {
        store.save(key, &record, 0).await.unwrap();
    }
    let before = lines(&*store).await;
    assert_eq!(before.len(), 13, "{before:?}");
    drop(store);

    let fixture = fixture.reopened(Older::WithoutTheIndex).await;
    let store = fixture.store();
    assert_eq!(lines(&*store).await, before, "counted at open");
    // Counted once: the next writes move the counts from there.
    store
        .save("handle/o-1", &at("doc", "m1", 2, json!("review")), 1)
        .await
        .unwrap();
    assert!(store.delete("handle/o-3@t", None, None).await.unwrap());
    let after = lines(&*store).await;
    assert_eq!(
        after,
        [
            line("doc", "m1", "", 1),
            line("doc", "m1", "review", 1),
            line("doc", "m2", "", 1),
            line("doc", "m2", "review", 1),
            line("doc", "m2", "review.checking", 1),
            line("invoice", "m9", "", 1),
            line("invoice", "m9", "paid", 1),
        ]
    );
    drop(store);

    let fixture = fixture.reopened(Older::CountsLost).await;
    let store = fixture.store();
    assert!(
        store.count_by_state().await.unwrap().is_empty(),
        "an index marked built is not counted again at open"
    );
    let recounted = store.recount_by_state().await.unwrap();
    assert_eq!(recounted, store.count_by_state().await.unwrap());
    assert_eq!(lines(&*store).await, after);
    drop(store);
    fixture
}
