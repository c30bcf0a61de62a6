//! What is kept beside the records by name: machine definitions, marks and tombstones.
//!
//! This module owns the SQL of `{namespace}_machines`, `{namespace}_marks` and the reads of
//! `{namespace}_tombstones` (a delete writes its tombstone in its own transaction, in
//! `records.rs`). It must not touch the records.

use mysql_async::prelude::Queryable;
use turnstile::store::{StoreError, Tombstone};

use crate::{MariaDbStore, link::Kind};

impl MariaDbStore {
    /// Keeps `definition` once: a version names one definition forever, so saving it again
    /// changes nothing.
    pub(crate) async fn keep_machine(
        &self,
        workflow: &str,
        version: &str,
        definition: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let what = "save machine";
        let sql = format!(
            "INSERT INTO {} (workflow, version, definition) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE workflow = workflow",
            self.tables.machines
        );
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(sql, (workflow, version, definition.to_string()))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))
            })
            .await
    }

    pub(crate) async fn machine(
        &self,
        workflow: &str,
        version: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let what = "load machine";
        let sql = format!(
            "SELECT definition FROM {} WHERE workflow = ? AND version = ?",
            self.tables.machines
        );
        let mut conn = self.link.conn(what).await?;
        let text: Option<String> = self
            .link
            .read(what, conn.exec_first(sql, (workflow, version)))
            .await?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                key: format!("{workflow}@{version}"),
                reason: format!("the machine definition is not JSON: {e}"),
            })
        })
        .transpose()
    }

    pub(crate) async fn mark(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let what = "load mark";
        let sql = format!("SELECT value FROM {} WHERE name = ?", self.tables.marks);
        let mut conn = self.link.conn(what).await?;
        self.link.read(what, conn.exec_first(sql, (name,))).await
    }

    pub(crate) async fn set_mark(&self, name: &str, value: u64) -> Result<(), StoreError> {
        let what = "save mark";
        let sql = format!(
            "INSERT INTO {} (name, value) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE value = VALUES(value)",
            self.tables.marks
        );
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(sql, (name, value))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))
            })
            .await
    }

    /// Tombstones of keys starting with `prefix`, in key order, none of a key that has a
    /// record again.
    pub(crate) async fn tombstones_of(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Tombstone>, StoreError> {
        let what = "tombstones";
        let sql = format!(
            "SELECT t.k, t.body FROM {} t WHERE t.k LIKE ? ESCAPE '!' \
             AND NOT EXISTS (SELECT 1 FROM {} i WHERE i.k = t.k) ORDER BY t.k LIMIT ?",
            self.tables.tombstones, self.tables.instances
        );
        let mut conn = self.link.conn(what).await?;
        let rows: Vec<(Vec<u8>, String)> = self
            .link
            .read(
                what,
                conn.exec(sql, (crate::records::like_prefix(prefix), limit as u64)),
            )
            .await?;
        rows.iter()
            .map(|(key, body)| Tombstone::decode(&String::from_utf8_lossy(key), body))
            .collect()
    }

    /// Removes up to `limit` tombstones deleted at or before `until_ms`, oldest first, through
    /// the index on the time of the delete.
    pub(crate) async fn prune(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let what = "prune tombstones";
        let sql = format!(
            "DELETE FROM {} WHERE deleted_at <= ? ORDER BY deleted_at LIMIT ?",
            self.tables.tombstones
        );
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(sql, (until_ms, limit as u64))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                Ok(conn.affected_rows() as usize)
            })
            .await
    }
}
