//! The PostgreSQL store's counts by state (`store/state_counts.rs`): a table moved by a trigger
//! in the transaction of every write to the instances table, summed on read.
//!
//! Each row keeps the tally it is counted under, `counted_machine` and `counted_states` (the
//! state paths; both NULL: counted nowhere), written by the save from `Tally`. The trigger
//! [`trigger_function`] takes the old row's tally off `{namespace}_state_counts` and puts the
//! new one on, so a save, a delete, a retention delete and a migration's rewrite all move the
//! counts in their own transaction, whichever statement they use; it fires only when the
//! tally's columns or the workflow are written, so a lease's renewal costs it nothing, and a
//! save that moves nothing changes no count row.
//!
//! Hot rows: every move out of a busy state would update that state's one count row, and the
//! saves of different instances would queue on its row lock. So each line is kept in
//! [`STRIPES`] rows, one per `pg_backend_pid() % STRIPES`: the saves on different connections
//! mostly update different rows, and a read sums them (a table of lines × stripes rows, never
//! the instances). A trigger updates its lines in one order, so two saves that meet on a stripe
//! wait for each other and never deadlock.
//!
//! Counting again ([`PostgresStore::recount`]) first *settles* every row, page by page, setting
//! its tally where it is missing (a row written before the index, or by older code beside this
//! one) or wrong (a save by older code keeps the old tally): a compare-and-set on the version,
//! so the trigger moves the counts as for a save. Then, in one short transaction holding the
//! counts table against the triggers, it sums the rows' tallies into the table afresh: a write
//! that came meanwhile waits and moves the fresh counts after. `{namespace}_indexes_built`
//! then holds the rule's version: a store without it (or with another) is counted again at
//! connect.
//!
//! It must not count by a rule of its own: the tallies are made in Rust, by `Tally`.

use futures_util::future::join_all;
use serde_json::Value;

use super::{PostgresStore, column, version_from};
use crate::store::{STATE_COUNTS_VERSION, StateStore, StoreError, Tally, format};

/// Rows per count line (see the module docs).
const STRIPES: u32 = 16;

/// Rows read and settled per page.
const PAGE: i64 = 500;

/// The name of the counts' mark in the built table.
const STATE_COUNTS: &str = "state_counts";

/// The counts table beside instances table `t`.
pub fn counts_table(t: &str) -> String {
    format!("{}_state_counts", t.strip_suffix("_instances").unwrap_or(t))
}

/// The table of the versions the indexes beside instances table `t` were built by.
pub fn built_table(t: &str) -> String {
    format!(
        "{}_indexes_built",
        t.strip_suffix("_instances").unwrap_or(t)
    )
}

/// The trigger function that moves the counts of instances table `t`.
pub fn trigger_function(t: &str) -> String {
    format!("{t}_count")
}

/// What the store's schema migration adds for the counts: the tally's columns, the two tables,
/// the trigger function (replaced, so a newer build's takes over) and the trigger.
pub fn ddl(t: &str) -> String {
    let c = counts_table(t);
    let b = built_table(t);
    let f = trigger_function(t);
    format!(
        "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS counted_machine text;
         ALTER TABLE {t} ADD COLUMN IF NOT EXISTS counted_states text[];
         CREATE TABLE IF NOT EXISTS {c} (
             workflow text NOT NULL,
             machine text NOT NULL,
             state text NOT NULL,
             stripe integer NOT NULL,
             n bigint NOT NULL,
             PRIMARY KEY (workflow, machine, state, stripe)
         );
         CREATE TABLE IF NOT EXISTS {b} (name text PRIMARY KEY, version bigint NOT NULL);
         CREATE OR REPLACE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $count$
         BEGIN
             INSERT INTO {c} AS counts (workflow, machine, state, stripe, n)
             SELECT workflow, machine, state, pg_backend_pid() % {STRIPES}, sum(n)
             FROM (
                 SELECT OLD.workflow AS workflow, COALESCE(OLD.counted_machine, '') AS machine,
                        state, -1 AS n
                 FROM unnest(ARRAY[''] || OLD.counted_states) AS state
                 WHERE TG_OP <> 'INSERT' AND OLD.counted_states IS NOT NULL
                 UNION ALL
                 SELECT NEW.workflow, COALESCE(NEW.counted_machine, ''), state, 1
                 FROM unnest(ARRAY[''] || NEW.counted_states) AS state
                 WHERE TG_OP <> 'DELETE' AND NEW.counted_states IS NOT NULL
             ) AS moved
             GROUP BY workflow, machine, state
             HAVING sum(n) <> 0
             ORDER BY workflow, machine, state
             ON CONFLICT (workflow, machine, state, stripe)
             DO UPDATE SET n = counts.n + EXCLUDED.n;
             RETURN NULL;
         END
         $count$;
         DO $create$ BEGIN
             IF NOT EXISTS (SELECT 1 FROM pg_trigger
                            WHERE tgname = 'counted' AND tgrelid = '{t}'::regclass) THEN
                 CREATE TRIGGER counted
                     AFTER INSERT OR DELETE OR UPDATE OF workflow, counted_machine, counted_states
                     ON {t} FOR EACH ROW EXECUTE FUNCTION {f}();
             END IF;
         END
         $create$;"
    )
}

/// The read of the counts: each line's stripes summed.
pub fn read_sql(t: &str) -> String {
    format!(
        "SELECT workflow, machine, state, sum(n)::bigint FROM {} \
         GROUP BY workflow, machine, state HAVING sum(n) > 0",
        counts_table(t)
    )
}

impl PostgresStore {
    /// Counts every row again if the counts are not marked built by this rule (see the module
    /// docs): at connect, once per namespace.
    pub(super) async fn build_state_counts(&self) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT version FROM {} WHERE name = $1",
            built_table(&self.table)
        );
        let rows = self.query("state counts", &sql, &[&STATE_COUNTS]).await?;
        let built: Option<i64> = rows
            .first()
            .map(|row| column(STATE_COUNTS, row, 0))
            .transpose()?;
        if built == i64::try_from(STATE_COUNTS_VERSION).ok() {
            return Ok(());
        }
        self.recount().await?;
        // A new table has nothing to count, and nothing worth a line in the log.
        if !self.count_by_state().await?.is_empty() {
            tracing::info!(store = %self.name,
                "counted the instances by state once, for the index this build keeps");
        }
        Ok(())
    }

    /// Settles every row's tally, then sums them into the counts table afresh (see the module
    /// docs).
    pub(super) async fn recount(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let page_sql = format!(
            "SELECT key, version, workflow, snapshot -> 'value', format, extras, \
             counted_machine, counted_states FROM {t} WHERE key > $1 ORDER BY key LIMIT $2"
        );
        let settle_sql = format!(
            "UPDATE {t} SET counted_machine = $3, counted_states = $4 \
             WHERE key = $1 AND version = $2"
        );
        let mut after = String::new();
        loop {
            let rows = self.query("recount", &page_sql, &[&after, &PAGE]).await?;
            let Some(last) = rows.last() else {
                break;
            };
            after = column("recount", last, 0)?;
            let mut settles = Vec::new();
            for row in &rows {
                let key: String = column("recount", row, 0)?;
                let version = version_from(&key, column(&key, row, 1)?)?;
                let tally = tally_of_row(&key, row)?;
                let counted = (
                    column::<Option<String>>(&key, row, 6)?,
                    column::<Option<Vec<String>>>(&key, row, 7)?,
                );
                let wanted = (
                    tally.as_ref().map(|tally| tally.machine().to_owned()),
                    tally
                        .as_ref()
                        .map(|tally| tally.states().map(str::to_owned).collect::<Vec<_>>()),
                );
                if counted != wanted {
                    settles.push((key, version, wanted));
                }
            }
            let settle_sql = &settle_sql;
            let settled = join_all(settles.iter().map(|(key, version, (machine, states))| {
                let version = i64::try_from(*version).unwrap_or(i64::MAX);
                async move {
                    self.execute("recount", settle_sql, &[key, &version, machine, states])
                        .await
                }
            }))
            .await;
            // A row saved meanwhile (another version) has its tally from that save.
            settled.into_iter().collect::<Result<Vec<_>, _>>()?;
        }
        self.sum_state_counts().await
    }

    /// Sums every row's tally into the counts table afresh and marks it built, in one
    /// transaction that holds the table against the triggers meanwhile.
    async fn sum_state_counts(&self) -> Result<(), StoreError> {
        let t = &self.table;
        let c = counts_table(t);
        let b = built_table(t);
        let sum = format!(
            "LOCK TABLE {c} IN SHARE ROW EXCLUSIVE MODE;
             DELETE FROM {c};
             INSERT INTO {c} (workflow, machine, state, stripe, n)
                 SELECT workflow, COALESCE(counted_machine, ''), state, 0, count(*)
                 FROM {t}, unnest(ARRAY[''] || counted_states) AS state
                 WHERE counted_states IS NOT NULL
                 GROUP BY workflow, COALESCE(counted_machine, ''), state;
             INSERT INTO {b} (name, version) VALUES ('{STATE_COUNTS}', {STATE_COUNTS_VERSION})
                 ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version;"
        );
        self.in_transaction("recount", None, async |txn| {
            txn.batch_execute(&sum)
                .await
                .map_err(|e| self.down("recount", e))
        })
        .await
    }
}

/// The tally of a row the recount read (`None`: its format cannot be read, and it is counted
/// nowhere), by the rule a save uses.
fn tally_of_row(
    key: &str,
    row: &deadpool_postgres::tokio_postgres::Row,
) -> Result<Option<Tally>, StoreError> {
    let workflow: String = column(key, row, 2)?;
    let value: Option<Value> = column(key, row, 3)?;
    let format_number: Option<i32> = column(key, row, 4)?;
    let extras: Option<String> = column(key, row, 5)?;
    let Ok((_, extras)) = format::decode(key, format_number.map(|f| f as u64), extras.as_deref())
    else {
        return Ok(None);
    };
    Ok(Some(Tally::of_parts(
        &workflow,
        extras.machine.as_deref(),
        &value.unwrap_or(Value::Null),
    )))
}

#[cfg(test)]
impl PostgresStore {
    /// Makes the store what `older` says older code left (see the contract).
    pub(in crate::store) async fn as_older_code_left_it(
        &self,
        older: crate::store::contract::Older,
    ) {
        let t = &self.table;
        let c = counts_table(t);
        let b = built_table(t);
        let sql = match older {
            crate::store::contract::Older::CountsLost => format!("DELETE FROM {c}"),
            crate::store::contract::Older::WithoutTheIndex => format!(
                "ALTER TABLE {t} DISABLE TRIGGER counted;
                 UPDATE {t} SET counted_machine = NULL, counted_states = NULL;
                 ALTER TABLE {t} ENABLE TRIGGER counted;
                 DELETE FROM {c};
                 DELETE FROM {b};"
            ),
        };
        let client = self.pool.get().await.unwrap();
        client.batch_execute(&sql).await.unwrap();
    }
}
