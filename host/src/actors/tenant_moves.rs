//! Moving handle-keyed instances from one tenant to another, when a principal's name changes
//! form: the token file's principals became `token:NAME` and `token:sha256:…` (they were `NAME`
//! and `line-N`), so their tenants changed, and `serve` moves the instances of the old tenants
//! of the tokens in the file now to the new ones at start, before any request.
//!
//! One instance at a time, under its lease on a store other servers share (a server running
//! older code may hold it; the instance is then left for the next start): its record is saved
//! under the new key (version 1, with its state, context, timers, machine version and
//! idempotency entries, and an audit entry saying it moved), then deleted under the old one.
//! The old key's audit trail goes with it: `turnstile instances show` it before upgrading if
//! it matters. An instance whose new key exists already is left alone, with a WARN.

use std::{collections::HashMap, sync::Arc, time::Duration};

use super::{InstanceKey, Tenant};
use crate::store::{AuditEntry, Fence, LeaseGrant, StateStore, StoreError, now_ms};

/// How long the migration holds an instance's lease: plenty for one load, save and delete.
const LEASE_TTL: Duration = Duration::from_secs(10);

/// Keys read per page of the store's listing.
const PAGE: usize = 500;

/// Moves every handle-keyed instance of a tenant in `moves` (old → new) to the new one.
/// Returns how many moved.
pub async fn move_tenants(
    store: &dyn StateStore,
    moves: &[(Tenant, Tenant)],
) -> Result<usize, StoreError> {
    let moves: HashMap<&str, &Tenant> = moves
        .iter()
        .filter(|(old, new)| old != new)
        .map(|(old, new)| (old.as_str(), new))
        .collect();
    if moves.is_empty() {
        return Ok(0);
    }
    let mut moved = 0;
    // Each old tenant's own records, from the store's per-owner index: a start reads what it
    // moves (nothing, once moved), not every key the store holds.
    for (old, new_tenant) in moves {
        let mut after: Option<String> = None;
        loop {
            let page = store.list_owned(old, after.as_deref(), PAGE).await?;
            let Some(last) = page.last().cloned() else {
                break;
            };
            for old_key in page {
                let Some(instance) = InstanceKey::from_store_key(&old_key) else {
                    continue;
                };
                let new_key = instance.owned_by(Some(new_tenant)).store_key();
                match move_one(store, &old_key, &new_key).await {
                    Ok(true) => moved += 1,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(key = %old_key, %error, "could not move an instance to its principal's new tenant; the next start tries again");
                    }
                }
            }
            after = Some(last);
        }
    }
    if moved > 0 {
        tracing::info!(
            moved,
            "moved the instances of the token file's principals to their namespaced tenants"
        );
    }
    Ok(moved)
}

/// Moves the record under `old_key` to `new_key`; `Ok(false)` when there was nothing to move.
async fn move_one(
    store: &dyn StateStore,
    old_key: &str,
    new_key: &str,
) -> Result<bool, StoreError> {
    let fence = if store.is_shared() {
        let holder: Arc<str> = format!("tenant-move-{}", std::process::id()).into();
        match store.acquire_lease(old_key, &holder, LEASE_TTL).await? {
            LeaseGrant::Held { token, .. } => Some(Fence { token, holder }),
            LeaseGrant::Absent => return Ok(false),
            LeaseGrant::Busy { remaining_ms } => {
                return Err(StoreError::Fenced {
                    key: old_key.to_owned(),
                    remaining_ms: Some(remaining_ms),
                });
            }
        }
    } else {
        None
    };
    let Some(old) = store.load(old_key).await? else {
        return Ok(false);
    };
    if store.load(new_key).await?.is_some() {
        tracing::warn!(
            old = old_key,
            new = new_key,
            "an instance's new key is taken already; left under its old key"
        );
        return Ok(false);
    }
    let state = old.snapshot.get("value").cloned().unwrap_or_default();
    let mut moved = old.clone();
    moved.version = 1;
    moved.fence = None;
    moved.updated_at_ms = now_ms();
    moved.audit = Some(AuditEntry {
        confirmation: None,
        at_ms: moved.updated_at_ms,
        version: 1,
        by: "operator:tenant-move".into(),
        event: None,
        from: state.clone(),
        to: state,
        principal: None,
    });
    store.save(new_key, &moved, 0).await?;
    store
        .delete(old_key, Some(old.version), fence.as_ref())
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{InstanceRecord, MemoryStore};

    #[tokio::test]
    async fn the_instances_of_an_old_tenant_move_to_its_new_one() {
        let store = MemoryStore::shared();
        let (old, new, other) = (
            Tenant::of("alice"),
            Tenant::of("\0token:alice"),
            Tenant::of("bob"),
        );
        let mine = InstanceKey::mint("invoice").owned_by(Some(&old));
        let theirs = InstanceKey::mint("invoice").owned_by(Some(&other));
        let record = InstanceRecord {
            version: 3,
            ..InstanceRecord::first("invoice", json!({"value": "review", "context": {"n": 1}}))
        };
        for key in [&mine, &theirs] {
            let mut saved = InstanceRecord::first("invoice", record.snapshot.clone());
            store.save(&key.store_key(), &saved, 0).await.unwrap();
            for version in 2..=3 {
                let next = saved.next(record.snapshot.clone());
                store
                    .save(&key.store_key(), &next, version - 1)
                    .await
                    .unwrap();
                saved = next;
            }
        }
        let moved = move_tenants(&store, &[(old.clone(), new.clone())])
            .await
            .unwrap();
        assert_eq!(moved, 1);
        assert!(store.load(&mine.store_key()).await.unwrap().is_none());
        let there = store
            .load(&mine.owned_by(Some(&new)).store_key())
            .await
            .unwrap()
            .expect("moved under the new tenant");
        assert_eq!(there.snapshot, record.snapshot);
        assert_eq!(there.version, 1);
        // Another tenant's instance stays; a second run moves nothing.
        assert!(store.load(&theirs.store_key()).await.unwrap().is_some());
        assert_eq!(move_tenants(&store, &[(old, new)]).await.unwrap(), 0);
    }
}
