//! The actors together, on the in-memory store, without plugins or MCP.

use std::sync::Arc;

use serde_json::json;

use super::{ActorOptions, InstanceError, InstanceKey, SessionId, start};
use crate::{
    catalog::{Catalog, LiveCatalog},
    statechart::Machine,
    store::{InstanceRecord, MemoryStore, StateStore},
};

fn invoice() -> serde_json::Value {
    json!({"id":"invoice","initial":"draft","states":{
        "draft":{"on":{"SUBMIT":"review"}},
        "review":{"on":{"APPROVE":"approved","REJECT":"draft"}},
        "approved":{"on":{"DISCHARGE":"discharged"}},
        "discharged":{"type":"final"}}})
}

#[tokio::test]
async fn an_instance_that_dies_fails_its_caller_and_comes_back_from_its_last_saved_state() {
    let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let runtime = start(catalog, store.clone(), ActorOptions::default()).expect("actors start");
    let key = InstanceKey::mint("invoice");
    let created = runtime.create(key.clone()).await.expect("create");
    assert_eq!(created.version, 1);

    // Another writer moves the instance on in the store; the actor's copy is now stale.
    let machine = Machine::from_json(&invoice()).expect("the invoice machine is valid");
    let moved = machine.transition(
        &machine.initial_snapshot(),
        &crate::statechart::Event::new("SUBMIT"),
    );
    let record = InstanceRecord {
        version: 2,
        updated_at_ms: 0,
        ..InstanceRecord::first("invoice", moved.snapshot.to_persisted())
    };
    store
        .save(&key.store_key(), &record, 1)
        .await
        .expect("save v2");

    // The handler panics: the caller gets an error, not a hang.
    let crashed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        runtime.crash(key.clone()),
    )
    .await;
    assert!(
        matches!(crashed, Ok(Err(_))),
        "the caller of a dying actor gets an error: {crashed:?}"
    );

    // The next caller finds a new actor, loaded from the last saved snapshot.
    let view = runtime.view(key.clone()).await.expect("view after restart");
    assert_eq!(view.version, 2);
    assert_eq!(view.snapshot.value(), json!("review"));
}

#[tokio::test]
async fn an_unknown_handle_is_an_error_and_creates_nothing() {
    let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let runtime = start(catalog, store.clone(), ActorOptions::default()).expect("actors start");
    let key = InstanceKey::mint("invoice");
    let viewed = runtime.view(key.clone()).await;
    assert!(
        matches!(viewed, Err(InstanceError::UnknownHandle(_))),
        "{viewed:?}"
    );
    assert_eq!(store.count("").await.unwrap(), 0);
}

#[tokio::test]
async fn idle_instances_are_passivated_and_come_back_on_their_next_call() {
    let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let options = ActorOptions {
        idle_after: Some(std::time::Duration::from_millis(200)),
        ..ActorOptions::default()
    };
    let runtime = start(catalog, store, options).expect("actors start");
    let keys: Vec<InstanceKey> = (0..50).map(|_| InstanceKey::mint("invoice")).collect();
    for key in &keys {
        runtime.create(key.clone()).await.expect("create");
    }
    assert_eq!(runtime.stats().await.unwrap().0.instances, 50);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (registry, _) = runtime.stats().await.unwrap();
        if registry.instances == 0 {
            assert_eq!(registry.passivated, 50);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "instances were not passivated: {registry:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for key in &keys {
        let view = runtime.view(key.clone()).await.expect("reactivated");
        assert_eq!(view.version, 1);
    }
}

#[tokio::test]
async fn an_ended_session_leaves_no_instances_behind() {
    let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let runtime = start(catalog, store.clone(), ActorOptions::default()).expect("actors start");
    let session = SessionId::new();
    runtime
        .view(InstanceKey::for_session(&session, "invoice"))
        .await
        .expect("view");
    assert_eq!(runtime.stats().await.unwrap().0.session_instances, 1);
    runtime.session_ended(&session);
    let (registry, notifier) = runtime.stats().await.unwrap();
    assert_eq!(
        (
            registry.instances,
            registry.session_instances,
            notifier.sessions
        ),
        (0, 0, 0)
    );
}

/// An invoice whose review goes back to draft after 300 ms, and a state whose timer loops.
fn timed_invoice() -> serde_json::Value {
    json!({"id":"timed","initial":"review","states":{
        "review":{"after":{"300":"draft"},"on":{"APPROVE":"approved"}},
        "draft":{"on":{"SUBMIT":"review","SPIN":"spinning"}},
        "spinning":{"after":{"100":"loop_a"}},
        "loop_a":{"always":"loop_b"},
        "loop_b":{"always":"loop_a"},
        "approved":{"type":"final"}}})
}

/// Actors and a timer task on `store`, with `options` (their alarm shared with the task).
fn timed_runtime(store: Arc<dyn StateStore>, options: ActorOptions) -> super::Runtime {
    let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![
        timed_invoice(),
    ])));
    let alarm = options.alarm.clone();
    let runtime = start(catalog, store.clone(), options).expect("actors start");
    crate::timers::spawn(store, runtime.clone(), alarm);
    runtime
}

/// Waits (up to 10 s) until the record under `key` satisfies `done`; returns it.
async fn eventually(
    store: &dyn StateStore,
    key: &str,
    done: impl Fn(&InstanceRecord) -> bool,
) -> InstanceRecord {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let record = store.load(key).await.unwrap().expect("the record exists");
        if done(&record) {
            return record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the record never got there: {record:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_timer_fires_by_itself_and_its_due_time_goes_with_it() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let runtime = timed_runtime(store.clone(), ActorOptions::default());
    let key = InstanceKey::mint("timed");
    let created = runtime.create(key.clone()).await.expect("create");
    let deadline = created
        .snapshot
        .next_deadline()
        .expect("review has a timer");
    assert_eq!(created.due_at_ms, Some(deadline));
    assert_eq!(
        store.due(u64::MAX, None, 10).await.unwrap(),
        [crate::store::Due {
            at_ms: deadline,
            key: key.store_key()
        }]
    );
    // Nobody calls or looks: the timer task wakes the instance, which saves the move.
    let moved = eventually(&*store, &key.store_key(), |r| r.version == 2).await;
    assert_eq!(moved.snapshot["value"], "draft");
    assert_eq!(moved.due_at_ms, None);
    assert!(store.due(u64::MAX, None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_passivated_instance_is_woken_to_fire_its_timer() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let options = ActorOptions {
        idle_after: Some(std::time::Duration::from_millis(50)),
        ..ActorOptions::default()
    };
    let runtime = timed_runtime(store.clone(), options);
    let key = InstanceKey::mint("timed");
    runtime.create(key.clone()).await.expect("create");
    let moved = eventually(&*store, &key.store_key(), |r| r.version == 2).await;
    assert_eq!(moved.snapshot["value"], "draft");
    let (registry, _) = runtime.stats().await.unwrap();
    assert!(registry.passivated >= 1, "{registry:?}");
}

#[tokio::test]
async fn timers_overdue_at_start_fire_once_each() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let machine = Machine::from_json(&timed_invoice()).unwrap();
    // Saved by a server that stopped long ago, with their timers long past due.
    let keys: Vec<InstanceKey> = (0..20).map(|_| InstanceKey::mint("timed")).collect();
    for (i, key) in keys.iter().enumerate() {
        let snapshot = machine.initial_snapshot_at(1_000 + i as u64);
        let record = InstanceRecord {
            updated_at_ms: 1_000,
            due_at_ms: snapshot.next_deadline(),
            ..InstanceRecord::first("timed", snapshot.to_persisted())
        };
        store.save(&key.store_key(), &record, 0).await.unwrap();
    }
    let _runtime = timed_runtime(store.clone(), ActorOptions::default());
    for key in &keys {
        let moved = eventually(&*store, &key.store_key(), |r| r.version >= 2).await;
        assert_eq!(moved.snapshot["value"], "draft");
    }
    // Nothing is due any more, and nothing fired twice.
    assert!(store.due(u64::MAX, None, 100).await.unwrap().is_empty());
    for key in &keys {
        assert_eq!(
            store.load(&key.store_key()).await.unwrap().unwrap().version,
            2
        );
    }
}

#[tokio::test]
async fn a_timer_that_loops_is_dropped_and_the_state_kept() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let machine = Machine::from_json(&timed_invoice()).unwrap();
    let draft = machine
        .fire_due(&machine.initial_snapshot_at(0), 300)
        .snapshot;
    let spinning = machine
        .step(&draft, &crate::statechart::Event::new("SPIN"), 400)
        .unwrap()
        .snapshot;
    assert_eq!(spinning.value(), json!("spinning"));
    let key = InstanceKey::mint("timed");
    let record = InstanceRecord {
        due_at_ms: spinning.next_deadline(),
        ..InstanceRecord::first("timed", spinning.to_persisted())
    };
    store.save(&key.store_key(), &record, 0).await.unwrap();
    let _runtime = timed_runtime(store.clone(), ActorOptions::default());
    let after = eventually(&*store, &key.store_key(), |r| r.version == 2).await;
    assert_eq!(
        after.snapshot["value"], "spinning",
        "the loop moved nothing"
    );
    assert_eq!(after.due_at_ms, None, "the timer is dropped");
    assert_eq!(after.snapshot["timers"], json!([]));
}

#[tokio::test]
async fn a_wrong_due_time_is_corrected_when_it_comes() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let machine = Machine::from_json(&timed_invoice()).unwrap();
    let draft = machine
        .fire_due(&machine.initial_snapshot_at(0), 300)
        .snapshot;
    // Saved with a due time although nothing in `draft` is timed (older code, say).
    let key = InstanceKey::mint("timed");
    let record = InstanceRecord {
        due_at_ms: Some(5),
        ..InstanceRecord::first("timed", draft.to_persisted())
    };
    store.save(&key.store_key(), &record, 0).await.unwrap();
    let _runtime = timed_runtime(store.clone(), ActorOptions::default());
    let after = eventually(&*store, &key.store_key(), |r| r.version == 2).await;
    assert_eq!(
        (after.snapshot["value"].clone(), after.due_at_ms),
        (json!("draft"), None)
    );
}

#[tokio::test]
async fn retention_deletes_an_instance_when_its_time_comes() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let options = ActorOptions {
        retention: crate::retention::Retention {
            final_state: Some(std::time::Duration::from_millis(200)),
            idle: None,
        },
        ..ActorOptions::default()
    };
    let runtime = timed_runtime(store.clone(), options);
    let key = InstanceKey::mint("timed");
    runtime.create(key.clone()).await.expect("create");
    let machine = Machine::from_json(&timed_invoice()).unwrap();
    let approved = machine
        .step(
            &machine.initial_snapshot_at(0),
            &crate::statechart::Event::new("APPROVE"),
            0,
        )
        .unwrap()
        .snapshot;
    // Another writer finishes it; the record's due time is its retention.
    let now = crate::store::now_ms();
    let record = InstanceRecord {
        version: 2,
        updated_at_ms: now,
        due_at_ms: Some(now + 200),
        ..InstanceRecord::first("timed", approved.to_persisted())
    };
    store.save(&key.store_key(), &record, 1).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.load(&key.store_key()).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "never deleted");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(matches!(
        runtime.view(key).await,
        Err(InstanceError::UnknownHandle(_))
    ));
}

#[tokio::test]
async fn a_session_of_another_process_is_left_to_it() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let runtime = timed_runtime(store.clone(), ActorOptions::default());
    let foreign = InstanceKey::for_session(&SessionId::new(), "timed");
    let machine = Machine::from_json(&timed_invoice()).unwrap();
    let record = InstanceRecord::first("timed", machine.initial_snapshot_at(0).to_persisted());
    store.save(&foreign.store_key(), &record, 0).await.unwrap();
    assert_eq!(
        runtime.wake(&foreign.store_key()).await.unwrap(),
        super::Woke::Elsewhere
    );
    assert_eq!(
        runtime.wake("not-a-key").await.unwrap(),
        super::Woke::Elsewhere
    );
    // A session of this process is woken: it fires its own timer (the one left to the other
    // process stays as it is).
    let own = SessionId::new();
    let key = InstanceKey::for_session(&own, "timed");
    let view = runtime.view(key.clone()).await.unwrap();
    assert_eq!(
        view.version, 1,
        "a never-saved instance with a timer is saved at once"
    );
    let moved = eventually(&*store, &key.store_key(), |r| r.version == 2).await;
    assert_eq!(moved.snapshot["value"], "draft");
    assert_eq!(
        store
            .load(&foreign.store_key())
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
}

#[tokio::test]
async fn of_two_processes_waking_one_timer_one_fires_and_the_other_finds_nothing() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let catalog = || {
        Arc::new(LiveCatalog::new(Catalog::with_machines(vec![
            timed_invoice(),
        ])))
    };
    // Two actor systems on one store, as two server processes (no timer task: the test wakes).
    let east = start(catalog(), store.clone(), ActorOptions::default()).expect("actors start");
    let west = start(catalog(), store.clone(), ActorOptions::default()).expect("actors start");
    let key = InstanceKey::mint("timed");
    let created = east.create(key.clone()).await.expect("create");
    // West holds the instance as created, timer running.
    assert_eq!(west.view(key.clone()).await.unwrap().version, 1);
    let deadline = created.snapshot.next_deadline().unwrap();
    while crate::store::now_ms() <= deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        east.wake(&key.store_key()).await.unwrap(),
        super::Woke::Fired { moved: true }
    );
    // West's copy is stale: its save loses the compare-and-set, it rereads, nothing is due.
    assert_eq!(
        west.wake(&key.store_key()).await.unwrap(),
        super::Woke::Nothing
    );
    let record = store.load(&key.store_key()).await.unwrap().unwrap();
    assert_eq!(
        (record.version, record.snapshot["value"].clone()),
        (2, json!("draft"))
    );
    assert_eq!(west.view(key).await.unwrap().version, 2);
}
