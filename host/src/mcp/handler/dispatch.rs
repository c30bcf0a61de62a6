//! rmcp's `ServerHandler` for [`TurnstileServer`]: each MCP method to the part of the handler
//! that answers it (`tools.rs`, `primitives.rs`, `completion.rs`), and the session's own
//! notifications (`initialize`, `notifications/initialized`, cancellation, logging level).

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams,
        CancelledNotificationParam, CompleteRequestParams, CompleteResult, CustomRequest,
        CustomResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
        Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
        SubscribeRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID, Tool,
        UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext},
};

use super::{
    call_events::{self},
    call_record::CallRecord,
    era::GATED_LISTS_EXTENSION,
    legacy_tasks::LEGACY_TASKS_PREFIX,
    reply,
    server::TurnstileServer,
    target::HandleMode,
    tasks::{Asked, CallMode},
};
use crate::actors::{InstanceError, SessionId, Subscribe};
use crate::mcp::session::scope::SinkListener;

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
                .enable_extensions_with(rmcp::model::ExtensionCapabilities::from([
                    (GATED_LISTS_EXTENSION.to_string(), JsonObject::new()),
                    (TASKS_EXTENSION_ID.to_string(), JsonObject::new()),
                ]))
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
        self.serve_call(request, context, Asked::Plainly)
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
        if self.caller(&context).is_sessionless() {
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
        if self.caller(&context).is_sessionless() {
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
        self.take_up_restored(&context);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// From its start, a session hears about the plugin catalog changing, before it has touched
    /// any instance; with its handshake done, it may be passivated when idle.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.handshake_done(&context.extensions, &context.peer);
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
        if self.caller(&context).is_sessionless() {
            // No session to keep a level in: 2026-07-28 removed the method (levels travel in
            // each request's `_meta`).
            return Err(reply::unroutable_request("logging/setLevel", None));
        }
        self.session()
            .set_log_level(call_events::from_rmcp(request.level));
        Ok(())
    }

    // rmcp checks that the client declares the tasks extension before these.
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.answer_get_task(request, &context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.answer_cancel_task(request, &context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.answer_update_task(request, &context)
    }

    /// rmcp hands over every request it could not match to a method with well-formed params:
    /// among them the 2025-11-25 task requests, renamed for the handler by the transport
    /// (`legacy_tasks.rs`).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if let Some(method) = request.method.strip_prefix(LEGACY_TASKS_PREFIX) {
            return self
                .answer_legacy_task(method, request.params, context)
                .await
                .map(CustomResult::new);
        }
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
                self.caller(request).tenant().as_ref(),
                self.shared.max_handles_per_request,
            )
            .map_err(reply::invalid_handles)?
        } else {
            Vec::new()
        };
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
        // Each instance is watched once it is known to exist. A subscription to one that does
        // not exist would never hear anything: the listen is refused, as tools/list does, and
        // leaves nothing behind.
        for key in keys {
            let watcher = Subscribe {
                session: listener_id.clone(),
                listener: listener.clone(),
                instance: key.clone(),
                seen: None,
            };
            if let Err(error) = self.shared.runtime.look(key.clone(), Some(watcher)).await {
                if matches!(error, InstanceError::UnknownHandle(_)) {
                    self.shared.runtime.forget(key);
                }
                self.shared.runtime.session_ended(&listener_id);
                return Err(reply::unwatchable(&error));
            }
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

impl TurnstileServer {
    /// A `tools/call`, asked as `asked`: plainly, or as a task, answered at once with it once
    /// the gate let it through.
    #[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
    pub(super) fn serve_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        asked: Asked,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + MaybeSendFuture + '_ {
        async move {
            let catalog = self.shared.catalog.current();
            let record = CallRecord::start(catalog.tool(&request.name).cloned());
            let mut task = None;
            if let Some(tool) = record.tool() {
                match self.call_mode(tool, &context, asked) {
                    Ok(CallMode::Plain) => {}
                    // A confirmation still to ask is asked plainly (a declined one answered so):
                    // the retry with the person's yes becomes the task. (A workflow tool's is
                    // asked by its instance, before its task starts.)
                    Ok(CallMode::Task(_))
                        if tool.workflow().is_none()
                            && self.confirmation_answers(tool, &request, &context) => {}
                    Ok(CallMode::Task(how)) => {
                        let handle = self.named_handle(&request, &context);
                        let created = self.new_task(tool.name(), handle, &context, how.ttl);
                        let created = match created.await {
                            Ok(Ok(created)) => created,
                            Ok(Err(refusal)) => {
                                let refused = reply::over_quota(tool.name(), &refusal);
                                return record
                                    .finish(&self.shared.call_metrics, Ok(refused.into()));
                            }
                            Err(down) => {
                                let down = InstanceError::Store(down);
                                let refused = reply::failure(tool.name(), &down);
                                return record
                                    .finish(&self.shared.call_metrics, Ok(refused.into()));
                            }
                        };
                        if tool.workflow().is_none() {
                            let catalog = catalog.clone();
                            return Ok(
                                self.start_task(created, request, context, catalog, record, how)
                            );
                        }
                        // The instance starts it once the gate lets the call through.
                        task = Some((created, how));
                    }
                    Err(refused) => return record.finish(&self.shared.call_metrics, Err(refused)),
                }
            }
            // Awaited where it is made: a future held in a local before its `.await` keeps a second
            // slot of its size in this one (rust-lang/rust#62958), and this one is copied whole
            // into its box for every call (BENCHMARKS.md's history, session 16).
            let context = match &task {
                Some((task, how)) => super::tasks::task_context(context, task, *how),
                None => context,
            };
            let task = task.map(|(task, _)| task);
            let answer = self
                .answer_call(request, context, &catalog, &record, task.clone())
                .await;
            if let Some(task) = task
                && !matches!(answer, Ok(CallToolResponse::Task(_)))
            {
                // Refused, or answered before it could start: a plain answer, and no task.
                self.shared.tasks.forget(&task.id);
            }
            record.finish(&self.shared.call_metrics, answer)
        }
    }
}
