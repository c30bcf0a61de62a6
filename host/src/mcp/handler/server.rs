//! [`TurnstileServer`]: rmcp's `ServerHandler` for one session.
//!
//! Every request reads the catalog being served once ([`LiveCatalog::current`]), so a plugin
//! reload never changes the catalog under a request. On the 2025 revisions (and for a
//! 2026-07-28 client declaring the gated-lists extension) `tools/list` asks the caller's
//! workflow instances for their state and the gate for their menus; on 2026-07-28 it lists the
//! catalog, each tool saying when it can be used (prompts and resources are served the same
//! way, in `primitives.rs`). `tools/call` resolves the tool, finds the instance (see
//! [`super::target`]), checks the arguments, hands the call to the instance's actor and ends
//! its result with the instance's next step. Every request of a session that touches an
//! instance subscribes the session to it.
//!
//! It must not decide visibility (gate) or hold state (actors); its replies come from `reply`.

use std::sync::{Arc, OnceLock};

use rmcp::{
    ErrorData, Peer, RoleServer,
    model::{CacheScope, Extensions, Tool},
    service::RequestContext,
};

use super::{
    caller::{Caller, CallerOf, CarriedBy, TraceparentOf},
    era::{declares_gated_lists, is_2026_07_28},
    reply,
    target::HandleMode,
};
use crate::mcp::{session::outbox::Outbox, session::scope::SessionScope};
use crate::{
    actors::{InstanceError, InstanceKey, InstanceView, Runtime, Subscribe},
    catalog::{Catalog, LiveCatalog, ToolEntry, Workflow},
    gate, invoke,
};

/// What every session shares.
pub struct Shared {
    /// The catalog being served: a request takes [`LiveCatalog::current`] once and keeps it.
    pub catalog: Arc<LiveCatalog>,
    pub runtime: Runtime,
    /// `Some`: instances are named by handles the client carries (DESIGN behaviours 5–7).
    pub handles: Option<HandleMode>,
    /// How long a tool bound to no workflow may run (instance calls use the actors' setting).
    pub call_limits: invoke::Limits,
    /// Draining and its stages: calls in flight are counted, listens end when streams close.
    pub shutdown: crate::shutdown::Shutdown,
    /// Who a request is from, as the transport tells it (`caller.rs`).
    pub caller_of: CallerOf,
    /// The `traceparent` a request's transport carried (`caller.rs`), read only to export it.
    pub traceparent_of: TraceparentOf,
    /// The `tools/call` metrics, counted as calls are answered.
    pub call_metrics: crate::metrics::CallMetrics,
    /// Where a workflow tool's result says what may come next (`--next-step`).
    pub next_step: reply::NextStepMode,
    /// How long a client may keep a list that depends only on the catalog (`--list-ttl`).
    pub list_ttl: std::time::Duration,
    /// The instances' store, read directly only for what no instance actor holds (the audit
    /// trail an instance resource shows).
    pub store: Arc<dyn crate::store::StateStore>,
    /// The most handles one request may name in `_meta` (`--max-handles-per-request`).
    pub max_handles_per_request: usize,
    /// What one principal (or client address) may hold and start (`quotas.rs`).
    pub quotas: Arc<crate::mcp::Quotas>,
    /// Seals and opens 2026-07-28 `requestState`s (`asking.rs`).
    pub state_seal: super::asking::StateSeal,
    /// A confirmation the client cannot show counts as given (`--confirm-fallback allow`).
    pub confirm_fallback: bool,
    /// The calls running, and run, as tasks (`tasks.rs`).
    pub tasks: crate::tasks::Tasks,
}

/// One per MCP session (stdio: one per connection; sessionless HTTP: one per request; a session
/// passivated and restored gets a new one). rmcp drops it when the session ends or passivates.
#[derive(Clone)]
pub struct TurnstileServer {
    pub(in crate::mcp) shared: Arc<Shared>,
    /// Set on first use: a new scope, or on a restore the passivated session's own.
    session: Arc<OnceLock<Arc<SessionScope>>>,
    /// Over HTTP: the sessions, where a new one is recorded and a restored one found.
    records: Option<Arc<dyn SessionHome>>,
}

/// The transport's record of its sessions, as a handler sees it (over HTTP, `session_records.rs`):
/// where a restored session's scope is found, where a new session's messages wait for its event
/// stream, and where its handler is left for the requests served past rmcp's session machinery.
pub trait SessionHome: Send + Sync {
    /// The scope of the passivated session an `initialize` (its `extensions`) restores, for the
    /// handler that restores it; `None` for a new session's `initialize`.
    fn restored(&self, extensions: &Extensions) -> Option<Arc<SessionScope>>;
    /// Where session `id`'s messages go while it has no event stream open.
    fn outbox_of(&self, id: &str) -> Option<Arc<Outbox>>;
    /// Session `id` finished its handshake: `scope` is its scope, `handler` and `peer` serve it.
    fn bind(
        &self,
        id: &str,
        scope: &Arc<SessionScope>,
        handler: TurnstileServer,
        peer: Peer<RoleServer>,
    );
}

impl TurnstileServer {
    /// Cheap: the Streamable HTTP service calls it once per session, or once per request.
    pub fn new(shared: Arc<Shared>, records: Option<Arc<dyn SessionHome>>) -> Self {
        TurnstileServer {
            shared,
            session: Arc::default(),
            records,
        }
    }

    /// This handler for `direct.rs`, which serves its session's requests outside rmcp's session
    /// machinery: without the session records (which hold it; only a handshake needs them).
    fn detached(&self) -> TurnstileServer {
        TurnstileServer {
            shared: self.shared.clone(),
            session: self.session.clone(),
            records: None,
        }
    }

    /// An `initialize` that restores a passivated session (rmcp replays it, marked) takes up
    /// the session's own scope.
    pub(super) fn take_up_restored(&self, context: &RequestContext<RoleServer>) {
        if let Some(records) = &self.records
            && let Some(scope) = records.restored(&context.extensions)
        {
            tracing::debug!(session = %scope.id, "session restored");
            scope.rebind(&context.peer);
            // Nothing has used this handler yet: `initialize` is its first request.
            let _ = self.session.set(scope);
        }
    }

    /// The session's handshake is done (`notifications/initialized`, its `extensions`, from
    /// `peer`): from now on it hears about the plugin catalog changing, before it has touched
    /// any instance, and, over HTTP, it may be passivated when idle.
    pub(super) fn handshake_done(&self, extensions: &Extensions, peer: &Peer<RoleServer>) {
        let caller = (self.shared.caller_of)(extensions);
        let records = self.records.as_ref().zip(caller.http_session());
        if let Some((records, id)) = records
            && let Some(outbox) = records.outbox_of(id)
        {
            // The session's messages go where its event stream may already be reading them. A
            // restored session has its scope already (`initialize`), and keeps it.
            let _ = self.session.set(Arc::new(SessionScope::with_outbox(
                self.shared.runtime.clone(),
                outbox,
            )));
        }
        let session = self.session();
        tracing::debug!(session = %session.id, "client initialized");
        self.shared
            .runtime
            .join(&session.id, session.listener(peer), true);
        if let Some((records, id)) = records {
            records.bind(id, session, self.detached(), peer.clone());
        }
    }

    /// Who `context`'s request is from and what carried it, as its transport says.
    pub(in crate::mcp) fn caller<'a>(&self, context: &'a RequestContext<RoleServer>) -> Caller<'a> {
        (self.shared.caller_of)(&context.extensions)
    }

    /// The W3C `traceparent` a call continues: its `_meta`'s, else its transport's (an HTTP
    /// header). Asked only when traces are exported.
    pub(in crate::mcp) fn traceparent<'a>(
        &self,
        context: &'a RequestContext<RoleServer>,
    ) -> Option<&'a str> {
        context
            .meta
            .get("traceparent")
            .and_then(serde_json::Value::as_str)
            .or_else(|| (self.shared.traceparent_of)(&context.extensions))
    }

    /// The session this handler serves. An HTTP session's messages wait for its event stream
    /// (`outbox.rs`) from the start.
    pub(in crate::mcp) fn session(&self) -> &Arc<SessionScope> {
        self.session.get_or_init(|| {
            let runtime = self.shared.runtime.clone();
            Arc::new(match self.records {
                Some(_) => SessionScope::with_outbox(runtime, Arc::new(Outbox::for_stream())),
                None => SessionScope::new(runtime),
            })
        })
    }

    /// The subscription that lets the session hear about `key`, for the instance to send to
    /// the notifier once it knows it exists (`actors::instance::Call::watcher`): the one point
    /// where a session starts watching an instance, ahead of any change the request causes,
    /// and never for an instance that does not exist. A request without a session watches
    /// nothing: it ends with its answer, and its own call tells it of a change directly (see
    /// `call_instance`).
    pub(in crate::mcp) fn watcher(
        &self,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> Option<Subscribe> {
        // On 2026-07-28 (without the gated-lists extension) a transition is no list change.
        if self.caller(context).is_sessionless() || !self.lists_follow_instances(context) {
            return None;
        }
        Some(Subscribe {
            session: self.session().id.clone(),
            listener: self.session().listener(&context.peer),
            instance: key.clone(),
            seen: None,
        })
    }

    /// After the instance answered: remember it among those the session touched, or, if it does
    /// not exist, drop the actor that looked for it, so a forged handle leaves nothing behind
    /// (a client naming random handles must not fill the memory).
    pub(in crate::mcp) fn settle<T>(&self, key: &InstanceKey, answer: &Result<T, InstanceError>) {
        match answer {
            Err(InstanceError::UnknownHandle(_)) => self.shared.runtime.forget(key.clone()),
            _ => self.session().touch(key),
        }
    }

    /// The instance `key` as a `tools/list` answer can use it, watching it from now on.
    pub(in crate::mcp) async fn view(
        &self,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> Result<InstanceView, ErrorData> {
        self.look_at(key, context)
            .await
            .map_err(|error| reply::instance_unreadable(&key.to_string(), &error))
    }

    /// The instance `key` as it stands, watched from now on ([`Self::watcher`]) and remembered,
    /// or, if it does not exist, left behind ([`Self::settle`]); the caller says what an error
    /// is to its client.
    pub(in crate::mcp) async fn look_at(
        &self,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> Result<InstanceView, InstanceError> {
        let watcher = self.watcher(key, context);
        let answer = self.shared.runtime.look(key.clone(), watcher).await;
        self.settle(key, &answer);
        answer
    }

    /// The listing of `tool` for an instance of `workflow` in `snapshot`.
    pub(super) fn listed(
        mode: Option<&HandleMode>,
        tool: &ToolEntry,
        workflow: &Workflow,
        snapshot: &crate::statechart::Snapshot,
    ) -> Tool {
        let listed = reply::listed_tool(tool, gate::description(tool, workflow, snapshot));
        match mode {
            Some(mode) => mode.add_handle_property(listed, gate::starts_instance(tool, workflow)),
            None => listed,
        }
    }

    /// How this request names its instance: the configured handle mode; else, for a request
    /// without a session (protocol 2026-07-28 over HTTP, which has no sessions), handles under
    /// the default key, since there is no session to keep state in; else the session.
    pub(in crate::mcp) fn handle_mode(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Option<&HandleMode> {
        if self.shared.handles.is_some() {
            return self.shared.handles.as_ref();
        }
        // A connection that is one session (stdio) keeps the session model whatever the
        // protocol revision says.
        let sessionless = self.caller(context).session != CarriedBy::Connection
            && context
                .meta
                .protocol_version()
                .is_some_and(|version| !version.has_initialize());
        sessionless.then(HandleMode::sessionless_default)
    }

    /// Whether this request's lists follow its instances (the per-state menus of DESIGN 1): on
    /// the 2025 revisions (a session, or stdio's connection), and on 2026-07-28 for a request
    /// whose client declares [`GATED_LISTS_EXTENSION`]. Otherwise, on 2026-07-28, a list must
    /// not vary with the connection or with earlier requests: it depends on the catalog alone
    /// (and so on the principal, once the catalog is per principal).
    pub(in crate::mcp) fn lists_follow_instances(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> bool {
        !is_2026_07_28(context) || declares_gated_lists(context)
    }

    /// How a list that depends on the catalog alone may be cached: for `--list-ttl`, by anyone
    /// unless authentication is on (then the answer is the principal's).
    pub(in crate::mcp) fn catalog_list_caching(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (u64, CacheScope) {
        let scope = match self.caller(context).principal {
            Some(_) => CacheScope::Private,
            None => CacheScope::Public,
        };
        let ttl_ms = u64::try_from(self.shared.list_ttl.as_millis()).unwrap_or(u64::MAX);
        (ttl_ms, scope)
    }

    /// Handle mode: the instances a listing shows, and whether the request named them. Named
    /// in `_meta` (each must exist: a name that finds nothing is the caller's mistake, -32602),
    /// else those the session touched, of which any that are gone (deleted, expired, or of a
    /// workflow no longer loaded) are forgotten, so the session keeps listing the rest.
    pub(in crate::mcp) async fn listed_instances(
        &self,
        mode: &HandleMode,
        catalog: &Catalog,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Vec<(InstanceKey, InstanceView)>, bool), ErrorData> {
        let named = mode
            .handles_in(
                &context.meta,
                self.caller(context).tenant().as_ref(),
                self.shared.max_handles_per_request,
            )
            .map_err(reply::invalid_handles)?;
        let mut views = Vec::new();
        if !named.is_empty() {
            for key in named {
                if catalog.workflow(&key.workflow).is_none() {
                    return Err(reply::handle_of_unloaded_workflow(&key.workflow));
                }
                let view = self.view(&key, context).await?;
                views.push((key, view));
            }
            return Ok((views, true));
        }
        for key in self.session().touched() {
            if catalog.workflow(&key.workflow).is_none() {
                tracing::debug!(instance = %key, "forgetting an instance whose workflow is no longer loaded");
                self.session().forget(&key);
                continue;
            }
            match self.look_at(&key, context).await {
                Ok(view) => views.push((key, view)),
                Err(InstanceError::UnknownHandle(_)) => {
                    tracing::debug!(instance = %key, "forgetting an instance that is gone");
                    self.session().forget(&key);
                }
                Err(error) => {
                    return Err(reply::instance_unreadable(&key.to_string(), &error));
                }
            }
        }
        Ok((views, false))
    }
}
