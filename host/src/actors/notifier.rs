//! [`Notifier`]: who watches which instance, and telling them when its menu changes.
//!
//! It owns the subscription table (instance → sessions, session → listener) and nothing else.
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
            if session.watching.is_empty() {
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
            let Some(session) = self.sessions.get(session_id) else {
                continue;
            };
            let sending = session.listener.tools_changed();
            let session_id = session_id.clone();
            // Each send runs on its own, so one slow session cannot delay the others; a session
            // whose transport is gone is forgotten.
            ctx.spawn(sending.into_actor(self).map(move |sent, notifier, _ctx| {
                if let Err(error) = sent {
                    tracing::debug!(session = %session_id, %error, "session gone; unsubscribing");
                    notifier.forget(&session_id);
                }
            }));
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
