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
