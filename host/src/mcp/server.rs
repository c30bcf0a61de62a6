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
    ErrorData, RoleServer, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult,
        CancelledNotificationParam, CompleteRequestParams, CompleteResult, CustomRequest,
        CustomResult, GetPromptRequestParams, GetPromptResponse, Implementation,
        InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
        SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
    },
    service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext},
    transport::streamable_http_server::SessionRestoreMarker,
};
use serde_json::Value;
use tracing::Instrument;

use super::{
    asking::{self, Asking, CallIdentity},
    auth::Principal,
    call_events::{self, CallEvents},
    direct::{RequestStream, Served},
    header_names::SESSION_ID,
    metrics::CallRecord,
    outbox::Outbox,
    reply,
    session::{SessionScope, SinkListener},
    session_records::SessionRecords,
    target::{self, HandleMode, Target},
};
use crate::{
    actors::{
        CallOutcome, InstanceError, InstanceKey, InstanceView, Owner, Runtime, SessionId, Tenant,
    },
    catalog::{Catalog, LiveCatalog, ToolEntry, Workflow},
    gate, invoke, metrics,
    plugin::{CallContext, HostCall, PluginOutput},
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
    /// The transport's connection is one session (stdio), whatever the protocol revision says.
    pub connection_is_session: bool,
    /// What `/readyz` asks (see `health`).
    pub readiness: super::health::Readiness,
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
    pub quotas: Arc<super::Quotas>,
    /// Seals and opens 2026-07-28 `requestState`s (`asking.rs`).
    pub state_seal: super::StateSeal,
    /// A confirmation the client cannot show counts as given (`--confirm-fallback allow`).
    pub confirm_fallback: bool,
}

/// One per MCP session (stdio: one per connection; sessionless HTTP: one per request; a session
/// passivated and restored gets a new one). rmcp drops it when the session ends or passivates.
#[derive(Clone)]
pub struct TurnstileServer {
    pub(super) shared: Arc<Shared>,
    /// Set on first use: a new scope, or on a restore the passivated session's own.
    session: Arc<OnceLock<Arc<SessionScope>>>,
    /// Over HTTP: the sessions, where a new one is recorded and a restored one found.
    records: Option<Arc<SessionRecords>>,
}

impl TurnstileServer {
    /// Cheap: the Streamable HTTP service calls it once per session, or once per request.
    pub fn new(shared: Arc<Shared>, records: Option<Arc<SessionRecords>>) -> Self {
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

    /// The session this handler serves. An HTTP session's messages wait for its event stream
    /// (`outbox.rs`) from the start.
    pub(super) fn session(&self) -> &Arc<SessionScope> {
        self.session.get_or_init(|| {
            let runtime = self.shared.runtime.clone();
            Arc::new(match self.records {
                Some(_) => SessionScope::with_outbox(runtime, Arc::new(Outbox::for_stream())),
                None => SessionScope::new(runtime),
            })
        })
    }

    /// Subscribes the session to `key`. Done before the instance is asked anything, so that the
    /// subscription reaches the notifier ahead of any change the request causes. A request
    /// without a session subscribes nothing: it ends with its answer, and its own call tells
    /// it of a change directly (see `call_tool`).
    pub(super) fn watch(&self, key: &InstanceKey, context: &RequestContext<RoleServer>) {
        // On 2026-07-28 (without the gated-lists extension) a transition is no list change.
        if is_sessionless(context) || !self.lists_follow_instances(context) {
            return;
        }
        self.shared.runtime.subscribe(
            &self.session().id,
            self.session().listener(&context.peer),
            key.clone(),
        );
    }

    /// After the instance answered: remember it among those the session touched, or, if it does
    /// not exist, take the subscription back and drop the actor that looked for it, so a forged
    /// handle leaves nothing behind (a client naming random handles must not fill the memory).
    pub(super) fn settle<T>(&self, key: &InstanceKey, answer: &Result<T, InstanceError>) {
        match answer {
            Err(InstanceError::UnknownHandle(_)) => {
                self.shared
                    .runtime
                    .unsubscribe(&self.session().id, key.clone());
                self.shared.runtime.forget(key.clone());
            }
            _ => self.session().touch(key),
        }
    }

    /// The instance `key` as a `tools/list` answer can use it, watching it from now on.
    pub(super) async fn view(
        &self,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> Result<InstanceView, ErrorData> {
        self.look_at(key, context)
            .await
            .map_err(|error| reply::instance_unreadable(&key.to_string(), &error))
    }

    /// The instance `key` as it stands, watched from now on ([`Self::watch`]) and remembered,
    /// or, if it does not exist, left behind ([`Self::settle`]); the caller says what an error
    /// is to its client.
    pub(super) async fn look_at(
        &self,
        key: &InstanceKey,
        context: &RequestContext<RoleServer>,
    ) -> Result<InstanceView, InstanceError> {
        self.watch(key, context);
        let answer = self.shared.runtime.view(key.clone()).await;
        self.settle(key, &answer);
        answer
    }

    /// The listing of `tool` for an instance of `workflow` in `snapshot`.
    fn listed(
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
    pub(super) fn handle_mode(&self, context: &RequestContext<RoleServer>) -> Option<&HandleMode> {
        if self.shared.handles.is_some() {
            return self.shared.handles.as_ref();
        }
        let sessionless = !self.shared.connection_is_session
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
    pub(super) fn lists_follow_instances(&self, context: &RequestContext<RoleServer>) -> bool {
        !is_2026_07_28(context) || declares_gated_lists(context)
    }

    /// How a list that depends on the catalog alone may be cached: for `--list-ttl`, by anyone
    /// unless authentication is on (then the answer is the principal's).
    pub(super) fn catalog_list_caching(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (u64, CacheScope) {
        let scope = match principal_of(context) {
            Some(_) => CacheScope::Private,
            None => CacheScope::Public,
        };
        let ttl_ms = u64::try_from(self.shared.list_ttl.as_millis()).unwrap_or(u64::MAX);
        (ttl_ms, scope)
    }

    /// 2026-07-28 by the book: every tool of the catalog, in name order, each workflow tool
    /// saying when it can be used and, in handle mode, taking the handle.
    fn list_catalog_tools(
        &self,
        catalog: &Catalog,
        context: &RequestContext<RoleServer>,
    ) -> Vec<Tool> {
        let mode = self.handle_mode(context);
        let key = mode.map(|mode| mode.key.as_str());
        catalog
            .tools()
            .map(|tool| {
                let Some(workflow) = tool.workflow().and_then(|id| catalog.workflow(id)) else {
                    return reply::listed_tool(tool, &tool.manifest.description);
                };
                let description = gate::catalog_description(tool, workflow, key);
                let listed = reply::listed_tool(tool, &description);
                match mode {
                    Some(mode) => {
                        mode.add_handle_property(listed, gate::starts_instance(tool, workflow))
                    }
                    None => listed,
                }
            })
            .collect()
    }

    /// Session mode: one instance per workflow for this session.
    async fn list_session_instances(
        &self,
        context: &RequestContext<RoleServer>,
        tools: &mut Vec<Tool>,
    ) -> Result<(), ErrorData> {
        let catalog = &*self.shared.catalog.current();
        for workflow in catalog.workflows() {
            let key = InstanceKey::for_session(&self.session().id, &workflow.id);
            let view = self.view(&key, context).await?;
            for tool in gate::menu(&view.workflow, &view.snapshot) {
                tools.push(Self::listed(None, &tool, &view.workflow, &view.snapshot));
            }
        }
        Ok(())
    }

    /// Handle mode: the named instance's menu; without a name, the menus of every instance this
    /// session touched plus the tools that start a new instance.
    async fn list_handle_instances(
        &self,
        mode: &HandleMode,
        context: &RequestContext<RoleServer>,
        tools: &mut Vec<Tool>,
    ) -> Result<(), ErrorData> {
        let catalog = &*self.shared.catalog.current();
        let (views, listing_named) = self.listed_instances(mode, catalog, context).await?;
        let mut seen = std::collections::HashSet::new();
        for (_, view) in views {
            for tool in gate::menu(&view.workflow, &view.snapshot) {
                if seen.insert(tool.name().to_string()) {
                    tools.push(Self::listed(
                        Some(mode),
                        &tool,
                        &view.workflow,
                        &view.snapshot,
                    ));
                }
            }
        }
        if !listing_named {
            // The tools that start an instance, and with them the workflow's tools bound to no
            // state (always visible; their schema says they need a handle).
            for workflow in catalog.workflows() {
                let initial = workflow.machine.initial_snapshot();
                for tool in gate::menu(workflow, &initial) {
                    let starts_or_ungated =
                        gate::starts_instance(&tool, workflow) || !tool.is_gated();
                    if starts_or_ungated && seen.insert(tool.name().to_string()) {
                        tools.push(Self::listed(Some(mode), &tool, workflow, &initial));
                    }
                }
            }
        }
        Ok(())
    }

    /// Handle mode: the instances a listing shows, and whether the request named them. Named
    /// in `_meta` (each must exist: a name that finds nothing is the caller's mistake, -32602),
    /// else those the session touched, of which any that are gone (deleted, expired, or of a
    /// workflow no longer loaded) are forgotten, so the session keeps listing the rest.
    pub(super) async fn listed_instances(
        &self,
        mode: &HandleMode,
        catalog: &Catalog,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Vec<(InstanceKey, InstanceView)>, bool), ErrorData> {
        let named = mode
            .handles_in(
                &context.meta,
                tenant_of(context).as_ref(),
                self.shared.max_handles_per_request,
            )
            .map_err(|error| ErrorData::invalid_params(error, None))?;
        let mut views = Vec::new();
        if !named.is_empty() {
            for key in named {
                if catalog.workflow(&key.workflow).is_none() {
                    return Err(ErrorData::invalid_params(
                        format!("no workflow \"{}\" is loaded", reply::clip(&key.workflow)),
                        None,
                    ));
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

    /// A call of a tool bound to no workflow: the plugin runs alone, once per round of asking
    /// (`asking.rs`).
    async fn call_unbound(
        &self,
        tool: Arc<ToolEntry>,
        arguments: Value,
        mut asking: Option<Asking>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let name = tool.name().to_string();
        let deadline = std::time::Instant::now() + self.shared.call_limits.timeout;
        let again = asking.is_some();
        let mut arguments = Some(arguments);
        loop {
            let call_context = CallContext {
                call_id: uuid::Uuid::new_v4().to_string(),
                handle: String::new(),
                state: Value::Null,
                asking: asking.as_ref().map_or(Value::Null, Asking::plugin_view),
                ..CallContext::default()
            };
            let (host, events) = HostCall::new(context.ct.child_token());
            let running = std::pin::pin!(invoke::run(
                tool.clone(),
                for_this_run(&mut arguments, again),
                call_context,
                Some(host),
                &self.shared.call_limits,
                None,
            ));
            let output = match self
                .call_events(context)
                .forward_during(running, events)
                .await
            {
                Ok(output) => output,
                Err(error) => return reply::invoke_failure(&name, &error).into(),
            };
            let (Some(asking), PluginOutput::NeedsInput(requests)) = (asking.as_mut(), &output)
            else {
                return reply::ran(&name, output, None).into();
            };
            let next = asking
                .next(requests.clone(), context, &self.shared.state_seal, deadline)
                .await;
            if let Some(answer) = asked(&name, next) {
                return answer;
            }
        }
    }

    /// Whether a call of the tool `name` may ask the client for input (`asking.rs`).
    pub(super) fn may_ask(&self, name: &str) -> bool {
        self.shared
            .catalog
            .current()
            .tool(name)
            .is_some_and(|tool| tool.asks())
    }

    /// Whether a `prompts/get` of the prompt `name` may ask the client for input.
    pub(super) fn prompt_may_ask(&self, name: &str) -> bool {
        self.shared
            .catalog
            .current()
            .prompt(name)
            .is_some_and(|prompt| prompt.manifest.asks)
    }

    /// Where the plugin's logs and progress go during a call made by this request.
    fn call_events<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> CallEvents<'a> {
        // A request without a session gets logs only if it names a level in `_meta` (2026-07-28
        // has no `logging/setLevel`); a session has a level, the default until it sets one.
        let min_level = if is_sessionless(context) {
            context.meta.log_level().map(call_events::from_rmcp)
        } else {
            Some(self.session().log_level())
        };
        CallEvents {
            peer: &context.peer,
            own_stream: context.extensions.get::<RequestStream>(),
            outbox: (!is_sessionless(context)).then(|| self.session().outbox()),
            progress_token: context.meta.get_progress_token(),
            min_level,
        }
    }

    /// `tools/call`: DESIGN behaviours 2 to 6, in the order a call meets them.
    ///
    /// The call's span (`record`) is made once the instance is known, with all its fields at
    /// once; what comes before it decides nothing that logs.
    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    fn answer_call<'a>(
        &'a self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        catalog: &'a Catalog,
        record: &'a CallRecord,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + 'a {
        async move {
            // A shutdown waits for this call to deliver its result.
            let _in_flight = self.shared.shutdown.call_started();
            let Some(tool) = record.tool().cloned() else {
                return Err(reply::unknown_tool(&request.name));
            };
            let mut arguments: JsonObject = request.arguments.unwrap_or_default();
            // Only a tool whose handler may ask is told what it may ask (`asking.rs`); its
            // retries' answers and sealed state are checked here, before anything runs.
            let asking = if tool.asks() {
                let handle_in_meta = self
                    .handle_mode(&context)
                    .and_then(|mode| context.meta.get(&mode.key));
                let identity = CallIdentity::new(
                    "tools/call",
                    tool.name(),
                    &arguments,
                    handle_in_meta,
                    principal_of(&context)
                        .as_ref()
                        .map(|principal| principal.0.as_str()),
                );
                Some(Asking::start(
                    &context,
                    &self.shared.state_seal,
                    identity,
                    request.input_responses,
                    request.request_state.as_deref(),
                    self.shared.confirm_fallback,
                )?)
            } else {
                None
            };
            let Some(workflow) = tool.workflow().and_then(|id| catalog.workflow(id)).cloned()
            else {
                if let Err(problems) = tool.check_arguments(&Value::Object(arguments.clone())) {
                    return Ok(reply::invalid_arguments(tool.name(), &problems).into());
                }
                // Boxed: a call of a workflow's tool, the common one, does not carry room for it.
                let arguments = Value::Object(arguments);
                let running = Box::pin(self.call_unbound(tool, arguments, asking, &context));
                return Ok(running.instrument(record.span(None)).await);
            };
            // The handle is the host's argument, not the plugin's: take it out before the schema
            // check.
            let target = match target::resolve(
                self.handle_mode(&context),
                &self.session().id,
                tenant_of(&context).as_ref(),
                &tool,
                &workflow,
                &mut arguments,
                &context.meta,
            ) {
                Ok(target) => target,
                Err(no_target) => return Ok(reply::no_target(tool.name(), &no_target).into()),
            };
            let arguments = Value::Object(arguments);
            if let Err(problems) = tool.check_arguments(&arguments) {
                return Ok(reply::invalid_arguments(tool.name(), &problems).into());
            }
            let idempotency_key = match context.meta.get("idempotencyKey") {
                None => None,
                Some(Value::String(key))
                    if !key.is_empty()
                        && key.chars().count() <= reply::MAX_IDEMPOTENCY_KEY_CHARS =>
                {
                    Some(key.clone())
                }
                Some(bad) => return Err(reply::invalid_idempotency_key(bad)),
            };
            // A minted instance is created by the call itself (one message, one save), and only
            // if the call succeeds.
            let (key, mint) = match target {
                Target::Existing(key) => (key, false),
                Target::Mint(key) => (key, true),
            };
            // A handle-keyed mint counts against its caller's rate (a session's instances are
            // bounded by its sessions).
            if mint
                && matches!(key.owner, Owner::Handle(_))
                && let Some(holder) = quota_holder(&context)
                && let Err(refusal) = self.shared.quotas.take_mint(&holder)
            {
                return Ok(reply::over_quota(tool.name(), &refusal).into());
            }
            // A mint in flight holds a place under the instance limit until it settles.
            let mut _minting = None;
            if mint
                && let Some(tenant) = &key.tenant
                && let Some(holder) = quota_holder(&context)
            {
                let store = self.shared.store.as_ref();
                let quotas = &self.shared.quotas;
                match quotas.reserve_instance(store, tenant, &holder).await {
                    Ok(Ok(place)) => _minting = place,
                    Ok(Err(refusal)) => return Ok(reply::over_quota(tool.name(), &refusal).into()),
                    Err(down) => {
                        let error = InstanceError::Store(down);
                        return Ok(reply::failure(tool.name(), &error).into());
                    }
                }
            }
            let span = record.span(Some(&key));
            self.call_instance(tool, key, mint, arguments, idempotency_key, asking, context)
                .instrument(span)
                .await
        }
    }

    /// [`TurnstileServer::answer_call`] once it knows the instance `key` the call is for, and
    /// whether the call mints it.
    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    #[allow(clippy::too_many_arguments)] // One call's whole request, each part named.
    fn call_instance(
        &self,
        tool: Arc<ToolEntry>,
        key: InstanceKey,
        mint: bool,
        arguments: Value,
        idempotency_key: Option<String>,
        mut asking: Option<Asking>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + '_ {
        async move {
            let name = tool.name().to_string();
            self.watch(&key, &context);
            // A session's request whose stream Turnstile writes (`direct.rs`) hears of its own
            // move there, ahead of the result. On the session's event stream the news would come
            // after the result, and a client that closes once its call returns (the Python SDK
            // 1.x does) logs an ERROR for a message reaching a stream it is closing.
            let own_stream = context.extensions.get::<RequestStream>().cloned();
            let told_in_reply = own_stream
                .as_ref()
                .filter(|_| !is_sessionless(&context) && self.lists_follow_instances(&context))
                .map(|_| self.session().id.clone());
            // Each run is a whole call: the gate is asked again, and a handler that needs input
            // ends having fired nothing (`asking.rs`).
            let deadline = std::time::Instant::now() + self.shared.call_limits.timeout;
            let again = asking.is_some();
            let (mut arguments, mut idempotency_key) = (Some(arguments), Some(idempotency_key));
            let answer = loop {
                let call_id = uuid::Uuid::new_v4().to_string();
                let (host, events) = HostCall::new(context.ct.child_token());
                let running = std::pin::pin!(self.shared.runtime.call(
                    key.clone(),
                    tool.clone(),
                    for_this_run(&mut arguments, again),
                    call_id,
                    Some(host),
                    mint,
                    for_this_run(&mut idempotency_key, again),
                    principal_of(&context).map(|principal| principal.0),
                    told_in_reply.clone(),
                    asking.as_ref().map_or(Value::Null, Asking::plugin_view),
                ));
                let answer = self
                    .call_events(&context)
                    .forward_during(running, events)
                    .await;
                let (
                    Some(asking),
                    Ok(CallOutcome::Ran {
                        output: PluginOutput::NeedsInput(requests),
                        ..
                    }),
                ) = (asking.as_mut(), &answer)
                else {
                    break answer;
                };
                let requests = requests.clone();
                let next = asking
                    .next(requests, &context, &self.shared.state_seal, deadline)
                    .await;
                if matches!(next, asking::Next::Rerouted)
                    && mint
                    && let Some(holder) = quota_holder(&context)
                {
                    // rmcp serves the call from the start, and takes its own mint then.
                    self.shared.quotas.give_back_mint(&holder);
                }
                let Some(asked) = asked(&name, next) else {
                    continue;
                };
                if mint {
                    // Nothing was created: no handle goes out, no subscription or actor stays.
                    self.shared
                        .runtime
                        .unsubscribe(&self.session().id, key.clone());
                    self.shared.runtime.forget(key.clone());
                }
                return Ok(asked);
            };
            let created = !mint
                || matches!(
                    answer,
                    Ok(CallOutcome::Ran {
                        output: PluginOutput::Success(_),
                        ..
                    })
                );
            if created {
                self.settle(&key, &answer);
            } else {
                // The instance was never created: no handle goes out, no subscription or actor
                // stays.
                self.shared
                    .runtime
                    .unsubscribe(&self.session().id, key.clone());
                self.shared.runtime.forget(key.clone());
            }
            let (result, next) = match answer {
                Ok(CallOutcome::Forbidden(refusal)) => (
                    reply::forbidden(&refusal),
                    Some((gate::NextStep::of_refusal(&refusal), false)),
                ),
                Ok(CallOutcome::Looped {
                    output,
                    state,
                    next,
                }) => (
                    reply::transition_loop(&name, output, state),
                    Some((next, false)),
                ),
                Ok(CallOutcome::Ran {
                    output,
                    moved,
                    state,
                    next,
                    lists,
                }) => {
                    if let (Some(stream), Some(_), Some(lists)) =
                        (&own_stream, &told_in_reply, lists)
                    {
                        stream.lists_changed(lists);
                    }
                    if moved && is_sessionless(&context) && self.lists_follow_instances(&context) {
                        // This request's stream is the only place the caller can hear of the
                        // change: say it there, before the result, every time.
                        // Boxed, as only sessionless calls that move send it.
                        match Box::pin(context.peer.notify_tool_list_changed()).await {
                            Ok(()) => metrics::list_changed_sent(metrics::Cause::Transition),
                            Err(error) => {
                                tracing::debug!(%error, "cannot tell the caller its list changed")
                            }
                        }
                    }
                    (reply::ran(&name, output, Some(state)), Some((next, moved)))
                }
                Ok(CallOutcome::Declined { action, next }) => {
                    (reply::declined(&name, &action), Some((next, false)))
                }
                Err(error) => (reply::failure(&name, &error), None),
            };
            // A failed mint left no instance to have a next step.
            let next = next.filter(|_| created);
            let next_step = self.shared.next_step;
            let handle = match (self.handle_mode(&context), &key.owner) {
                (Some(mode), Owner::Handle(handle)) if created => Some((mode, &**handle)),
                _ => None,
            };
            let result = match handle {
                Some((mode, handle)) => reply::with_handle(
                    result,
                    &mode.key,
                    handle,
                    next.is_none() || !next_step.writes_text(),
                ),
                None => result,
            };
            let result = match next {
                Some((next, moved)) => reply::with_next_step(
                    result,
                    next_step,
                    reply::Whereabouts {
                        workflow: &key.workflow,
                        handle: handle.map(|(_, handle)| handle),
                        next,
                        moved,
                    },
                ),
                None => result,
            };
            Ok(result.into())
        }
    }
}

/// What one run of a call gets of `kept`: a copy when the call may run `again` (its handler may
/// ask), else `kept` itself, taken (a call that cannot ask runs once, and copies nothing).
fn for_this_run<T: Clone>(kept: &mut Option<T>, again: bool) -> T {
    let taken = if again { kept.clone() } else { kept.take() };
    taken.expect("a call that cannot ask runs once")
}

/// What a call of `tool` whose handler asked for input answers, given what came of asking;
/// `None` when the answers are in and the handler runs again.
fn asked(tool: &str, next: asking::Next) -> Option<CallToolResponse> {
    Some(match next {
        asking::Next::RunAgain => return None,
        asking::Next::InputRequired(result) => result.into(),
        asking::Next::Unavailable(requests) => {
            reply::input_unavailable(tool, &reply::needed(&requests)).into()
        }
        asking::Next::Failed(why) => reply::asking_failed(tool, &why).into(),
        asking::Next::Cancelled => reply::asking_failed(tool, "the call was cancelled").into(),
        asking::Next::Rerouted => CallToolResult::success(Vec::new()).into(),
    })
}

/// The tenant whose instances an HTTP request may reach: its principal's, when authentication
/// is on (`auth.rs` put the principal in the request). Without authentication, and over stdio,
/// handles alone name instances.
pub(super) fn tenant_of(context: &RequestContext<RoleServer>) -> Option<Tenant> {
    principal_of(context).map(|principal| principal.tenant())
}

/// Who an HTTP request is from, when authentication is on (`auth.rs` put it in the request).
/// Who a request counts against for the per-client quotas (`quotas.rs`): its principal, else
/// the address it came from (over stdio: nobody).
fn quota_holder(context: &RequestContext<RoleServer>) -> Option<super::quotas::Holder> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    super::quotas::Holder::of(
        parts.extensions.get::<Principal>(),
        parts.extensions.get::<super::quotas::ClientAddr>(),
    )
}

/// The name of the principal a request is from, with authentication on.
pub(super) fn principal_name(context: &RequestContext<RoleServer>) -> Option<String> {
    principal_of(context).map(|principal| principal.0)
}

fn principal_of(context: &RequestContext<RoleServer>) -> Option<Principal> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    parts.extensions.get::<Principal>().cloned()
}

/// The protocol extension (SEP-2133 naming) a 2026-07-28 client declares in its capabilities
/// to be served lists that follow its instances, as the 2025 revisions are (`docs/gated-lists.md`).
pub const GATED_LISTS_EXTENSION: &str = "dev.turnstile/gated-lists";

/// Whether `context` is a request of protocol 2026-07-28 (or later): its `_meta` names a
/// revision without an `initialize` handshake.
pub(super) fn is_2026_07_28(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// Whether the client of a 2026-07-28 request declares [`GATED_LISTS_EXTENSION`] in the
/// capabilities the request carries.
fn declares_gated_lists(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .client_capabilities()
        .and_then(|capabilities| capabilities.extensions)
        .is_some_and(|extensions| extensions.contains_key(GATED_LISTS_EXTENSION))
}

/// Whether `context` is an HTTP request without a session (protocol 2026-07-28, or a server
/// started `--stateless`): it has no `Mcp-Session-Id`, so nothing sent after its answer can reach
/// it. Stdio (no HTTP parts) is one session.
pub(super) fn is_sessionless(context: &RequestContext<RoleServer>) -> bool {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .is_some_and(|parts| !parts.headers.contains_key(SESSION_ID))
}

impl ServerHandler for TurnstileServer {
    #[allow(deprecated)] // `enable_logging`: see `set_level`.
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_extensions_with(rmcp::model::ExtensionCapabilities::from([(
                    GATED_LISTS_EXTENSION.to_string(),
                    JsonObject::new(),
                )]))
                .build(),
        )
        .with_server_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each workflow tool works only at certain steps of its workflow: its description \
                 says when, a call at the wrong step is refused with the tools that fit, and \
                 every result ends with where the workflow is now and which tools come next. \
                 With a session, lists show only what fits now: re-read a list after its \
                 notifications/.../list_changed.",
        )
    }

    /// For rmcp's transport, which compares a 2026-07-28 call's `Mcp-Param-*` headers with its
    /// arguments (SEP-2243) when it knows the tool's input schema. Only tools that mirror a
    /// parameter into a header are returned: for the rest there is nothing to compare, and the
    /// call path builds no listing.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        let catalog = self.shared.catalog.current();
        let tool = catalog.tool(name)?;
        crate::catalog::param_headers::declares_any(&tool.manifest.input_schema)
            .then(|| reply::listed_tool(tool, &tool.manifest.description))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.shared.catalog.current();
        if !self.lists_follow_instances(&context) {
            let (ttl_ms, scope) = self.catalog_list_caching(&context);
            return Ok(ListToolsResult::with_all_items(
                self.list_catalog_tools(&catalog, &context),
            )
            .with_ttl_ms(ttl_ms)
            .with_cache_scope(scope));
        }
        let mut tools: Vec<Tool> = catalog
            .tools()
            .filter(|tool| tool.workflow().is_none())
            .map(|tool| reply::listed_tool(tool, &tool.manifest.description))
            .collect();
        match self.handle_mode(&context) {
            Some(mode) => {
                self.list_handle_instances(mode, &context, &mut tools)
                    .await?
            }
            None => self.list_session_instances(&context, &mut tools).await?,
        }
        // The menu depends on the caller's state, so a client must not serve it from a cache.
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(0)
            .with_cache_scope(CacheScope::Private))
    }

    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + MaybeSendFuture + '_ {
        async move {
            let catalog = self.shared.catalog.current();
            let record = CallRecord::start(catalog.tool(&request.name).cloned());
            // Awaited where it is made: a future held in a local before its `.await` keeps a second
            // slot of its size in this one (rust-lang/rust#62958), and this one is copied whole
            // into its box for every call (BENCHMARKS.md's history, session 16).
            let answer = self.answer_call(request, context, &catalog, &record).await;
            record.finish(&self.shared.call_metrics, answer)
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.answer_list_prompts(&context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.answer_get_prompt(request, &context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.answer_list_resources(&context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.answer_complete(request, &context).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.answer_list_templates(&context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.answer_read_resource(request, &context)
            .await
            .map(Into::into)
    }

    // rmcp marks `resources/subscribe` legacy (2026-07-28 replaced it by `subscriptions/listen`);
    // the session-based revisions Turnstile serves still have it.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_sessionless(&context) {
            // Nothing could reach a request without a session after its answer.
            return Err(reply::unroutable_request("resources/subscribe", None));
        }
        self.answer_subscribe(&request.uri, &context).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_sessionless(&context) {
            return Err(reply::unroutable_request("resources/unsubscribe", None));
        }
        self.answer_unsubscribe(&request.uri);
        Ok(())
    }

    /// A restore of a passivated session (rmcp replays its `initialize`, marked) takes up the
    /// session's own scope; otherwise rmcp's default.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if let (Some(records), Some(restore)) = (
            &self.records,
            context.extensions.get::<SessionRestoreMarker>(),
        ) && let Some(scope) = records.adopt(restore.id.as_ref())
        {
            tracing::debug!(session = %scope.id, "session restored");
            scope.rebind(&context.peer);
            // Nothing has used this handler yet: `initialize` is its first request.
            let _ = self.session.set(scope);
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// From its start, a session hears about the plugin catalog changing, before it has touched
    /// any instance; with its handshake done, it may be passivated when idle.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let http_session = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| super::http_layer::session_of(&parts.headers));
        let records = self.records.as_ref().zip(http_session);
        if let Some((records, id)) = records
            && let Some((outbox, _)) = records.outbox(id)
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
            .join(&session.id, session.listener(&context.peer), true);
        if let Some((records, id)) = records {
            records.bind(
                id,
                session,
                Served::new(self.detached(), context.peer.clone()),
            );
        }
    }

    /// `notifications/cancelled` for a request served outside rmcp's service loop (rmcp has
    /// already cancelled it if it was one of its own).
    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        if let Some(id) = &notification.request_id {
            self.session().cancel(id);
        }
    }

    // rmcp marks MCP logging deprecated (SEP-2577, a future revision); the revisions Turnstile
    // serves still have it, and the plugins' logs reach the client through it.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_sessionless(&context) {
            // No session to keep a level in: 2026-07-28 removed the method (levels travel in
            // each request's `_meta`).
            return Err(reply::unroutable_request("logging/setLevel", None));
        }
        self.session()
            .set_log_level(call_events::from_rmcp(request.level));
        Ok(())
    }

    /// rmcp hands over every request it could not match to a method with well-formed params.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(reply::unroutable_request(
            &request.method,
            request.params.as_ref(),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp intersects this with what was requested and what get_info advertises. Resource
        // subscriptions are accepted where the URI names a resource: whether its instance is
        // the caller's is known only in `listen`, which refuses the listen if not.
        let catalog = self.shared.catalog.current();
        let resources = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| {
                super::instance_resource::parse(uri).is_some()
                    || catalog.resource(uri).is_some()
                    || catalog.template_for(uri).is_some()
            })
            .cloned();
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .resource_subscriptions(resources)
                .build(),
        )
    }

    /// 2026-07-28 `subscriptions/listen`: `list_changed` when the plugin catalog changes, and
    /// one `resources/updated` per transition of each instance resource in
    /// `resourceSubscriptions`, until the client cancels; the server never ends it but at
    /// shutdown. With the gated-lists extension, also `list_changed` for the instances named in
    /// the request's `_meta` (under the handle key) whenever they move. A resource naming
    /// nothing of the caller's ends the listen with -32002, as `resources/read` answers.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let request = context.request_context();
        let mode = self
            .handle_mode(request)
            .unwrap_or(HandleMode::sessionless_default());
        let lists_follow_instances = self.lists_follow_instances(request);
        // Without the gated-lists extension a transition changes no list: the listen hears
        // only the catalog changing, whatever handles it names.
        let keys = if lists_follow_instances {
            mode.handles_in(
                &request.meta,
                tenant_of(request).as_ref(),
                self.shared.max_handles_per_request,
            )
            .map_err(|error| ErrorData::invalid_params(error, None))?
        } else {
            Vec::new()
        };
        // A subscription to an instance that does not exist would never hear anything: refuse
        // it, as tools/list does.
        for key in &keys {
            if let Err(error) = self.shared.runtime.view(key.clone()).await {
                if matches!(error, InstanceError::UnknownHandle(_)) {
                    self.shared.runtime.forget(key.clone());
                }
                return Err(ErrorData::invalid_params(error.to_string(), None));
            }
        }
        let mut resources = Vec::new();
        for uri in context.accepted().resource_subscriptions.iter().flatten() {
            if let super::primitives::InstanceResource::Instance(key) =
                self.instance_resource_key(uri, request).await?
            {
                resources.push((key, uri.clone()));
            }
        }
        let listener_id = SessionId::new();
        let listener: Arc<SinkListener> = Arc::new(SinkListener::new(context.sink().clone()));
        // Every open listen hears about the plugin catalog changing.
        self.shared
            .runtime
            .join(&listener_id, listener.clone(), lists_follow_instances);
        for key in keys {
            self.shared
                .runtime
                .subscribe(&listener_id, listener.clone(), key);
        }
        for (key, uri) in resources {
            self.shared
                .runtime
                .subscribe_resource(&listener_id, listener.clone(), key, &uri);
        }
        // Ended by the client, or by the server's shutdown: then with the final result, which
        // is the graceful close a client expects.
        tokio::select! {
            () = context.cancelled() => {},
            () = self.shared.shutdown.closing_streams.cancelled() => {},
        }
        self.shared.runtime.session_ended(&listener_id);
        Ok(())
    }
}
