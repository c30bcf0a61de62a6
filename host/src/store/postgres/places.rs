//! The PostgreSQL store's places under the per-principal limits
//! ([`StateStore::reserve_place`]): `{namespace}_places` (`scope`, `id`, `until`), a row per
//! place, lapsing at `until` in PostgreSQL's clock so that servers whose clocks differ agree.
//!
//! Taking a place is one transaction: a transaction-scoped advisory lock on the scope, then one
//! statement that drops the scope's lapsed rows, adds (or renews) the place and counts the live
//! ones. The lock makes two servers' places in one scope take turns, and the count, a statement
//! begun after the lock was granted, sees the other's committed row: without it, two
//! transactions would each count without the other's row and both pass. Lapsed rows of a scope
//! no one takes places in any more stay until its next place.
//!
//! [`StateStore::reserve_place`]: crate::store::StateStore::reserve_place

use std::time::Duration;

use super::PostgresStore;
use crate::store::StoreError;

/// The places table beside instances table `t`.
pub fn table(t: &str) -> String {
    format!("{}_places", t.strip_suffix("_instances").unwrap_or(t))
}

/// Creates the table (run with the store's other DDL at connect).
pub fn ddl(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (
             scope text NOT NULL,
             id text NOT NULL,
             until timestamptz NOT NULL,
             PRIMARY KEY (scope, id)
         );",
        table(t)
    )
}

impl PostgresStore {
    /// [`crate::store::StateStore::reserve_place`].
    pub(super) async fn reserve(
        &self,
        scope: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let p = table(&self.table);
        let lock = format!("turnstile_place:{p}:{scope}");
        // The lapsed rows deleted here are still in this statement's snapshot: the count leaves
        // them out by their time, and adds the place being written, which it cannot see.
        let reserve = format!(
            "WITH lapsed AS (DELETE FROM {p} WHERE scope = $1 AND until <= clock_timestamp()), \
             added AS (INSERT INTO {p} (scope, id, until) \
               VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond') \
               ON CONFLICT (scope, id) DO UPDATE SET until = EXCLUDED.until) \
             SELECT count(*) + 1 FROM {p} \
             WHERE scope = $1 AND id <> $2 AND until > clock_timestamp()"
        );
        let ttl_ms = i64::try_from(ttl.as_millis().max(1)).unwrap_or(i64::MAX);
        let held: i64 = self
            .in_transaction("reserve a place", Some(&lock), async |txn| {
                txn.query_one(&reserve, &[&scope, &id, &ttl_ms])
                    .await
                    .map_err(|e| self.down("reserve a place", e))
                    .map(|row| row.get(0))
            })
            .await?;
        Ok(held.max(0) as u64)
    }

    /// [`crate::store::StateStore::release_place`].
    pub(super) async fn release(&self, scope: &str, id: &str) -> Result<(), StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE scope = $1 AND id = $2",
            table(&self.table)
        );
        self.execute("release a place", &sql, &[&scope, &id])
            .await
            .map(|_| ())
    }
}
