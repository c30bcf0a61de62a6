//! What an operator does to one instance (the console's reset and delete buttons), done by the
//! instance's own actor, in its mailbox, like a call: never a write to the store behind a live
//! actor's back, whose copy in memory would then be stale.
//!
//! The messages are handled by [`InstanceActor`] here rather than in `instance/`, which owns the
//! `tools/call` path; they use only what that module lends the rest of `actors/` (its view, its
//! lease, its `save`). A reset saves the machine's initial state and context as the next
//! version, with an audit entry `operator:reset` naming the operator's principal, and forgets the
//! instance's idempotency entries (a retry must not replay a result from before the reset). A
//! delete removes the record (and its trail, which goes with it). Both hold the instance's lease
//! first with a store other servers share, are compare-and-set on the version just read, tell the
//! other servers (the store's change feed) and this one's watchers (the notifier).
//!
//! While a step runs on the instance as a task here, both are refused, as a call that would move
//! it is ([`InstanceError::TaskRunning`]): the task's end would land on a record reset or gone.
//!
//! It must not decide what an operator may do (that is the console's access check) or find
//! instances (that is `instances/`).

use std::{sync::Arc, time::Instant};

use actix::prelude::*;
use serde_json::Value;

use super::{
    InstanceKey,
    instance::{self, InstanceActor, InstanceDeps, InstanceError, InstanceView},
    tenure::Tenure,
};
use crate::{
    catalog::Workflow,
    gate::ListsChanged,
    store::{AuditEntry, DeleteKind, Fence, InstanceRecord, now_ms},
};

/// Put the instance back in its machine's initial state and context.
#[derive(Message)]
#[rtype(result = "Result<Operated, InstanceError>")]
pub struct Reset {
    /// The operator, for the audit trail (`None` without authentication).
    pub principal: Option<String>,
}

/// Delete the instance's record.
#[derive(Message)]
#[rtype(result = "Result<Operated, InstanceError>")]
pub struct Delete {
    /// The operator, for the log.
    pub principal: Option<String>,
}

/// What an operator's action did.
#[derive(Debug, Clone, PartialEq)]
pub enum Operated {
    /// Reset from the state value `from` to `to`.
    Reset { from: Value, to: Value },
    /// The record is gone.
    Deleted,
    /// There was nothing stored to act on (never saved, or deleted meanwhile).
    Missing,
}

/// What an operator's action works on: the actor's instance, taken (once the actor follows the
/// catalog) for the action's future, which runs apart from the actor. Reset and delete start
/// alike, and [`Operand::held`] is how.
struct Operand {
    deps: Arc<InstanceDeps>,
    key: InstanceKey,
    workflow: Arc<Workflow>,
    tenure: Option<Arc<Tenure>>,
}

impl Operand {
    fn of(actor: &mut InstanceActor) -> Self {
        actor.follow_catalog();
        Operand {
            deps: actor.deps.clone(),
            key: actor.key.clone(),
            workflow: actor.workflow.clone(),
            tenure: actor.tenure.clone(),
        }
    }

    /// The instance as stored now, or `None` when nothing is. With a store other servers share,
    /// read under its lease, held first (waiting for another server to give it up for up to
    /// `--lease-wait`): the copy in memory may predate another server's move.
    async fn held(&self) -> Result<Option<InstanceView>, InstanceError> {
        if let Some(tenure) = &self.tenure {
            tenure.hold(Some(Instant::now())).await??;
        }
        match instance::load(&self.deps, &self.key, &self.workflow).await {
            Ok(view) if view.version > 0 => Ok(Some(view)),
            Ok(_) | Err(InstanceError::UnknownHandle(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The fence to write under: the lease held, if any.
    fn fence(&self) -> Option<Fence> {
        self.tenure.as_ref().and_then(|tenure| tenure.fence())
    }
}

impl Handler<Reset> for InstanceActor {
    type Result = AtomicResponse<Self, Result<Operated, InstanceError>>;

    fn handle(&mut self, msg: Reset, _ctx: &mut Self::Context) -> Self::Result {
        if let Some(busy) = self.held_by_task() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(busy))));
        }
        let operand = Operand::of(self);
        let work = async move {
            let Some(view) = operand.held().await? else {
                return Ok((None, Operated::Missing));
            };
            let (deps, key) = (&operand.deps, &operand.key);
            let running = view.workflow.clone();
            let now = now_ms();
            let snapshot = running.machine.initial_snapshot_at(now);
            let (from, to) = (view.snapshot.value(), snapshot.value());
            let version = view.version + 1;
            let record = InstanceRecord {
                machine: Some(running.version.clone()),
                due_at_ms: deps.due_at(key, &snapshot, now),
                audit: Some(AuditEntry {
                    at_ms: now,
                    version,
                    by: "operator:reset".into(),
                    event: None,
                    from: from.clone(),
                    to: to.clone(),
                    principal: msg.principal,
                    confirmation: None,
                }),
                fence: operand.fence(),
                ..InstanceRecord::new(running.id.clone(), snapshot.to_persisted(), version, now)
            };
            deps.save(key, &running, &record, view.version, true)
                .await?;
            let after = InstanceView {
                snapshot,
                version,
                workflow: running,
                idempotency: Vec::new(),
                tasks: Vec::new(),
                updated_at_ms: now,
                due_at_ms: record.due_at_ms,
            };
            Ok((Some(after), Operated::Reset { from, to }))
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|result, actor, ctx| {
            let outcome = match result {
                Ok((adopt, operated)) => {
                    if let Some(view) = adopt {
                        actor.workflow = view.workflow.clone();
                        actor.current = Some(view);
                        // Every list may differ in the initial state.
                        actor.announce(ListsChanged::ALL, None);
                    }
                    Ok(operated)
                }
                Err(error) => {
                    actor.current = None;
                    Err(error)
                }
            };
            actor.after(&outcome, ctx);
            outcome
        })))
    }
}

impl Handler<Delete> for InstanceActor {
    type Result = AtomicResponse<Self, Result<Operated, InstanceError>>;

    fn handle(&mut self, msg: Delete, _ctx: &mut Self::Context) -> Self::Result {
        if let Some(busy) = self.held_by_task() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(busy))));
        }
        let operand = Operand::of(self);
        let work = async move {
            let Some(view) = operand.held().await? else {
                return Ok(Operated::Missing);
            };
            let (deps, key) = (&operand.deps, &operand.key);
            let store_key = key.store_key();
            let by = msg.principal.as_deref().unwrap_or("console");
            if !deps
                .delete_leaving(
                    &store_key,
                    &view,
                    operand.fence().as_ref(),
                    by,
                    DeleteKind::Console,
                )
                .await?
            {
                return Ok(Operated::Missing);
            }
            tracing::info!(workflow = %key.workflow, principal = msg.principal.as_deref().unwrap_or("-"), "an operator deleted an instance");
            if let Err(error) = deps.store.announce_change(&deps.node, &store_key).await {
                tracing::warn!(%error, "could not announce an operator's delete to other servers");
            }
            Ok(Operated::Deleted)
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |outcome, actor, ctx| {
                // Whatever happened, the next message reads the store again.
                actor.current = None;
                if matches!(outcome, Ok(Operated::Deleted)) {
                    // The lease went with the record.
                    if let Some(tenure) = &actor.tenure {
                        tenure.forget();
                    }
                    actor.announce(ListsChanged::ALL, None);
                }
                actor.after(&outcome, ctx);
                outcome
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::Operated;
    use crate::{
        actors::{ActorOptions, InstanceError, InstanceKey, start},
        catalog::{Catalog, LiveCatalog},
        statechart::{Event, Machine},
        store::{DeleteKind, InstanceRecord, MemoryStore, StateStore},
    };

    fn invoice() -> serde_json::Value {
        json!({"id":"invoice","initial":"draft","context":{"n":0},"states":{
            "draft":{"on":{"SUBMIT":"review"}},
            "review":{"on":{"APPROVE":"approved"}},
            "approved":{"type":"final"}}})
    }

    #[tokio::test]
    async fn a_live_instance_is_reset_and_deleted_by_its_actor() {
        let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let runtime = start(catalog, store.clone(), ActorOptions::default()).unwrap();
        let key = InstanceKey::mint("invoice");
        let store_key = key.store_key();
        let machine = Machine::from_json(&invoice()).unwrap();
        let moved = machine.transition(&machine.initial_snapshot(), &Event::new("SUBMIT"));
        let mut record = InstanceRecord::first("invoice", moved.snapshot.to_persisted());
        record.machine = Some(crate::catalog::machine_version(&invoice()));
        store.save(&store_key, &record, 0).await.unwrap();
        // The actor is live, with its copy in memory.
        assert_eq!(
            runtime.view(key.clone()).await.unwrap().snapshot.value(),
            "review"
        );

        let reset = runtime
            .reset(&store_key, Some("token:ops".into()))
            .await
            .unwrap();
        assert_eq!(
            reset,
            Some(Operated::Reset {
                from: json!("review"),
                to: json!("draft")
            })
        );
        // The actor's own copy moved with the store: a view needs no reload to see it.
        let view = runtime.view(key.clone()).await.unwrap();
        assert_eq!((view.snapshot.value(), view.version), (json!("draft"), 2));
        let trail = store.audit(&store_key).await.unwrap();
        let last = trail.last().unwrap();
        assert_eq!(
            (last.by.as_str(), last.principal.as_deref()),
            ("operator:reset", Some("token:ops"))
        );

        let deleted = runtime.delete(&store_key, None).await.unwrap();
        assert_eq!(deleted, Some(Operated::Deleted));
        assert!(store.load(&store_key).await.unwrap().is_none());
        // It left a tombstone of the version it deleted, naming the console (no principal).
        let left = store.tombstones(&store_key, 10).await.unwrap();
        assert_eq!(
            left.iter()
                .map(|t| (t.deleted_by.as_str(), t.kind, t.state.clone(), t.version))
                .collect::<Vec<_>>(),
            [("console", DeleteKind::Console, json!("draft"), 2)]
        );
        assert!(matches!(
            runtime.view(key).await,
            Err(InstanceError::UnknownHandle(_))
        ));
        // A key that names no instance is nothing this process runs.
        assert_eq!(runtime.reset("machine/x", None).await.unwrap(), None);
    }

    #[tokio::test]
    async fn with_tombstones_off_a_delete_leaves_none() {
        let catalog = Arc::new(LiveCatalog::new(Catalog::with_machines(vec![invoice()])));
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let options = ActorOptions {
            tombstones: false,
            ..ActorOptions::default()
        };
        let runtime = start(catalog, store.clone(), options).unwrap();
        let key = InstanceKey::mint("invoice");
        let store_key = key.store_key();
        let machine = Machine::from_json(&invoice()).unwrap();
        let mut record =
            InstanceRecord::first("invoice", machine.initial_snapshot().to_persisted());
        record.machine = Some(crate::catalog::machine_version(&invoice()));
        store.save(&store_key, &record, 0).await.unwrap();
        runtime.view(key).await.unwrap();
        let deleted = runtime.delete(&store_key, Some("token:ops".into())).await;
        assert_eq!(deleted.unwrap(), Some(Operated::Deleted));
        assert!(store.load(&store_key).await.unwrap().is_none());
        assert!(store.tombstones("", 10).await.unwrap().is_empty());
    }
}
