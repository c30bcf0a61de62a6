//! Resetting and deleting an instance by writing the store directly: what `turnstile instances`
//! does (no server needed), and what a server's console falls back to for an instance none of
//! its actors holds (a session-keyed instance of another server sharing the store).
//!
//! Every write is a compare-and-set on the version just read, under the instance's lease in a
//! store servers share (so that no server runs a call on it meanwhile, and no call that ran
//! before can commit after), and is announced on the store's change feed, so the servers that
//! watch the instance tell their sessions and read the new state on their next call.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{
    statechart::Machine,
    store::{
        AuditEntry, DeleteKind, Fence, InstanceRecord, LeaseGrant, StateStore, StoreError,
        Tombstone, now_ms,
    },
};

/// The name these writes are announced under, on a store's change channel.
const ANNOUNCER: &str = "turnstile-instances";

/// Who `turnstile instances delete` says deleted an instance: the OS user running it
/// (`$USER`, else `$LOGNAME`), or `cli` when neither names one.
pub fn cli_user() -> String {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|user| !user.is_empty()))
        .unwrap_or_else(|| "cli".to_owned())
}

/// How long a reset or delete waits for a server to give up the instance's lease.
const OPERATOR_LEASE_WAIT: Duration = Duration::from_secs(10);
/// How long the operator's own lease lives: well past what a reset or delete takes.
const OPERATOR_LEASE_TTL: Duration = Duration::from_secs(30);

/// Puts the instance under `key` back in its machine's initial state and context, recording
/// `principal` (the operator, if known) in its audit trail. Returns the new state value.
pub async fn reset(
    store: &dyn StateStore,
    key: &str,
    principal: Option<String>,
) -> anyhow::Result<Value> {
    let fence = operator_lease(store, key).await?;
    let reset = match reread(store, key).await {
        Ok(record) => reset_record(store, key, &record, fence.as_ref(), principal).await,
        Err(error) => Err(error),
    };
    release(store, key, fence.as_ref()).await;
    reset
}

/// Deletes the instance under `key` (its audit trail with it), leaving a tombstone saying `by`
/// deleted it as `kind` (`store/tombstone.rs`: a server's sweep prunes it after
/// `--tombstone-days`, at once when that is 0).
pub async fn delete(
    store: &dyn StateStore,
    key: &str,
    by: &str,
    kind: DeleteKind,
) -> anyhow::Result<()> {
    let fence = operator_lease(store, key).await?;
    let deleted = match reread(store, key).await {
        Ok(record) => {
            let tombstone = Tombstone::of(key, &record, by, kind, now_ms());
            store
                .delete_leaving(key, record.version, fence.as_ref(), &tombstone)
                .await
                .map_err(anyhow::Error::from)
        }
        Err(error) => Err(error),
    };
    // A delete removes the lease with the record; only a failed one leaves it to release.
    if !matches!(deleted, Ok(true)) {
        release(store, key, fence.as_ref()).await;
    }
    if !deleted? {
        bail!(changed_meanwhile(key));
    }
    announce(store, key).await;
    Ok(())
}

/// In a store servers share, takes the instance's lease for an operator's write (see
/// `store/lease.rs`): waits for the server holding it to give it up (it does once the instance
/// is idle), up to [`OPERATOR_LEASE_WAIT`]. `None` for a store no server shares, or an instance
/// that is gone.
async fn operator_lease(store: &dyn StateStore, key: &str) -> anyhow::Result<Option<Fence>> {
    if !store.is_shared() {
        return Ok(None);
    }
    let holder: Arc<str> = format!("operator-{}", std::process::id()).into();
    let deadline = Instant::now() + OPERATOR_LEASE_WAIT;
    loop {
        match store
            .acquire_lease(key, &holder, OPERATOR_LEASE_TTL)
            .await?
        {
            LeaseGrant::Held { token, .. } => return Ok(Some(Fence { token, holder })),
            LeaseGrant::Absent => return Ok(None),
            LeaseGrant::Busy { remaining_ms } => {
                if Instant::now() >= deadline {
                    bail!(
                        "{key} is busy: a server has been running calls on it for {}s; nothing \
                         was done: try again",
                        OPERATOR_LEASE_WAIT.as_secs()
                    );
                }
                let pause = Duration::from_millis(remaining_ms.clamp(1, 100));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Gives the operator's lease back (best effort: it lapses by itself).
async fn release(store: &dyn StateStore, key: &str, fence: Option<&Fence>) {
    if let Some(fence) = fence
        && let Err(error) = store.release_lease(key, fence).await
    {
        tracing::debug!(%key, %error, "could not release the operator's lease; it lapses by itself");
    }
}

/// The record under `key`, read again once the lease is held.
async fn reread(store: &dyn StateStore, key: &str) -> anyhow::Result<InstanceRecord> {
    store
        .load(key)
        .await?
        .with_context(|| format!("{key} was deleted meanwhile; nothing was done"))
}

/// Saves the machine's initial state and context as the next version of `record`, forgetting
/// its idempotency entries (a retry must not replay a result from before the reset). The
/// machine is the version the record names, as the store keeps it.
async fn reset_record(
    store: &dyn StateStore,
    key: &str,
    record: &InstanceRecord,
    fence: Option<&Fence>,
    principal: Option<String>,
) -> anyhow::Result<Value> {
    let Some(version) = &record.machine else {
        bail!(
            "{key} does not name its machine version (a record from before format 2): start a \
             server on this store once, which migrates it, then reset it"
        );
    };
    let definition = store
        .load_machine(&record.workflow, version)
        .await?
        .with_context(|| {
            format!(
                "machine version {version} of workflow \"{}\" is not in this store; nothing was \
                 reset",
                record.workflow
            )
        })?;
    // The initial state needs no guard of the plugin's (nothing is decided by an event yet).
    let guards = Arc::new(crate::catalog::Unavailable);
    let machine = Machine::from_json_with_guards(&definition, guards).with_context(|| {
        format!(
            "the stored machine version {version} of workflow \"{}\" does not load",
            record.workflow
        )
    })?;
    let snapshot = machine.initial_snapshot_at(now_ms());
    let mut next = record.next(snapshot.to_persisted());
    next.idempotency.clear();
    // Due now: a server sharing the store looks at it at once (a server on the embedded store,
    // when it starts) and sets its due time from the new state's timers and its own retention
    // settings, which this code does not know.
    next.due_at_ms = Some(now_ms());
    next.audit = Some(AuditEntry {
        confirmation: None,
        at_ms: next.updated_at_ms,
        version: next.version,
        by: "operator:reset".into(),
        event: None,
        from: record.snapshot["value"].clone(),
        to: snapshot.value(),
        principal,
    });
    next.fence = fence.cloned();
    match store.save(key, &next, record.version).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => {
            bail!(changed_meanwhile(key))
        }
        Err(error) => return Err(error.into()),
    }
    announce(store, key).await;
    Ok(snapshot.value())
}

/// The error of a write that lost its compare-and-set to a server.
pub fn changed_meanwhile(key: &str) -> String {
    format!("{key} changed meanwhile (a server moved it); nothing was done: try again")
}

/// Tells the servers sharing the store that `key` changed, so they drop their copy. A failure
/// costs them a stale copy until their next call conflicts and reloads it: logged, not fatal.
async fn announce(store: &dyn StateStore, key: &str) {
    if let Err(error) = store.announce_change(ANNOUNCER, key).await {
        tracing::warn!(%key, %error, "could not tell running servers about the change");
    }
}
