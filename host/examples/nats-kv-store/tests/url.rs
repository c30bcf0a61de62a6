//! What `open` says of a URL it cannot use: [`StoreError::Config`] for a wrong one,
//! [`StoreError::Unavailable`] naming the server (and never the password) for one that is down.

use turnstile::store::{StoreError, StoreOptions};
use turnstile_nats_kv_store::NatsKvStore;

async fn open(url: &str) -> StoreError {
    match NatsKvStore::open(url.to_owned(), StoreOptions::default()).await {
        Ok(_) => panic!("{url} opened"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn a_wrong_url_is_a_configuration_error() {
    for url in [
        "redis://127.0.0.1:4222",
        "nats://",
        "not a url",
        "nats://127.0.0.1:4222?bucket=a.b",
        "nats://127.0.0.1:4222?buckets=x",
    ] {
        let error = open(url).await;
        assert!(matches!(error, StoreError::Config(_)), "{url}: {error:?}");
    }
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable_and_its_password_unsaid() {
    // Port 1: nothing listens there.
    let error = open("nats://turnstile:hunter2@127.0.0.1:1").await;
    let StoreError::Unavailable(message) = &error else {
        panic!("expected Unavailable, got {error:?}");
    };
    assert!(
        message.contains("nats://turnstile@127.0.0.1:1"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}
