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
//! Leases (see `lease.rs`) are columns of the instance's row: `fence bigint` (the token of the
//! last grant), `lease_holder text` and `lease_until timestamptz` (PostgreSQL's clock, so
//! servers' clocks need not agree), and `lease_wanted_by`/`lease_wanted_until`, the mark of an
//! asker waiting for it. A save or delete checks them in its `WHERE`, under the same
//! row lock as the version, so a grant and a write on one instance are serialized by the row;
//! a renewal, too, extends `lease_until` only where `fence` and `lease_holder` are the ones it
//! names and the lease lives.
//!
//! Changes are announced with `NOTIFY` on one of 1,024 channels of the namespace, picked by a
//! digest of the instance's key, carrying `origin` and the key; a server `LISTEN`s, on a
//! connection of its own, to the channels of the instances it watches, and passes on the
//! changes of those instances only (`postgres/feed.rs`; see `changes.rs`).
//!
//! What deletes leave lives in `{namespace}_tombstones` (`postgres/tombstones.rs`).
//!
//! Machine definitions live in `{namespace}_machines` (`workflow, version, definition jsonb`),
//! written once per version.
//!
//! The counts by state live in `{namespace}_state_counts`, moved by a trigger on the instances
//! table in the transaction of each write, from the tally each row keeps (`counted_machine`,
//! `counted_states`); see `postgres/state_counts.rs`.
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
    AuditEntry, ChangeFeed, Due, Durability, Fence, InstanceRecord, LeaseGrant, LeaseRenewal,
    StateCounts, StateStore, StoreError, StoreOptions, Tally, Tombstone, WANTED_FOR, chain,
    check_key, check_save, conflict, format, invalid, redact,
};

mod feed;
mod places;
mod state_counts;
mod tombstones;

/// The rows whose key names an owner (`owned.rs`: `handle/…@owner`), and the owner such a key
/// names: the index behind [`StateStore::count_owned`] is on this expression, for these rows.
const OWNED_KEYS: &str = "key LIKE 'handle/%@%'";
const OWNER_OF_KEY: &str = "substr(key, strpos(key, '@') + 1)";

/// Every statement, with the table name filled in once at connect time (the namespace is
/// validated to `[a-z0-9_]`, so interpolating it is safe).
struct Sql {
    load: String,
    save_machine: String,
    load_machine: String,
    load_mark: String,
    save_mark: String,
    insert: String,
    update: String,
    /// `insert` and `update` that also append an audit entry, in the same statement: the entry
    /// is inserted only for the row the save wrote, so the statement's row count is still 1 for
    /// a save and 0 for a conflict.
    insert_audited: String,
    update_audited: String,
    audit: String,
    version: String,
    /// What a conditional write that changed nothing found: version and whether its lease
    /// check passed, with the live lease's remaining ms.
    write_state: String,
    delete: String,
    delete_if: String,
    acquire: String,
    lease_left: String,
    renew: String,
    release: String,
    list: String,
    count: String,
    count_owned: String,
    list_owned: String,
    due: String,
    count_by_state: String,
}

impl Sql {
    fn insert(t: &str) -> String {
        format!(
            "INSERT INTO {t} \
             (key, workflow, snapshot, version, updated_at, format, extras, due_at, \
              counted_machine, counted_states) \
             VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000), $6, $7, $8, $9, $10) \
             ON CONFLICT (key) DO NOTHING"
        )
    }

    fn update(t: &str) -> String {
        format!(
            "UPDATE {t} SET workflow = $2, snapshot = $3, version = $4, \
             updated_at = to_timestamp($5::float8 / 1000), format = $7, extras = $8, \
             due_at = $9, counted_machine = $12, counted_states = $13 \
             WHERE key = $1 AND version = $6 AND {}",
            Self::lease_allows("$10", "$11")
        )
    }

    /// The condition under which a write naming fence token `token` of holder `holder` (both
    /// NULL for none) may change a row (see `lease.rs`).
    fn lease_allows(token: &str, holder: &str) -> String {
        format!(
            "COALESCE(CASE WHEN {token}::bigint IS NULL \
               THEN lease_until IS NULL OR lease_until <= clock_timestamp() \
               ELSE fence = {token}::bigint AND lease_holder = {holder}::text \
                    AND lease_until > clock_timestamp() END, false)"
        )
    }

    /// The statements for instances table `t`, machines table `machines`, keeping the last
    /// `audit_keep` versions' audit entries of each instance.
    fn new(t: &str, machines: &str, audit_keep: u64) -> Self {
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
            load_mark: format!(
                "SELECT value FROM {marks} WHERE name = $1",
                marks = marks_table(t)
            ),
            save_mark: format!(
                "INSERT INTO {marks} (name, value) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                marks = marks_table(t)
            ),
            insert: Self::insert(t),
            update: Self::update(t),
            insert_audited: format!(
                "WITH saved AS ({} RETURNING key) \
                 INSERT INTO {audit} (key, version, entry) SELECT key, $4, $11 FROM saved",
                Self::insert(t)
            ),
            // Data-modifying CTEs run whether or not anything reads them: the trim drops the
            // entries older than the last `audit_keep` versions in the same statement.
            update_audited: format!(
                "WITH saved AS ({} RETURNING key), \
                 trimmed AS (DELETE FROM {audit} WHERE key IN (SELECT key FROM saved) \
                   AND version <= $4::bigint - {audit_keep}) \
                 INSERT INTO {audit} (key, version, entry) SELECT key, $4, $14 FROM saved",
                Self::update(t)
            ),
            audit: format!("SELECT entry FROM {audit} WHERE key = $1 ORDER BY version"),
            version: format!("SELECT version FROM {t} WHERE key = $1"),
            write_state: format!(
                "SELECT version, {}, \
                 GREATEST(0, (EXTRACT(EPOCH FROM lease_until - clock_timestamp()) * 1000)::bigint) \
                 FROM {t} WHERE key = $1",
                Self::lease_allows("$2", "$3")
            ),
            delete: format!(
                "DELETE FROM {t} WHERE key = $1 AND {}",
                Self::lease_allows("$2", "$3")
            ),
            delete_if: format!(
                "DELETE FROM {t} WHERE key = $1 AND {} AND version = $4",
                Self::lease_allows("$2", "$3")
            ),
            // A live lease of the asker is renewed with its token; a lapsed one (anyone's) is
            // granted anew with the next token.
            // A released lease has no holder; one that lapsed keeps it: granting over that is a
            // takeover.
            // A live lease of the asker is renewed with its token (its wanted mark kept); a
            // free one is granted anew with the next token, unless another asker's wanted mark
            // keeps it for that asker.
            acquire: format!(
                "WITH old AS (SELECT key, lease_holder, lease_until, lease_wanted_by, \
                   lease_wanted_until FROM {t} WHERE key = $1 FOR UPDATE) \
                 UPDATE {t} SET \
                   fence = CASE WHEN {t}.lease_holder = $2 \
                                 AND {t}.lease_until > clock_timestamp() \
                           THEN {t}.fence ELSE {t}.fence + 1 END, \
                   lease_wanted_by = CASE WHEN {t}.lease_holder = $2 \
                                 AND {t}.lease_until > clock_timestamp() \
                           THEN {t}.lease_wanted_by END, \
                   lease_wanted_until = CASE WHEN {t}.lease_holder = $2 \
                                 AND {t}.lease_until > clock_timestamp() \
                           THEN {t}.lease_wanted_until END, \
                   lease_holder = $2, \
                   lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' \
                 FROM old WHERE {t}.key = old.key \
                   AND ((old.lease_holder = $2 AND old.lease_until > clock_timestamp()) \
                     OR ((old.lease_until IS NULL OR old.lease_until <= clock_timestamp()) \
                       AND (old.lease_wanted_until IS NULL \
                         OR old.lease_wanted_until <= clock_timestamp() \
                         OR old.lease_wanted_by = $2))) \
                 RETURNING {t}.fence, \
                   old.lease_holder IS NOT NULL AND old.lease_until <= clock_timestamp(), \
                   {t}.version, \
                   COALESCE({t}.lease_wanted_until > clock_timestamp(), false)"
            ),
            // Not granted: marks it wanted by the asker (unless another asker's mark lives),
            // and says how long the lease, or the mark keeping it, lives.
            lease_left: format!(
                "UPDATE {t} SET \
                   lease_wanted_by = CASE WHEN lease_wanted_until > clock_timestamp() \
                       AND lease_wanted_by <> $3 THEN lease_wanted_by ELSE $3 END, \
                   lease_wanted_until = CASE WHEN lease_wanted_until > clock_timestamp() \
                       AND lease_wanted_by <> $3 THEN lease_wanted_until \
                       ELSE clock_timestamp() + $2::bigint * interval '1 millisecond' END \
                 WHERE key = $1 \
                 RETURNING GREATEST(0, (EXTRACT(EPOCH FROM \
                   GREATEST(lease_until, lease_wanted_until) - clock_timestamp()) * 1000)::bigint)"
            ),
            // Only the lease named, while it lives: a renewal is never a grant.
            renew: format!(
                "UPDATE {t} SET \
                   lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond' \
                 WHERE key = $1 AND fence = $2 AND lease_holder = $3 \
                   AND lease_until > clock_timestamp() \
                 RETURNING COALESCE(lease_wanted_until > clock_timestamp(), false)"
            ),
            release: format!(
                "UPDATE {t} SET lease_holder = NULL, lease_until = NULL \
                 WHERE key = $1 AND fence = $2 AND lease_holder = $3"
            ),
            list: format!(
                "SELECT key FROM {t} WHERE key LIKE $1 AND key > $2 ORDER BY key LIMIT $3"
            ),
            count: format!("SELECT count(*) FROM {t} WHERE key LIKE $1"),
            // The same expression and predicate as the `_owner_key` index, so the planner uses it.
            count_owned: format!(
                "SELECT count(*) FROM {t} WHERE {OWNED_KEYS} AND {OWNER_OF_KEY} = $1"
            ),
            // `key > $2` is the page boundary ('' for the first page): the index is on (owner,
            // key), so a page reads what it returns.
            list_owned: format!(
                "SELECT key FROM {t} WHERE {OWNED_KEYS} AND {OWNER_OF_KEY} = $1 AND key > $2 \
                 ORDER BY {OWNER_OF_KEY}, key LIMIT $3"
            ),
            // `(due_at, key) > ($2, $3)` is the page boundary: a row comparison the index serves.
            due: format!(
                "SELECT due_at, key FROM {t} \
                 WHERE due_at IS NOT NULL AND due_at <= $1 AND (due_at, key) > ($2, $3) \
                 ORDER BY due_at, key LIMIT $4"
            ),
            count_by_state: state_counts::read_sql(t),
        }
    }
}

/// The table of audit trails beside the instances table `t`: one row per entry, deleted with
/// its instance (`ON DELETE CASCADE`).
/// The marks of [`StateStore::save_mark`]: `{namespace}_marks`.
fn marks_table(t: &str) -> String {
    format!("{}_marks", t.strip_suffix("_instances").unwrap_or(t))
}

fn audit_table(t: &str) -> String {
    // `t` is `{namespace}_instances`; the trail is `{namespace}_audit`.
    format!("{}_audit", t.strip_suffix("_instances").unwrap_or(t))
}

/// PostgreSQL-backed store.
pub struct PostgresStore {
    name: String,
    /// How to connect, for the change feed's own connection.
    config: tokio_postgres::Config,
    namespace: String,
    pool: Pool,
    table: String,
    machines: String,
    op_timeout: Duration,
    sql: Sql,
}

/// Turns PostgreSQL's JIT compilation off for the store's connections, unless the URL's
/// `options` set `jit` themselves (theirs come after, and win).
///
/// Every statement of the store touches a few rows by key, where compiling costs milliseconds
/// and saves nothing. The planner compiles whatever it estimates costly, and it estimates from
/// statistics that lag (never gathered where autovacuum is off): on such a server, filled with a
/// million instances, the state-counts query reading 77 rows was estimated at 1.2 million and
/// compiled, 5 ms of compiling (`EXPLAIN ANALYZE`) for a scan of 0.2 ms.
fn without_jit(config: &mut tokio_postgres::Config) {
    let options = match config.get_options() {
        Some(theirs) => format!("-c jit=off {theirs}"),
        None => "-c jit=off".to_owned(),
    };
    config.options(&options);
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
        without_jit(&mut config);
        let manager = Manager::from_config(
            config.clone(),
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
            config,
            namespace: options.namespace.clone(),
            pool,
            sql: Sql::new(&table, &machines, options.audit_keep.max(1)),
            table,
            machines,
            op_timeout: options.op_timeout,
        };
        store.migrate().await.map_err(StoreError::when_connecting)?;
        store
            .build_state_counts()
            .await
            .map_err(StoreError::when_connecting)?;
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
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_holder text;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_until timestamptz;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_wanted_by text;
             ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_wanted_until timestamptz;
             CREATE INDEX IF NOT EXISTS {t}_due ON {t} (due_at, key) WHERE due_at IS NOT NULL;
             CREATE INDEX IF NOT EXISTS {t}_owner_key ON {t} (({OWNER_OF_KEY}), key) WHERE {OWNED_KEYS};
             DROP INDEX IF EXISTS {t}_owner;
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
             );
             CREATE TABLE IF NOT EXISTS {marks} (name text PRIMARY KEY, value bigint NOT NULL);
             {counts}
             {tombstones}
             {places}",
            m = self.machines,
            marks = marks_table(t),
            a = audit_table(t),
            counts = state_counts::ddl(t),
            tombstones = tombstones::ddl(t),
            places = places::ddl(t),
        );
        let lock = format!("turnstile_store_migrate:{t}");
        self.in_transaction("migrate", Some(&lock), async |txn| {
            txn.batch_execute(&ddl)
                .await
                .map_err(|e| self.down("migrate", e))
        })
        .await
    }

    /// Runs `work` in a transaction on a pooled connection, under `op_timeout`, and commits
    /// it; a failure anywhere rolls it back (the transaction is dropped uncommitted). With a
    /// `lock`, the transaction first takes the transaction-scoped advisory lock of that name,
    /// so that the transactions naming it, on any server, take turns.
    async fn in_transaction<T>(
        &self,
        what: &str,
        lock: Option<&str>,
        work: impl AsyncFnOnce(&tokio_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.bounded(what, async {
            let mut client = self.pool.get().await.map_err(|e| self.down(what, e))?;
            let txn = client.transaction().await.map_err(|e| self.down(what, e))?;
            if let Some(lock) = lock {
                txn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock])
                    .await
                    .map_err(|e| self.down(&format!("{what}: lock"), e))?;
            }
            let done = work(&txn).await?;
            txn.commit()
                .await
                .map_err(|e| self.down(&format!("{what}: commit"), e))?;
            Ok(done)
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
                Err(StoreError::NoAnswer(format!(
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

    /// [`Self::execute`] for a save: a connection that broke once the statement was sent on it
    /// (not a refusal from PostgreSQL, which answered) may have carried it, and PostgreSQL may
    /// commit it still ([`StoreError::Dropped`]). Failing to get a connection or to prepare
    /// the statement sent nothing.
    async fn execute_save(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.bounded("save", async {
            let client = self.pool.get().await.map_err(|e| self.down("save", e))?;
            let stmt = client
                .prepare_cached(sql)
                .await
                .map_err(|e| self.down("save", e))?;
            client.execute(&stmt, params).await.map_err(|e| {
                if e.as_db_error().is_some() {
                    self.down("save", e)
                } else {
                    StoreError::Dropped(format!(
                        "{}: the connection broke while a save was in flight: {}",
                        self.name,
                        chain(&e)
                    ))
                }
            })
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

    /// Why a write under `fence` expecting `expected` changed nothing: the lease refused it
    /// ([`StoreError::Fenced`], checked first, as the other stores do) or the version did
    /// ([`StoreError::Conflict`]; `Ok(None)` for a delete of a record that is not there).
    async fn refusal(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<Option<StoreError>, StoreError> {
        let (token, holder) = fence_params(fence);
        let rows = self
            .query(
                "read write state",
                &self.sql.write_state,
                &[&key, &token, &holder],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(expected.map(|expected| conflict(key, expected, None)));
        };
        let version = version_from(key, column(key, row, 0)?)?;
        let allowed: bool = column(key, row, 1)?;
        let left: Option<i64> = column(key, row, 2)?;
        if !allowed {
            return Ok(Some(StoreError::Fenced {
                key: key.to_owned(),
                remaining_ms: left.filter(|&ms| ms > 0).map(|ms| ms as u64),
            }));
        }
        Ok(expected
            .filter(|&expected| expected != version)
            .map(|expected| conflict(key, expected, Some(version))))
    }

    /// The `NOTIFY` channel of the instance under `key` (of its shard: see `feed.rs`).
    fn changed_channel(&self, key: &str) -> String {
        feed::changed_channel(&self.namespace, key)
    }

    /// A feed of the changes announced on the channels it is told to watch, on a connection of
    /// its own (`LISTEN` holds a session), which ends when that connection does.
    async fn subscribe_changed(&self) -> Result<ChangeFeed, StoreError> {
        use futures_util::StreamExt;
        // Keepalives, so that a connection a firewall dropped silently is noticed and the feed
        // ends (and is opened again) instead of going quiet for good.
        let mut config = self.config.clone();
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
        let connected = tokio::time::timeout(self.op_timeout, config.connect(NoTls)).await;
        let (client, mut connection) = match connected {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(self.down("listen connect", e)),
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "{}: listen connect timed out after {:?}",
                    self.name, self.op_timeout
                )));
            }
        };
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let (subscriptions, watched) = feed::Subscriptions::new(
            client,
            self.namespace.clone(),
            self.name.clone(),
            self.op_timeout,
        );
        // The connection delivers notifications only while it is polled: a task of its own
        // polls it until it closes, which ends the feed. It passes on the changes of the keys
        // watched, of all those its shards' channels carry.
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let tokio_postgres::AsyncMessage::Notification(note) = message
                    && let Some(change) = watched.pass(note.payload())
                    && sender.send(change).is_err()
                {
                    break;
                }
            }
        });
        Ok(ChangeFeed {
            changes: Box::pin(futures_util::stream::poll_fn(move |cx| {
                receiver.poll_recv(cx)
            })),
            subscriptions: Box::new(subscriptions),
        })
    }

    /// Drops this store's table. For tests: a namespace per test keeps parallel runs apart.
    #[cfg(test)]
    pub(super) async fn destroy_namespace(&self) -> Result<(), StoreError> {
        let sql = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}, {}, {}, {}; DROP FUNCTION IF EXISTS {}",
            audit_table(&self.table),
            marks_table(&self.table),
            self.table,
            self.machines,
            state_counts::counts_table(&self.table),
            state_counts::built_table(&self.table),
            tombstones::table(&self.table),
            places::table(&self.table),
            state_counts::trigger_function(&self.table),
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

/// A fence as the statements' token and holder parameters (both NULL for none).
fn fence_params(fence: Option<&Fence>) -> (Option<i64>, Option<&str>) {
    match fence {
        Some(fence) => (
            Some(i64::try_from(fence.token).unwrap_or(i64::MAX)),
            Some(&*fence.holder),
        ),
        None => (None, None),
    }
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

    fn keeps_leases(&self) -> bool {
        true
    }

    fn indexes_due_times(&self) -> bool {
        true
    }

    async fn announce_change(&self, origin: &str, key: &str) -> Result<(), StoreError> {
        let channel = self.changed_channel(key);
        let payload = format!("{origin}\n{key}");
        self.execute("notify", "SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .map(|_| ())
    }

    async fn watch_changes(&self) -> Option<Result<ChangeFeed, StoreError>> {
        Some(self.subscribe_changed().await)
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
        let tally = Tally::of(record);
        let counted_machine = tally.machine();
        let counted_states: Vec<&str> = tally.states().collect();
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
                &counted_machine,
                &counted_states,
            ];
            let sql = match &audit {
                Some(entry) => {
                    params.push(entry);
                    &self.sql.insert_audited
                }
                None => &self.sql.insert,
            };
            self.execute_save(sql, &params).await?
        } else {
            let pg_expected = pg_version(key, expected)?;
            let (token, holder) = fence_params(record.fence.as_ref());
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
                &key,
                &record.workflow,
                &record.snapshot,
                &version,
                &updated_at,
                &pg_expected,
                &format,
                &extras,
                &due,
                &token,
                &holder,
                &counted_machine,
                &counted_states,
            ];
            let sql = match &audit {
                Some(entry) => {
                    params.push(entry);
                    &self.sql.update_audited
                }
                None => &self.sql.update,
            };
            self.execute_save(sql, &params).await?
        };
        if changed == 1 {
            return Ok(());
        }
        if expected == 0 {
            return Err(conflict(key, expected, self.current_version(key).await?));
        }
        Err(self
            .refusal(key, Some(expected), record.fence.as_ref())
            .await?
            // Changed meanwhile so that the write would pass now: report what it raced.
            .unwrap_or_else(|| conflict(key, expected, Some(expected))))
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

    async fn load_mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let rows = self
            .query("load mark", &self.sql.load_mark, &[&name])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let value: i64 = column(name, row, 0)?;
        Ok(Some(value as u64))
    }

    async fn save_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        let value = i64::try_from(value).map_err(|_| StoreError::Invalid {
            key: name.to_owned(),
            reason: format!("a mark is below 2^63, not {value}"),
        })?;
        self.execute("save mark", &self.sql.save_mark, &[&name, &value])
            .await
            .map(|_| ())
    }

    async fn reserve_place(
        &self,
        scope: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        self.reserve(scope, id, ttl).await.map(Some)
    }

    async fn release_place(&self, scope: &str, id: &str) -> Result<(), StoreError> {
        self.release(scope, id).await
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

    async fn delete(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let (token, holder) = fence_params(fence);
        let deleted = match expected {
            None => {
                self.execute("delete", &self.sql.delete, &[&key, &token, &holder])
                    .await?
            }
            Some(expected) => {
                let pg_expected = pg_version(key, expected)?;
                self.execute(
                    "delete",
                    &self.sql.delete_if,
                    &[&key, &token, &holder, &pg_expected],
                )
                .await?
            }
        };
        if deleted == 1 {
            return Ok(true);
        }
        match self.refusal(key, expected, fence).await? {
            Some(refusal) => Err(refusal),
            None => Ok(false),
        }
    }

    async fn acquire_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        check_key(key)?;
        let ttl_ms = i64::try_from(ttl.as_millis().max(1)).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "acquire lease",
                &self.sql.acquire,
                &[&key, &holder, &ttl_ms],
            )
            .await?;
        if let Some(row) = rows.first() {
            let token: i64 = column(key, row, 0)?;
            return Ok(LeaseGrant::Held {
                token: token.max(0) as u64,
                took_over: column(key, row, 1)?,
                version: version_from(key, column(key, row, 2)?)?,
                wanted: column(key, row, 3)?,
            });
        }
        let wanted_for = WANTED_FOR.as_millis() as i64;
        let rows = self
            .query(
                "read lease",
                &self.sql.lease_left,
                &[&key, &wanted_for, &holder],
            )
            .await?;
        Ok(match rows.first() {
            None => LeaseGrant::Absent,
            Some(row) => LeaseGrant::Busy {
                remaining_ms: column::<Option<i64>>(key, row, 0)?.unwrap_or(0).max(0) as u64,
            },
        })
    }

    async fn renew_lease(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        check_key(key)?;
        let token = i64::try_from(fence.token).unwrap_or(i64::MAX);
        let ttl_ms = i64::try_from(ttl.as_millis().max(1)).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "renew lease",
                &self.sql.renew,
                &[&key, &token, &&*fence.holder, &ttl_ms],
            )
            .await?;
        Ok(match rows.first() {
            Some(row) => LeaseRenewal::Renewed {
                wanted: column(key, row, 0)?,
            },
            None => LeaseRenewal::Lost,
        })
    }

    async fn release_lease(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        let token = i64::try_from(fence.token).unwrap_or(i64::MAX);
        self.execute(
            "release lease",
            &self.sql.release,
            &[&key, &token, &&*fence.holder],
        )
        .await
        .map(|_| ())
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

    async fn count_owned(&self, owner: &str) -> Result<u64, StoreError> {
        let rows = self
            .query("count owned", &self.sql.count_owned, &[&owner])
            .await?;
        let n: i64 = rows.first().map_or(Ok(0), |row| column(owner, row, 0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn list_owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query(
                "list owned",
                &self.sql.list_owned,
                &[&owner, &after.unwrap_or(""), &limit],
            )
            .await?;
        rows.iter().map(|row| column(owner, row, 0)).collect()
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        let rows = self
            .query("count by state", &self.sql.count_by_state, &[])
            .await?;
        let mut counts = StateCounts::default();
        for row in &rows {
            counts.add_line(
                &column::<String>("count by state", row, 0)?,
                &column::<String>("count by state", row, 1)?,
                &column::<String>("count by state", row, 2)?,
                column("count by state", row, 3)?,
            );
        }
        Ok(counts)
    }

    async fn recount_by_state(&self) -> Result<StateCounts, StoreError> {
        self.recount().await?;
        self.count_by_state().await
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

    /// One statement: the delete and the tombstone's insert (`postgres/tombstones.rs`).
    async fn delete_leaving(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        self.bury(key, expected, fence, tombstone).await
    }

    async fn tombstones(&self, prefix: &str, limit: usize) -> Result<Vec<Tombstone>, StoreError> {
        self.tombstones_of(prefix, limit).await
    }

    async fn prune_tombstones(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.prune(until_ms, limit).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::contract::builtin::{postgres_url, unique_options};
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

    /// The store's connections do not compile statements, unless the URL's options say
    /// otherwise; the URL's other settings are kept.
    #[tokio::test]
    async fn the_store_connects_without_jit_unless_told_otherwise() {
        let shown = async |url: String| -> (String, String) {
            let store = PostgresStore::connect(&url, &unique_options())
                .await
                .unwrap();
            let client = store.pool.get().await.unwrap();
            let show = async |setting: &str| -> String {
                let row = client.query_one(&format!("SHOW {setting}"), &[]).await;
                row.unwrap().get(0)
            };
            let shown = (show("jit").await, show("application_name").await);
            drop(client);
            store.destroy_namespace().await.unwrap();
            shown
        };
        let url = postgres_url();
        let with = |setting: &str| {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}{setting}")
        };
        let (jit, name) = shown(with("application_name=mine")).await;
        assert_eq!((jit.as_str(), name.as_str()), ("off", "mine"));
        let (jit, _) = shown(with("options=-c%20jit%3Don")).await;
        assert_eq!(jit, "on", "the URL's own setting wins");
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
            .batch_execute(&format!("UPDATE {table} SET format = 4 WHERE key = 'old'"))
            .await
            .unwrap();
        assert!(matches!(
            store.load("old").await,
            Err(crate::store::StoreError::UnsupportedFormat { format: 4, .. })
        ));
        store.destroy_namespace().await.unwrap();
    }
}
