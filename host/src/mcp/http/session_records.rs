//! Every HTTP session the server holds, live or passivated, and the passivation of idle ones.
//!
//! A live session costs about 60 KiB, nearly all of it rmcp's per-session machinery (a task and
//! the first block of each of its channels; BENCHMARKS.md, "Memory per idle session"). Most of
//! that is wasted on a session that has gone quiet: a client that opened a session and keeps it
//! for later, or one that only watches its event stream. So a session with no request in flight
//! (an event stream rmcp serves is one; one Turnstile serves is not, see below) for
//! `--session-passivate-after` is **passivated**: rmcp's worker for it is
//! closed, and what is left is its record here (the client's `initialize` parameters and the
//! session's [`SessionScope`]: its instances, subscriptions and log level), about 1 KiB.
//!
//! The client does not notice. Its next request names a session rmcp does not hold, so rmcp asks
//! its session store, which is this table ([`SessionStore`]), for the session's `initialize`,
//! starts a new worker and replays the handshake; the new handler adopts the session's scope
//! ([`SessionRecords::adopt`]) and the request is served. Notices that fall due while a session
//! is passivated are dropped: it had no stream to carry them, and a client that opens one lists
//! again. So are the events of a response stream that was cut off: a client resuming one
//! (`Last-Event-ID`) after the session passivated gets an error, as it would after a restart.
//!
//! A session ends (its record goes, and with it the scope) on DELETE (rmcp deletes it from the
//! store), when it has seen no request begin or end for `--session-idle-timeout` (live or
//! passivated; an open event stream is no request), when its handshake never finished
//! (`handshake.rs`), or when rmcp's worker for a live one failed. The idle timeout is kept here
//! and not by rmcp's worker, because the requests `direct.rs` serves never reach the worker; a
//! sweep every [`sweep_interval`] finds idle and failed sessions.
//!
//! `http/endpoint.rs` reports each request of a session ([`SessionRecords::visit`]); the handler
//! (`server.rs`) binds a new session's scope and its [`Served`] once its handshake is done and
//! adopts the scope back on a restore. It must not look into requests: it counts them.
//!
//! **A watching session passivates too.** Its event stream, served by Turnstile from the
//! session's [`Outbox`] (`event_stream.rs`), needs nothing of rmcp's worker: the notifier tells
//! the outbox, and the outbox writes to the stream. So that stream is no request in flight here
//! ([`Visit::watching`]): a session that only watches is passivated like an idle one, and its
//! stream goes on carrying its notices (`Outbox::passivate` keeps an open stream). A watching
//! session then costs its record, its stream and hyper's connection, not rmcp's machinery
//! (BENCHMARKS.md, "Memory per watching session").

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use rmcp::{
    Peer, RoleServer,
    model::{Extensions, InitializeRequestParams},
    transport::streamable_http_server::{
        SessionRestoreMarker,
        session::{
            SessionId, SessionManager,
            local::LocalSessionManager,
            store::{SessionState, SessionStore, SessionStoreError},
        },
    },
};
use tokio::{sync::watch, time::Instant};

use super::direct::Served;
use crate::fast_hash::ConcurrentMap;
use crate::mcp::{
    handler::server::{SessionHome, TurnstileServer},
    session::{outbox::Outbox, scope::SessionScope},
};

/// One session's record.
struct Record {
    /// What rmcp replays to restore the session.
    initialize: InitializeRequestParams,
    /// The session's state; `None` until its handshake is done (only then can it passivate).
    scope: Option<Arc<SessionScope>>,
    /// How `direct.rs` serves its requests: set while it is live with its handshake done.
    served: Option<Served>,
    /// Where its messages go, from its `initialize` on: its handler's scope takes it up, and a
    /// GET that comes before the handler did (right after the handshake) finds it here.
    outbox: Arc<Outbox>,
    /// Requests of the session whose responses are not sent in full (an event stream rmcp
    /// serves among them; one Turnstile serves is not: [`Visit::watching`]).
    in_flight: usize,
    /// When a request of the session last began or ended.
    last_seen: Instant,
    phase: Phase,
}

#[derive(Clone)]
enum Phase {
    /// rmcp holds a worker for it.
    Live,
    /// Its worker is being closed; a request that arrives meanwhile waits for `true`.
    Closing(watch::Receiver<bool>),
    /// Only this record is left.
    Passivated,
}

/// The HTTP sessions (see the module doc).
pub struct SessionRecords {
    rmcp: Arc<LocalSessionManager>,
    records: ConcurrentMap<Arc<str>, Record>,
    /// `None`: sessions are never passivated.
    passivate_after: Option<Duration>,
    idle_timeout: Duration,
}

/// How often the sweep runs: often enough that a session is passivated or ended within a
/// quarter of its delay, and at most every 50 ms.
pub fn sweep_interval(passivate_after: Option<Duration>, idle_timeout: Duration) -> Duration {
    let shortest = passivate_after.map_or(idle_timeout, |after| after.min(idle_timeout));
    (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

impl SessionRecords {
    pub fn new(
        rmcp: Arc<LocalSessionManager>,
        passivate_after: Option<Duration>,
        idle_timeout: Duration,
    ) -> Arc<SessionRecords> {
        Arc::new(SessionRecords {
            rmcp,
            records: ConcurrentMap::default(),
            passivate_after,
            idle_timeout,
        })
    }

    /// rmcp's session manager, which runs the live sessions' workers.
    pub fn workers(&self) -> Arc<LocalSessionManager> {
        self.rmcp.clone()
    }

    /// Sweeps until the table is dropped.
    pub fn start_sweeping(self: &Arc<Self>) {
        let records: Weak<SessionRecords> = Arc::downgrade(self);
        let period = sweep_interval(self.passivate_after, self.idle_timeout);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(records) = records.upgrade() else {
                    return;
                };
                records.sweep().await;
            }
        });
    }

    /// Sessions the server holds, live or passivated (what `--max-sessions` bounds).
    pub fn count(&self) -> usize {
        self.records.len()
    }

    /// Sessions that are passivated now.
    pub fn passivated(&self) -> usize {
        self.records
            .iter()
            .filter(|record| matches!(record.phase, Phase::Passivated))
            .count()
    }

    /// Whether session `id` exists, live or passivated.
    pub fn exists(&self, id: &str) -> bool {
        self.records.contains_key(id)
    }

    /// A request of session `id` begins; it ends when the returned visit is dropped (with its
    /// response body). A request that arrives while the session is being passivated waits for
    /// that to finish, so that rmcp then restores the session instead of routing the request to
    /// a worker that is closing. `None`: no such session (rmcp answers that).
    pub async fn visit(self: &Arc<Self>, id: &str) -> Option<Visit> {
        loop {
            let mut closing = {
                let mut record = self.records.get_mut(id)?;
                let key = record.key().clone();
                match &record.phase {
                    Phase::Closing(done) => done.clone(),
                    Phase::Live | Phase::Passivated => {
                        record.in_flight += 1;
                        record.last_seen = Instant::now();
                        let live = matches!(record.phase, Phase::Live);
                        let served = if live { record.served.clone() } else { None };
                        return Some(Visit {
                            records: self.clone(),
                            id: key,
                            served,
                            in_flight: true,
                        });
                    }
                }
            };
            // An error means the sweep that was closing it is gone: look again either way.
            let _ = closing.wait_for(|done| *done).await;
        }
    }

    fn visit_ended(&self, id: &str, in_flight: bool) {
        if let Some(mut record) = self.records.get_mut(id) {
            if in_flight {
                record.in_flight = record.in_flight.saturating_sub(1);
            }
            record.last_seen = Instant::now();
        }
    }

    /// Where session `id`'s messages go, and whether it is live (a GET of a passivated one
    /// goes to rmcp, which restores it).
    pub fn outbox(&self, id: &str) -> Option<(Arc<Outbox>, bool)> {
        let record = self.records.get(id)?;
        Some((record.outbox.clone(), matches!(record.phase, Phase::Live)))
    }

    /// Ends session `id` now: its record goes, its event stream ends, and rmcp's worker if it
    /// has one.
    pub async fn end(&self, id: &SessionId) {
        self.forget(id.as_ref());
        if let Err(error) = self.rmcp.close_session(id).await {
            tracing::debug!(session = %id, %error, "could not close a session's worker");
        }
    }

    /// Forgets session `id`, and ends the event stream this server serves it, if one is open.
    fn forget(&self, id: &str) {
        if let Some((_, record)) = self.records.remove(id) {
            record.outbox.close_stream();
        }
    }

    /// Passivates the sessions idle long enough, and forgets the ones that ended.
    async fn sweep(&self) {
        let now = Instant::now();
        let mut to_passivate = Vec::new();
        let mut ended = Vec::new();
        let mut to_end = Vec::new();
        {
            let workers = self.rmcp.sessions.read().await;
            for mut entry in self.records.iter_mut() {
                let (id, record) = entry.pair_mut();
                let idle = now.saturating_duration_since(record.last_seen);
                let quiet = record.in_flight == 0;
                match record.phase {
                    Phase::Live if !workers.contains_key(&SessionId::from(&**id)) => {
                        // rmcp ended it (its idle timeout, or a worker that failed); a record
                        // stored a moment ago has its worker already.
                        ended.push(id.clone());
                    }
                    Phase::Live if idle >= self.idle_timeout => {
                        // No request began or ended for so long (an open stream is no request).
                        to_end.push(id.clone());
                    }
                    Phase::Live
                        if quiet
                            && record.scope.is_some()
                            && self.passivate_after.is_some_and(|after| idle >= after) =>
                    {
                        let (done, closing) = watch::channel(false);
                        record.phase = Phase::Closing(closing);
                        record.served = None;
                        if let Some(scope) = &record.scope {
                            scope.unbind();
                        }
                        to_passivate.push((id.clone(), done));
                    }
                    Phase::Passivated if quiet && idle >= self.idle_timeout => {
                        ended.push(id.clone());
                    }
                    _ => {}
                }
            }
        }
        for id in ended {
            tracing::debug!(session = %id, "session ended");
            self.forget(&id);
        }
        for id in to_end {
            tracing::debug!(session = %id, "idle session ended");
            self.end(&SessionId::from(&*id)).await;
        }
        for (id, done) in to_passivate {
            if let Err(error) = self.rmcp.close_session(&SessionId::from(&*id)).await {
                tracing::debug!(session = %id, %error, "could not close a session's worker");
            }
            if let Some(mut record) = self.records.get_mut(&id) {
                record.phase = Phase::Passivated;
            }
            tracing::debug!(session = %id, "session passivated");
            let _ = done.send(true);
        }
    }
}

/// One request of a session, until its response is sent (see [`SessionRecords::visit`]).
pub struct Visit {
    records: Arc<SessionRecords>,
    id: Arc<str>,
    /// Found with the record, rather than looked up again: see [`Visit::take_served`].
    served: Option<Served>,
    /// Counted among the session's requests in flight (not once it is [`Visit::watching`]).
    in_flight: bool,
}

impl Visit {
    /// How to serve the request outside rmcp's session machinery (`direct.rs`): `None` unless
    /// the session was live with its handshake done when the request began.
    pub fn take_served(&mut self) -> Option<Served> {
        self.served.take()
    }

    /// The request is the session's event stream, served by Turnstile: no longer counted in
    /// flight, so the session may passivate while the stream stays open (see the module doc).
    /// Its end still counts as activity.
    pub fn watching(&mut self) {
        // The session's handler, found with the record for a POST: a stream that held it would
        // keep the handler and rmcp's peer (its channel: ~11 KiB) alive past passivation.
        self.served = None;
        if std::mem::take(&mut self.in_flight)
            && let Some(mut record) = self.records.records.get_mut(&*self.id)
        {
            record.in_flight = record.in_flight.saturating_sub(1);
        }
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        self.records.visit_ended(&self.id, self.in_flight);
    }
}

/// rmcp's view: it stores a session's `initialize` when the session opens, loads it to restore
/// a session it does not hold, and deletes it on DELETE.
#[async_trait::async_trait]
impl SessionStore for SessionRecords {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self
            .records
            .get(session_id)
            .filter(|record| matches!(record.phase, Phase::Passivated))
            .map(|record| SessionState::new(record.initialize.clone())))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.records.insert(
            session_id.into(),
            Record {
                initialize: state.initialize_params.clone(),
                scope: None,
                served: None,
                // Its event stream is served by Turnstile (`event_stream.rs`); its messages wait
                // for it meanwhile.
                outbox: Arc::new(Outbox::for_stream()),
                in_flight: 0,
                last_seen: Instant::now(),
                phase: Phase::Live,
            },
        );
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.forget(session_id);
        Ok(())
    }
}

/// How a handler finds its session here (the handler knows no HTTP: `handler/server.rs`).
impl SessionHome for SessionRecords {
    /// A new handler restores a session (rmcp replays its `initialize`, marked): its scope, if
    /// the session is passivated.
    fn restored(&self, extensions: &Extensions) -> Option<Arc<SessionScope>> {
        let id = &extensions.get::<SessionRestoreMarker>()?.id;
        let mut record = self.records.get_mut(id.as_ref())?;
        if !matches!(record.phase, Phase::Passivated) {
            return None;
        }
        record.phase = Phase::Live;
        record.scope.clone()
    }

    fn outbox_of(&self, id: &str) -> Option<Arc<Outbox>> {
        self.outbox(id).map(|(outbox, _)| outbox)
    }

    /// Session `id` finished its handshake with `scope` (a first one, or the replay of a
    /// restore), served by `handler` and `peer`: it may passivate from now on.
    fn bind(
        &self,
        id: &str,
        scope: &Arc<SessionScope>,
        handler: TurnstileServer,
        peer: Peer<RoleServer>,
    ) {
        if let Some(mut record) = self.records.get_mut(id) {
            record.scope.get_or_insert_with(|| scope.clone());
            record.served = Some(Served::new(handler, peer));
            if !Arc::ptr_eq(&record.outbox, scope.outbox()) {
                // The handler made its scope before it took up the record's (a request it
                // handled before `notifications/initialized`): that scope's outbox carries the
                // session's messages, and takes over the stream a GET may have opened meanwhile.
                scope.outbox().take_over(&record.outbox);
                record.outbox = scope.outbox().clone();
            }
        }
    }
}
