//! [`Notifier`]: who watches which instance, and telling them when its menu changes.
//!
//! It owns the subscription table (instance → sessions, session → listener) and nothing else.
//! When the plugin catalog changes, it tells every client, or the watchers of the instances
//! whose menus changed (which ones is decided outside, see `Runtime::catalog_changed`); clients
//! that watch no instance yet (a fresh session, a listen stream without a handle) are known to
//! it by [`Join`].
//! A session is subscribed to every instance it touches; when an instance changes state, each
//! subscribed session gets exactly one `tools/list_changed`, and no other session gets any. A
//! session that ends is dropped from every subscription, so nothing is left behind.
//!
//! It must not know how a notification travels (the MCP layer implements [`Listener`]).

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    pin::Pin,
    sync::Arc,
};

use actix::prelude::*;

use super::{InstanceKey, SessionId, tables::shrink_if_sparse};
use crate::metrics::{self, Cause};

/// A session that can be told its tool list changed.
pub trait Listener: Send + Sync + 'static {
    /// Sends `notifications/tools/list_changed`. An error means the session is gone.
    fn tools_changed(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
}

/// `session` touched `instance`: tell it about the instance's changes from now on.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe {
    pub session: SessionId,
    pub listener: Arc<dyn Listener>,
    pub instance: InstanceKey,
}

/// `session` is a client that hears about the catalog changing, whether or not it watches an
/// instance (a session from its `initialized`, a listen stream from its start).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Join {
    pub session: SessionId,
    pub listener: Arc<dyn Listener>,
}

/// The instances of these workflows that some session watches.
#[derive(Message)]
#[rtype(result = "Vec<InstanceKey>")]
pub struct Watched {
    pub workflows: Vec<String>,
}

/// The catalog changed: tell every client (`everyone`), or the watchers of `instances`, once
/// each.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CatalogChanged {
    pub everyone: bool,
    pub instances: Vec<InstanceKey>,
}

/// `session` touched `instance` by mistake (it does not exist): stop watching it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unsubscribe {
    pub session: SessionId,
    pub instance: InstanceKey,
}

/// `session` ended: forget it everywhere.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionEnded {
    pub session: SessionId,
}

/// `instance` moved to a new state (already saved).
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceChanged {
    pub instance: InstanceKey,
}

/// How much the notifier holds, for operators and leak tests.
#[derive(Message)]
#[rtype(result = "NotifierStats")]
pub struct Stats;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NotifierStats {
    /// Sessions with at least one subscription.
    pub sessions: usize,
    /// (session, instance) pairs.
    pub subscriptions: usize,
    /// Instances with at least one subscriber.
    pub watched_instances: usize,
}

#[derive(Default)]
pub struct Notifier {
    watchers: HashMap<InstanceKey, HashSet<SessionId>>,
    sessions: HashMap<SessionId, Session>,
}

struct Session {
    listener: Arc<dyn Listener>,
    watching: HashSet<InstanceKey>,
    /// Joined (see [`Join`]): kept until it ends, even while it watches nothing.
    joined: bool,
}

impl Actor for Notifier {
    type Context = Context<Self>;
}

impl Handler<Subscribe> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        let session = self
            .sessions
            .entry(msg.session.clone())
            .or_insert_with(|| Session {
                listener: msg.listener,
                watching: HashSet::new(),
                joined: false,
            });
        if session.watching.insert(msg.instance.clone()) {
            self.watchers
                .entry(msg.instance)
                .or_default()
                .insert(msg.session);
        }
    }
}

impl Handler<Unsubscribe> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, _ctx: &mut Self::Context) {
        if let Some(session) = self.sessions.get_mut(&msg.session) {
            session.watching.remove(&msg.instance);
            if session.watching.is_empty() && !session.joined {
                self.sessions.remove(&msg.session);
            }
        }
        if let Some(watchers) = self.watchers.get_mut(&msg.instance) {
            watchers.remove(&msg.session);
            if watchers.is_empty() {
                self.watchers.remove(&msg.instance);
            }
        }
    }
}

impl Handler<Join> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: Join, _ctx: &mut Self::Context) {
        self.sessions
            .entry(msg.session)
            .or_insert_with(|| Session {
                listener: msg.listener,
                watching: HashSet::new(),
                joined: true,
            })
            .joined = true;
    }
}

impl Handler<Watched> for Notifier {
    type Result = MessageResult<Watched>;

    fn handle(&mut self, msg: Watched, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.watchers
                .keys()
                .filter(|key| msg.workflows.iter().any(|id| **id == *key.workflow))
                .cloned()
                .collect(),
        )
    }
}

impl Handler<CatalogChanged> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: CatalogChanged, ctx: &mut Self::Context) {
        let sessions: HashSet<SessionId> = if msg.everyone {
            self.sessions.keys().cloned().collect()
        } else {
            msg.instances
                .iter()
                .filter_map(|instance| self.watchers.get(instance))
                .flatten()
                .cloned()
                .collect()
        };
        for session in sessions {
            self.tell(&session, Cause::Catalog, ctx);
        }
    }
}

impl Handler<SessionEnded> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: SessionEnded, _ctx: &mut Self::Context) {
        self.forget(&msg.session);
    }
}

impl Handler<InstanceChanged> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: InstanceChanged, ctx: &mut Self::Context) {
        let Some(watchers) = self.watchers.get(&msg.instance) else {
            return;
        };
        for session_id in watchers {
            self.tell(session_id, Cause::Transition, ctx);
        }
    }
}

impl Handler<Stats> for Notifier {
    type Result = MessageResult<Stats>;

    fn handle(&mut self, _: Stats, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(NotifierStats {
            sessions: self.sessions.len(),
            subscriptions: self.sessions.values().map(|s| s.watching.len()).sum(),
            watched_instances: self.watchers.len(),
        })
    }
}

impl Notifier {
    /// Sends `session` one `list_changed`, counted under `cause` once it is sent.
    fn tell(&self, session_id: &SessionId, cause: Cause, ctx: &mut Context<Self>) {
        let Some(session) = self.sessions.get(session_id) else {
            return;
        };
        let sending = session.listener.tools_changed();
        let session_id = session_id.clone();
        // Each send runs on its own, so one slow session cannot delay the others; a session
        // whose transport is gone is forgotten.
        ctx.spawn(sending.into_actor(self).map(move |sent, notifier, _ctx| {
            match sent {
                Ok(()) => metrics::list_changed_sent(cause),
                Err(error) => {
                    tracing::debug!(session = %session_id, %error, "session gone; unsubscribing");
                    notifier.forget(&session_id);
                }
            }
        }));
    }

    fn forget(&mut self, session_id: &SessionId) {
        let Some(session) = self.sessions.remove(session_id) else {
            return;
        };
        for instance in session.watching {
            if let Some(watchers) = self.watchers.get_mut(&instance) {
                watchers.remove(session_id);
                if watchers.is_empty() {
                    self.watchers.remove(&instance);
                }
            }
        }
        shrink_if_sparse(&mut self.sessions);
        shrink_if_sparse(&mut self.watchers);
    }
}
