//! Leases: one holder per record at a time, by the database's clock, and the condition a write
//! names its lease by.
//!
//! This module owns the lease columns of the instances table (`fence`, `lease_holder`,
//! `lease_until`, `lease_wanted_by`, `lease_wanted_until`) and the rules of the contract
//! (`turnstile::store::LeaseGrant`): a grant, a renewal, a release, and the wanted mark that
//! makes servers take turns. It must not decide when to ask for a lease: that is the host's.
//!
//! Every time is `NOW(6)` on the server, so servers' clocks need not agree. A grant reads the
//! row `FOR UPDATE` and writes it in one transaction (four round trips: begin, read, write,
//! commit), so two askers are serialized by the row lock, as are a grant and a save.

use std::time::Duration;

use mysql_async::{TxOpts, Value, prelude::Queryable};
use turnstile::store::{Fence, LeaseGrant, LeaseRenewal, StoreError, WANTED_FOR};

use crate::{MariaDbStore, checks, link::Kind};

/// The longest lease or mark kept: further than that a `DATETIME` could overflow, and nobody
/// holds an instance for a year.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// The condition under which a write naming `fence` may change a row, and its parameters: the
/// fence's lease is the one alive now, or, naming none, no lease is alive.
pub(crate) fn allows(fence: Option<&Fence>) -> (&'static str, Vec<Value>) {
    match fence {
        None => ("(lease_until IS NULL OR lease_until <= NOW(6))", Vec::new()),
        Some(fence) => (
            "(fence = ? AND lease_holder = ? AND lease_until > NOW(6))",
            vec![fence.token.into(), (&*fence.holder).into()],
        ),
    }
}

/// The refusal of a write by the lease, `left_us` being how long the live one lasts.
pub(crate) fn refused_by(key: &str, left_us: Option<i64>) -> StoreError {
    StoreError::Fenced {
        key: key.to_owned(),
        remaining_ms: left_us
            .filter(|&us| us > 0)
            .map(|us| (us as u64).div_ceil(1000)),
    }
}

/// Microseconds of `ttl`, at least one and at most [`LONGEST`].
fn micros(ttl: Duration) -> u64 {
    ttl.clamp(Duration::from_micros(1), LONGEST).as_micros() as u64
}

/// A record's lease as a grant reads it, locked.
struct Lease {
    version: u64,
    fence: u64,
    holder: Option<String>,
    /// The lease lives now.
    live: bool,
    wanted_by: Option<String>,
    /// A wanted mark lives now.
    wanted_live: bool,
    /// Microseconds the lease and the mark still live (negative or `None`: lapsed or none).
    lease_left_us: Option<i64>,
    wanted_left_us: Option<i64>,
}

impl MariaDbStore {
    pub(crate) async fn acquire(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LeaseGrant, StoreError> {
        checks::key(key)?;
        let what = "acquire lease";
        let t = &self.tables.instances;
        let read = format!(
            "SELECT version, fence, lease_holder, COALESCE(lease_until > NOW(6), 0), \
               lease_wanted_by, COALESCE(lease_wanted_until > NOW(6), 0), \
               TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_until), \
               TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_wanted_until) \
             FROM {t} WHERE k = ? FOR UPDATE"
        );
        let fail = |e| self.link.failed(what, Kind::Write, e);
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                let mut tx = conn
                    .start_transaction(TxOpts::default())
                    .await
                    .map_err(fail)?;
                type Row = (
                    u64,
                    u64,
                    Option<String>,
                    bool,
                    Option<String>,
                    bool,
                    Option<i64>,
                    Option<i64>,
                );
                let row: Option<Row> = tx.exec_first(read, (key,)).await.map_err(fail)?;
                let Some(row) = row else {
                    tx.rollback().await.map_err(fail)?;
                    return Ok(LeaseGrant::Absent);
                };
                let lease = Lease {
                    version: row.0,
                    fence: row.1,
                    holder: row.2,
                    live: row.3,
                    wanted_by: row.4,
                    wanted_live: row.5,
                    lease_left_us: row.6,
                    wanted_left_us: row.7,
                };
                let (grant, write) = decide(t, key, holder, ttl, &lease);
                match write {
                    Some((sql, params)) => {
                        tx.exec_drop(sql, params).await.map_err(fail)?;
                        tx.commit().await.map_err(fail)?;
                    }
                    None => tx.rollback().await.map_err(fail)?,
                }
                Ok(grant)
            })
            .await
    }

    pub(crate) async fn renew(
        &self,
        key: &str,
        fence: &Fence,
        ttl: Duration,
    ) -> Result<LeaseRenewal, StoreError> {
        checks::key(key)?;
        let what = "renew lease";
        let t = &self.tables.instances;
        // Only the lease named, while it lives: a renewal is never a grant.
        let renew = format!(
            "UPDATE {t} SET lease_until = NOW(6) + INTERVAL ? MICROSECOND \
             WHERE k = ? AND fence = ? AND lease_holder = ? AND lease_until > NOW(6)"
        );
        // Read after the renewal, not in its transaction: the mark is a hint to give the lease
        // up, not part of what the lease guards.
        let wanted =
            format!("SELECT COALESCE(lease_wanted_until > NOW(6), 0) FROM {t} WHERE k = ?");
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(renew, (micros(ttl), key, fence.token, &*fence.holder))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))?;
                if conn.affected_rows() != 1 {
                    return Ok(LeaseRenewal::Lost);
                }
                let wanted: Option<bool> = conn
                    .exec_first(wanted, (key,))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Read, e))?;
                Ok(LeaseRenewal::Renewed {
                    wanted: wanted.unwrap_or(false),
                })
            })
            .await
    }

    pub(crate) async fn release(&self, key: &str, fence: &Fence) -> Result<(), StoreError> {
        checks::key(key)?;
        let what = "release lease";
        // No holder left: the next grant is not a takeover. A lease that passed on is not
        // this fence's, and is left alone.
        let release = format!(
            "UPDATE {} SET lease_holder = NULL, lease_until = NULL \
             WHERE k = ? AND fence = ? AND lease_holder = ?",
            self.tables.instances
        );
        let mut conn = self.link.conn(what).await?;
        self.link
            .bounded(what, async {
                conn.exec_drop(release, (key, fence.token, &*fence.holder))
                    .await
                    .map_err(|e| self.link.failed(what, Kind::Write, e))
            })
            .await
    }
}

/// What an ask by `holder` for `ttl` gets, given the locked `lease`, and the write that makes
/// it so (`None`: nothing to write):
///
/// - the asker's own live lease is renewed with its token, its wanted mark kept;
/// - a free lease (released, or lapsed: a takeover when it had a holder) is granted with the
///   next token, unless another asker's live mark keeps it for that asker; a grant clears the
///   mark;
/// - otherwise it is busy, and marked wanted by the asker unless another asker's mark lives.
fn decide(
    t: &str,
    key: &str,
    holder: &str,
    ttl: Duration,
    lease: &Lease,
) -> (LeaseGrant, Option<(String, Vec<Value>)>) {
    let until = "NOW(6) + INTERVAL ? MICROSECOND";
    if lease.live && lease.holder.as_deref() == Some(holder) {
        let grant = LeaseGrant::Held {
            token: lease.fence,
            took_over: false,
            version: lease.version,
            wanted: lease.wanted_live,
        };
        let write = format!("UPDATE {t} SET lease_until = {until} WHERE k = ?");
        return (grant, Some((write, vec![micros(ttl).into(), key.into()])));
    }
    let kept_for_another = lease.wanted_live && lease.wanted_by.as_deref() != Some(holder);
    if !lease.live && !kept_for_another {
        let token = lease.fence + 1;
        let grant = LeaseGrant::Held {
            token,
            took_over: lease.holder.is_some(),
            version: lease.version,
            wanted: false,
        };
        let write = format!(
            "UPDATE {t} SET fence = ?, lease_holder = ?, lease_until = {until}, \
             lease_wanted_by = NULL, lease_wanted_until = NULL WHERE k = ?"
        );
        let params = vec![token.into(), holder.into(), micros(ttl).into(), key.into()];
        return (grant, Some((write, params)));
    }
    let lease_left = lease.lease_left_us.unwrap_or(0).max(0) as u64;
    let (write, wanted_left) = if kept_for_another {
        // Another asker's mark lives: theirs is left alone.
        (None, lease.wanted_left_us.unwrap_or(0).max(0) as u64)
    } else {
        let write =
            format!("UPDATE {t} SET lease_wanted_by = ?, lease_wanted_until = {until} WHERE k = ?");
        let params = vec![holder.into(), micros(WANTED_FOR).into(), key.into()];
        (Some((write, params)), micros(WANTED_FOR))
    };
    let busy = LeaseGrant::Busy {
        remaining_ms: lease_left.max(wanted_left).div_ceil(1000),
    };
    (busy, write)
}
