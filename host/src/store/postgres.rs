//! `PostgresStore`: instances in one PostgreSQL table.
//!
//! This module owns the table's schema (created or migrated on start), the SQL of every
//! operation and the connection pool. It must not hold a transaction open across an await that
//! waits on anything but PostgreSQL, and must not report success for a write whose statement
//! did not return.
//!
//! The table is `{namespace}_instances`:
//! `key text COLLATE "C" PRIMARY KEY, workflow text, snapshot jsonb, version bigint,
//! updated_at timestamptz, format integer, extras text`. `format` and `extras` (record format 2;
//! see `format.rs`) are NULL in a row written by format-1 code. The "C" collation makes the
//! primary key's order byte order (what `list_keys` promises) and lets `LIKE 'prefix%'` use the
//! index. `due_at bigint` is the record's due time (NULL: none), indexed by
//! `{namespace}_instances_due` on `(due_at, key) WHERE due_at IS NOT NULL`, so the due query is an
//! index range scan that never touches the rows without one.
//!
//! Machine definitions live in `{namespace}_machines` (`workflow, version, definition jsonb`),
//! written once per version.
//!
//! Compare-and-set is one statement: `INSERT … ON CONFLICT DO NOTHING` for version 1,
//! `UPDATE … WHERE key = $1 AND version = $n` after that. PostgreSQL's row lock makes the check
//! and the write atomic; when no row changes, a follow-up `SELECT` reports the current version.
//!
//! Outages: a `deadpool-postgres` pool. Connections that died are dropped when next taken from
//! the pool and new ones are made as needed, so the store recovers on its own; every operation
//! (taking a connection included) runs under `op_timeout`.

use std::{future::Future, time::Duration};

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
    tokio_postgres::{self, NoTls, Row},
};

use super::{
    AuditEntry, Due, Durability, InstanceRecord, StateStore, StoreError, StoreOptions, chain,
    check_key, check_save, conflict, format, invalid, redact,
};

/// Every statement, with the table name filled in once at connect time (the namespace is
/// validated to `[a-z0-9_]`, so interpolating it is safe).
struct Sql {
    load: String,
    save_machine: String,
    load_machine: String,
    insert: String,
    update: String,
    /// `insert` and `update` that also append an audit entry, in the same statement: the entry
    /// is inserted only for the row the save wrote, so the statement's row count is still 1 for
    /// a save and 0 for a conflict.
    insert_audited: String,
    update_audited: String,
    audit: String,
    version: String,
    delete: String,
    delete_if: String,
    list: String,
    count: String,
    due: String,
}

impl Sql {
    fn insert(t: &str) -> String {
        format!(
            "INSERT INTO {t} \
             (key, workflow, snapshot, version, updated_at, format, extras, due_at) \
             VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000), $6, $7, $8) \
             ON CONFLICT (key) DO NOTHING"
        )
    }

    fn update(t: &str) -> String {
        format!(
            "UPDATE {t} SET workflow = $2, snapshot = $3, version = $4, \
             updated_at = to_timestamp($5::float8 / 1000), format = $7, extras = $8, \
             due_at = $9 WHERE key = $1 AND version = $6"
        )
    }

    fn new(t: &str, machines: &str) -> Self {
        let audit = audit_table(t);
        Self {
            load: format!(
                "SELECT workflow, snapshot, version, \
                 (EXTRACT(EPOCH FROM updated_at) * 1000)::bigint, format, extras, due_at \
                 FROM {t} WHERE key = $1"
            ),
            save_machine: format!(
                "INSERT INTO {machines} (workflow, version, definition) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING"
            ),
            load_machine: format!(
                "SELECT definition FROM {machines} WHERE workflow = $1 AND version = $2"
            ),
            insert: Self::insert(t),
            update: Self::update(t),
            insert_audited: format!(
                "WITH saved AS ({} RETURNING key) \
                 INSERT INTO {audit} (key, version, entry) SELECT key, $4, $9 FROM saved",
                Self::insert(t)
            ),
            update_audited: format!(
                "WITH saved AS ({} RETURNING key) \
                 INSERT INTO {audit} (key, version, entry) SELECT key, $4, $10 FROM saved",
                Self::update(t)
            ),
            audit: format!("SELECT entry FROM {audit} WHERE key = $1 ORDER BY version"),
            version: format!("SELECT version FROM {t} WHERE key = $1"),
            delete: format!("DELETE FROM {t} WHERE key = $1"),
            delete_if: format!("DELETE FROM {t} WHERE key = $1 AND version = $2"),
            list: format!(
                "SELECT key FROM {t} WHERE key LIKE $1 AND key > $2 ORDER BY key LIMIT $3"
            ),
            count: format!("SELECT count(*) FROM {t} WHERE key LIKE $1"),
            // `(due_at, key) > ($2, $3)` is the page boundary: a row comparison the index serves.
            due: format!(
                "SELECT due_at, key FROM {t} \
                 WHERE due_at IS NOT NULL AND due_at <= $1 AND (due_at, key) > ($2, $3) \
                 ORDER BY due_at, key LIMIT $4"
            ),
        }
    }
}

/// The table of audit trails beside the instances table `t`: one row per entry, deleted with
/// its instance (`ON DELETE CASCADE`).
fn audit_table(t: &str) -> String {
    // `t` is `{namespace}_instances`; the trail is `{namespace}_audit`.
    format!("{}_audit", t.strip_suffix("_instances").unwrap_or(t))
}

/// PostgreSQL-backed store.
pub struct PostgresStore {
    name: String,
    pool: Pool,
    table: String,
    machines: String,
    op_timeout: Duration,
    sql: Sql,
}

impl PostgresStore {
    /// Connects to `url`, then creates the table (or adds what an older layout lacks).
    ///
    /// Fails with [`StoreError::Unavailable`] (naming the URL, password removed) when the server
    /// cannot be reached within `connect_timeout` or the migration does not finish within
    /// `op_timeout`, and with [`StoreError::Config`] when the URL does not parse.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        options.check_namespace()?;
        let name = redact(url);
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Config(format!("{name}: bad PostgreSQL URL: {e}")))?;
        config.connect_timeout(options.connect_timeout);
        let manager = Manager::from_config(
            config,
            NoTls,
            // `Fast` only drops connections whose socket is closed: after a server restart
            // every old connection is closed, and a query on a half-dead one fails (and is
            // dropped next time) rather than hanging, thanks to the op timeout.
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.op_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.op_timeout))
            .build()
            .map_err(|e| StoreError::Config(format!("{name}: pool: {e}")))?;
        let table = format!("{}_instances", options.namespace);
        let machines = format!("{}_machines", options.namespace);
        let store = Self {
            name,
            pool,
            sql: Sql::new(&table, &machines),
            table,
            machines,
            op_timeout: options.op_timeout,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Creates the table, or brings an older one up to date. Serialized across processes by an
    /// advisory lock, since two servers starting at once would both try `CREATE TABLE`. The lock
    /// is keyed by the table, so servers on other namespaces (each test has its own) do not queue
    /// behind each other's DDL; a hash collision between two namespaces only serializes them.
    async fn migrate(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {t} (
                 key text COLLATE \"C\" PRIMARY KEY,
                 workflow text NOT NULL,
                 snapshot jsonb NOT NULL,
                 version bigint NOT NULL CHECK (version > 0)
             );
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS
                 updated_at timestamptz NOT NULL DEFAULT now();
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS format integer;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS extras text;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS due_at bigint;
             CREATE INDEX IF NOT EXISTS {t}_due ON {t} (due_at, key) WHERE due_at IS NOT NULL;
             CREATE TABLE IF NOT EXISTS {a} (
                 key text COLLATE \"C\" NOT NULL REFERENCES {t} (key) ON DELETE CASCADE,
                 version bigint NOT NULL,
                 entry text NOT NULL,
                 PRIMARY KEY (key, version)
             );
             CREATE TABLE IF NOT EXISTS {m} (
                 workflow text NOT NULL,
                 version text NOT NULL,
                 definition jsonb NOT NULL,
                 PRIMARY KEY (workflow, version)
             );",
            m = self.machines,
            a = audit_table(t),
        );
        self.bounded("migrate", async {
            let mut client = self.pool.get().await.map_err(|e| self.down("connect", e))?;
            let txn = client
                .transaction()
                .await
                .map_err(|e| self.down("migrate", e))?;
            txn.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&format!("turnstile_store_migrate:{t}")],
            )
            .await
            .map_err(|e| self.down("migrate lock", e))?;
            txn.batch_execute(&ddl)
                .await
                .map_err(|e| self.down("migrate", e))?;
            txn.commit()
                .await
                .map_err(|e| self.down("migrate commit", e))
        })
        .await
    }

    /// Runs `op` under `op_timeout`.
    async fn bounded<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.op_timeout, op)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(format!(
                    "{}: {what} timed out after {:?}",
                    self.name, self.op_timeout
                )))
            })
    }

    fn down(&self, what: &str, e: impl std::error::Error) -> StoreError {
        StoreError::Unavailable(format!("{}: {what} failed: {}", self.name, chain(&e)))
    }

    /// Runs one statement on a pooled connection, under `op_timeout`.
    async fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.bounded(what, async {
            let client = self.pool.get().await.map_err(|e| self.down(what, e))?;
            let stmt = client
                .prepare_cached(sql)
                .await
                .map_err(|e| self.down(what, e))?;
            client
                .query(&stmt, params)
                .await
                .map_err(|e| self.down(what, e))
        })
        .await
    }

    /// Like [`Self::query`], for statements that return a row count.
    async fn execute(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.bounded(what, async {
            let client = self.pool.get().await.map_err(|e| self.down(what, e))?;
            let stmt = client
                .prepare_cached(sql)
                .await
                .map_err(|e| self.down(what, e))?;
            client
                .execute(&stmt, params)
                .await
                .map_err(|e| self.down(what, e))
        })
        .await
    }

    /// The stored version of `key`, after a conditional write changed nothing.
    async fn current_version(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let rows = self
            .query("read version", &self.sql.version, &[&key])
            .await?;
        rows.first()
            .map(|row| version_from(key, column(key, row, 0)?))
            .transpose()
    }

    /// Drops this store's table. For tests: a namespace per test keeps parallel runs apart.
    #[cfg(test)]
    pub(super) async fn destroy_namespace(&self) -> Result<(), StoreError> {
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}",
            audit_table(&self.table),
            self.table,
            self.machines
        );
        self.bounded("drop table", async {
            let client = self.pool.get().await.map_err(|e| self.down("drop", e))?;
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| self.down("drop", e))
        })
        .await
    }
}

/// Column `idx` of `row`; a type that does not match the schema is a corrupt table, not a
/// panic.
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    key: &str,
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("column {idx}: {e}"),
    })
}

fn version_from(key: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("negative version {v}"),
    })
}

/// Versions are `bigint`: refuse what does not fit instead of wrapping.
fn pg_version(key: &str, v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| invalid(key, format!("version {v} exceeds PostgreSQL bigint")))
}

/// A `LIKE` pattern matching keys that start with `prefix` (backslash is `LIKE`'s escape).
fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[async_trait]
impl StateStore for PostgresStore {
    fn is_shared(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.query("ping", "SELECT 1", &[]).await.map(|_| ())
    }

    /// `SHOW synchronous_commit`: `off` answers before the commit's WAL is flushed.
    async fn durability(&self) -> Option<Durability> {
        let rows = self
            .query("show synchronous_commit", "SHOW synchronous_commit", &[])
            .await
            .ok()?;
        let setting: String = rows.first()?.try_get(0).ok()?;
        let name = self.describe();
        Some(if setting == "off" {
            Durability::Lost(format!(
                "{name} has synchronous_commit off: a crash of PostgreSQL may lose the last \
                 acknowledged transitions (set it to on)"
            ))
        } else {
            Durability::Kept(format!(
                "{name} has synchronous_commit {setting}: an acknowledged transition is on disk"
            ))
        })
    }

    async fn load(&self, key: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let rows = self.query("load", &self.sql.load, &[&key]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let updated_at: i64 = column(key, row, 3)?;
        let format: Option<i32> = column(key, row, 4)?;
        let extras: Option<String> = column(key, row, 5)?;
        let due: Option<i64> = column(key, row, 6)?;
        let (format, extras) = format::decode(key, format.map(|f| f as u64), extras.as_deref())?;
        Ok(Some(
            InstanceRecord::assemble(
                format,
                extras,
                column(key, row, 0)?,
                column(key, row, 1)?,
                version_from(key, column(key, row, 2)?)?,
                // Before 1970 only if someone edited the row by hand; 0 says "unknown".
                u64::try_from(updated_at).unwrap_or(0),
            )
            .due(due.map(|due| u64::try_from(due).unwrap_or(0))),
        ))
    }

    async fn save(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        check_save(key, record, expected)?;
        let version = pg_version(key, record.version)?;
        // f64 holds every millisecond timestamp up to the year 287,000 exactly.
        let updated_at = record.updated_at_ms as f64;
        let format = i32::try_from(record.format)
            .map_err(|_| invalid(key, format!("format {} too large", record.format)))?;
        let extras = format::encode(&record.extras());
        // `check_save` keeps due times within `bigint`.
        let due = record
            .due_at_ms
            .map(|due| i64::try_from(due).unwrap_or(i64::MAX));
        let audit = record.audit.as_ref().map(AuditEntry::encode);
        let changed = if expected == 0 {
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
                &key,
                &record.workflow,
                &record.snapshot,
                &version,
                &updated_at,
                &format,
                &extras,
                &due,
            ];
            let sql = match &audit {
                Some(entry) => {
                    params.push(entry);
                    &self.sql.insert_audited
                }
                None => &self.sql.insert,
            };
            self.execute("save", sql, &params).await?
        } else {
            let expected = pg_version(key, expected)?;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
                &key,
                &record.workflow,
                &record.snapshot,
                &version,
                &updated_at,
                &expected,
                &format,
                &extras,
                &due,
            ];
            let sql = match &audit {
                Some(entry) => {
                    params.push(entry);
                    &self.sql.update_audited
                }
                None => &self.sql.update,
            };
            self.execute("save", sql, &params).await?
        };
        if changed == 1 {
            return Ok(());
        }
        Err(conflict(key, expected, self.current_version(key).await?))
    }

    async fn audit(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = self.query("audit", &self.sql.audit, &[&key]).await?;
        rows.iter()
            .map(|row| AuditEntry::decode(key, &row.get::<_, String>(0)))
            .collect()
    }

    async fn save_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.execute(
            "save machine",
            &self.sql.save_machine,
            &[&workflow, &version, definition],
        )
        .await
        .map(|_| ())
    }

    async fn load_machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let rows = self
            .query(
                "load machine",
                &self.sql.load_machine,
                &[&workflow, &version],
            )
            .await?;
        let key = super::machine_key(workflow, version);
        rows.first().map(|row| column(&key, row, 0)).transpose()
    }

    async fn delete(&self, key: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        check_key(key)?;
        let Some(expected) = expected else {
            return Ok(self.execute("delete", &self.sql.delete, &[&key]).await? == 1);
        };
        let pg_expected = pg_version(key, expected)?;
        if self
            .execute("delete", &self.sql.delete_if, &[&key, &pg_expected])
            .await?
            == 1
        {
            return Ok(true);
        }
        Err(conflict(key, expected, self.current_version(key).await?))
    }

    async fn list_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let pattern = like_prefix(prefix);
        // "" sorts before every key, so it means "from the start".
        let after = after.unwrap_or("");
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query("list", &self.sql.list, &[&pattern, &after, &limit])
            .await?;
        rows.iter().map(|row| column(prefix, row, 0)).collect()
    }

    async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let rows = self
            .query("count", &self.sql.count, &[&like_prefix(prefix)])
            .await?;
        // count(*) returns exactly one row, with a non-negative bigint.
        let n: i64 = rows.first().map_or(Ok(0), |row| column(prefix, row, 0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn due(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let until = i64::try_from(until).unwrap_or(i64::MAX);
        // Due times are never negative, so (-1, "") is before every entry.
        let (after_at, after_key) = match after {
            Some(after) => (
                i64::try_from(after.at_ms).unwrap_or(i64::MAX),
                after.key.as_str(),
            ),
            None => (-1, ""),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "due",
                &self.sql.due,
                &[&until, &after_at, &after_key, &limit],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let key: String = column("due", row, 1)?;
                let at: i64 = column(&key, row, 0)?;
                Ok(Due {
                    at_ms: u64::try_from(at).unwrap_or(0),
                    key,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::contract::{postgres_url, unique_options};
    use super::{InstanceRecord, PostgresStore, StateStore, tokio_postgres};

    /// A plain connection, to write rows the way older code did.
    async fn raw_client(url: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
        tokio::spawn(conn);
        client
    }

    /// A table from before `updated_at` existed is brought up to date on connect.
    /// The verdict follows the server's own `synchronous_commit`, read here independently.
    #[tokio::test]
    async fn durability_says_whether_a_crash_keeps_a_transition() {
        let url = postgres_url();
        let store = PostgresStore::connect(&url, &unique_options())
            .await
            .unwrap();
        let client = raw_client(&url).await;
        let setting: String = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap()
            .get(0);
        match (setting.as_str(), store.durability().await) {
            ("off", Some(super::Durability::Lost(_))) => {}
            (on, Some(super::Durability::Kept(what))) if on != "off" => assert!(what.contains(on)),
            (setting, verdict) => panic!("synchronous_commit {setting}, verdict {verdict:?}"),
        }
    }

    #[tokio::test]
    async fn migrates_an_older_table() {
        let url = postgres_url();
        let options = unique_options();
        let client = raw_client(&url).await;
        let table = format!("{}_instances", options.namespace);
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (key text COLLATE \"C\" PRIMARY KEY, workflow text NOT NULL, \
                 snapshot jsonb NOT NULL, version bigint NOT NULL);
                 INSERT INTO {table} VALUES ('old', 'invoice', '{{\"value\":\"draft\"}}', 1);"
            ))
            .await
            .unwrap();
        let store = PostgresStore::connect(&url, &options).await.unwrap();
        let old = store.load("old").await.unwrap().expect("old row kept");
        assert_eq!(
            (old.version, old.snapshot.clone()),
            (1, json!({"value": "draft"}))
        );
        store
            .save("old", &old.next(json!({"value": "review"})), 1)
            .await
            .unwrap();
        let new = InstanceRecord::first("invoice", json!(null));
        store.save("new", &new, 0).await.unwrap();
        assert_eq!(store.load("new").await.unwrap(), Some(new));
        store.destroy_namespace().await.unwrap();
    }

    /// Rows written by format-1 code (the table without `format` and `extras`) are read and
    /// migrated.
    #[tokio::test]
    async fn format_1_records_are_migrated() {
        let url = postgres_url();
        let options = unique_options();
        let client = raw_client(&url).await;
        let table = format!("{}_instances", options.namespace);
        client
            .batch_execute(&format!(
                "CREATE TABLE {table} (key text COLLATE \"C\" PRIMARY KEY, workflow text NOT NULL, \
                 snapshot jsonb NOT NULL, version bigint NOT NULL CHECK (version > 0), \
                 updated_at timestamptz NOT NULL DEFAULT now());
                 INSERT INTO {table} VALUES
                   ('old', 'invoice', '{{\"value\":\"draft\"}}', 3, to_timestamp(1600000000));"
            ))
            .await
            .unwrap();
        let store = PostgresStore::connect(&url, &options).await.unwrap();
        // jsonb cannot hold a broken snapshot; a broken format-2 extras column stands in for the
        // damaged record.
        client
            .batch_execute(&format!(
                "INSERT INTO {table} VALUES ('broken', 'invoice', 'null', 1, now(), 2, '{{oops')"
            ))
            .await
            .unwrap();
        crate::store::migrate::check_format_1_migration(&store).await;
        client
            .batch_execute(&format!("UPDATE {table} SET format = 3 WHERE key = 'old'"))
            .await
            .unwrap();
        assert!(matches!(
            store.load("old").await,
            Err(crate::store::StoreError::UnsupportedFormat { format: 3, .. })
        ));
        store.destroy_namespace().await.unwrap();
    }
}
