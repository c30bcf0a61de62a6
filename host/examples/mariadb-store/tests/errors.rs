//! What opening reports when it cannot work: a server that is not there is unavailable, named
//! by its URL without the password; a URL or namespace that cannot work is a configuration
//! error.

use std::time::Duration;

use turnstile::store::{StoreError, StoreOptions};
use turnstile_mariadb_store::MariaDbStore;

fn quick() -> StoreOptions {
    StoreOptions {
        connect_timeout: Duration::from_secs(2),
        op_timeout: Duration::from_secs(2),
        ..StoreOptions::default()
    }
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unavailable_and_named_without_its_password() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let url = "mysql://app:secret@127.0.0.1:1/turnstile".to_owned();
    match MariaDbStore::open(url, quick()).await {
        Err(StoreError::Unavailable(message)) => {
            assert!(
                message.contains("mysql://app@127.0.0.1:1/turnstile"),
                "{message}"
            );
            assert!(!message.contains("secret"), "{message}");
        }
        Err(other) => panic!("expected the store to be unavailable, got {other:?}"),
        Ok(_) => panic!("opened a store on a port nothing listens on"),
    }
}

#[tokio::test]
async fn a_url_or_namespace_that_cannot_work_is_a_configuration_error() {
    let bad_namespace = StoreOptions {
        namespace: "Robert'); DROP TABLE students;--".to_owned(),
        ..quick()
    };
    let cases = [
        ("redis://127.0.0.1:6379", quick()),
        ("mysql://root@127.0.0.1:3306", quick()),
        ("mysql://root@127.0.0.1:3306/test", bad_namespace),
    ];
    for (url, options) in cases {
        match MariaDbStore::open(url.to_owned(), options).await {
            Err(StoreError::Config(_)) => {}
            Err(other) => panic!("{url}: expected a configuration error, got {other:?}"),
            Ok(_) => panic!("{url}: expected a configuration error"),
        }
    }
}
