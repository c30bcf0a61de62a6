//! A real MCP client (rmcp's) that records what the server pushes to it: list changes, notices,
//! log messages and progress.

use std::{
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientConfig, PaginatedRequestParams,
        ProtocolVersion, RequestMetaObject, Tool,
    },
    service::{NotificationContext, RunningService, ServiceError},
    transport::{StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::Value;
use tokio::sync::Notify;

use super::{STDIO_SERVE, eventually, turnstile_bin};

/// Counts `notifications/tools/list_changed`.
#[derive(Default)]
pub struct ListChanges {
    count: AtomicUsize,
    changed: Notify,
}

impl ListChanges {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    fn record(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Waits until at least `n` notifications have arrived; panics after 10 s.
    pub async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.count() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "expected {n} list_changed notifications, got {}",
                self.count()
            );
            let _ = tokio::time::timeout(
                left.min(Duration::from_millis(100)),
                self.changed.notified(),
            )
            .await;
        }
    }

    /// Asserts that the count stays at `n` for a quiet period (for "sends none" checks).
    pub async fn stays_at(&self, n: usize) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(self.count(), n, "unexpected list_changed notifications");
    }
}

/// What the server told a client about its prompts and resources.
#[derive(Default)]
pub struct Notices {
    /// `notifications/prompts/list_changed`.
    pub prompts: ListChanges,
    /// `notifications/resources/list_changed`.
    pub resources: ListChanges,
    /// `notifications/resources/updated`, and the URIs they named, in order.
    pub updated: ListChanges,
    pub updated_uris: Mutex<Vec<String>>,
}

/// The client side of a session: records what the server pushes.
#[derive(Clone)]
pub struct Recorder {
    pub changes: Arc<ListChanges>,
    pub notices: Arc<Notices>,
    /// Log messages and progress reports, in arrival order: `log:<level>:<data>` and
    /// `progress:<progress>/<total>`.
    pub events: Arc<std::sync::Mutex<Vec<String>>>,
    protocol: ProtocolVersion,
    /// The protocol extensions it declares in its capabilities (SEP-1724), by identifier.
    extensions: Vec<&'static str>,
}

/// Turnstile's extension for 2026-07-28 lists that follow the instances named in `_meta`.
pub const GATED_LISTS_EXTENSION: &str = "dev.turnstile/gated-lists";

/// The `_meta` key of a workflow tool's result that carries its next step.
pub const NEXT_STEP_META_KEY: &str = "dev.turnstile/next-step";

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default().with_protocol_version(self.protocol.clone());
        if !self.extensions.is_empty() {
            config.capabilities.extensions = Some(
                self.extensions
                    .iter()
                    .map(|id| (id.to_string(), rmcp::model::JsonObject::new()))
                    .collect(),
            );
        }
        config
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.record();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.prompts.record();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.notices.resources.record();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.notices.updated_uris.lock().unwrap().push(params.uri);
        self.notices.updated.record();
    }

    #[allow(deprecated)] // MCP logging, as 2025-11-25 has it.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level).unwrap();
        let entry = format!("log:{}:{}", level.as_str().unwrap_or("?"), params.data);
        self.events.lock().unwrap().push(entry);
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let total = params
            .total
            .map_or("?".to_string(), |total| total.to_string());
        let entry = format!("progress:{}/{total}", params.progress);
        self.events.lock().unwrap().push(entry);
    }
}

/// A connected MCP client.
pub struct Client {
    service: RunningService<RoleClient, Recorder>,
    pub changes: Arc<ListChanges>,
    /// What the server logged and reported to this client, in order (see [`Recorder::events`]).
    pub events: Arc<std::sync::Mutex<Vec<String>>>,
    /// What the server told it about its prompts and resources.
    pub notices: Arc<Notices>,
}

fn recorder() -> Recorder {
    // The session-based handshake (2025-11-25): initialize, Mcp-Session-Id, GET stream.
    recorder_speaking(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

fn recorder_speaking(protocol: ProtocolVersion) -> Recorder {
    Recorder {
        changes: Arc::new(ListChanges::default()),
        notices: Arc::default(),
        events: Arc::default(),
        protocol,
        extensions: Vec::new(),
    }
}

impl From<RunningService<RoleClient, Recorder>> for Client {
    /// The client of a connected service, sharing what its recorder records.
    fn from(service: RunningService<RoleClient, Recorder>) -> Client {
        let recorder = service.service();
        let (changes, events, notices) = (
            recorder.changes.clone(),
            recorder.events.clone(),
            recorder.notices.clone(),
        );
        Client {
            service,
            changes,
            events,
            notices,
        }
    }
}

/// `names`, sorted: lists are compared as sets of names.
fn sorted(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.into_iter().collect();
    names.sort();
    names
}

/// A list request's parameters, with `meta` as its `_meta`.
fn paginated(meta: Value) -> PaginatedRequestParams {
    let mut params = PaginatedRequestParams::default();
    params.meta = Some(meta_object(meta));
    params
}

/// A `tools/call` request's parameters; `arguments` when it is an object.
fn call_params(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_string());
    if let Value::Object(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    params
}

impl Client {
    /// Connects over Streamable HTTP.
    pub async fn http(url: &str) -> Client {
        Self::http_speaking(url, ProtocolVersion::LATEST_WITH_INITIALIZE).await
    }

    /// Connects over Streamable HTTP, asking for a given protocol revision.
    pub async fn http_speaking(url: &str, protocol: ProtocolVersion) -> Client {
        let recorder = recorder_speaking(protocol);
        let transport = StreamableHttpClientTransport::from_uri(url.to_string());
        let service = recorder.serve(transport).await.expect("connect over HTTP");
        Client::from(service)
    }

    /// Connects over Streamable HTTP with protocol 2026-07-28's lifecycle: `server/discover`,
    /// no session (each request carries its own protocol metadata).
    pub async fn http_sessionless(url: &str) -> Client {
        Self::http_sessionless_declaring(url, &[]).await
    }

    /// [`Client::http_sessionless`], declaring the protocol extensions `extensions` in every
    /// request's capabilities.
    pub async fn http_sessionless_declaring(url: &str, extensions: &[&'static str]) -> Client {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
        let mut recorder = recorder_speaking(ProtocolVersion::V_2026_07_28);
        recorder.extensions = extensions.to_vec();
        let transport = StreamableHttpClientTransport::from_uri(url.to_string());
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let service = recorder
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("discover over HTTP");
        Client::from(service)
    }

    /// Connects over Streamable HTTP as the principal of `bearer` (`Authorization: Bearer`).
    pub async fn http_as(url: &str, bearer: &str) -> Client {
        Self::http_through(url, reqwest::Client::new(), Some(bearer)).await
    }

    /// Connects over Streamable HTTP through `http` (an HTTPS client trusting a test
    /// certificate, say), sending `bearer` as `Authorization: Bearer` when given.
    pub async fn http_through(url: &str, http: reqwest::Client, bearer: Option<&str>) -> Client {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let recorder = recorder();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(bearer) = bearer {
            config = config.auth_header(bearer);
        }
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let service = recorder.serve(transport).await.expect("connect over HTTP");
        Client::from(service)
    }

    /// Starts `turnstile serve --stdio` as a child process and connects to it.
    /// The server keeps its state in memory: a stdio server lives exactly as long as its client.
    pub async fn stdio(plugins: &Path) -> Client {
        let recorder = recorder();
        let mut command = tokio::process::Command::new(turnstile_bin());
        command.args(STDIO_SERVE).arg(plugins);
        let transport = TokioChildProcess::new(command).expect("start turnstile --stdio");
        let service = recorder.serve(transport).await.expect("connect over stdio");
        Client::from(service)
    }

    pub async fn tools(&self) -> Vec<Tool> {
        self.service
            .list_tools(Some(PaginatedRequestParams::default()))
            .await
            .expect("tools/list")
            .tools
    }

    /// Whether `tools/list` offers `tool` now.
    pub async fn offers(&self, tool: &str) -> bool {
        self.tool_names().await.iter().any(|name| name == tool)
    }

    pub async fn tool_names(&self) -> Vec<String> {
        sorted(self.tools().await.into_iter().map(|t| t.name.to_string()))
    }

    /// `tools/list` with `_meta` (naming handles, in handle mode).
    pub async fn tools_with_meta(&self, meta: Value) -> Vec<Tool> {
        self.try_tools_with_meta(meta).await.expect("tools/list")
    }

    /// Like `tools_with_meta`, returning a JSON-RPC error instead of panicking on one.
    pub async fn try_tools_with_meta(&self, meta: Value) -> Result<Vec<Tool>, ServiceError> {
        Ok(self.service.list_tools(Some(paginated(meta))).await?.tools)
    }

    pub async fn tool_names_with_meta(&self, meta: Value) -> Vec<String> {
        let tools = self.tools_with_meta(meta).await;
        sorted(tools.into_iter().map(|tool| tool.name.to_string()))
    }

    pub async fn try_call(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, ServiceError> {
        self.service.call_tool(call_params(name, arguments)).await
    }

    /// Calls a tool with `_meta` on the request (a progress token, a log level).
    pub async fn call_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> CallToolResult {
        self.try_call_with_meta(name, arguments, meta)
            .await
            .unwrap_or_else(|error| panic!("tools/call {name}: {error}"))
    }

    /// Like `call_with_meta`, returning a JSON-RPC error instead of panicking on one.
    pub async fn try_call_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> Result<CallToolResult, ServiceError> {
        let mut params = call_params(name, arguments);
        params.meta = Some(meta_object(meta));
        self.service.call_tool(params).await
    }

    /// Starts a `tools/call` and, after `after`, cancels it (`notifications/cancelled`), as a
    /// client does when its user gives up.
    pub async fn call_then_cancel(&self, name: &str, arguments: Value, after: Duration) {
        let params = call_params(name, arguments);
        let request =
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        let handle = self
            .service
            .peer()
            .send_cancellable_request(request, rmcp::service::PeerRequestOptions::default())
            .await
            .expect("send tools/call");
        tokio::time::sleep(after).await;
        handle
            .cancel(Some("the user gave up".to_string()))
            .await
            .expect("send notifications/cancelled");
    }

    /// `logging/setLevel`.
    #[allow(deprecated)] // MCP logging, as 2025-11-25 has it.
    pub async fn set_log_level(&self, level: &str) {
        let level = serde_json::from_value(Value::from(level)).expect("an MCP level name");
        self.service
            .set_level(rmcp::model::SetLevelRequestParams::new(level))
            .await
            .expect("logging/setLevel");
    }

    /// What the server has logged and reported to this client so far, in order.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// The events once `enough` says they are complete; panics after 10 s. For events that
    /// travel on the session's stream, which may reach the client just after the answer of the
    /// call that caused them (two HTTP streams keep no order between them).
    pub async fn events_when(&self, enough: impl Fn(&[String]) -> bool) -> Vec<String> {
        eventually(
            "events never completed",
            Duration::from_secs(10),
            Duration::from_millis(10),
            async || {
                let events = self.events();
                if enough(&events) {
                    Ok(events)
                } else {
                    Err(format!("{events:?}"))
                }
            },
        )
        .await
    }

    /// Calls a tool; panics on a protocol error (tool errors are results).
    pub async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        self.try_call(name, arguments)
            .await
            .unwrap_or_else(|error| panic!("tools/call {name}: {error}"))
    }

    /// The state the invoice plugin's `invoice.status` reports.
    pub async fn invoice_state(&self) -> Value {
        let result = self.call("invoice.status", serde_json::json!({})).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "invoice.status failed: {result:?}"
        );
        let structured = result
            .structured_content
            .expect("invoice.status has structured content");
        structured["state"].clone()
    }

    /// Opens a `subscriptions/listen` (protocol 2026-07-28) for `list_changed`, naming no
    /// handle, and counts what arrives on it for as long as the client lives.
    pub async fn listen(&self) -> Arc<ListChanges> {
        let filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .build();
        self.listen_counting(filter, |notification| {
            matches!(
                notification,
                rmcp::model::ServerNotification::ToolListChangedNotification(_)
            )
        })
        .await
        .expect("subscriptions/listen")
    }

    /// Opens a `subscriptions/listen` (protocol 2026-07-28) with `resourceSubscriptions` `uris`
    /// (and nothing else), and counts the `resources/updated` that arrive on it for as long as
    /// the client lives.
    pub async fn listen_resources(&self, uris: &[&str]) -> Result<Arc<ListChanges>, ServiceError> {
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscriptions(uris.iter().copied())
            .build();
        self.listen_counting(filter, |notification| {
            matches!(
                notification,
                rmcp::model::ServerNotification::ResourceUpdatedNotification(_)
            )
        })
        .await
    }

    /// Opens a `subscriptions/listen` for `filter` and counts the notifications on it that
    /// `counts` picks, for as long as the client lives.
    async fn listen_counting(
        &self,
        filter: rmcp::model::SubscriptionFilter,
        counts: fn(&rmcp::model::ServerNotification) -> bool,
    ) -> Result<Arc<ListChanges>, ServiceError> {
        let mut subscription = self.service.peer().listen(filter).await?;
        let changes = Arc::new(ListChanges::default());
        let counting = changes.clone();
        tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                if counts(&notification) {
                    counting.record();
                }
            }
        });
        Ok(changes)
    }

    /// `prompts/list` (with `_meta`, e.g. naming a handle): the names, sorted.
    pub async fn prompt_names_with_meta(&self, meta: Value) -> Vec<String> {
        let listed = self.service.list_prompts(Some(paginated(meta))).await;
        sorted(
            listed
                .expect("prompts/list")
                .prompts
                .into_iter()
                .map(|p| p.name),
        )
    }

    pub async fn prompt_names(&self) -> Vec<String> {
        self.prompt_names_with_meta(serde_json::json!({})).await
    }

    /// `prompts/get` with `arguments` (an object) and `_meta`.
    /// `completion/complete` with `params` given as JSON (`ref`, `argument`, `_meta`): the
    /// values.
    pub async fn complete(&self, params: Value) -> Result<Vec<String>, ServiceError> {
        let params: rmcp::model::CompleteRequestParams =
            serde_json::from_value(params).expect("completion params as MCP spells them");
        Ok(self.service.complete(params).await?.completion.values)
    }

    pub async fn get_prompt_with_meta(
        &self,
        name: &str,
        arguments: Value,
        meta: Value,
    ) -> Result<rmcp::model::GetPromptResult, ServiceError> {
        let mut params = rmcp::model::GetPromptRequestParams::new(name);
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        params = params.with_meta(meta_object(meta));
        self.service.get_prompt(params).await
    }

    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<rmcp::model::GetPromptResult, ServiceError> {
        self.get_prompt_with_meta(name, arguments, serde_json::json!({}))
            .await
    }

    /// `resources/list` (with `_meta`): the URIs, sorted.
    pub async fn resource_uris_with_meta(&self, meta: Value) -> Vec<String> {
        let listed = self.service.list_resources(Some(paginated(meta))).await;
        sorted(
            listed
                .expect("resources/list")
                .resources
                .into_iter()
                .map(|r| r.uri),
        )
    }

    pub async fn resource_uris(&self) -> Vec<String> {
        self.resource_uris_with_meta(serde_json::json!({})).await
    }

    /// `resources/templates/list`: the URI templates, sorted.
    pub async fn resource_templates(&self) -> Vec<String> {
        let listed = self
            .service
            .list_resource_templates(Some(PaginatedRequestParams::default()))
            .await;
        let templates = listed.expect("resources/templates/list").resource_templates;
        sorted(templates.into_iter().map(|template| template.uri_template))
    }

    /// `resources/read` of `uri`.
    pub async fn read_resource(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult, ServiceError> {
        self.service
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
    }

    /// `resources/subscribe` to `uri`.
    #[allow(deprecated)] // resources/subscribe, as 2025-11-25 has it.
    pub async fn subscribe(&self, uri: &str) -> Result<(), ServiceError> {
        self.service
            .subscribe(rmcp::model::SubscribeRequestParams::new(uri))
            .await
    }

    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// A JSON object as request `_meta`.
fn meta_object(meta: Value) -> RequestMetaObject {
    let Value::Object(meta) = meta else {
        panic!("_meta must be an object")
    };
    RequestMetaObject::from(meta)
}

/// The JSON-RPC error a request was answered with: its code and `data`; panics on anything else.
pub fn rpc_error<T: std::fmt::Debug>(answer: Result<T, ServiceError>) -> (i32, Value) {
    match answer {
        Err(ServiceError::McpError(error)) => (error.code.0, error.data.unwrap_or(Value::Null)),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// A handle-mode server with `plugins` where two principals hold tokens (`alice`: `tok-alice`,
/// `bob`: `tok-bob`), and a client of each: for what one principal may reach of another's.
pub async fn alice_and_bob(
    plugins: &super::PluginDir,
) -> (super::TokenFile, super::Server, Client, Client) {
    let tokens = super::TokenFile::with("alice tok-alice\nbob tok-bob\n");
    let flags = ["--auth-token-file", tokens.arg(), "--state-handle-key"];
    let server = super::Server::http(plugins.path(), &flags);
    let alice = Client::http_as(&server.url, "tok-alice").await;
    let bob = Client::http_as(&server.url, "tok-bob").await;
    (tokens, server, alice, bob)
}

/// [`start`](super::start)`(plugins, flags)` and an rmcp client connected to the server over
/// Streamable HTTP: the set-up most tests start from.
pub async fn serve_and_connect(
    plugins: &[&str],
    flags: &[&str],
) -> (super::PluginDir, super::Server, Client) {
    let (plugins, server) = super::start(plugins, flags);
    let client = Client::http(&server.url).await;
    (plugins, server, client)
}
