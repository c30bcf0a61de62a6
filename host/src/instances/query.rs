//! Reading instances from a store: the listing with its filters, an instance found by handle or
//! key, and everything `show` tells about one. Everything here reads stored records as they
//! are: the persisted snapshot carries its state value, status, context and timers, so none of
//! it needs a machine.

use anyhow::bail;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::mcp::auth::principal::Principal;
pub use crate::store::active_paths;
use crate::store::{
    InstanceRecord, StateStore, StoreError, TaskEntry, Tombstone, now_ms, redact_context,
};

/// How many keys one page of a listing reads from the store.
pub(super) const PAGE: usize = 500;

/// Which instances a listing holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// Only instances of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Only instances in this state: a state path (`review`, or `a.b` for a nested one), active
    /// in the instance's state value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only instances whose last save is at least this many seconds old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_secs: Option<u64>,
    /// Only the instances of this principal, named as the audit trail names it (`token:NAME`
    /// for a line of the token file, `oauth:ISSUER#SUB` for an OAuth token): one tenant's,
    /// read from the store's per-owner index, whatever the others hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Only instances whose key comes after this one: the next page, from the last key of a
    /// full one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many. A listing that holds this many may have more: ask again with its
    /// last key as `after`.
    pub limit: usize,
}

impl Filter {
    /// The key to start the next page after, when `listed` (what this filter listed) is a
    /// full page.
    pub fn next_after<'a>(&self, listed: &'a [Summary]) -> Option<&'a str> {
        (listed.len() >= self.limit)
            .then(|| listed.last().map(|summary| summary.key.as_str()))
            .flatten()
    }
}

/// One line of a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The store key: `handle/<handle>[@<tenant>]` or `session/<session>/<workflow>`.
    pub key: String,
    pub workflow: String,
    /// The state value (`"review"`, or an object for nested and parallel states).
    pub state: Value,
    /// `active`, `done`, …
    pub status: Value,
    pub version: u64,
    pub updated_at_ms: u64,
    /// The step running on it as an MCP task, as its record says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningTask>,
}

/// A step running on an instance as an MCP task (`store::TaskEntry`, `working`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningTask {
    pub task_id: String,
    pub tool: String,
    /// When it started, in unix milliseconds.
    pub since_ms: u64,
}

impl Summary {
    pub fn of(key: &str, record: &InstanceRecord) -> Summary {
        Summary {
            key: key.to_owned(),
            workflow: record.workflow.clone(),
            state: record.snapshot["value"].clone(),
            status: record.snapshot["status"].clone(),
            version: record.version,
            updated_at_ms: record.updated_at_ms,
            running: TaskEntry::running(&record.tasks).map(|task| RunningTask {
                task_id: task.id.clone(),
                tool: task.tool.clone(),
                since_ms: task.created_at_ms,
            }),
        }
    }
}

/// The instances `filter` selects, in key order: handle-keyed and session-keyed alike, or one
/// principal's.
pub async fn list(store: &dyn StateStore, filter: &Filter) -> anyhow::Result<Vec<Summary>> {
    let cutoff = filter
        .older_than_secs
        .map(|secs| now_ms().saturating_sub(secs.saturating_mul(1000)));
    let mut shown = Vec::new();
    let keys = match &filter.principal {
        Some(principal) => Keys::Owned(Principal(principal.clone()).tenant()),
        None => Keys::All,
    };
    each_instance_of(store, &keys, filter.after.as_deref(), |key, record| {
        if shown.len() >= filter.limit {
            return false;
        }
        let value = &record.snapshot["value"];
        let keep = filter
            .workflow
            .as_ref()
            .is_none_or(|w| *w == record.workflow)
            && filter
                .state
                .as_ref()
                .is_none_or(|state| active_paths(value).contains(state))
            && cutoff.is_none_or(|cutoff| record.updated_at_ms <= cutoff);
        if keep {
            shown.push(Summary::of(key, record));
        }
        true
    })
    .await?;
    Ok(shown)
}

/// Which keys a walk goes through.
enum Keys {
    /// Every key of the store.
    All,
    /// The keys of one tenant's records (`StateStore::list_owned`).
    Owned(crate::actors::Tenant),
}

/// Calls `visit` with each instance record `keys` names after `after`, in key order, until it
/// returns false. Reads page by page; for operators, not for hot paths.
async fn each_instance_of(
    store: &dyn StateStore,
    keys: &Keys,
    after: Option<&str>,
    mut visit: impl FnMut(&str, &InstanceRecord) -> bool,
) -> anyhow::Result<()> {
    let mut after: Option<String> = after.map(str::to_owned);
    loop {
        let keys = match keys {
            Keys::All => store.list_keys("", after.as_deref(), PAGE).await?,
            Keys::Owned(tenant) => {
                store
                    .list_owned(tenant.as_str(), after.as_deref(), PAGE)
                    .await?
            }
        };
        let Some(last) = keys.last().cloned() else {
            return Ok(());
        };
        for key in keys {
            // Machine definitions share the key space; they are not instances.
            let Some(record) = load_instance(store, &key).await? else {
                continue;
            };
            if !visit(&key, &record) {
                return Ok(());
            }
        }
        after = Some(last);
    }
}

/// The record under `key`, if it is an instance's (a record that does not parse is reported,
/// not skipped: an operator looking for trouble wants to see it).
async fn load_instance(
    store: &dyn StateStore,
    key: &str,
) -> anyhow::Result<Option<InstanceRecord>> {
    if !(key.starts_with("handle/") || key.starts_with(crate::actors::SESSION_PREFIX)) {
        return Ok(None);
    }
    match store.load(key).await {
        Ok(record) => Ok(record),
        Err(
            StoreError::Unavailable(reason)
            | StoreError::NoAnswer(reason)
            | StoreError::Dropped(reason),
        ) => {
            bail!("the store is unavailable: {reason}")
        }
        Err(error) => {
            tracing::warn!(%key, %error, "cannot read this record; skipped");
            Ok(None)
        }
    }
}

/// No instance of that handle or key is stored.
#[derive(Debug, thiserror::Error)]
#[error("no instance {0} in this store")]
pub struct NotFound(pub String);

/// The key and record `instance` names: a store key (`handle/…`, `session/…`), or a handle,
/// whose key may carry a tenant (`handle/<handle>@<tenant>`).
pub async fn find(
    store: &dyn StateStore,
    instance: &str,
) -> anyhow::Result<(String, InstanceRecord)> {
    let instance = instance.trim();
    let keys: Vec<String> = if instance.contains('/') {
        vec![instance.to_string()]
    } else {
        let prefix = format!("handle/{instance}");
        store
            .list_keys(&prefix, None, PAGE)
            .await?
            .into_iter()
            .filter(|key| key == &prefix || key.starts_with(&format!("{prefix}@")))
            .collect()
    };
    let mut found = Vec::new();
    for key in keys {
        if let Some(record) = store.load(&key).await? {
            found.push((key, record));
        }
    }
    match found.len() {
        0 => Err(NotFound(instance.to_owned()).into()),
        1 => Ok(found.remove(0)),
        _ => bail!(
            "{instance} names {} instances (one per principal): name one by its key: {}",
            found.len(),
            found
                .iter()
                .map(|(key, _)| key.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Everything `show` tells of the instance `instance` names (or, once deleted, of its
/// tombstone: [`shown_deleted`]): its summary, machine version,
/// context (secret-looking values redacted, see `store::redact_context`), timers, and audit
/// trail (the last `last` entries; `audit_total` says how many are kept).
pub async fn show(
    store: &dyn StateStore,
    instance: &str,
    last: Option<usize>,
) -> anyhow::Result<Value> {
    let (key, record) = match find(store, instance).await {
        Ok(found) => found,
        Err(error) if error.downcast_ref::<NotFound>().is_some() => {
            return match find_deleted(store, instance).await? {
                Some(tombstone) => Ok(shown_deleted(&tombstone)),
                None => Err(error),
            };
        }
        Err(error) => return Err(error),
    };
    let mut shown = serde_json::to_value(Summary::of(&key, &record))?;
    shown["machine"] = json!(record.machine);
    shown["format"] = json!(record.format);
    shown["context"] = redact_context(&record.snapshot["context"]);
    shown["timers"] = record.snapshot["timers"].clone();
    shown["due_at_ms"] = json!(record.due_at_ms);
    shown["idempotency_entries"] = json!(record.idempotency.len());
    // The tasks its record keeps, without their outputs (a task's client reads those).
    shown["tasks"] = record
        .tasks
        .iter()
        .map(|task| {
            json!({
                "task_id": task.id,
                "tool": task.tool,
                "status": task.status,
                "principal": task.principal,
                "created_at_ms": task.created_at_ms,
                "updated_at_ms": task.updated_at_ms,
            })
        })
        .collect();
    let mut audit = store.audit(&key).await?;
    shown["audit_total"] = audit.len().into();
    if let Some(last) = last {
        audit.drain(..audit.len().saturating_sub(last));
    }
    shown["audit"] = serde_json::to_value(audit)?;
    Ok(shown)
}

/// A state value for a person: `review`, or its JSON when nested.
pub fn state_text(value: &Value) -> String {
    match value {
        Value::String(name) => name.clone(),
        other => other.to_string(),
    }
}

/// How long ago `at_ms` was, for a person: `42s ago`, `5m ago`, `3h ago`, `2d ago`.
pub fn age(at_ms: u64) -> String {
    let secs = now_ms().saturating_sub(at_ms) / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// Unix milliseconds as `2026-12-05T10:17:35Z` (the proleptic Gregorian calendar, computed
/// here: no time-zone crate for one format).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// What `show` tells of a deleted instance, from its tombstone: the key, workflow, last state
/// and version as for a live one, and `deleted` (when, by whom, how, and that as a sentence), so
/// a reader of the JSON and a person both see it was deleted rather than never there.
pub fn shown_deleted(tombstone: &Tombstone) -> Value {
    json!({
        "key": tombstone.key,
        "workflow": tombstone.workflow,
        "state": tombstone.state,
        "version": tombstone.version,
        "deleted": {
            "at_ms": tombstone.deleted_at_ms,
            "by": tombstone.deleted_by,
            "kind": tombstone.kind,
            "text": format!(
                "deleted at {} by {} ({}) in state {} (version {})",
                utc(tombstone.deleted_at_ms),
                tombstone.deleted_by,
                tombstone.kind.as_str(),
                state_text(&tombstone.state),
                tombstone.version
            ),
        },
    })
}

/// The tombstone of the instance `instance` names (a handle or a store key, as for [`find`]),
/// if it was deleted and its tombstone is kept; the latest one when a handle names several
/// (one per principal).
async fn find_deleted(store: &dyn StateStore, instance: &str) -> anyhow::Result<Option<Tombstone>> {
    let instance = instance.trim();
    let prefix = if instance.contains('/') {
        instance.to_owned()
    } else {
        format!("handle/{instance}")
    };
    let found = store.tombstones(&prefix, PAGE).await?;
    Ok(found
        .into_iter()
        .filter(|t| {
            t.key == prefix || (!instance.contains('/') && t.key.starts_with(&format!("{prefix}@")))
        })
        .max_by_key(|t| t.deleted_at_ms))
}
