//! Tests of what only the embedded store promises: durability across reopen, one open per
//! file, and group commit that batches without letting one conflict fail its neighbours.

use std::sync::{Arc, atomic::Ordering};

use serde_json::json;

use super::{
    EmbeddedStore, InstanceRecord, StateStore, StoreError, journal,
    overlay::{Change, Row},
    owners,
};

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
            formats.insert("future", (4, r#"{"new":1}"#)).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert!(matches!(
        store.load("future").await,
        Err(StoreError::UnsupportedFormat { format: 4, .. })
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

fn record(workflow: &str, version: u64, due: Option<u64>, to: &str) -> InstanceRecord {
    InstanceRecord {
        version,
        due_at_ms: due,
        audit: Some(crate::store::AuditEntry {
            confirmation: None,
            at_ms: 1_700_000_000_000 + version,
            version,
            by: "test".into(),
            event: Some("GO".into()),
            from: json!("before"),
            to: json!(to),
            principal: None,
        }),
        ..InstanceRecord::first(workflow, json!({"value": to}))
    }
}

/// Saves each `(key, record, expected)` in turn, as a caller that waits for each would.
async fn save_all(store: &EmbeddedStore, saves: &[(&str, InstanceRecord, u64)]) {
    for (key, record, expected) in saves {
        store.save(key, record, *expected).await.unwrap();
    }
}

/// A journal frame's save of `key` at `version`, as the writer would have written it.
fn journaled(key: &str, version: u64, to: &str, due: Option<u64>, audit: Option<&str>) -> Change {
    Change::Save {
        key: key.into(),
        row: Row {
            version,
            updated_at_ms: 1,
            workflow: "w".into(),
            snapshot_json: json!({"value": to}).to_string(),
            format: crate::store::CURRENT_FORMAT.into(),
            extras_json: "{}".into(),
            due_at_ms: due,
            tally: None,
        }
        .counted(key),
        audit: audit.map(str::to_owned),
    }
}

fn due(at_ms: u64, key: &str) -> crate::store::Due {
    crate::store::Due {
        at_ms,
        key: key.to_owned(),
    }
}

/// Reads see one store whether a record's latest change is still in the journal (and the
/// overlay) or already folded into redb: keys, counts, due times and audit trails merge, and a
/// delete in the journal hides what redb still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_merge_the_journal_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("k/a", record("w", 1, Some(50), "a1"), 0),
                ("k/b", record("w", 1, Some(10), "b1"), 0),
                ("k/c", record("w", 1, None, "c1"), 0),
                ("k/b", record("w", 2, Some(20), "b2"), 1),
            ],
        )
        .await;
    }
    // Closing folded everything into the file and left no journal behind.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec!["s.redb".to_owned()], "{left:?}");

    let store = EmbeddedStore::open(&path).await.unwrap();
    save_all(&store, &[("k/a", record("w", 2, Some(5), "a2"), 1)]).await;
    assert!(store.delete("k/b", Some(2), None).await.unwrap());
    save_all(
        &store,
        &[
            ("k/d", record("w", 1, Some(30), "d1"), 0),
            ("j/x", record("w", 1, None, "x1"), 0),
        ],
    )
    .await;

    assert_eq!(store.count("k/").await.unwrap(), 3);
    assert_eq!(store.count("").await.unwrap(), 4);
    assert_eq!(
        store.list_keys("k/", None, 10).await.unwrap(),
        vec!["k/a", "k/c", "k/d"]
    );
    assert_eq!(
        store.list_keys("k/", None, 2).await.unwrap(),
        vec!["k/a", "k/c"]
    );
    assert_eq!(
        store.list_keys("k/", Some("k/a"), 1).await.unwrap(),
        vec!["k/c"]
    );
    assert_eq!(
        store.list_keys("k/", Some("k/c"), 5).await.unwrap(),
        vec!["k/d"]
    );
    // `k/a`'s stored due time (50) is stale and `k/b`'s gone with it.
    assert_eq!(
        store.due(u64::MAX, None, 10).await.unwrap(),
        vec![due(5, "k/a"), due(30, "k/d")]
    );
    assert_eq!(
        store.due(u64::MAX, Some(&due(5, "k/a")), 10).await.unwrap(),
        vec![due(30, "k/d")]
    );
    assert_eq!(store.due(29, None, 10).await.unwrap(), vec![due(5, "k/a")]);
    let trail: Vec<_> = store
        .audit("k/a")
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.to)
        .collect();
    assert_eq!(trail, vec![json!("a1"), json!("a2")]);
    assert!(store.audit("k/b").await.unwrap().is_empty());
    assert_eq!(store.load("k/b").await.unwrap(), None);
    assert_eq!(
        store.load("k/c").await.unwrap().unwrap().snapshot,
        json!({"value": "c1"})
    );
    // A recreated key starts a new trail, and its version check sees the delete.
    assert!(matches!(
        store.save("k/b", &record("w", 3, None, "b3"), 2).await,
        Err(StoreError::Conflict { current: None, .. })
    ));
    store
        .save("k/b", &record("w", 1, None, "b-new"), 0)
        .await
        .unwrap();
    let trail = store.audit("k/b").await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].to, json!("b-new"));
}

/// What a server acknowledged and then lost with its process (the journal, never folded into
/// the file) is there when the store opens again; a batch the crash cut short is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_of_a_crashed_server_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("kept", record("w", 1, Some(7), "k1"), 0),
                ("gone", record("w", 1, None, "g1"), 0),
            ],
        )
        .await;
    }
    // What a crashed server leaves: two segments, the second ending in a torn write.
    let audit = r#"{"at_ms":1,"version":2,"by":"t","event":"E","from":"a","to":"k2"}"#;
    let mut first = journal::Segment::create(&path, 4).unwrap();
    let mut frames = Vec::new();
    journal::encode(
        &journaled("kept", 2, "k2", Some(9), Some(audit)),
        &mut frames,
    );
    journal::encode(&Change::Delete { key: "gone".into() }, &mut frames);
    first.append(&frames).unwrap();
    let mut second = journal::Segment::create(&path, 5).unwrap();
    frames.clear();
    journal::encode(&journaled("new", 1, "n1", None, None), &mut frames);
    second.append(&frames).unwrap();
    let mut torn = Vec::new();
    journal::encode(&journaled("new", 2, "n2", None, None), &mut torn);
    torn.truncate(torn.len() - 5);
    second.append(&torn).unwrap();
    drop((first, second));

    let store = EmbeddedStore::open(&path).await.unwrap();
    let kept = store.load("kept").await.unwrap().unwrap();
    assert_eq!((kept.version, kept.due_at_ms), (2, Some(9)));
    assert_eq!(store.audit("kept").await.unwrap().len(), 2);
    assert_eq!(store.load("gone").await.unwrap(), None);
    assert_eq!(store.load("new").await.unwrap().unwrap().version, 1);
    assert_eq!(
        store.due(u64::MAX, None, 10).await.unwrap(),
        vec![due(9, "kept")]
    );
    // Replayed into the file: the old segments are gone, and a save follows on from them.
    let segments: Vec<u64> = journal::segments(&path)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(segments, vec![6]);
    store
        .save("new", &record("w", 2, None, "n2"), 1)
        .await
        .unwrap();
}

/// Owners are counted again at open, from the file and from a journal a crash left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_are_counted_after_reopen_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("handle/a-1@t", record("w", 1, None, "x"), 0),
                ("handle/a-2@t", record("w", 1, None, "x"), 0),
                ("handle/a-3@u", record("w", 1, None, "x"), 0),
            ],
        )
        .await;
        assert!(store.delete("handle/a-2@t", None, None).await.unwrap());
        assert_eq!(store.count_owned("t").await.unwrap(), 1);
    }
    // A crashed server's journal: one more of t's, and u's deleted.
    let mut frames = Vec::new();
    journal::encode(&journaled("handle/a-4@t", 1, "x", None, None), &mut frames);
    journal::encode(
        &Change::Delete {
            key: "handle/a-3@u".into(),
        },
        &mut frames,
    );
    journal::Segment::create(&path, 9)
        .unwrap()
        .append(&frames)
        .unwrap();
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert_eq!(store.count_owned("t").await.unwrap(), 2);
    assert_eq!(store.count_owned("u").await.unwrap(), 0);
    assert_eq!(
        store.list_owned("t", None, 10).await.unwrap(),
        ["handle/a-1@t", "handle/a-4@t"]
    );
    assert!(store.list_owned("u", None, 10).await.unwrap().is_empty());
}

/// A file written before the owner index is indexed once, when it opens, with what its
/// journal adds; later opens read the index (a row per owner), not the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_older_than_the_owner_index_is_indexed_when_it_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("handle/a-1@t", record("w", 1, None, "x"), 0),
                ("handle/a-2@u", record("w", 1, None, "x"), 0),
                ("handle/a-3", record("w", 1, None, "x"), 0),
            ],
        )
        .await;
    }
    owners::forget(&redb::Database::open(&path).unwrap());
    let mut frames = Vec::new();
    journal::encode(&journaled("handle/a-4@t", 1, "x", None, None), &mut frames);
    journal::Segment::create(&path, 9)
        .unwrap()
        .append(&frames)
        .unwrap();
    for _ in 0..2 {
        let store = EmbeddedStore::open(&path).await.unwrap();
        assert_eq!(store.count_owned("t").await.unwrap(), 2);
        assert_eq!(store.count_owned("u").await.unwrap(), 1);
        assert_eq!(
            store.list_owned("t", None, 10).await.unwrap(),
            ["handle/a-1@t", "handle/a-4@t"]
        );
    }
}

/// The counts by state of a server that crashed: what the file held, moved by the journal the
/// crash left (a move, a delete, a create, and a batch cut short), agree with the records when
/// the store opens again; a segment folded in already moves nothing twice. Then they go on
/// agreeing, through saves, a checkpoint and a clean reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_by_state_agree_with_the_records_after_a_crash() {
    let lines = async |store: &EmbeddedStore| {
        let counts = store.count_by_state().await.unwrap();
        assert_eq!(
            counts,
            crate::store::state_store::count_every_record(store)
                .await
                .unwrap()
        );
        counts
            .lines()
            .map(|(_, _, state, n)| (state.to_owned(), n))
            .collect::<Vec<_>>()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("a", record("w", 1, None, "draft"), 0),
                ("b", record("w", 1, None, "draft"), 0),
                ("c", record("w", 1, None, "review"), 0),
            ],
        )
        .await;
    }
    // Segment 0 was folded in when the store closed: a change left in it is not replayed.
    let mut frames = Vec::new();
    journal::encode(&Change::Delete { key: "c".into() }, &mut frames);
    journal::Segment::create(&path, 0)
        .unwrap()
        .append(&frames)
        .unwrap();
    // The crashed server's journal, acknowledged but never folded in.
    frames.clear();
    journal::encode(&journaled("a", 2, "review", None, None), &mut frames);
    journal::encode(&Change::Delete { key: "b".into() }, &mut frames);
    journal::encode(&journaled("d", 1, "draft", None, None), &mut frames);
    let mut crashed = journal::Segment::create(&path, 4).unwrap();
    crashed.append(&frames).unwrap();
    let mut torn = Vec::new();
    journal::encode(&journaled("c", 2, "draft", None, None), &mut torn);
    torn.truncate(torn.len() - 3);
    crashed.append(&torn).unwrap();
    drop(crashed);

    let store = EmbeddedStore::open(&path).await.unwrap();
    let expected = [
        ("".to_owned(), 3),
        ("draft".to_owned(), 1),
        ("review".to_owned(), 2),
    ];
    assert_eq!(lines(&store).await, expected);
    // Saves after the replay move the counts from there, across a checkpoint.
    save_all(
        &store,
        &[
            ("d", record("w", 2, None, "review"), 1),
            ("e", record("w", 1, None, "done"), 0),
        ],
    )
    .await;
    store.checkpoint().await.unwrap();
    assert!(store.delete("a", Some(2), None).await.unwrap());
    let expected = [
        ("".to_owned(), 3),
        ("done".to_owned(), 1),
        ("review".to_owned(), 2),
    ];
    assert_eq!(lines(&store).await, expected);
    // A recount finds the same.
    assert_eq!(
        store.recount_by_state().await.unwrap(),
        store.count_by_state().await.unwrap()
    );
    drop(store);
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert_eq!(lines(&store).await, expected);
}

/// Checkpoints run while saves and reads go on, and lose nothing: every key reads back at its
/// last version, with its whole trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_under_load_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Arc::new(EmbeddedStore::open(&path).await.unwrap());
    const KEYS: u64 = 8;
    const VERSIONS: u64 = 120;
    let writers: Vec<_> = (0..KEYS)
        .map(|k| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for v in 1..=VERSIONS {
                    let rec = record("w", v, Some(v), &format!("{k}-{v}"));
                    store.save(&format!("k{k}"), &rec, v - 1).await.unwrap();
                    // Each key reads back its own last write at once, checkpoint or not.
                    let back = store.load(&format!("k{k}")).await.unwrap().unwrap();
                    assert_eq!(back.version, v);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(
        store.batch_stats().checkpoints.load(Ordering::Relaxed) >= 2,
        "the test should cross checkpoints"
    );
    assert_eq!(store.count("k").await.unwrap(), KEYS);
    for k in 0..KEYS {
        let key = format!("k{k}");
        assert_eq!(store.load(&key).await.unwrap().unwrap().version, VERSIONS);
        let trail = store.audit(&key).await.unwrap();
        let versions: Vec<u64> = trail.iter().map(|entry| entry.version).collect();
        assert_eq!(versions, (1..=VERSIONS).collect::<Vec<_>>());
    }
    let due = store.due(u64::MAX, None, 100).await.unwrap();
    assert_eq!(due.len() as u64, KEYS);
    assert!(due.iter().all(|due| due.at_ms == VERSIONS));
}

/// An idle store folds its journal into the file by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_store_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = EmbeddedStore::open(&path).await.unwrap();
    store
        .save("a", &record("w", 1, None, "a1"), 0)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.batch_stats().checkpoints.load(Ordering::Relaxed) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint after 10 s idle"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(store.load("a").await.unwrap().unwrap().version, 1);
}

/// A segment a checkpoint already folded in (its deletion failed, say) is not replayed over the
/// newer state the file holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folded_segment_is_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path).await.unwrap();
        save_all(
            &store,
            &[
                ("a", record("w", 1, None, "a1"), 0),
                ("a", record("w", 2, None, "a2"), 1),
            ],
        )
        .await;
    }
    // Segment 0 was the one the closed store folded in; put an older change back in it.
    let mut stale = journal::Segment::create(&path, 0).unwrap();
    let mut frames = Vec::new();
    journal::encode(&journaled("a", 1, "a1", None, None), &mut frames);
    stale.append(&frames).unwrap();
    drop(stale);
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert_eq!(store.load("a").await.unwrap().unwrap().version, 2);
    assert!(
        journal::segments(&path)
            .unwrap()
            .iter()
            .all(|(n, _)| *n > 0)
    );
}

/// A save's version check reads redb only after the overlay said it does not know the key, so
/// a checkpoint that folds a key into redb and drops it from the overlay between two saves of
/// one batch cannot make the second check miss it (and accept a stale write).
#[test]
fn a_version_check_does_not_miss_a_key_a_checkpoint_moved() {
    use std::sync::RwLock;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let db = Arc::new(super::open_file(&path, "t").unwrap());
    let overlay = Arc::new(RwLock::new(super::overlay::Overlay::default()));
    // "b" v1 acknowledged (in the journal and the overlay), then frozen by a checkpoint.
    overlay
        .write()
        .unwrap()
        .apply([journaled("b", 1, "b1", None, None)]);
    let frozen = overlay.write().unwrap().freeze();
    let writer = super::Writer {
        name: "t".into(),
        path: path.clone(),
        db: Arc::clone(&db),
        overlay: Arc::clone(&overlay),
        stats: Arc::default(),
        segment: journal::Segment::create(&path, 1).unwrap(),
        checkpointer: None,
        frames: Vec::new(),
        audit_keep: super::super::DEFAULT_AUDIT_KEEP,
        owned: Arc::default(),
        counts: Arc::default(),
    };
    // First op of the batch: a key nobody knows, read from redb.
    let version = |key| writer.stored(key).unwrap().map(|(version, _)| version);
    assert_eq!(version("a"), None);
    // The checkpoint thread: commit, then drop the layer.
    super::checkpoint::fold(&db, &[&frozen], 0, super::super::DEFAULT_AUDIT_KEEP).unwrap();
    overlay.write().unwrap().checkpointed();
    // Second op of the batch: "b" is at version 1, now in redb only.
    assert_eq!(version("b"), Some(1));
}

/// A segment whose length reached the disk before its header did (a crash while it was being
/// created) holds nothing, and does not stop the store opening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_of_zeros_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(EmbeddedStore::open(&path).await.unwrap());
    std::fs::write(journal::segment_path(&path, 3), [0u8; 4096]).unwrap();
    let store = EmbeddedStore::open(&path).await.unwrap();
    store
        .save("a", &record("w", 1, None, "a1"), 0)
        .await
        .unwrap();
}

/// The file keeps only the last `audit_keep` versions' audit entries: a checkpoint drops the
/// older ones, so a long-lived instance's trail does not grow the file without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_drops_audit_entries_past_the_kept_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    {
        let store = EmbeddedStore::open_keeping(&path, 3).await.unwrap();
        let mut record = InstanceRecord::first("w", json!(0));
        for version in 1..=10 {
            record.version = version;
            record.audit = Some(super::AuditEntry {
                confirmation: None,
                at_ms: version,
                version,
                by: "tool:t.go".into(),
                event: Some("GO".into()),
                from: json!(version - 1),
                to: json!(version),
                principal: None,
            });
            store.save("k", &record, version - 1).await.unwrap();
        }
        // Closing folds everything into the file.
    }
    let db = redb::Database::create(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let table = txn.open_table(super::AUDIT).unwrap();
    let versions: Vec<u64> = redb::ReadableTable::range(&table, ("k", 0)..=("k", u64::MAX))
        .unwrap()
        .map(|entry| entry.unwrap().0.value().1)
        .collect();
    assert_eq!(versions, [8, 9, 10]);
}
