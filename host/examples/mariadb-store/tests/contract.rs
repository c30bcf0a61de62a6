//! The host's contract suite (`turnstile::store::contract`, the `testkit` feature) on this
//! store, lease and change-feed cases included, against the server `TURNSTILE_TEST_MARIADB_URL`
//! names (by default the local one). It fails, never skips, when the server cannot be reached.
//! Every namespace a case opened is dropped afterwards, whether the cases passed or not.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use futures_util::FutureExt;
use turnstile::store::{StoreOptions, contract};
use turnstile_mariadb_store::MariaDbStore;

fn url() -> String {
    std::env::var("TURNSTILE_TEST_MARIADB_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mariadb_store_keeps_the_store_contract() {
    let url = url();
    let opened = Arc::new(Mutex::new(BTreeSet::new()));
    let open = {
        let (url, opened) = (url.clone(), Arc::clone(&opened));
        move |options: StoreOptions| {
            opened
                .lock()
                .expect("no case panics while holding the set")
                .insert(options.namespace.clone());
            MariaDbStore::open(url.clone(), options)
        }
    };
    let outcome = std::panic::AssertUnwindSafe(contract::check(open))
        .catch_unwind()
        .await;
    let namespaces = opened.lock().map(|set| set.clone()).unwrap_or_default();
    for namespace in namespaces {
        let options = StoreOptions {
            namespace,
            ..StoreOptions::default()
        };
        if let Err(error) = MariaDbStore::drop_namespace(&url, &options).await {
            eprintln!("could not drop namespace {}: {error}", options.namespace);
        }
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
