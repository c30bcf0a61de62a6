//! [`InstanceDeps`]: what every instance actor shares (the catalog, the store, the notifier,
//! the limits), and the save every call and timer ends with: keep the machine, compare-and-set,
//! settle an unanswered save, tell the timer task and the other servers.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::prelude::*;

use super::InstanceError;
use crate::actors::{InstanceKey, Owner, notifier, tenure::LeaseSettings};
use crate::{
    catalog::{LiveCatalog, Workflow},
    invoke,
    retention::Retention,
    statechart::Snapshot,
    store::{DeleteKind, Fence, InstanceRecord, StateStore, StoreError, Tombstone},
    timers::Alarm,
};

/// What the actor needs that is shared by every instance.
pub struct InstanceDeps {
    /// This process's name in change announcements (see `StateStore::announce_change`).
    pub node: Arc<str>,
    /// How long a plugin call may take, and when a shutdown stops waiting for it.
    pub limits: invoke::Limits,
    /// The catalog being served; a plugin reload replaces it (see [`InstanceActor::follow_catalog`]).
    pub catalog: Arc<LiveCatalog>,
    pub store: Arc<dyn StateStore>,
    pub notifier: Addr<notifier::Notifier>,
    /// How long an idempotency key is honoured (`--idempotency-window`).
    pub idempotency_window: Duration,
    /// The largest record a call may save (`--max-record-bytes`).
    pub max_record_bytes: usize,
    /// How long instances are kept (`--retain-final`, `--instance-ttl`): part of each due time.
    pub retention: Retention,
    /// Whether a delete leaves a tombstone (`--tombstone-days` above 0).
    pub tombstones: bool,
    /// Told every due time that is saved, so the timer task wakes in time for it.
    pub alarm: Arc<Alarm>,
    /// How leases are held, with a store other servers share (see `tenure.rs`).
    pub leases: LeaseSettings,
    /// The machine versions this process has put in the store (`StateStore::save_machine`),
    /// so each is saved once, before the first record that names it. Keyed by version, which
    /// hashes the whole definition (its `id` included).
    pub saved_machines: Mutex<HashSet<String>>,
    /// The ids of the tasks whose plugins run in this process (`task.rs`): a `working` task in
    /// a record is orphaned only if its id is not here (an actor passivated while its task runs
    /// still runs it, and its successor must not end it).
    pub running_tasks: crate::fast_hash::ConcurrentMap<String, ()>,
}

impl InstanceDeps {
    /// Deletes `view`'s record (compare-and-delete on its version, under `fence`), leaving a
    /// tombstone saying `by` deleted it as `kind`, unless tombstones are off. The one place an
    /// actor deletes a record it knows, so every such delete leaves its trace alike.
    pub async fn delete_leaving(
        &self,
        key: &str,
        view: &super::InstanceView,
        fence: Option<&Fence>,
        by: &str,
        kind: DeleteKind,
    ) -> Result<bool, StoreError> {
        if !self.tombstones {
            return self.store.delete(key, Some(view.version), fence).await;
        }
        let tombstone = Tombstone {
            key: key.to_owned(),
            workflow: view.workflow.id.clone(),
            state: view.snapshot.value(),
            version: view.version,
            deleted_at_ms: crate::store::now_ms(),
            deleted_by: by.to_owned(),
            kind,
        };
        self.store
            .delete_leaving(key, view.version, fence, &tombstone)
            .await
    }

    /// Makes sure the store keeps `workflow`'s machine definition, so a record naming its
    /// version can be restored after the plugin that brings it is gone.
    async fn keep_machine(&self, workflow: &Workflow) -> Result<(), StoreError> {
        // The version alone names the machine (it hashes the whole definition, `id` included),
        // so the check on every save allocates nothing.
        if workflow.archived || self.machines().contains(workflow.version.as_str()) {
            return Ok(());
        }
        self.store
            .save_machine(&workflow.id, &workflow.version, &workflow.definition)
            .await?;
        self.machines().insert(workflow.version.clone());
        Ok(())
    }

    fn machines(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Lookups and inserts only: a panic cannot leave the set inconsistent.
        self.saved_machines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The due time of `key` in `snapshot`, last moved at `updated_at_ms` (see
    /// `timers::due_at`): retention applies to handle-keyed instances only.
    pub(in crate::actors) fn due_at(
        &self,
        key: &InstanceKey,
        snapshot: &Snapshot,
        updated_at_ms: u64,
    ) -> Option<u64> {
        let retention = matches!(key.owner, Owner::Handle(_)).then_some(&self.retention);
        crate::timers::due_at(snapshot, updated_at_ms, retention)
    }

    /// Saves `record` for `key` with compare-and-set on `expected` (under the lease
    /// `record.fence` names, if any), after keeping the machine it names; then tells the timer
    /// task its due time and, when it `moved`, the other server processes sharing the store
    /// (they notify their own sessions).
    pub(in crate::actors) async fn save(
        &self,
        key: &InstanceKey,
        workflow: &Workflow,
        record: &InstanceRecord,
        expected: u64,
        moved: bool,
    ) -> Result<(), InstanceError> {
        let store_key = key.store_key();
        self.keep_machine(workflow).await?;
        let saved =
            match crate::metrics::timed_save(self.store.save(&store_key, record, expected)).await {
                // No answer is not "not saved": learn which it was before telling the caller.
                Err(failure @ (StoreError::NoAnswer(_) | StoreError::Dropped(_))) => {
                    crate::store::settle_unanswered_save(
                        &*self.store,
                        &store_key,
                        record,
                        expected,
                        failure,
                    )
                    .await
                }
                other => other,
            };
        if let Err(StoreError::Fenced { .. }) = &saved {
            crate::metrics::lease_fenced();
            tracing::info!(instance = %key, "a save was refused: this server's lease on the instance lapsed or moved");
        }
        saved?;
        if let Some(due) = record.due_at_ms {
            self.alarm.set(due);
        }
        // The transition is saved already, so a failed announcement costs the others a
        // notification, not a state.
        if moved && let Err(error) = self.store.announce_change(&self.node, &store_key).await {
            tracing::warn!(instance = %key, %error, "could not announce a change to other servers");
        }
        Ok(())
    }
}
