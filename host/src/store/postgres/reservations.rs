//! The PostgreSQL store's places held for mints in flight ([`StateStore::reserve_owned`]):
//! `{namespace}_reservations` (`owner`, `id`, `until`), a row per place, expiring at `until` in
//! PostgreSQL's clock so that servers whose clocks differ agree.
//!
//! A reservation is one transaction: a transaction-scoped advisory lock on the owner, then one
//! statement that drops the owner's expired rows, adds the new one and counts the live ones. The
//! lock makes two servers' reservations for one owner take turns, and the count, a statement
//! begun after the lock was granted, sees the other's committed row: without it, two
//! transactions would each count without the other's row and both pass. Rows of an owner that
//! stopped minting stay, expired, until its next reservation.
//!
//! [`StateStore::reserve_owned`]: crate::store::StateStore::reserve_owned

use std::time::Duration;

use super::PostgresStore;
use crate::store::StoreError;

/// The reservations table beside instances table `t`.
pub fn table(t: &str) -> String {
    format!("{}_reservations", t.strip_suffix("_instances").unwrap_or(t))
}

/// Creates the table (run with the store's other DDL at connect).
pub fn ddl(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (
             owner text NOT NULL,
             id text NOT NULL,
             until timestamptz NOT NULL,
             PRIMARY KEY (owner, id)
         );",
        table(t)
    )
}

impl PostgresStore {
    /// [`crate::store::StateStore::reserve_owned`].
    pub(super) async fn reserve(
        &self,
        owner: &str,
        reservation: &str,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let r = table(&self.table);
        let lock = format!("turnstile_reserve:{r}:{owner}");
        // The expired rows deleted here are still in this statement's snapshot: the count
        // leaves them out by their time, and adds the row being inserted, which it cannot see.
        let reserve = format!(
            "WITH expired AS (DELETE FROM {r} WHERE owner = $1 AND until <= clock_timestamp()), \
             added AS (INSERT INTO {r} (owner, id, until) \
               VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond') \
               ON CONFLICT (owner, id) DO UPDATE SET until = EXCLUDED.until) \
             SELECT count(*) + 1 FROM {r} \
             WHERE owner = $1 AND id <> $2 AND until > clock_timestamp()"
        );
        let ttl_ms = i64::try_from(ttl.as_millis().max(1)).unwrap_or(i64::MAX);
        self.bounded("reserve", async {
            let mut client = self.pool.get().await.map_err(|e| self.down("reserve", e))?;
            let txn = client
                .transaction()
                .await
                .map_err(|e| self.down("reserve", e))?;
            txn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock])
                .await
                .map_err(|e| self.down("reserve lock", e))?;
            let held: i64 = txn
                .query_one(&reserve, &[&owner, &reservation, &ttl_ms])
                .await
                .map_err(|e| self.down("reserve", e))?
                .get(0);
            txn.commit()
                .await
                .map_err(|e| self.down("reserve commit", e))?;
            Ok(held.max(0) as u64)
        })
        .await
    }

    /// [`crate::store::StateStore::release_owned`].
    pub(super) async fn release(&self, owner: &str, reservation: &str) -> Result<(), StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE owner = $1 AND id = $2",
            table(&self.table)
        );
        self.execute("release reservation", &sql, &[&owner, &reservation])
            .await
            .map(|_| ())
    }
}
