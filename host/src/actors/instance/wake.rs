//! Timers and retention of one instance: the part of [`InstanceActor`] that acts when nobody
//! calls.
//!
//! It owns [`Wake`], what the timer task (`timers.rs`) sends an instance whose due time came,
//! and [`settle`], which fires the instance's due timers and saves the result; the instance actor
//! runs it before every call and view too, so whatever looks at an instance sees the state its
//! timers left, whether or not the timer task got there first. Both run inside the actor's
//! mailbox like a call (`AtomicResponse`), so a timer and a call on one instance never
//! interleave, and save with compare-and-set, so with several servers on one store a timer
//! fires once: the loser of the race reloads and finds nothing due.
//!
//! It must not decide when to wake (that is the timer task's) or which record expires (that is
//! `retention`'s rule; here it is applied).

use actix::prelude::*;
use tracing::Instrument;

use super::{InstanceActor, InstanceDeps, InstanceError, InstanceView, load};
use crate::actors::InstanceKey;
use crate::{
    invoke::InvokeError,
    logs::otlp,
    statechart::{Status, TransitionLoop},
    store::{AuditEntry, DeleteKind, Fence, InstanceRecord, StoreError, now_ms},
};

/// The instance's due time came: fire its due timers, delete it if retention says so, or
/// correct its due time if the stored one is wrong.
#[derive(Message)]
#[rtype(result = "Result<Woke, InstanceError>")]
pub struct Wake;

/// What a [`Wake`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// Timers fired (`moved`: one took a transition) and the result was saved.
    Fired { moved: bool },
    /// Past its retention: the record is deleted.
    Retired,
    /// Nothing was due; the stored due time was wrong and is corrected.
    Reindexed,
    /// Nothing was due, or another writer got there first.
    Nothing,
    /// The record is gone (its stale due-time entry was removed).
    Gone,
    /// Not an instance this server process runs (a session of another one): left to it.
    Elsewhere,
}

/// How many times [`settle`] tries in all, rereading the record after each compare-and-set race
/// it loses.
const SETTLE_ATTEMPTS: usize = 3;

/// What [`settle`] did.
pub(super) struct Settled {
    /// The instance after it.
    pub view: InstanceView,
    /// Whether a timer took a transition (its watchers are owed a `list_changed`, and other
    /// servers were told).
    pub moved: bool,
    /// Whether it saved (timers fired, or a never-saved instance with a timer was saved).
    pub saved: bool,
}

/// Fires `view`'s timers due at `now`, each at its own deadline and in order, and saves the
/// result (a timer whose step loops is logged and dropped; the instance keeps its state). A
/// session-keyed instance never saved whose state has a timer is saved now, so that its timer
/// is in the store's index.
///
/// A save that loses a compare-and-set race rereads the record and tries again: what another
/// writer saved is the truth, and its timers may already have fired. Saves are made under
/// `fence`, the lease held (if any); a lease that refuses them is the caller's to handle.
pub(super) async fn settle(
    deps: &InstanceDeps,
    key: &InstanceKey,
    mut view: InstanceView,
    now: u64,
    fence: Option<Fence>,
) -> Result<Settled, InstanceError> {
    let mut attempt = 1;
    loop {
        // Nearly every call finds nothing to do, and so may a reread after a lost race (the
        // other writer settled it): neither need look up the catalog's machine.
        if !has_work(&view, now) {
            return Ok(Settled {
                view,
                moved: false,
                saved: false,
            });
        }
        // A reread after a lost race is loaded onto the catalog's machine, as the actor loads it.
        let workflow = deps
            .catalog
            .current()
            .workflow(&key.workflow)
            .cloned()
            .unwrap_or_else(|| view.workflow.clone());
        match settle_once(deps, key, view, now, fence.clone()).await {
            Err(InstanceError::Store(StoreError::Conflict { .. })) if attempt < SETTLE_ATTEMPTS => {
                attempt += 1;
                view = load(deps, key, &workflow).await?;
            }
            settled => return settled,
        }
    }
}

/// Whether settling `view` at `now` does anything: a timer is due, or the instance was never
/// saved and has a timer (its deadline must reach the store's index).
fn has_work(view: &InstanceView, now: u64) -> bool {
    let unsaved_timer = view.version == 0 && view.snapshot.next_deadline().is_some();
    is_due(view, now) || unsaved_timer
}

/// Whether a timer of `view` is due at `now`.
fn is_due(view: &InstanceView, now: u64) -> bool {
    view.snapshot
        .next_deadline()
        .is_some_and(|deadline| deadline <= now)
}

/// One try of [`settle`], for a `view` with work to do.
async fn settle_once(
    deps: &InstanceDeps,
    key: &InstanceKey,
    view: InstanceView,
    now: u64,
    fence: Option<Fence>,
) -> Result<Settled, InstanceError> {
    // Past a shutdown's deadline nothing more is saved.
    if deps.limits.abandon.is_cancelled() {
        return Err(InstanceError::Tool(InvokeError::ShuttingDown));
    }
    // A firing is a trace of its own (`logs::otlp`), even when a call's load found it due: no
    // client asked for it. (Saving a new instance's first deadline fires nothing: no trace.)
    let span = if otlp::exporting() && is_due(&view, now) {
        let from = otlp::state(&view.snapshot.value());
        tracing::info_span!(
            target: "turnstile::timers",
            parent: None,
            "timers",
            workflow = %key.workflow,
            instance = %key.label(),
            from = from.as_str(),
            to = tracing::field::Empty,
            event = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    fire_due(deps, key, view, now, fence).instrument(span).await
}

/// [`settle_once`] for an instance with work to do: fires what is due and saves.
async fn fire_due(
    deps: &InstanceDeps,
    key: &InstanceKey,
    view: InstanceView,
    now: u64,
    fence: Option<Fence>,
) -> Result<Settled, InstanceError> {
    let workflow = view.workflow.clone();
    let fired = crate::invoke::answering_guards(&deps.limits, || {
        workflow.machine.fire_due(&view.snapshot, now)
    })
    .await;
    for timer in &fired.timers {
        if timer.outcome == Err(TransitionLoop) {
            tracing::error!(
                instance = %key,
                timer = timer.event,
                "a timer started an eventless loop (over the microstep limit): the timer is \
                 dropped and the instance keeps its state"
            );
        }
    }
    let moved = fired.changed();
    let updated_at_ms = if moved || view.version == 0 {
        now
    } else {
        view.updated_at_ms
    };
    let record = InstanceRecord {
        machine: Some(workflow.version.clone()),
        idempotency: view.idempotency.clone(),
        tasks: view.tasks.clone(),
        due_at_ms: deps.due_at(key, &fired.snapshot, updated_at_ms),
        audit: moved.then(|| AuditEntry {
            confirmation: None,
            at_ms: updated_at_ms,
            version: view.version + 1,
            by: "timer".to_string(),
            event: fired
                .timers
                .iter()
                .rev()
                .find(|timer| timer.outcome == Ok(true))
                .map(|timer| timer.event.clone()),
            from: view.snapshot.value(),
            to: fired.snapshot.value(),
            principal: None,
        }),
        fence,
        ..InstanceRecord::new(
            workflow.id.clone(),
            fired.snapshot.to_persisted(),
            view.version + 1,
            updated_at_ms,
        )
    };
    let saving = if otlp::exporting() {
        let span = tracing::Span::current();
        let to = otlp::state(&fired.snapshot.value());
        span.record("to", to.as_str());
        if let Some(AuditEntry {
            event: Some(event), ..
        }) = &record.audit
        {
            span.record("event", event.as_str());
        }
        tracing::info_span!(target: "turnstile::timers", "save", version = record.version)
    } else {
        tracing::Span::none()
    };
    deps.save(key, &workflow, &record, view.version, moved)
        .instrument(saving)
        .await?;
    for timer in &fired.timers {
        if timer.outcome == Ok(true) {
            crate::metrics::transition_saved(&workflow.id, &timer.event);
        }
    }
    if !fired.timers.is_empty() {
        tracing::debug!(instance = %key, fired = fired.timers.len(), moved, "timers fired");
    }
    let after = InstanceView {
        snapshot: fired.snapshot,
        version: record.version,
        workflow: view.workflow,
        idempotency: record.idempotency,
        tasks: record.tasks,
        updated_at_ms,
        due_at_ms: record.due_at_ms,
    };
    Ok(Settled {
        view: after,
        moved,
        saved: true,
    })
}

/// The [`Wake`] of `view`: retention (an expired instance is deleted, timers or not), its due
/// timers, then a due time to correct. Returns the view to keep (`None`: reload next time),
/// whether it moved, and what happened.
async fn wake(
    deps: &InstanceDeps,
    key: &InstanceKey,
    view: InstanceView,
    now: u64,
    fence: Option<Fence>,
) -> Result<(Option<InstanceView>, bool, Woke), InstanceError> {
    if expired(deps, key, &view, now) {
        return retire(deps, key, &view, fence.as_ref()).await;
    }
    let Settled { view, moved, saved } = settle(deps, key, view, now, fence.clone()).await?;
    if saved {
        return Ok((Some(view), moved, Woke::Fired { moved }));
    }
    // Settling may have reread the record (another writer saved it meanwhile).
    if expired(deps, key, &view, now) {
        return retire(deps, key, &view, fence.as_ref()).await;
    }
    // Nothing was due: the stored due time is wrong (written by code that predates due times,
    // or under other retention settings). Store the right one, or the key stays due.
    let due = deps.due_at(key, &view.snapshot, view.updated_at_ms);
    if view.version == 0 || view.due_at_ms == due {
        return Ok((Some(view), false, Woke::Nothing));
    }
    let record = InstanceRecord {
        due_at_ms: due,
        ..view.restated(fence)
    };
    match deps
        .save(key, &view.workflow, &record, view.version, false)
        .await
    {
        Ok(()) => Ok((
            Some(InstanceView {
                version: record.version,
                due_at_ms: due,
                ..view
            }),
            false,
            Woke::Reindexed,
        )),
        Err(InstanceError::Store(StoreError::Conflict { .. })) => Ok((None, false, Woke::Nothing)),
        Err(error) => Err(error),
    }
}

/// Whether retention deletes `view` at `now` (handle-keyed, saved instances only).
fn expired(deps: &InstanceDeps, key: &InstanceKey, view: &InstanceView, now: u64) -> bool {
    matches!(key.owner, super::Owner::Handle(_))
        && view.version > 0
        && deps
            .retention
            .expires_at(view.updated_at_ms, view.snapshot.status() == Status::Done)
            .is_some_and(|expires| expires <= now)
}

/// Deletes `view`'s record with a compare-and-delete: a save that landed since it was read
/// wins, and is looked at again at its own due time.
async fn retire(
    deps: &InstanceDeps,
    key: &InstanceKey,
    view: &InstanceView,
    fence: Option<&Fence>,
) -> Result<(Option<InstanceView>, bool, Woke), InstanceError> {
    match deps
        .delete_leaving(
            &key.store_key(),
            view,
            fence,
            "retention",
            DeleteKind::Retention,
        )
        .await
    {
        Ok(_) => {
            tracing::debug!(instance = %key, "deleted an instance past its retention");
            Ok((None, false, Woke::Retired))
        }
        Err(StoreError::Conflict { .. }) => Ok((None, false, Woke::Nothing)),
        Err(error) => Err(error.into()),
    }
}

impl Handler<Wake> for InstanceActor {
    type Result = AtomicResponse<Self, Result<Woke, InstanceError>>;

    fn handle(&mut self, _: Wake, _ctx: &mut Self::Context) -> Self::Result {
        self.follow_catalog();
        let (deps, key, tenure) = (self.deps.clone(), self.key.clone(), self.tenure.clone());
        let cached = self.current.clone();
        let workflow = self.workflow.clone();
        let work = async move {
            // With a store other servers share, the timer fires where the lease is: taken here
            // if free, else left to its holder, who settles the instance on its next message.
            let cached = match &tenure {
                None => cached,
                Some(tenure) => match tenure.hold(None).await? {
                    Ok(holding) => cached.filter(|view| holding.keeps(view.version)),
                    Err(_busy) => return Ok((cached, false, Woke::Elsewhere)),
                },
            };
            let loaded = match cached {
                Some(view) => Ok(view),
                None => load(&deps, &key, &workflow).await,
            };
            let view = match loaded {
                Ok(view) => view,
                // Deleted, by code that left its due-time entry behind: remove that too.
                Err(InstanceError::UnknownHandle(_)) => {
                    deps.store.delete(&key.store_key(), None, None).await?;
                    return Ok((None, false, Woke::Gone));
                }
                Err(error) => return Err(error),
            };
            let fence = tenure.as_ref().and_then(|tenure| tenure.fence());
            wake(&deps, &key, view, now_ms(), fence).await
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|woke, actor, ctx| {
            actor.after(&woke, ctx);
            match woke {
                Ok((view, moved, woke)) => {
                    if let Some(view) = &view {
                        actor.workflow = view.workflow.clone();
                    }
                    actor.current = view;
                    if moved {
                        // A timer's move: what it changed besides tools is not worked out
                        // here, so every list is announced.
                        actor.announce(crate::gate::ListsChanged::ALL, None);
                    }
                    Ok(woke)
                }
                Err(error) => {
                    actor.current = None;
                    Err(error)
                }
            }
        })))
    }
}
