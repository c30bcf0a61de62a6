//! Tests of what only the embedded store promises: durability across reopen, one open per
//! file, and group commit that batches without letting one conflict fail its neighbours.

use std::sync::{Arc, atomic::Ordering};

use serde_json::json;

use super::{EmbeddedStore, InstanceRecord, StateStore, StoreError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/state.redb");
    let v1 = InstanceRecord::first("invoice", json!({"value": "draft"}));
    let v2 = v1.next(json!({"value": "review"}));
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        store.save("inv", &v1, 0).await.unwrap();
        store.save("inv", &v2, 1).await.unwrap();
        // A second store on the same file would have its own writer: refused.
        let again = EmbeddedStore::open(&path).await;
        assert!(
            matches!(again, Err(StoreError::Unavailable(_))),
            "{again:?}"
        );
    }
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert_eq!(store.load("inv").await.unwrap(), Some(v2.clone()));
    assert!(matches!(
        store.save("inv", &v2, 1).await,
        Err(StoreError::Conflict {
            current: Some(2),
            ..
        })
    ));
}

/// Concurrent saves share commits, and a stale writer in a batch fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_isolates_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        EmbeddedStore::open(dir.path().join("s.redb"))
            .await
            .unwrap(),
    );
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let rec = InstanceRecord::first("w", json!(i));
                // Odd tasks claim to update a record that does not exist: a conflict.
                let expected = if i % 2 == 0 { 0 } else { 7 };
                let rec = InstanceRecord {
                    version: expected + 1,
                    ..rec
                };
                (i, store.save(&format!("k{i}"), &rec, expected).await)
            })
        })
        .collect();
    for task in tasks {
        let (i, result) = task.await.unwrap();
        if i % 2 == 0 {
            result.unwrap();
        } else {
            assert!(matches!(
                result,
                Err(StoreError::Conflict { current: None, .. })
            ));
        }
    }
    assert_eq!(store.count("k").await.unwrap(), 100);
    let commits = store.batch_stats().commits.load(Ordering::Relaxed);
    let ops = store.batch_stats().ops.load(Ordering::Relaxed);
    assert_eq!(ops, 200);
    assert!(
        commits < 100,
        "expected batching, got {commits} commits for 100 saves"
    );
}

/// A file written by format-1 code (one table, no format numbers) is read and migrated; a
/// record in a newer format is refused and left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_1_records_are_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        // The layout format-1 code wrote: `instances_v1` alone.
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(super::INSTANCES).unwrap();
            table
                .insert(
                    "old",
                    (3, 1_600_000_000_000, "invoice", r#"{"value":"draft"}"#),
                )
                .unwrap();
            table
                .insert("broken", (1, 1_600_000_000_000, "invoice", "{not json"))
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = EmbeddedStore::open(&path).await.unwrap();
    crate::store::migrate::check_format_1_migration(&store).await;
    drop(store);

    {
        // A newer server wrote format 3 under "future".
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(super::INSTANCES).unwrap();
            table
                .insert("future", (1, 0, "invoice", r#"{"value":"draft"}"#))
                .unwrap();
            let mut formats = txn.open_table(super::FORMATS).unwrap();
            formats.insert("future", (3, r#"{"new":1}"#)).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert!(matches!(
        store.load("future").await,
        Err(StoreError::UnsupportedFormat { format: 3, .. })
    ));
    let report = crate::store::migrate(&store, |_| None, |_, _| None)
        .await
        .unwrap();
    assert_eq!(report.skipped, 2);
    assert!(matches!(
        store.load("future").await,
        Err(StoreError::UnsupportedFormat { .. })
    ));
}
