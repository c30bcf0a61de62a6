//! The tables of one namespace, created if missing when a store opens, and dropped on request.
//!
//! This module owns the names and the `CREATE TABLE` statements. It must not hold the SQL of
//! the operations: each module writes its own against the names here.
//!
//! Keys are `VARBINARY(1024)`: byte order is the order `list_keys` promises, `LIKE` compares
//! bytes, and 1024 bytes (the contract's longest key) fits InnoDB's index limit, which a
//! `utf8mb4` `VARCHAR(1024)` would not. JSON is kept as `LONGTEXT` in `utf8mb4`, whatever the
//! database's default character set is.

use mysql_async::prelude::Queryable;
use turnstile::store::{StoreError, StoreOptions};

use crate::link::{Kind, Link};

/// The tables of one namespace: `{namespace}_instances` and its neighbours.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    /// One row per record, its lease in columns of its own.
    pub(crate) instances: String,
    /// Each instance's audit trail, deleted with it (a foreign key `ON DELETE CASCADE`).
    pub(crate) audit: String,
    /// Machine definitions by workflow and version.
    pub(crate) machines: String,
    /// The marks of `save_mark`.
    pub(crate) marks: String,
    /// What deletes left, by key, indexed by the time of the delete.
    pub(crate) tombstones: String,
    /// Announced changes, polled by the change feeds and pruned by age.
    pub(crate) changes: String,
}

impl Tables {
    /// The tables of `options.namespace`, once it is checked to make safe table names.
    pub(crate) fn of(options: &StoreOptions) -> Result<Tables, StoreError> {
        let ns = &options.namespace;
        let ok = ns.len() <= 48
            && ns.starts_with(|c: char| c.is_ascii_lowercase())
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(StoreError::Config(format!(
                "namespace {ns:?} must be 1-48 of [a-z0-9_], starting with a letter"
            )));
        }
        Ok(Tables {
            instances: format!("{ns}_instances"),
            audit: format!("{ns}_audit"),
            machines: format!("{ns}_machines"),
            marks: format!("{ns}_marks"),
            tombstones: format!("{ns}_tombstones"),
            changes: format!("{ns}_changes"),
        })
    }

    /// The statements creating every missing table, in an order the foreign key allows.
    fn create(&self) -> Vec<String> {
        let Tables {
            instances,
            audit,
            machines,
            marks,
            tombstones,
            changes,
        } = self;
        let tail = "ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";
        vec![
            // `body` is the record as JSON; `version` and `due_at` are kept beside it, where
            // SQL can compare and index them. `owner` is the owner the key names (NULL for
            // none), indexed for `count_owned`. The lease: `fence` (the token of the last
            // grant), `lease_holder`, `lease_until`, and the mark of an asker waiting for it.
            format!(
                "CREATE TABLE IF NOT EXISTS {instances} (
                    k VARBINARY(1024) NOT NULL PRIMARY KEY,
                    owner VARBINARY(1024) NULL,
                    body LONGTEXT NOT NULL,
                    version BIGINT UNSIGNED NOT NULL,
                    due_at BIGINT UNSIGNED NULL,
                    fence BIGINT UNSIGNED NOT NULL DEFAULT 0,
                    lease_holder VARCHAR(255) NULL,
                    lease_until DATETIME(6) NULL,
                    lease_wanted_by VARCHAR(255) NULL,
                    lease_wanted_until DATETIME(6) NULL,
                    INDEX {instances}_due (due_at, k),
                    INDEX {instances}_owner (owner, k)
                ) {tail}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {audit} (
                    k VARBINARY(1024) NOT NULL,
                    version BIGINT UNSIGNED NOT NULL,
                    entry LONGTEXT NOT NULL,
                    PRIMARY KEY (k, version),
                    CONSTRAINT {audit}_instance FOREIGN KEY (k) REFERENCES {instances} (k)
                        ON DELETE CASCADE
                ) {tail}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {machines} (
                    workflow VARBINARY(512) NOT NULL,
                    version VARBINARY(512) NOT NULL,
                    definition LONGTEXT NOT NULL,
                    PRIMARY KEY (workflow, version)
                ) {tail}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {marks} (
                    name VARBINARY(255) NOT NULL PRIMARY KEY,
                    value BIGINT UNSIGNED NOT NULL
                ) {tail}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {tombstones} (
                    k VARBINARY(1024) NOT NULL PRIMARY KEY,
                    deleted_at BIGINT UNSIGNED NOT NULL,
                    body LONGTEXT NOT NULL,
                    INDEX {tombstones}_age (deleted_at)
                ) {tail}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {changes} (
                    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
                    origin VARCHAR(255) NOT NULL,
                    k VARBINARY(1024) NOT NULL,
                    at DATETIME(6) NOT NULL,
                    INDEX {changes}_age (at)
                ) {tail}"
            ),
        ]
    }

    /// Creates the tables that are missing. Two servers starting at once take turns through a
    /// named lock, so neither sees the other's half-made schema.
    pub(crate) async fn create_missing(&self, link: &Link) -> Result<(), StoreError> {
        let what = "create tables";
        let mut conn = link.conn(what).await?;
        let lock = format!("{}_schema", self.instances);
        link.bounded(what, async {
            let got: Option<Option<i64>> = conn
                .exec_first("SELECT GET_LOCK(?, 30)", (&lock,))
                .await
                .map_err(|e| link.failed(what, Kind::Write, e))?;
            if got.flatten() != Some(1) {
                return Err(StoreError::Unavailable(format!(
                    "{}: {what}: another server held the schema lock {lock:?} for 30 s",
                    link.name()
                )));
            }
            let mut result = Ok(());
            for statement in self.create() {
                if let Err(e) = conn.query_drop(statement).await {
                    result = Err(link.failed(what, Kind::Write, e));
                    break;
                }
            }
            // The lock also goes with the connection, should this fail.
            let _: Result<Option<Option<i64>>, _> =
                conn.exec_first("SELECT RELEASE_LOCK(?)", (&lock,)).await;
            result
        })
        .await
    }

    /// Drops every table of the namespace, and with them everything it held.
    pub(crate) async fn drop_all(&self, link: &Link) -> Result<(), StoreError> {
        let what = "drop tables";
        let mut conn = link.conn(what).await?;
        // The audit trail refers to the instances: it goes first.
        let statement = format!(
            "DROP TABLE IF EXISTS {}, {}, {}, {}, {}, {}",
            self.audit, self.instances, self.machines, self.marks, self.tombstones, self.changes
        );
        link.bounded(what, async {
            conn.query_drop(statement)
                .await
                .map_err(|e| link.failed(what, Kind::Write, e))
        })
        .await
    }
}
