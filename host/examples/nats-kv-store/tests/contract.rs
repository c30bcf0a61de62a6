//! The host's contract suite (`turnstile::store::contract::check`), run against a NATS server:
//! `TURNSTILE_TEST_NATS_URL`, else the local one. A server that cannot be reached fails it.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use turnstile::store::StoreOptions;
use turnstile_nats_kv_store::NatsKvStore;

fn nats_url() -> String {
    std::env::var("TURNSTILE_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_the_contract() {
    // Every namespace a case opened, so its bucket is deleted whatever the outcome.
    let opened = Arc::new(Mutex::new(BTreeSet::new()));
    let (url, seen) = (nats_url(), opened.clone());
    let suite = tokio::spawn(turnstile::store::contract::check(
        move |options: StoreOptions| {
            seen.lock().unwrap().insert(options.namespace.clone());
            NatsKvStore::open(url.clone(), options)
        },
    ));
    let outcome = suite.await;
    let namespaces = std::mem::take(&mut *opened.lock().unwrap());
    for namespace in namespaces {
        let options = StoreOptions {
            namespace,
            ..StoreOptions::default()
        };
        let store = NatsKvStore::open(nats_url(), options).await.unwrap();
        store.destroy().await.unwrap();
    }
    if let Err(failed) = outcome {
        std::panic::resume_unwind(failed.into_panic());
    }
}
