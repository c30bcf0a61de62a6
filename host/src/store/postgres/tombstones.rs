//! The PostgreSQL store's tombstones (`store/tombstone.rs`): `{namespace}_tombstones`
//! (`key text COLLATE "C" PRIMARY KEY, deleted_at bigint, body text`), indexed on
//! `(deleted_at, key)` so pruning is an index range over the expired ones.
//!
//! A delete that leaves a tombstone is one statement: the conditional `DELETE` in a CTE whose
//! `RETURNING` feeds the `INSERT … ON CONFLICT DO UPDATE` of the tombstone, so both are in one
//! transaction (and the state counts' trigger fires in it too). A lookup reads the tombstones
//! with `NOT EXISTS` on the instances table in the same statement: one snapshot, so a tombstone
//! never stands for a live record.

use super::{PostgresStore, Sql, check_key, fence_params, like_prefix, pg_version};
use crate::store::{Fence, StoreError, Tombstone};

/// The tombstones table beside instances table `t`.
pub fn table(t: &str) -> String {
    format!("{}_tombstones", t.strip_suffix("_instances").unwrap_or(t))
}

/// Creates the table and its index (run with the store's other DDL at connect).
pub fn ddl(t: &str) -> String {
    let tt = table(t);
    format!(
        "CREATE TABLE IF NOT EXISTS {tt} (
             key text COLLATE \"C\" PRIMARY KEY,
             deleted_at bigint NOT NULL,
             body text NOT NULL
         );
         CREATE INDEX IF NOT EXISTS {tt}_time ON {tt} (deleted_at, key);"
    )
}

impl PostgresStore {
    /// [`crate::store::StateStore::delete_leaving`]. Params: key, fence token, holder,
    /// expected, the tombstone's time and JSON.
    pub(super) async fn bury(
        &self,
        key: &str,
        expected: u64,
        fence: Option<&Fence>,
        tombstone: &Tombstone,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let t = &self.table;
        let tt = table(t);
        let sql = format!(
            "WITH gone AS (DELETE FROM {t} WHERE key = $1 AND {} AND version = $4 RETURNING key) \
             INSERT INTO {tt} (key, deleted_at, body) SELECT key, $5, $6 FROM gone \
             ON CONFLICT (key) DO UPDATE SET deleted_at = EXCLUDED.deleted_at, body = EXCLUDED.body",
            Sql::lease_allows("$2", "$3")
        );
        let (token, holder) = fence_params(fence);
        let pg_expected = pg_version(key, expected)?;
        let at = i64::try_from(tombstone.deleted_at_ms).unwrap_or(i64::MAX);
        let body = tombstone.encode();
        let deleted = self
            .execute(
                "delete",
                &sql,
                &[&key, &token, &holder, &pg_expected, &at, &body],
            )
            .await?;
        if deleted == 1 {
            return Ok(true);
        }
        match self.refusal(key, Some(expected), fence).await? {
            Some(refusal) => Err(refusal),
            None => Ok(false),
        }
    }

    /// [`crate::store::StateStore::tombstones`].
    pub(super) async fn tombstones_of(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Tombstone>, StoreError> {
        let t = &self.table;
        let tt = table(t);
        let sql = format!(
            "SELECT key, body FROM {tt} tomb WHERE key LIKE $1 \
             AND NOT EXISTS (SELECT 1 FROM {t} live WHERE live.key = tomb.key) \
             ORDER BY key LIMIT $2"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query("tombstones", &sql, &[&like_prefix(prefix), &limit])
            .await?;
        rows.iter()
            .map(|row| {
                let key: String = super::column(prefix, row, 0)?;
                let body: String = super::column(&key, row, 1)?;
                Tombstone::decode(&key, &body)
            })
            .collect()
    }

    /// [`crate::store::StateStore::prune_tombstones`].
    pub(super) async fn prune(&self, until_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let tt = table(&self.table);
        let sql = format!(
            "DELETE FROM {tt} WHERE key IN (SELECT key FROM {tt} WHERE deleted_at <= $1 \
             ORDER BY deleted_at, key LIMIT $2)"
        );
        let until = i64::try_from(until_ms).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let pruned = self
            .execute("prune tombstones", &sql, &[&until, &limit])
            .await?;
        Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
    }
}
