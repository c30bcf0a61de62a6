//! [`Runtime`]: the typed handle through which the rest of the host reaches the actors.

use std::sync::Arc;

use actix::prelude::*;

use super::{
    InstanceKey, SessionId,
    instance::wake::{Wake, Woke},
    instance::{self, CallOutcome, InstanceError, InstanceView},
    notifier::{self, Listener, Notifier, NotifierStats},
    operator::{self, Operated},
    registry::{self, Registry, RegistryStats},
    routes::Routes,
    watching::Watching,
    workers::{self, Workers},
};
use crate::{
    gate::ListsChanged,
    gate::{Affected, CatalogChange},
    store::TaskEntry,
};

/// Cheap to clone; every method may be called from any tokio task.
#[derive(Clone)]
pub struct Runtime {
    pub(super) registry: Addr<Registry>,
    /// The registry's table, read directly: a call to a live instance skips the registry.
    pub(super) routes: Arc<Routes>,
    pub(super) notifier: Addr<Notifier>,
    /// The notifier's table of who watches what, read directly: a subscription already made
    /// is not sent again.
    pub(super) watching: Arc<Watching>,
    pub(super) workers: Arc<Workers>,
}

impl Runtime {
    /// Runs `call` on the instance `key` (started or reloaded as needed), serialized with every
    /// other call on that instance (see [`instance::Call`] for what each part asks). A watcher
    /// the session has already is not sent again.
    pub async fn call(
        &self,
        key: InstanceKey,
        mut call: instance::Call,
    ) -> Result<CallOutcome, InstanceError> {
        call.watcher = self.unless_watched(call.watcher);
        call.sent_at = std::time::Instant::now();
        let instance = self.resolve(key).await?;
        instance
            .send(call)
            .await
            .map_err(|_| InstanceError::Stopped)?
    }

    /// A subscription for the instance to send once it is known to exist, unless the session
    /// has it already.
    fn unless_watched(&self, watcher: Option<notifier::Subscribe>) -> Option<notifier::Subscribe> {
        watcher.filter(|watcher| !self.watching.contains(&watcher.session, &watcher.instance))
    }

    /// Test hook: creates the handle-keyed instance `key` in its initial state, saved. (Serving
    /// never needs it: a starting call creates its instance itself, see `call`'s `mint`.)
    #[cfg(test)]
    pub(crate) async fn create(&self, key: InstanceKey) -> Result<InstanceView, InstanceError> {
        let instance = self.resolve(key).await?;
        instance
            .send(instance::Create)
            .await
            .map_err(|_| InstanceError::Stopped)?
    }

    /// The instance's current state, after any call in progress on it.
    ///
    /// Reading has no effect, so unlike a call it is retried when the actor turns out to have
    /// died: the registry notices the dead actor (or its dead thread) shortly after, and starts
    /// a new one that reloads the last saved state.
    pub async fn view(&self, key: InstanceKey) -> Result<InstanceView, InstanceError> {
        self.look(key, None).await
    }

    /// [`Runtime::view`], for a session that watches the instance from then on if it exists
    /// (see [`instance::View`]).
    pub async fn look(
        &self,
        key: InstanceKey,
        watcher: Option<notifier::Subscribe>,
    ) -> Result<InstanceView, InstanceError> {
        let watcher = self.unless_watched(watcher);
        let mut attempts_left = 3;
        loop {
            let instance = self.resolve(key.clone()).await?;
            let watcher = watcher.clone();
            match instance.send(instance::View { watcher }).await {
                Ok(view) => return view,
                Err(_) if attempts_left > 0 => {
                    attempts_left -= 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(_) => return Err(InstanceError::Stopped),
            }
        }
    }

    /// Where task `id` of instance `key` stands, as its record says (see [`instance::ReadTask`]):
    /// for a task this process does not hold in memory.
    pub async fn read_task(
        &self,
        key: InstanceKey,
        id: &str,
    ) -> Result<Option<(TaskEntry, InstanceView)>, InstanceError> {
        let instance = self.resolve(key).await?;
        instance
            .send(instance::ReadTask { id: id.to_owned() })
            .await
            .map_err(|_| InstanceError::Stopped)?
    }

    /// The timer task found the record under `store_key` due: its instance (woken from the
    /// store if passivated) fires its due timers, or is deleted past its retention. An instance
    /// this process does not run (a session of another server process, a key no server writes)
    /// is [`Woke::Elsewhere`].
    pub async fn wake(&self, store_key: &str) -> Result<Woke, InstanceError> {
        let Some((key, instance)) = self.resolve_here(store_key).await? else {
            return Ok(Woke::Elsewhere);
        };
        let woke = instance
            .send(Wake)
            .await
            .map_err(|_| InstanceError::Stopped)?;
        // A deleted instance keeps nothing in memory either: its handle is unknown from now on.
        if matches!(woke, Ok(Woke::Retired | Woke::Gone)) {
            self.forget(key);
        }
        woke
    }

    /// An operator resets the instance stored under `store_key` to its machine's initial state
    /// (`operator.rs`), through its actor here. `Ok(None)` when the instance is not this
    /// process's to run (a session of another server process sharing the store, or of no live
    /// session): no actor here holds it, so the caller may write the store itself.
    pub async fn reset(
        &self,
        store_key: &str,
        principal: Option<String>,
    ) -> Result<Option<Operated>, InstanceError> {
        let Some((_, instance)) = self.resolve_here(store_key).await? else {
            return Ok(None);
        };
        instance
            .send(operator::Reset { principal })
            .await
            .map_err(|_| InstanceError::Stopped)?
            .map(Some)
    }

    /// An operator deletes the instance stored under `store_key`, through its actor here, which
    /// is then forgotten (its handle is unknown from now on). `Ok(None)` as for
    /// [`Runtime::reset`].
    pub async fn delete(
        &self,
        store_key: &str,
        principal: Option<String>,
    ) -> Result<Option<Operated>, InstanceError> {
        let Some((key, instance)) = self.resolve_here(store_key).await? else {
            return Ok(None);
        };
        let deleted = instance
            .send(operator::Delete { principal })
            .await
            .map_err(|_| InstanceError::Stopped)??;
        if matches!(deleted, Operated::Deleted | Operated::Missing) {
            self.forget(key);
        }
        Ok(Some(deleted))
    }

    /// The actor for the record under `store_key`, started if need be, when this process runs
    /// it; `None` for a key that is not an instance's or an instance this process does not run
    /// (see [`registry::ResolveDue`]).
    async fn resolve_here(
        &self,
        store_key: &str,
    ) -> Result<Option<(InstanceKey, Addr<instance::InstanceActor>)>, InstanceError> {
        let Some(key) = InstanceKey::parse_store_key(store_key) else {
            return Ok(None);
        };
        if let Some(live) = self.routes.live(&key) {
            return Ok(Some((key, live)));
        }
        let found = self
            .registry
            .send(registry::ResolveDue { key: key.clone() })
            .await
            .map_err(|_| InstanceError::Stopped)?
            .map_err(|unknown| InstanceError::UnknownWorkflow(unknown.0))?;
        Ok(found.map(|instance| (key, instance)))
    }

    /// `session` hears about catalog changes from now on, even while it watches no instance
    /// (see [`Runtime::catalog_changed`]); a move of an instance it watches changes its lists
    /// only if `lists_follow_instances` (see [`notifier::Join`]). Idempotent.
    pub fn join(
        &self,
        session: &SessionId,
        listener: Arc<dyn Listener>,
        lists_follow_instances: bool,
    ) {
        self.notifier.do_send(notifier::Join {
            session: session.clone(),
            listener,
            lists_follow_instances,
        });
    }

    /// The plugin catalog was replaced: sends `list_changed` to every client whose menu
    /// `change` concerns, once each: everyone, or the watchers of the instances of a changed
    /// workflow whose state the change concerns (their state is read for that, after the new
    /// catalog is in place).
    pub async fn catalog_changed(&self, change: CatalogChange) {
        if change.everyone {
            self.notifier.do_send(notifier::CatalogChanged {
                everyone: true,
                instances: Vec::new(),
                primitives: change.primitives,
            });
            return;
        }
        if change.primitives {
            self.notifier.do_send(notifier::CatalogChanged {
                everyone: false,
                instances: Vec::new(),
                primitives: true,
            });
        }
        let workflows = change.workflows.keys().cloned().collect();
        let Ok(watched) = self.notifier.send(notifier::Watched { workflows }).await else {
            return;
        };
        let mut instances = Vec::new();
        for key in watched {
            let concerned = match change.workflows.get(&*key.workflow) {
                None => false,
                Some(Affected::All) => true,
                Some(Affected::InStates(_)) => self
                    .view(key.clone())
                    .await
                    .is_ok_and(|view| change.concerns(&key.workflow, &view.snapshot)),
            };
            if concerned {
                instances.push(key);
            }
        }
        if !instances.is_empty() {
            self.notifier.do_send(notifier::CatalogChanged {
                everyone: false,
                instances,
                primitives: false,
            });
        }
    }

    /// Another server process changed `instance` (announced through the shared store): tell
    /// this process's sessions that watch it. The announcement does not say what the move
    /// changed besides the tools, so they are told that their prompts and resources may have
    /// changed too.
    pub fn changed_elsewhere(&self, instance: InstanceKey) {
        self.notifier.do_send(notifier::InstanceChanged {
            instance,
            lists: ListsChanged::ALL,
            told_in_reply: None,
        });
    }

    /// From now on, `session` is told when `instance` moves that its resource `uri` changed
    /// (`resources/updated`), and, like any watcher, when the instance's lists change.
    pub fn subscribe_resource(
        &self,
        session: &SessionId,
        listener: Arc<dyn Listener>,
        instance: InstanceKey,
        uri: &str,
    ) {
        self.notifier.do_send(notifier::SubscribeResource {
            session: session.clone(),
            listener,
            instance,
            uri: uri.into(),
        });
    }

    /// `session` no longer wants `resources/updated` for `uri`.
    pub fn unsubscribe_resource(&self, session: &SessionId, uri: &str) {
        self.notifier.do_send(notifier::UnsubscribeResource {
            session: session.clone(),
            uri: uri.into(),
        });
    }

    /// An instance that does not exist: a minted one whose starting call failed, or one a
    /// handle named that the store does not have. Nothing of it stays in memory.
    pub fn forget(&self, instance: InstanceKey) {
        self.registry.do_send(registry::Forget { key: instance });
    }

    /// `session` is gone: drop its subscriptions and its session-keyed instances.
    pub fn session_ended(&self, session: &SessionId) {
        self.notifier.do_send(notifier::SessionEnded {
            session: session.clone(),
        });
        self.registry.do_send(registry::SessionEnded {
            session: session.clone(),
        });
    }

    /// What the actors hold right now.
    pub async fn stats(&self) -> Result<(RegistryStats, NotifierStats), InstanceError> {
        let registry = self
            .registry
            .send(registry::Stats)
            .await
            .map_err(|_| InstanceError::Stopped)?;
        let notifier = self
            .notifier
            .send(notifier::Stats)
            .await
            .map_err(|_| InstanceError::Stopped)?;
        Ok((registry, notifier))
    }

    /// The threads instance actors run on, where HTTP connections are served too, so that a
    /// session's calls reach the instances it started without leaving its thread (`workers`).
    pub fn workers(&self) -> Arc<Workers> {
        self.workers.clone()
    }

    /// Test hook: makes the instance actor of `key` panic inside a handler, as a bug would.
    #[cfg(test)]
    pub(crate) async fn crash(&self, key: InstanceKey) -> Result<(), actix::MailboxError> {
        let instance = self.resolve(key).await.expect("resolve");
        instance.send(instance::Crash).await
    }

    async fn resolve(
        &self,
        key: InstanceKey,
    ) -> Result<Addr<instance::InstanceActor>, InstanceError> {
        if let Some(live) = self.routes.live(&key) {
            return Ok(live);
        }
        self.registry
            .send(registry::Resolve {
                key,
                caller: workers::current(),
            })
            .await
            .map_err(|_| InstanceError::Stopped)?
            .map_err(|unknown| InstanceError::UnknownWorkflow(unknown.0))
    }
}
