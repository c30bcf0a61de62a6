//! [`migrate`]: rewriting, on start, the format-1 records a store holds in the current format,
//! and records whose due time is not the one the caller works out for them.
//!
//! It owns the walk through every key, in pages, and the rule for each record (see "The record
//! format" and "Due times" in the module docs of `store`). It must not change what a record
//! means: the snapshot, workflow and time stay as they are, and the rewrite is a compare-and-set
//! save, so a record another server moves meanwhile is that server's to write.

use futures_util::future::join_all;

use super::{CURRENT_FORMAT, CURRENT_SINCE, InstanceRecord, StateStore, StoreError};

/// Keys read per page, and records rewritten concurrently.
const BATCH: usize = 128;

/// The mark ([`StateStore::save_mark`]) a finished walk leaves, valued by the rule it ran by.
pub const MIGRATED_MARK: &str = "records_migrated";

/// What a migration did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Format-1 records rewritten in the current format.
    pub migrated: u64,
    /// Current-format records rewritten only to correct their due time (written by code that
    /// predates due times, or under other retention settings).
    pub reindexed: u64,
    /// Records already in the current format.
    pub current: u64,
    /// Records another writer changed or deleted between our read and our save: left to it.
    pub raced: u64,
    /// Records that could not be read (damaged, or in a newer format): logged, left alone.
    pub skipped: u64,
}

/// Rewrites every format-1 record in `store` as [`CURRENT_FORMAT`], its machine version being
/// `machine_of(workflow)` (the version served now, which is what a format-1 record runs on), and
/// every record whose due time is not `due_of(key, record)` with that due time (`due_of` answers
/// `None` when it cannot tell, e.g. for a workflow no plugin serves: the record keeps its own).
/// Logs the counts once at the end, and each record it leaves alone.
///
/// Fails only when the store does not answer: what was migrated by then stays migrated, and
/// the rest is still readable as format 1.
pub async fn migrate(
    store: &dyn StateStore,
    machine_of: impl Fn(&str) -> Option<String>,
    due_of: impl Fn(&str, &InstanceRecord) -> Option<Option<u64>>,
) -> Result<MigrationReport, StoreError> {
    let mut report = MigrationReport::default();
    let mut after: Option<String> = None;
    loop {
        let keys = store.list_keys("", after.as_deref(), BATCH).await?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        let outcomes = join_all(
            keys.iter()
                .map(|key| migrate_one(store, key, &machine_of, &due_of)),
        )
        .await;
        for outcome in outcomes {
            match outcome? {
                Outcome::Migrated => report.migrated += 1,
                Outcome::Reindexed => report.reindexed += 1,
                Outcome::Current => report.current += 1,
                Outcome::Raced => report.raced += 1,
                Outcome::Skipped => report.skipped += 1,
            }
        }
        after = Some(last);
    }
    if report.migrated > 0 || report.skipped > 0 {
        tracing::info!(
            store = %store.describe(),
            migrated = report.migrated,
            raced = report.raced,
            skipped = report.skipped,
            "migrated format-1 instance records to format {CURRENT_FORMAT}"
        );
    }
    if report.reindexed > 0 {
        tracing::info!(
            store = %store.describe(),
            reindexed = report.reindexed,
            "corrected the due times of instance records"
        );
    }
    Ok(report)
}

/// [`migrate`], unless a walk under the same rule already went through the store to its end:
/// then every record in it is in the current format and has the due time `due_of` gives
/// (every save since wrote both), and reading each again would only find that out, at a cost
/// that grows with the store (seconds at a million records), on every start. `due_rule`
/// fingerprints what `machine_of` and `due_of` answer by (`timers::due_rule`); the oldest
/// format read as current ([`CURRENT_SINCE`]) is folded in here, so a new format that needs no
/// rewrite starts no walk. A finished walk marks the store with the rule.
/// Returns `None` when it skipped the walk.
///
/// What the mark cannot see: a record a server of older code (format 1, or no due times)
/// writes after the mark, during a rolling deploy. It stays readable, and its due time is
/// corrected when it comes (see the module docs of `store`); a start under another rule walks
/// again.
pub async fn migrate_unless_done(
    store: &dyn StateStore,
    due_rule: u64,
    machine_of: impl Fn(&str) -> Option<String>,
    due_of: impl Fn(&str, &InstanceRecord) -> Option<Option<u64>>,
) -> Result<Option<MigrationReport>, StoreError> {
    let rule = (due_rule ^ u64::from(CURRENT_SINCE).rotate_left(48)) & (u64::MAX >> 1);
    if store.load_mark(MIGRATED_MARK).await? == Some(rule) {
        tracing::debug!(store = %store.describe(), "instance records were migrated under this rule already");
        return Ok(None);
    }
    let report = migrate(store, machine_of, due_of).await?;
    store.save_mark(MIGRATED_MARK, rule).await?;
    Ok(Some(report))
}

enum Outcome {
    Migrated,
    Reindexed,
    Current,
    Raced,
    Skipped,
}

async fn migrate_one(
    store: &dyn StateStore,
    key: &str,
    machine_of: &impl Fn(&str) -> Option<String>,
    due_of: &impl Fn(&str, &InstanceRecord) -> Option<Option<u64>>,
) -> Result<Outcome, StoreError> {
    let record = match store.load(key).await {
        Ok(Some(record)) => record,
        // Deleted since it was listed.
        Ok(None) => return Ok(Outcome::Raced),
        Err(error @ (StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. })) => {
            tracing::warn!(key, %error, "instance record left as it is by the format migration");
            return Ok(Outcome::Skipped);
        }
        Err(error) => return Err(error),
    };
    let outdated = record.format < CURRENT_SINCE;
    let mut rewritten = InstanceRecord {
        format: CURRENT_FORMAT,
        machine: if outdated {
            machine_of(&record.workflow)
        } else {
            record.machine.clone()
        },
        version: record.version + 1,
        // The record's time says when its instance last moved (retention reads it): a format
        // change is not a move.
        ..record.clone()
    };
    let due = due_of(key, &rewritten).unwrap_or(record.due_at_ms);
    if !outdated && due == record.due_at_ms {
        return Ok(Outcome::Current);
    }
    rewritten.due_at_ms = due;
    match store.save(key, &rewritten, record.version).await {
        Ok(()) if outdated => Ok(Outcome::Migrated),
        Ok(()) => Ok(Outcome::Reindexed),
        // Another server holds its lease: it is that server's to save, in the current format.
        Err(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => Ok(Outcome::Raced),
        Err(error) => Err(error),
    }
}

/// What every store's migration test checks, given a store holding, as format-1 code wrote
/// them: `old` (workflow "invoice", snapshot `{"value":"draft"}`, version 3, time
/// 1 600 000 000 000) and `broken` (a snapshot that is not JSON).
#[cfg(test)]
pub(super) async fn check_format_1_migration(store: &dyn StateStore) {
    use serde_json::json;

    let before = store.load("old").await.unwrap().expect("the old record");
    assert_eq!(
        (before.format, before.machine.as_deref(), before.version),
        (1, None, 3),
        "a record without a format number reads as format 1"
    );
    assert!(matches!(
        store.load("broken").await,
        Err(StoreError::Corrupt { .. })
    ));
    let machine_of = |id: &str| (id == "invoice").then(|| "v-now".to_owned());
    let report = migrate(store, machine_of, |_, _| None).await.unwrap();
    assert_eq!(
        report,
        MigrationReport {
            migrated: 1,
            reindexed: 0,
            current: 0,
            raced: 0,
            skipped: 1
        }
    );
    let after = store.load("old").await.unwrap().expect("the old record");
    assert_eq!(
        after,
        InstanceRecord {
            format: CURRENT_FORMAT,
            workflow: "invoice".into(),
            snapshot: json!({"value": "draft"}),
            version: 4,
            updated_at_ms: 1_600_000_000_000,
            machine: Some("v-now".into()),
            idempotency: Vec::new(),
            tasks: Vec::new(),
            due_at_ms: None,
            audit: None,
            fence: None,
        }
    );
    // The damaged record is left for an operator, not deleted; a second run has nothing to do.
    assert_eq!(store.count("").await.unwrap(), 2);
    let again = migrate(store, machine_of, |_, _| None).await.unwrap();
    assert_eq!((again.migrated, again.current, again.skipped), (0, 1, 1));
}
