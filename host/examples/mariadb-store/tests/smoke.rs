//! A quick check against the local server until the contract kit is public: a save, a
//! conflict, a fenced write, a lease, a change heard.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use turnstile::store::{Fence, InstanceRecord, LeaseGrant, StateStore, StoreError, StoreOptions};
use turnstile_mariadb_store::MariaDbStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let url = std::env::var("TURNSTILE_TEST_MARIADB_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let options = StoreOptions {
        namespace: format!("smoke_{}", std::process::id()),
        ..StoreOptions::default()
    };
    let store = MariaDbStore::open(url.clone(), options.clone())
        .await
        .unwrap();
    let first = InstanceRecord::first("w", json!({"value": "a", "context": {"note": "ünïcødé"}}));
    store.save("handle/x@alice", &first, 0).await.unwrap();
    assert_eq!(store.load("handle/x@alice").await.unwrap().unwrap(), first);
    assert!(matches!(
        store.save("handle/x@alice", &first, 0).await,
        Err(StoreError::Conflict {
            current: Some(1),
            ..
        })
    ));
    assert_eq!(store.count_owned("alice").await.unwrap(), 1);
    let LeaseGrant::Held { token, .. } = store
        .acquire_lease("handle/x@alice", "a", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("no lease")
    };
    let next = first.next(json!({"value": "b"}));
    assert!(matches!(
        store.save("handle/x@alice", &next, 1).await,
        Err(StoreError::Fenced {
            remaining_ms: Some(_),
            ..
        })
    ));
    let fence = Fence {
        token,
        holder: "a".into(),
    };
    store
        .save("handle/x@alice", &next.clone().fenced(Some(fence)), 1)
        .await
        .unwrap();
    let mut feed = store.watch_changes().await.unwrap().unwrap();
    feed.subscriptions.watch("handle/x@alice").await.unwrap();
    store.announce_change("me", "handle/x@alice").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), feed.changes.next()).await;
    assert_eq!(heard.unwrap(), Some(("me".into(), "handle/x@alice".into())));
    MariaDbStore::drop_namespace(&url, &options).await.unwrap();
}
