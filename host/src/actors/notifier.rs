//! [`Notifier`]: who watches which instance, and telling them when its menu changes.
//!
//! It owns the subscription table (instance → sessions, session → listener, and the instance
//! resources a session subscribed to) and nothing else.
//! When the plugin catalog changes, it tells every client, or the watchers of the instances
//! whose menus changed (which ones is decided outside, see `Runtime::catalog_changed`); clients
//! that watch no instance yet (a fresh session, a listen stream without a handle) are known to
//! it by [`Join`].
//! A session is subscribed to every instance it touches; when an instance changes state, each
//! subscribed session gets exactly one `tools/list_changed`, one `prompts/list_changed` and one
//! `resources/list_changed` if the move changed those lists, and one `resources/updated` per
//! resource of that instance it subscribed to; no other session gets any. A session that ends is
//! dropped from every subscription, so nothing is left behind.
//!
//! It must not know how a notification travels (the MCP layer implements [`Listener`]).

use std::{
    collections::{HashMap, HashSet},
    future::{Future, IntoFuture, Ready},
    pin::Pin,
    sync::Arc,
};

use actix::prelude::*;
use futures_util::{FutureExt as _, StreamExt, future::Either, stream::FuturesUnordered};

use super::{InstanceKey, SessionId, tables::shrink_if_sparse, watching::Watching};
use crate::{
    fast_hash::{Map, Set},
    gate::ListsChanged,
    metrics::{self, Cause},
};

/// What a session is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// `notifications/prompts/list_changed`.
    PromptsChanged,
    /// `notifications/resources/list_changed`.
    ResourcesChanged,
    /// `notifications/resources/updated` for this URI.
    ResourceUpdated(Arc<str>),
}

/// What a client whose lists follow an instance is told of the instance's move, in this order:
/// its tools changed (every move, DESIGN 3), and its prompts and resources when `lists` says the
/// move changed them. The one rule for it: the notifier tells the instance's watchers by it, and
/// a caller told of its own move in its reply (`handler/call_events.rs`) is told by it too.
pub fn notices_of_move(lists: ListsChanged) -> impl Iterator<Item = Notice> {
    [
        Some(Notice::ToolsChanged),
        lists.prompts.then_some(Notice::PromptsChanged),
        lists.resources.then_some(Notice::ResourcesChanged),
    ]
    .into_iter()
    .flatten()
}

/// A session that can be told its lists changed.
pub trait Listener: Send + Sync + 'static {
    /// Sends `notice`. An error means the session is gone (a notice the session did not ask
    /// for is not an error: the listener drops it).
    fn notify(&self, notice: Notice) -> Sending;
}

/// What sending a session a message took: most sends are done at once (a message queued on the
/// session's stream), some are under way (through rmcp's peer). Told apart so that a fan-out
/// to thousands of streams neither allocates nor polls a future per session.
pub enum Sending {
    /// Done: sent, or the session is gone (`Err`).
    Done(Result<(), String>),
    /// Under way; its outcome as above.
    Later(Pin<Box<dyn Future<Output = Result<(), String>> + Send>>),
}

impl IntoFuture for Sending {
    type Output = Result<(), String>;
    type IntoFuture =
        Either<Ready<Result<(), String>>, Pin<Box<dyn Future<Output = Self::Output> + Send>>>;

    fn into_future(self) -> Self::IntoFuture {
        match self {
            Sending::Done(outcome) => Either::Left(std::future::ready(outcome)),
            Sending::Later(sending) => Either::Right(sending),
        }
    }
}

/// `session` touched `instance`: tell it about the instance's changes from now on.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Subscribe {
    pub session: SessionId,
    pub listener: Arc<dyn Listener>,
    pub instance: InstanceKey,
    /// The record version the session saw as it began watching, written by the instance actor
    /// as it sends this (`None` before, or where no version is at hand): if the instance is
    /// watched here for the first time, the relay of other servers' changes checks, once it
    /// listens, that the instance has not moved on from it meanwhile (see `relay.rs`).
    pub seen: Option<u64>,
}

impl Subscribe {
    /// `self`, seeing the instance at `version`.
    pub(super) fn seeing(self, version: u64) -> Subscribe {
        Subscribe {
            seen: Some(version),
            ..self
        }
    }
}

/// `session` is a client that hears about the catalog changing, whether or not it watches an
/// instance (a session from its `initialized`, a listen stream from its start).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Join {
    pub session: SessionId,
    pub listener: Arc<dyn Listener>,
    /// Whether a move of an instance it watches is a change of its lists: true for the 2025
    /// revisions' sessions, false for a 2026-07-28 listen (without the gated-lists extension),
    /// whose lists never follow an instance, so it hears only `resources/updated` of a move.
    pub lists_follow_instances: bool,
}

/// The instances of these workflows that some session watches.
#[derive(Message)]
#[rtype(result = "Vec<InstanceKey>")]
pub struct Watched {
    pub workflows: Vec<String>,
}

/// The catalog changed: tell every client (`everyone`), or the watchers of `instances`, once
/// each; and with `primitives`, every client that its prompts and resources changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CatalogChanged {
    pub everyone: bool,
    pub instances: Vec<InstanceKey>,
    pub primitives: bool,
}

/// `session` subscribed (`resources/subscribe`) to `uri`, a resource of `instance`: tell it when
/// the instance moves, as it is told of the instance's lists.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SubscribeResource {
    pub session: SessionId,
    pub listener: Arc<dyn Listener>,
    pub instance: InstanceKey,
    pub uri: Arc<str>,
}

/// `session` no longer wants `resources/updated` for `uri` (it still watches the instance's
/// lists).
#[derive(Message)]
#[rtype(result = "()")]
pub struct UnsubscribeResource {
    pub session: SessionId,
    pub uri: Arc<str>,
}

/// `session` ended: forget it everywhere.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SessionEnded {
    pub session: SessionId,
}

/// `instance` moved to a new state (already saved); `lists` says which lists besides the tools
/// the move changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstanceChanged {
    pub instance: InstanceKey,
    pub lists: ListsChanged,
    /// The session whose call moved the instance and whose reply tells it so (the list
    /// notices are not sent to it again; its resource updates are).
    pub told_in_reply: Option<SessionId>,
}

/// An instance gained its first watcher in this process, or lost its last: what the relay of
/// other servers' changes listens to, so that this process hears only the changes of the
/// instances its sessions watch (see `store/changes.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The first watcher came; it saw the instance's record at version `seen`, if that is known
    /// (see [`Subscribe::seen`]).
    Watched {
        instance: InstanceKey,
        seen: Option<u64>,
    },
    Unwatched(InstanceKey),
}

/// Where [`WatchEvent`]s go: the relay (`relay.rs`), with a store other processes share.
pub type WatchEvents = tokio::sync::mpsc::UnboundedSender<WatchEvent>;

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

pub struct Notifier {
    watchers: Map<InstanceKey, Set<SessionId>>,
    sessions: Map<SessionId, Session>,
    /// What each session watches, the other side of `watchers`; shared with
    /// [`super::Runtime`], which reads it to skip a subscription already made, and written only
    /// here.
    watching: Arc<Watching>,
    /// Told when an instance gains its first watcher or loses its last, if anyone listens.
    watch_events: Option<WatchEvents>,
}

impl Notifier {
    pub(super) fn new(watching: Arc<Watching>, watch_events: Option<WatchEvents>) -> Self {
        Notifier {
            watchers: Map::default(),
            sessions: Map::default(),
            watching,
            watch_events,
        }
    }

    fn emit(&self, event: WatchEvent) {
        if let Some(events) = &self.watch_events {
            // The relay ended (the server is stopping): nobody needs to know.
            let _ = events.send(event);
        }
    }

    /// Removes `session` from `instance`'s watchers; the instance's last watcher gone, it is
    /// no longer watched here.
    fn unwatch(&mut self, session: &SessionId, instance: &InstanceKey) {
        if let Some(watchers) = self.watchers.get_mut(instance) {
            watchers.remove(session);
            if watchers.is_empty() {
                self.watchers.remove(instance);
                self.emit(WatchEvent::Unwatched(instance.clone()));
            }
        }
    }
}

struct Session {
    listener: Arc<dyn Listener>,
    /// Joined (see [`Join`]): kept until it ends, even while it watches nothing.
    joined: bool,
    /// The instance resources it subscribed to, by instance (each instance is also watched).
    resources: HashMap<InstanceKey, HashSet<Arc<str>>>,
    /// See [`Join::lists_follow_instances`]; true for a session that never joined.
    lists_follow_instances: bool,
}

impl Session {
    fn new(listener: Arc<dyn Listener>, joined: bool) -> Session {
        Session {
            listener,
            joined,
            resources: HashMap::new(),
            lists_follow_instances: true,
        }
    }
}

impl Actor for Notifier {
    type Context = Context<Self>;
}

impl Handler<Subscribe> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        self.watch(msg.session, msg.listener, msg.instance, msg.seen);
    }
}

impl Handler<SubscribeResource> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: SubscribeResource, _ctx: &mut Self::Context) {
        // The instance is looked at before a subscription to its resource: watched already,
        // as a rule, and its version is not at hand here.
        self.watch(
            msg.session.clone(),
            msg.listener,
            msg.instance.clone(),
            None,
        );
        if let Some(session) = self.sessions.get_mut(&msg.session) {
            session
                .resources
                .entry(msg.instance)
                .or_default()
                .insert(msg.uri);
        }
    }
}

impl Handler<UnsubscribeResource> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: UnsubscribeResource, _ctx: &mut Self::Context) {
        if let Some(session) = self.sessions.get_mut(&msg.session) {
            session.resources.retain(|_, uris| {
                uris.remove(&msg.uri);
                !uris.is_empty()
            });
        }
    }
}

impl Handler<Join> for Notifier {
    type Result = ();

    fn handle(&mut self, msg: Join, _ctx: &mut Self::Context) {
        let session = self
            .sessions
            .entry(msg.session)
            .or_insert_with(|| Session::new(msg.listener, true));
        session.joined = true;
        session.lists_follow_instances = msg.lists_follow_instances;
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
        let mut batch = Batch::new(Cause::Catalog);
        for session in &sessions {
            self.tell(&mut batch, session, Notice::ToolsChanged);
        }
        if msg.primitives {
            for session in self.sessions.keys() {
                self.tell(&mut batch, session, Notice::PromptsChanged);
                self.tell(&mut batch, session, Notice::ResourcesChanged);
            }
        }
        batch.send(ctx);
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
        let mut batch = Batch::new(Cause::Transition);
        for session_id in watchers {
            // Looked up once per watcher: this loop runs once per session of a fan-out. (A
            // watcher is always a session here: `watch` makes one first.)
            let Some(session) = self.sessions.get(session_id) else {
                continue;
            };
            let told = msg.told_in_reply.as_ref() == Some(session_id);
            if !told && session.lists_follow_instances {
                for notice in notices_of_move(msg.lists) {
                    batch.add(session_id, &session.listener, notice);
                }
            }
            for uri in session.resources.get(&msg.instance).into_iter().flatten() {
                batch.add(
                    session_id,
                    &session.listener,
                    Notice::ResourceUpdated(uri.clone()),
                );
            }
        }
        batch.send(ctx);
    }
}

impl Handler<Stats> for Notifier {
    type Result = MessageResult<Stats>;

    fn handle(&mut self, _: Stats, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(NotifierStats {
            sessions: self.sessions.len(),
            subscriptions: self.watching.pairs(),
            watched_instances: self.watchers.len(),
        })
    }
}

impl Notifier {
    /// `session` watches `instance` from now on (idempotent), having seen it at version `seen`.
    fn watch(
        &mut self,
        session_id: SessionId,
        listener: Arc<dyn Listener>,
        instance: InstanceKey,
        seen: Option<u64>,
    ) {
        self.sessions
            .entry(session_id.clone())
            .or_insert_with(|| Session::new(listener, false));
        if self.watching.insert(session_id.clone(), instance.clone()) {
            let watchers = self.watchers.entry(instance.clone()).or_default();
            let first = watchers.is_empty();
            watchers.insert(session_id);
            if first {
                self.emit(WatchEvent::Watched { instance, seen });
            }
        }
    }

    /// Adds one `notice` for `session` to `batch` (nothing if the session is gone).
    fn tell(&self, batch: &mut Batch, session_id: &SessionId, notice: Notice) {
        if let Some(session) = self.sessions.get(session_id) {
            batch.add(session_id, &session.listener, notice);
        }
    }

    fn forget(&mut self, session_id: &SessionId) {
        if self.sessions.remove(session_id).is_none() {
            return;
        }
        for instance in self.watching.take(session_id) {
            self.unwatch(session_id, &instance);
        }
        shrink_if_sparse(&mut self.sessions);
        shrink_if_sparse(&mut self.watchers);
    }
}

/// The notices one message sends.
///
/// Most are sent as they are added (queued on a session's stream: [`Sending::Done`]). Those
/// under way are polled as one [`FuturesUnordered`], each send with its own waker, and spawned
/// as a single item on the notifier's context. Spawning each send as its own item would cost
/// O(N²) for a fan-out to N sessions: actix polls every item of a context whenever any of them
/// is woken (at 10,000 watchers that was about a quarter of the delivery time; BENCHMARKS.md,
/// "Fan-out"). Each send still runs on its own, so one slow session delays no other; a session
/// whose transport is gone is forgotten once the batch ends.
struct Batch {
    cause: Cause,
    /// Tool list changes sent so far, counted under `cause` (the metric counts what
    /// `tools/list_changed` costs the clients).
    tools_sent: u64,
    /// Sessions found gone as they were told.
    gone: Vec<SessionId>,
    sends: FuturesUnordered<Pin<Box<dyn Future<Output = Option<SessionId>> + Send>>>,
}

impl Batch {
    fn new(cause: Cause) -> Batch {
        Batch {
            cause,
            tools_sent: 0,
            gone: Vec::new(),
            sends: FuturesUnordered::new(),
        }
    }

    /// Sends one notice, or queues its send; a session that turns out to be gone is noted.
    fn add(&mut self, session_id: &SessionId, listener: &Arc<dyn Listener>, notice: Notice) {
        let counted = notice == Notice::ToolsChanged;
        match listener.notify(notice) {
            Sending::Done(Ok(())) => self.tools_sent += u64::from(counted),
            Sending::Done(Err(error)) => {
                tracing::debug!(session = %session_id, %error, "session gone; unsubscribing");
                self.gone.push(session_id.clone());
            }
            Sending::Later(sending) => {
                let cause = self.cause;
                let session_id = session_id.clone();
                self.sends.push(Box::pin(async move {
                    match sending.await {
                        Ok(()) => {
                            metrics::list_changed_sent(cause, u64::from(counted));
                            None
                        }
                        Err(error) => {
                            tracing::debug!(
                                session = %session_id, %error, "session gone; unsubscribing"
                            );
                            Some(session_id)
                        }
                    }
                }));
            }
        }
    }

    fn send(self, ctx: &mut Context<Notifier>) {
        metrics::list_changed_sent(self.cause, self.tools_sent);
        if self.sends.is_empty() && self.gone.is_empty() {
            return;
        }
        let gone_at_once = self.gone;
        // Outside tokio's cooperative budget: within it, a task may do only 128 channel
        // operations per poll, after which every send's semaphore answers "pending" and wakes
        // itself, so a batch to N sessions was polled over and over (at 10,000 sessions the
        // notifier's thread spent most of its time there; BENCHMARKS.md, "Fan-out"). Each send
        // only queues a message on its session's channel, so the batch cannot hog the thread.
        let gone = tokio::task::unconstrained(
            self.sends
                .filter_map(std::future::ready)
                .collect::<Vec<_>>(),
        )
        .map(|mut gone| {
            gone.extend(gone_at_once);
            gone
        });
        let gone = actix::fut::wrap_future::<_, Notifier>(gone);
        ctx.spawn(gone.map(|gone, notifier, _ctx| {
            for session_id in gone {
                notifier.forget(&session_id);
            }
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A session's transport: counts what it is told, or says the session is gone, at once or
    /// once a send under way ends.
    struct Transport {
        told: AtomicUsize,
        gone: Option<bool>,
    }

    impl Listener for Transport {
        fn notify(&self, _notice: Notice) -> Sending {
            self.told.fetch_add(1, Ordering::SeqCst);
            match self.gone {
                None => Sending::Done(Ok(())),
                Some(false) => Sending::Done(Err("closed".into())),
                Some(true) => Sending::Later(Box::pin(async { Err("closed".into()) })),
            }
        }
    }

    #[actix::test]
    async fn sessions_whose_transports_are_gone_are_forgotten_at_once_or_once_the_send_ends() {
        let notifier = Notifier::new(Arc::default(), None).start();
        let instance = InstanceKey::mint("invoice");
        let mut transports = Vec::new();
        for gone in [None, Some(false), Some(true)] {
            let transport = Arc::new(Transport {
                told: AtomicUsize::new(0),
                gone,
            });
            notifier
                .send(Subscribe {
                    session: SessionId::new(),
                    listener: transport.clone(),
                    instance: instance.clone(),
                    seen: None,
                })
                .await
                .unwrap();
            transports.push(transport);
        }
        let moved = || InstanceChanged {
            instance: instance.clone(),
            lists: ListsChanged::default(),
            told_in_reply: None,
        };
        notifier.send(moved()).await.unwrap();
        // The send under way ends on the notifier's context, after the message.
        for _ in 0..100 {
            if notifier.send(Stats).await.unwrap().subscriptions == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(notifier.send(Stats).await.unwrap().subscriptions, 1);
        notifier.send(moved()).await.unwrap();
        let told: Vec<usize> = transports
            .iter()
            .map(|transport| transport.told.load(Ordering::SeqCst))
            .collect();
        assert_eq!(told, [2, 1, 1], "only the live session is told again");
    }
}
