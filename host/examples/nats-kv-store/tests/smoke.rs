//! A quick check of the basics until the contract suite is public (then `contract.rs` runs it).

use std::time::Duration;

use futures_util::StreamExt;
use turnstile::store::{
    DeleteKind, Fence, InstanceRecord, LeaseGrant, StateStore, StoreError, StoreOptions, Tombstone,
};
use turnstile_nats_kv_store::NatsKvStore;

fn url() -> String {
    std::env::var("TURNSTILE_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let options = StoreOptions {
        namespace: format!("smoke_{}", std::process::id()),
        audit_keep: 5,
        ..StoreOptions::default()
    };
    let store = NatsKvStore::open(url(), options).await.unwrap();
    let key = "handle/a b@owner";
    assert_eq!(store.load(key).await.unwrap(), None);
    let first = InstanceRecord::first("w", serde_json::json!({"value": "a"}));
    store.save(key, &first, 0).await.unwrap();
    assert_eq!(store.load(key).await.unwrap().unwrap().version, 1);
    match store.save(key, &first, 0).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(1)),
        other => panic!("{other:?}"),
    }
    let LeaseGrant::Held { token, .. } = store
        .acquire_lease(key, "n1", Duration::from_secs(5))
        .await
        .unwrap()
    else {
        panic!("no lease")
    };
    let second = first.next(serde_json::json!({"value": "b"}));
    assert!(matches!(
        store.save(key, &second, 1).await,
        Err(StoreError::Fenced { .. })
    ));
    let fence = Fence {
        token,
        holder: "n1".into(),
    };
    store
        .save(key, &second.clone().fenced(Some(fence.clone())), 1)
        .await
        .unwrap();
    assert_eq!(store.list_keys("", None, 10).await.unwrap(), vec![key]);
    let mut feed = store.watch_changes().await.unwrap().unwrap();
    feed.subscriptions.watch(key).await.unwrap();
    store.announce_change("n2", key).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), feed.changes.next()).await;
    assert_eq!(heard.unwrap(), Some(("n2".into(), key.into())));
    let tombstone = Tombstone::of(key, &second, "me", DeleteKind::Cli, 5);
    assert!(
        store
            .delete_leaving(key, 2, Some(&fence), &tombstone)
            .await
            .unwrap()
    );
    assert_eq!(store.load(key).await.unwrap(), None);
    assert_eq!(store.tombstones("", 10).await.unwrap(), vec![tombstone]);
    assert_eq!(store.prune_tombstones(10, 10).await.unwrap(), 1);
    assert!(store.list_keys("", None, 10).await.unwrap().is_empty());
    store.destroy().await.unwrap();
}
