//! The records: load, the compare-and-set save, deletes, and the reads over many records
//! (listing, counting, the due index, an owner's keys).
//!
//! This module owns the SQL of the instances table and of the audit trail that is written with
//! it. It must not decide about leases beyond checking one in a write's `WHERE`
//! ([`crate::leases::allows`]): granting them is `leases.rs`'s.
//!
//! A save is one `INSERT` (version 1) or one `UPDATE … WHERE k = ? AND version = ? AND <lease>`,
//! so InnoDB's row lock makes the version check, the lease check and the write one step. With an
//! audit entry the same transaction appends it and trims the trail to its last `audit_keep`.

use mysql_async::{Conn, TxOpts, Value, prelude::Queryable};
use turnstile::store::{
    AuditEntry, CURRENT_FORMAT, Due, Fence, InstanceRecord, StoreError, Tombstone, owner_of,
};

use crate::{
    MariaDbStore, checks,
    leases::{allows, refused_by},
    link::Kind,
};

/// MySQL's "duplicate entry" error: the key of a first save exists.
const DUPLICATE_KEY: u16 = 1062;

impl MariaDbStore {
    pub(crate) async fn load_record(
        &self,
        key: &str,
    ) -> Result<Option<InstanceRecord>, StoreError> {
        let what = "load";
        let sql = format!(
            "SELECT body, version, due_at FROM {} WHERE k = ?",
            self.tables.instances
        );
        let mut conn = self.link.conn(what).await?;
        let row: Option<(String, u64, Option<u64>)> =
            self.link.read(what, conn.exec_first(sql, (key,))).await?;
        row.map(|(body, version, due)| decode(key, &body, version, due))
            .transpose()
    }

    pub(crate) async fn save_record(
        &self,
        key: &str,
        record: &InstanceRecord,
        expected: u64,
    ) -> Result<(), StoreError> {
        checks::save(key, record, expected)?;
        let what = "save";
        let body = serde_json::to_string(record)
            .map_err(|e| checks::invalid(key, format!("the record is not JSON: {e}")))?;
        let audit = record
            .audit
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| checks::invalid(key, format!("the audit entry is not JSON: {e}")))?;
        let mut conn = self.link.conn(what).await?;
        let written = self
            .link
            .bounded(what, async {
                let (sql, params) = self.write_statement(key, record, &body, expected);
                let Some(entry) = &audit else {
                    return self.changed(&mut conn, what, sql, params).await;
                };
                let mut tx = conn
                    .start_transaction(TxOpts::default())
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                let written = match tx.exec_drop(sql, params).await {
                    Ok(()) => tx.affected_rows() == 1,
                    Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_KEY => false,
                    Err(e) => return Err(self.link.failed(what, Kind::Write, e)),
                };
                if !written {
                    tx.rollback()
                        .await
                        .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                    return Ok(false);
                }
                let append = format!(
                    "INSERT INTO {} (k, version, entry) VALUES (?, ?, ?)",
                    self.tables.audit
                );
                let trim = format!(
                    "DELETE FROM {} WHERE k = ? AND version + ? <= ?",
                    self.tables.audit
                );
                tx.exec_drop(append, (key, record.version, entry))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                tx.exec_drop(trim, (key, self.audit_keep, record.version))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                tx.commit()
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                Ok(true)
            })
            .await?;
        // Back to the pool before asking why: a task holding one connection while it waits for
        // another could starve the pool when many writes are refused at once.
        drop(conn);
        if written {
            return Ok(());
        }
        if expected == 0 {
            // A first save needs no lease: only the key being taken refuses it.
            return Err(checks::conflict(key, 0, self.version_of(key).await?));
        }
        Err(self
            .refusal(key, Some(expected), record.fence.as_ref())
            .await?
            // Changed meanwhile so that the write would pass now: report what it raced.
            .unwrap_or_else(|| checks::conflict(key, expected, Some(expected))))
    }

    /// The `INSERT` of a first save, or the `UPDATE` of a later one, and its parameters.
    fn write_statement(
        &self,
        key: &str,
        record: &InstanceRecord,
        body: &str,
        expected: u64,
    ) -> (String, Vec<Value>) {
        let t = &self.tables.instances;
        if expected == 0 {
            let sql =
                format!("INSERT INTO {t} (k, owner, body, version, due_at) VALUES (?, ?, ?, ?, ?)");
            let params = vec![
                key.into(),
                owner_of(key).into(),
                body.into(),
                record.version.into(),
                record.due_at_ms.into(),
            ];
            return (sql, params);
        }
        let (lease, lease_params) = allows(record.fence.as_ref());
        let sql = format!(
            "UPDATE {t} SET body = ?, version = ?, due_at = ? \
             WHERE k = ? AND version = ? AND {lease}"
        );
        let mut params = vec![
            body.into(),
            record.version.into(),
            record.due_at_ms.into(),
            key.into(),
            expected.into(),
        ];
        params.extend(lease_params);
        (sql, params)
    }

    /// Runs one write in autocommit; whether it changed a row. A first save of a key that
    /// exists changes none.
    async fn changed(
        &self,
        conn: &mut Conn,
        what: &str,
        sql: String,
        params: Vec<Value>,
    ) -> Result<bool, StoreError> {
        match conn.exec_drop(sql, params).await {
            Ok(()) => Ok(conn.affected_rows() == 1),
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_KEY => Ok(false),
            Err(e) => Err(self.link.failed(what, Kind::Write, e)),
        }
    }

    /// The stored version of `key`, after a first save found it taken.
    async fn version_of(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let what = "read version";
        let sql = format!("SELECT version FROM {} WHERE k = ?", self.tables.instances);
        let mut conn = self.link.conn(what).await?;
        self.link.read(what, conn.exec_first(sql, (key,))).await
    }

    /// Why a write under `fence` expecting `expected` changed nothing: the lease refused it
    /// ([`StoreError::Fenced`], checked first, as every store does) or the version did
    /// ([`StoreError::Conflict`]). `None`: neither would now (a delete of a record that is not
    /// there, or one that changed meanwhile).
    async fn refusal(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
    ) -> Result<Option<StoreError>, StoreError> {
        let what = "read write state";
        let (lease, mut params) = allows(fence);
        let sql = format!(
            "SELECT version, COALESCE({lease}, 0), \
             TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until) FROM {} WHERE k = ?",
            self.tables.instances
        );
        params.push(key.into());
        let mut conn = self.link.conn(what).await?;
        let row: Option<(u64, bool, Option<i64>)> =
            self.link.read(what, conn.exec_first(sql, params)).await?;
        let Some((version, allowed, left_us)) = row else {
            return Ok(expected.map(|expected| checks::conflict(key, expected, None)));
        };
        if !allowed {
            return Ok(Some(refused_by(key, left_us)));
        }
        Ok(expected
            .filter(|&expected| expected != version)
            .map(|expected| checks::conflict(key, expected, Some(version))))
    }

    pub(crate) async fn delete_record(
        &self,
        key: &str,
        expected: Option<u64>,
        fence: Option<&Fence>,
        tombstone: Option<&Tombstone>,
    ) -> Result<bool, StoreError> {
        checks::key(key)?;
        let what = "delete";
        let (lease, lease_params) = allows(fence);
        let mut sql = format!(
            "DELETE FROM {} WHERE k = ? AND {lease}",
            self.tables.instances
        );
        let mut params: Vec<Value> = vec![key.into()];
        params.extend(lease_params);
        if let Some(expected) = expected {
            sql.push_str(" AND version = ?");
            params.push(expected.into());
        }
        let mut conn = self.link.conn(what).await?;
        let deleted = self
            .link
            .bounded(what, async {
                let Some(tombstone) = tombstone else {
                    return self.changed(&mut conn, what, sql, params).await;
                };
                // The audit trail goes by the foreign key's cascade; the tombstone is written
                // in the same transaction, replacing the key's earlier one.
                let mut tx = conn
                    .start_transaction(TxOpts::default())
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                tx.exec_drop(sql, params)
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                if tx.affected_rows() != 1 {
                    tx.rollback()
                        .await
                        .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                    return Ok(false);
                }
                let keep = format!(
                    "INSERT INTO {} (k, deleted_at, body) VALUES (?, ?, ?) \
                     ON DUPLICATE KEY UPDATE deleted_at = VALUES(deleted_at), body = VALUES(body)",
                    self.tables.tombstones
                );
                tx.exec_drop(keep, (key, tombstone.deleted_at_ms, tombstone.encode()))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                tx.commit()
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                Ok(true)
            })
            .await?;
        // Back to the pool before asking why (see `save_record`).
        drop(conn);
        if deleted {
            return Ok(true);
        }
        match self.refusal(key, expected, fence).await? {
            Some(refusal) => Err(refusal),
            None => Ok(false),
        }
    }

    pub(crate) async fn audit_of(&self, key: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let what = "audit";
        let sql = format!(
            "SELECT entry FROM {} WHERE k = ? ORDER BY version",
            self.tables.audit
        );
        let mut conn = self.link.conn(what).await?;
        let entries: Vec<String> = self.link.read(what, conn.exec(sql, (key,))).await?;
        entries
            .iter()
            .map(|text| {
                serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                    key: key.to_owned(),
                    reason: format!("an audit entry is not readable: {e}"),
                })
            })
            .collect()
    }

    /// Keys of `column`'s rows matching `condition` (with `params`), after `after`, in byte
    /// order: one page of a listing.
    async fn keys_where(
        &self,
        what: &str,
        condition: &str,
        mut params: Vec<Value>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT k FROM {} WHERE {condition} AND k > ? ORDER BY k LIMIT ?",
            self.tables.instances
        );
        params.push(after.unwrap_or("").into());
        params.push((limit as u64).into());
        let mut conn = self.link.conn(what).await?;
        let keys: Vec<Vec<u8>> = self.link.read(what, conn.exec(sql, params)).await?;
        keys.into_iter().map(|key| text_key(key, what)).collect()
    }

    pub(crate) async fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let condition = "k LIKE ? ESCAPE '!'";
        self.keys_where(
            "list keys",
            condition,
            vec![like_prefix(prefix).into()],
            after,
            limit,
        )
        .await
    }

    pub(crate) async fn owned(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.keys_where("list owned", "owner = ?", vec![owner.into()], after, limit)
            .await
    }

    /// How many rows match `condition`.
    async fn count_where(
        &self,
        what: &str,
        condition: &str,
        params: Vec<Value>,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "SELECT COUNT(*) FROM {} WHERE {condition}",
            self.tables.instances
        );
        let mut conn = self.link.conn(what).await?;
        let count: Option<u64> = self.link.read(what, conn.exec_first(sql, params)).await?;
        Ok(count.unwrap_or(0))
    }

    pub(crate) async fn count_prefix(&self, prefix: &str) -> Result<u64, StoreError> {
        let condition = "k LIKE ? ESCAPE '!'";
        self.count_where("count", condition, vec![like_prefix(prefix).into()])
            .await
    }

    pub(crate) async fn count_owner(&self, owner: &str) -> Result<u64, StoreError> {
        self.count_where("count owned", "owner = ?", vec![owner.into()])
            .await
    }

    /// One page of the due index: `(due_at, k) > after`, up to `until`. The boundary is
    /// written as two ranges of the `(due_at, k)` index rather than a row comparison, which
    /// MariaDB would not read from the index.
    pub(crate) async fn due_page(
        &self,
        until: u64,
        after: Option<&Due>,
        limit: usize,
    ) -> Result<Vec<Due>, StoreError> {
        let what = "due";
        let (at, key) = after.map_or((0, ""), |due| (due.at_ms, due.key.as_str()));
        let sql = format!(
            "SELECT due_at, k FROM {} \
             WHERE due_at <= ? AND (due_at > ? OR (due_at = ? AND k > ?)) \
             ORDER BY due_at, k LIMIT ?",
            self.tables.instances
        );
        let mut conn = self.link.conn(what).await?;
        let rows: Vec<(u64, Vec<u8>)> = self
            .link
            .read(what, conn.exec(sql, (until, at, at, key, limit as u64)))
            .await?;
        rows.into_iter()
            .map(|(at_ms, key)| {
                Ok(Due {
                    at_ms,
                    key: text_key(key, what)?,
                })
            })
            .collect()
    }
}

/// A record read back: its JSON `body`, with the version and due time of their columns (what
/// the compare-and-set and the index saw). A format newer than this build's is refused, never
/// read as something else.
fn decode(
    key: &str,
    body: &str,
    version: u64,
    due: Option<u64>,
) -> Result<InstanceRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|e| corrupt(format!("the record is not JSON: {e}")))?;
    let format = value
        .get("format")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(1);
    if format > u64::from(CURRENT_FORMAT) {
        return Err(StoreError::UnsupportedFormat {
            key: key.to_owned(),
            format,
            reads_up_to: CURRENT_FORMAT,
        });
    }
    let record: InstanceRecord = serde_json::from_value(value)
        .map_err(|e| corrupt(format!("the record is not readable: {e}")))?;
    Ok(InstanceRecord {
        version,
        due_at_ms: due,
        ..record
    })
}

/// A key column read back as text (every key was written from a `&str`).
fn text_key(key: Vec<u8>, what: &str) -> Result<String, StoreError> {
    String::from_utf8(key).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
        reason: format!("{what}: a stored key is not UTF-8"),
    })
}

/// `prefix` as a `LIKE … ESCAPE '!'` pattern: its `%`, `_` and `!` taken literally.
pub(crate) fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}
