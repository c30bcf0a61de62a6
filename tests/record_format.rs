//! The stored record format (issue 11 item 11, issue 12 item 4): records written in format 1 (as
//! servers before the format number wrote them) are served by a new server and rewritten in the
//! current format (3) when it starts, on the embedded store, Redis and PostgreSQL; a record that cannot be
//! parsed is logged and left alone, never deleted.
//!
//! Each test makes a real record with a server, stops it, puts the record back in the old shape
//! with the backend's own client (removing what format 2 added) and adds a damaged one, takes
//! away the mark of the migration the first server made (older code left none, so a new server
//! walks such a store once), then starts a server on the same store.

mod common;

use std::path::Path;

use common::{Client, PluginDir, Server, handle_of};
use deadpool_postgres::tokio_postgres;
use redb::{ReadableDatabase, TableDefinition};
use serde_json::json;

/// The embedded store's tables, as `host/src/store/embedded.rs` defines them: format 1 knew
/// only the first.
const INSTANCES: TableDefinition<&str, (u64, u64, &str, &str)> =
    TableDefinition::new("instances_v1");
const FORMATS: TableDefinition<&str, (u64, &str)> = TableDefinition::new("instance_formats_v1");
const MARKS: TableDefinition<&str, u64> = TableDefinition::new("marks_v1");

/// The mark a finished start-up migration leaves (`store::migrate_unless_done`).
const MIGRATED_MARK: &str = "records_migrated";

/// The store key of a damaged record; its handle is well-formed.
const BROKEN: &str = "handle/invoice-00000000000000000000000000000000";

fn start(plugins: &PluginDir, data: &Path, store: Option<&str>, ns: &str) -> Server {
    Server::on_store(
        plugins.path(),
        data,
        store,
        ns,
        &["--state-handle-key"],
        &[],
    )
}

/// A server makes an invoice in review; returns its handle.
async fn make_instance(server: &Server) -> String {
    let client = Client::http(&server.url).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    client.close().await;
    handle
}

/// A server on the shared store `url`, in a namespace of its own, makes an invoice in review
/// and stops: the directories to start the next one with, the namespace, and the handle.
async fn an_instance_on(url: &str) -> (PluginDir, tempfile::TempDir, String, String) {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let ns = format!("fmt{}", uuid::Uuid::new_v4().simple());
    let server = start(&plugins, data.path(), Some(url), &ns);
    let handle = make_instance(&server).await;
    (plugins, data, ns, handle)
}

/// A server started on the downgraded store migrates (logging one count) and serves the
/// instance as it was.
async fn check_served_after_migration(server: &Server, handle: &str) {
    let line = server.wait_for_log("migrated format-1 instance records");
    assert!(
        line.contains("migrated=1") && line.contains("skipped=1"),
        "{line}"
    );
    assert!(
        server.stderr().contains(BROKEN),
        "the damaged record is named in the log"
    );
    let client = Client::http(&server.url).await;
    assert_eq!(
        client
            .tool_names_with_meta(json!({ "handle": handle }))
            .await,
        ["invoice.approve", "invoice.reject", "invoice.status"]
    );
    let approved = client
        .call("invoice.approve", json!({ "handle": handle }))
        .await;
    assert_eq!(approved.structured_content.unwrap()["state"], "approved");
    client.close().await;
}

#[tokio::test]
async fn on_the_embedded_store() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let mut server = start(&plugins, data.path(), None, "");
    let handle = make_instance(&server).await;
    // A clean stop: the file alone then holds the instance (a kill would leave it in the
    // journal beside the file, for the next start to replay).
    server.stop();

    let file = data.path().join("state.redb");
    let key = format!("handle/{handle}");
    {
        let db = redb::Database::create(&file).expect("open the store file");
        let txn = db.begin_write().unwrap();
        {
            let mut formats = txn.open_table(FORMATS).unwrap();
            assert!(formats.remove(key.as_str()).unwrap().is_some());
            let mut instances = txn.open_table(INSTANCES).unwrap();
            instances
                .insert(BROKEN, (1, 0, "invoice", "{not json"))
                .unwrap();
            let mut marks = txn.open_table(MARKS).unwrap();
            assert!(marks.remove(MIGRATED_MARK).unwrap().is_some());
        }
        txn.commit().unwrap();
    }

    let mut server = start(&plugins, data.path(), None, "");
    check_served_after_migration(&server, &handle).await;
    server.stop();
    let db = redb::Database::create(&file).expect("open the store file");
    let txn = db.begin_read().unwrap();
    let formats = txn.open_table(FORMATS).unwrap();
    assert_eq!(formats.get(key.as_str()).unwrap().unwrap().value().0, 3);
    let instances = txn.open_table(INSTANCES).unwrap();
    assert!(
        instances.get(BROKEN).unwrap().is_some(),
        "the damaged record is left alone"
    );
}

#[tokio::test]
async fn on_redis() {
    let url = common::reachable_redis_url();
    let (plugins, data, ns, handle) = an_instance_on(&url).await;

    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let record = format!("{ns}:i:handle/{handle}");
    let removed: u64 = redis::cmd("HDEL")
        .arg(&record)
        .arg(&["f", "x"])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(removed, 2, "format 2 wrote f and x");
    redis::cmd("HSET")
        .arg(format!("{ns}:i:{BROKEN}"))
        .arg(&["v", "1", "w", "invoice", "s", "{not json", "t", "0"])
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    redis::cmd("ZADD")
        .arg(format!("{ns}:index"))
        .arg(0)
        .arg(BROKEN)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let unmarked: u64 = redis::cmd("DEL")
        .arg(format!("{ns}:mark:{MIGRATED_MARK}"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(unmarked, 1, "the first server marked its migration");

    let server = start(&plugins, data.path(), Some(&url), &ns);
    check_served_after_migration(&server, &handle).await;
    let format: Option<String> = redis::cmd("HGET")
        .arg(&record)
        .arg("f")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(format.as_deref(), Some("3"));
    let broken: u64 = redis::cmd("EXISTS")
        .arg(format!("{ns}:i:{BROKEN}"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(broken, 1, "the damaged record is left alone");
    drop(server);
    common::delete_redis_namespace(&mut con, &ns).await;
}

#[tokio::test]
async fn on_postgres() {
    let url = common::reachable_postgres_url();
    let (plugins, data, ns, handle) = an_instance_on(&url).await;

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let table = format!("{ns}_instances");
    let key = format!("handle/{handle}");
    // Format-1 code wrote neither column: NULL in both. jsonb cannot hold a snapshot that is
    // not JSON, so the damaged record has damaged format-2 fields instead.
    let downgraded = client
        .execute(
            &format!("UPDATE {table} SET format = NULL, extras = NULL WHERE key = $1"),
            &[&key],
        )
        .await
        .unwrap();
    assert_eq!(downgraded, 1);
    client
        .execute(
            &format!(
                "INSERT INTO {table} (key, workflow, snapshot, version, format, extras) \
                 VALUES ($1, 'invoice', 'null', 1, 2, '{{oops')"
            ),
            &[&BROKEN],
        )
        .await
        .unwrap();
    let unmarked = client
        .execute(
            &format!("DELETE FROM {ns}_marks WHERE name = $1"),
            &[&MIGRATED_MARK],
        )
        .await
        .unwrap();
    assert_eq!(unmarked, 1, "the first server marked its migration");

    let server = start(&plugins, data.path(), Some(&url), &ns);
    check_served_after_migration(&server, &handle).await;
    let row = client
        .query_one(
            &format!("SELECT format FROM {table} WHERE key = $1"),
            &[&key],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i32>>(0), Some(3));
    let broken = client
        .query(&format!("SELECT 1 FROM {table} WHERE key = $1"), &[&BROKEN])
        .await
        .unwrap();
    assert_eq!(broken.len(), 1, "the damaged record is left alone");
    drop(server);
    client
        .batch_execute(&format!(
            "DROP TABLE {ns}_audit, {table}, {ns}_machines, {ns}_marks"
        ))
        .await
        .unwrap();
}
