//! [`Registry`]: finds the instance actor for a key, starting one if there is none.
//!
//! It owns the table of live instance actors ([`Routes`], which callers read directly, so that a
//! call to a live instance never waits for the registry) and where they run. It is asked only on
//! a miss: it starts the actor, enters it in the table and hands back its address; the caller
//! talks to the instance directly. It never waits on an instance.
//!
//! It also passivates: an instance nobody has used for `idle_after` is dropped from the table.
//! Dropping the registry's address is all it takes: actix stops an actor once no address to it
//! is left, after any call still holding one finishes, and a supervised actor whose address is
//! gone is not restarted. The next call reactivates the instance from the store. Should an old
//! actor still be finishing a call while a new one loads, the store's compare-and-set keeps the
//! two from overwriting each other.
//!
//! It must not hold instance state (that is the instance actor's) or decide visibility.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use actix::prelude::*;

use super::{
    InstanceKey, Owner, SessionId,
    instance::{self, InstanceActor, InstanceDeps},
    routes::Routes,
    tables::shrink_if_sparse,
    workers::Workers,
};

/// The address of the actor for `key`, started if needed.
#[derive(Message)]
#[rtype(result = "Result<Addr<InstanceActor>, UnknownWorkflow>")]
pub struct Resolve {
    pub key: InstanceKey,
    /// The worker thread the caller runs on, if any: a new actor starts there.
    pub caller: Option<usize>,
}

/// Like [`Resolve`], for the timer task, which finds keys in the store: `None` for a
/// session-keyed instance of a session this process does not have (another server process
/// shares the store, and the instance is that one's to run).
#[derive(Message)]
#[rtype(result = "Result<Option<Addr<InstanceActor>>, UnknownWorkflow>")]
pub struct ResolveDue {
    pub key: InstanceKey,
}

/// `session` ended: its session-keyed instances end with it, stored records included.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionEnded {
    pub session: SessionId,
}

/// Drop `key` from the table: a minted instance whose starting call failed was never created.
/// Its actor stops once its address is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forget {
    pub key: InstanceKey,
}

/// How many instance actors are live, for operators and leak tests.
#[derive(Message)]
#[rtype(result = "RegistryStats")]
pub struct Stats;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RegistryStats {
    /// Live instance actors.
    pub instances: usize,
    /// Of those, instances keyed by a session (they end with it; passivated ones not counted).
    pub session_instances: usize,
    /// Instances dropped for idleness since start.
    pub passivated: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("no loaded plugin defines workflow \"{0}\"")]
pub struct UnknownWorkflow(pub String);

pub struct Registry {
    deps: Arc<InstanceDeps>,
    /// The threads instance actors run on.
    workers: Arc<Workers>,
    /// The live instance actors; shared with [`super::Runtime`], written only here.
    instances: Arc<Routes>,
    /// Every instance a session owns, live or passivated, so that all of them end with it.
    by_session: HashMap<SessionId, HashSet<InstanceKey>>,
    /// `None`: never passivate.
    idle_after: Option<Duration>,
    passivated: u64,
}

impl Registry {
    pub fn new(
        deps: Arc<InstanceDeps>,
        workers: Arc<Workers>,
        idle_after: Option<Duration>,
        instances: Arc<Routes>,
    ) -> Self {
        Registry {
            deps,
            workers,
            instances,
            by_session: HashMap::new(),
            idle_after,
            passivated: 0,
        }
    }

    /// Drops every instance idle for longer than `idle_after`.
    fn passivate_idle(&mut self) {
        let Some(idle_after) = self.idle_after else {
            return;
        };
        let dropped = self.instances.drop_idle(idle_after);
        if dropped == 0 {
            return;
        }
        self.passivated += dropped as u64;
        // `by_session` keeps passivated keys: when the session ends, their records go too.
        tracing::debug!(
            dropped,
            live = self.instances.len(),
            "passivated idle instances"
        );
    }

    fn start_instance(
        &mut self,
        key: &InstanceKey,
        caller: Option<usize>,
    ) -> Result<Addr<InstanceActor>, UnknownWorkflow> {
        let workflow = self
            .deps
            .catalog
            .current()
            .workflow(&key.workflow)
            .cloned()
            .ok_or_else(|| UnknownWorkflow(key.workflow.to_string()))?;
        let worker = self.workers.for_new_actor(caller);
        let deps = self.deps.clone();
        let actor_key = key.clone();
        let addr = Supervisor::start_in_arbiter(&worker, move |_| {
            InstanceActor::new(actor_key, workflow, deps)
        });
        Ok(addr)
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(idle_after) = self.idle_after {
            // Sweeping at a fraction of the idle time bounds how long past it an instance lives.
            let every = (idle_after / 4).max(Duration::from_millis(50));
            ctx.run_interval(every, |registry, _ctx| registry.passivate_idle());
        }
    }
}

impl Registry {
    fn resolve(
        &mut self,
        key: InstanceKey,
        caller: Option<usize>,
    ) -> Result<Addr<InstanceActor>, UnknownWorkflow> {
        // Another caller may have missed on the same key just before: its actor is live now.
        if let Some(addr) = self.instances.live(&key) {
            return Ok(addr);
        }
        // Not in memory, or an actor whose handler panicked is gone (actix does not restart on
        // panic): start a new one, which reloads the last saved snapshot.
        let addr = self.start_instance(&key, caller)?;
        if self.instances.insert(key.clone(), addr.clone())
            && let Owner::Session(session) = &key.owner
        {
            self.by_session
                .entry(session.clone())
                .or_default()
                .insert(key);
        }
        Ok(addr)
    }
}

impl Handler<Resolve> for Registry {
    type Result = Result<Addr<InstanceActor>, UnknownWorkflow>;

    fn handle(&mut self, msg: Resolve, _ctx: &mut Self::Context) -> Self::Result {
        self.resolve(msg.key, msg.caller)
    }
}

impl Handler<ResolveDue> for Registry {
    type Result = Result<Option<Addr<InstanceActor>>, UnknownWorkflow>;

    fn handle(&mut self, msg: ResolveDue, _ctx: &mut Self::Context) -> Self::Result {
        // Every instance a session here has saved is in `by_session` (passivated ones too).
        if let Owner::Session(session) = &msg.key.owner
            && !self
                .by_session
                .get(session)
                .is_some_and(|keys| keys.contains(&msg.key))
        {
            return Ok(None);
        }
        self.resolve(msg.key, None).map(Some)
    }
}

impl Handler<SessionEnded> for Registry {
    type Result = ();

    fn handle(&mut self, msg: SessionEnded, ctx: &mut Self::Context) {
        let Some(keys) = self.by_session.remove(&msg.session) else {
            return;
        };
        shrink_if_sparse(&mut self.by_session);
        let mut passivated = Vec::new();
        for key in keys {
            match self.instances.remove(&key) {
                // The instance deletes its own record (it knows whether it ever saved one), and
                // stops once its address is gone, after any call still in its mailbox.
                Some(addr) => addr.do_send(instance::End),
                None => passivated.push(key.store_key()),
            }
        }
        if passivated.is_empty() {
            return;
        }
        // A passivated instance may have saved a record: delete it here.
        let store = self.deps.store.clone();
        ctx.spawn(
            async move {
                for key in passivated {
                    if let Err(error) = store.delete(&key, None, None).await {
                        tracing::warn!(instance = %key, %error, "could not delete an ended session's instance");
                    }
                }
            }
            .into_actor(self),
        );
    }
}

impl Handler<Forget> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Forget, _ctx: &mut Self::Context) {
        self.instances.remove(&msg.key);
    }
}

impl Handler<Stats> for Registry {
    type Result = MessageResult<Stats>;

    fn handle(&mut self, _: Stats, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(RegistryStats {
            instances: self.instances.len(),
            session_instances: self
                .by_session
                .values()
                .flatten()
                .filter(|key| self.instances.contains(key))
                .count(),
            passivated: self.passivated,
        })
    }
}
