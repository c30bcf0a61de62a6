//! [`Link`]: one MCP session with the upstream (stdio: one process), as rmcp's client.
//!
//! It owns connecting (starting the process, or opening the HTTP session), the upstream's stderr
//! (each line to the server's log under the plugin's name), and what the upstream says on its own
//! during a call: its requests for input go to the call's [`Asking`], its progress and log
//! messages to the call's host services, and its `tools/list_changed` to whoever loaded it.
//! It does not decide anything about a call's outcome (`call.rs`) or how many links there are
//! (`sessions.rs`).
//!
//! This module and `mcp/` are the only places that name rmcp types: an upstream is an MCP client.

use std::{
    collections::HashMap,
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, ServiceExt,
    model::{
        ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
        ElicitResult, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    },
    service::{NotificationContext, RequestContext, RunningService},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use turnstile_plugin_abi::LogLevel;

use super::{
    asking::{Asking, Reply},
    file::{Transport, UpstreamFile},
};
use crate::plugin::{CallEvent, HostCall};

/// How long connecting (a process starting and answering `initialize`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A call in flight on a link: where the upstream's requests and messages for it go.
pub struct InFlight {
    pub asking: Asking,
    pub host: Option<Arc<HostCall>>,
}

/// What the loader is told of the upstream.
pub type ListChanged = Arc<dyn Fn() + Send + Sync>;

/// One open MCP session with the upstream.
pub struct Link {
    service: RunningService<RoleClient, Client>,
    calls: Arc<Calls>,
}

/// The calls in flight on one link, by number.
#[derive(Default)]
struct Calls(Mutex<HashMap<u64, Arc<InFlight>>>);

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<InFlight>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The one call in flight, if exactly one is: MCP does not say which call a request of the
    /// server's belongs to (over stdio nothing ties them), so one with several in flight is
    /// answered for none of them. A per-instance session has one call at a time (the instance's
    /// calls are serialized); a shared one, one per instance in flight.
    fn only(&self) -> Option<Arc<InFlight>> {
        let calls = self.lock();
        let mut calls = calls.values();
        match (calls.next(), calls.next()) {
            (Some(call), None) => Some(call.clone()),
            _ => None,
        }
    }
}

/// Removes a call from its link's table when dropped.
pub struct Registered {
    calls: Arc<Calls>,
    number: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.calls.lock().remove(&self.number);
    }
}

impl Link {
    /// Connects to the upstream `file` describes. `list_changed` is called when it says its
    /// tools changed.
    pub async fn connect(file: &UpstreamFile, list_changed: ListChanged) -> Result<Link, String> {
        Link::connect_to(&file.name, &file.transport, list_changed).await
    }

    /// Connects to the upstream `name` reached by `transport`.
    pub async fn connect_to(
        name: &str,
        transport: &Transport,
        list_changed: ListChanged,
    ) -> Result<Link, String> {
        let calls = Arc::new(Calls::default());
        let client = Client {
            name: name.to_owned(),
            calls: calls.clone(),
            list_changed,
        };
        let connecting = async {
            match transport {
                Transport::Stdio {
                    program,
                    args,
                    env,
                    dir,
                } => {
                    let mut command = tokio::process::Command::new(program);
                    command
                        .args(args)
                        .envs(env)
                        .current_dir(dir)
                        .kill_on_drop(true);
                    let (transport, stderr) = TokioChildProcess::builder(command)
                        .stderr(Stdio::piped())
                        .spawn()
                        .map_err(|err| format!("cannot start {}: {err}", program.display()))?;
                    if let Some(stderr) = stderr {
                        tokio::spawn(forward_stderr(name.to_owned(), stderr));
                    }
                    client
                        .serve(transport)
                        .await
                        .map_err(|err| format!("did not answer initialize: {err}"))
                }
                Transport::Http {
                    url,
                    token,
                    headers,
                } => {
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    if let Some(token) = token {
                        config = config.auth_header(token.clone());
                    }
                    let mut custom = HashMap::new();
                    for (name, value) in headers {
                        let name = reqwest::header::HeaderName::try_from(name.as_str())
                            .map_err(|err| format!("headers.{name}: {err}"))?;
                        let value = reqwest::header::HeaderValue::try_from(value.as_str())
                            .map_err(|err| format!("headers.{name}: {err}"))?;
                        custom.insert(name, value);
                    }
                    config = config.custom_headers(custom);
                    let transport =
                        StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
                    client
                        .serve(transport)
                        .await
                        .map_err(|err| format!("did not answer initialize at {url}: {err}"))
                }
            }
        };
        let service = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| format!("did not answer within {}s", CONNECT_TIMEOUT.as_secs()))??;
        Ok(Link { service, calls })
    }

    /// Whether the session is over (the process ended, the connection broke).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.is_transport_closed()
    }

    /// The upstream's version, as it names itself.
    pub fn version(&self) -> String {
        self.service
            .peer_info()
            .and_then(|info| serde_json::to_value(&*info).ok())
            .and_then(|info| info["serverInfo"]["version"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "0".into())
    }

    /// The upstream's tools, every page, as JSON (MCP's `Tool` objects).
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        as_json("tools/list", self.service.list_all_tools().await)
    }

    /// The upstream's prompts, resources and resource templates (MCP's objects, as JSON), each
    /// empty when the server does not declare that capability.
    pub async fn list_primitives(&self) -> Result<Primitives, String> {
        let capabilities = self
            .service
            .peer_info()
            .and_then(|info| serde_json::to_value(&*info).ok())
            .map(|info| info["capabilities"].clone())
            .unwrap_or_default();
        let mut primitives = Primitives::default();
        if capabilities.get("prompts").is_some() {
            primitives.prompts = as_json("prompts/list", self.service.list_all_prompts().await)?;
        }
        if capabilities.get("resources").is_some() {
            primitives.resources =
                as_json("resources/list", self.service.list_all_resources().await)?;
            primitives.templates = as_json(
                "resources/templates/list",
                self.service.list_all_resource_templates().await,
            )?;
        }
        Ok(primitives)
    }

    /// `prompts/get` with `params` (MCP's `GetPromptRequestParams` as JSON); the result as JSON.
    pub async fn get_prompt(&self, params: Value) -> Result<Value, CallFailed> {
        answer_of(self.service.get_prompt(params_of(params)?).await)
    }

    /// `resources/read` with `params` (MCP's `ReadResourceRequestParams` as JSON); the result as
    /// JSON.
    pub async fn read_resource(&self, params: Value) -> Result<Value, CallFailed> {
        answer_of(self.service.read_resource(params_of(params)?).await)
    }

    /// Registers a call, so that what the upstream says during it reaches it.
    pub fn register(&self, number: u64, call: Arc<InFlight>) -> Registered {
        self.calls.lock().insert(number, call);
        Registered {
            calls: self.calls.clone(),
            number,
        }
    }

    /// Sends `tools/call` with `params` (MCP's `CallToolRequestParams` as JSON) and returns the
    /// result as JSON. Dropping the future cancels the call upstream (`notifications/cancelled`).
    pub async fn call_tool(&self, params: Value) -> Result<Value, CallFailed> {
        answer_of(self.service.call_tool(params_of(params)?).await)
    }

    /// Ends the session (stdio: the process is told to stop, then killed).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// What an upstream lists beside its tools, as MCP's objects in JSON.
#[derive(Debug, Default)]
pub struct Primitives {
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
}

/// How a call failed to get its answer.
#[derive(Debug)]
pub enum CallFailed {
    /// It never left this process: the upstream did not receive it.
    NotSent(String),
    /// It was sent, and no usable answer came: it may have run upstream.
    NoAnswer(String),
}

/// A request's params, from JSON to rmcp's type: one that does not fit was never sent.
fn params_of<P: serde::de::DeserializeOwned>(params: Value) -> Result<P, CallFailed> {
    serde_json::from_value(params)
        .map_err(|err| CallFailed::NotSent(format!("cannot be sent: {err}")))
}

/// A request's answer, as JSON, or how it failed.
fn answer_of<R: serde::Serialize>(
    answer: Result<R, rmcp::ServiceError>,
) -> Result<Value, CallFailed> {
    match answer {
        Ok(result) => serde_json::to_value(result)
            .map_err(|err| CallFailed::NoAnswer(format!("its answer is unusable: {err}"))),
        Err(error) => Err(classify(&error)),
    }
}

/// A listing's items as JSON; `method` names the request in the error.
fn as_json<T: serde::Serialize>(
    method: &str,
    items: Result<Vec<T>, rmcp::ServiceError>,
) -> Result<Vec<Value>, String> {
    let items = items.map_err(|err| format!("{method} failed: {err}"))?;
    Ok(items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect())
}

/// Whether `error` means the request was never sent.
fn classify(error: &rmcp::ServiceError) -> CallFailed {
    use rmcp::ServiceError;
    match error {
        ServiceError::TransportSend(_) => CallFailed::NotSent(error.to_string()),
        ServiceError::McpError(data) => {
            CallFailed::NoAnswer(format!("the upstream answered an error: {}", data.message))
        }
        _ => CallFailed::NoAnswer(error.to_string()),
    }
}

/// Writes each line the upstream writes on stderr to the server's log, under its name.
async fn forward_stderr(name: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "turnstile::upstream", upstream = %name, "{line}");
    }
}

/// rmcp's client handler for one link.
struct Client {
    name: String,
    calls: Arc<Calls>,
    list_changed: ListChanged,
}

impl Client {
    /// The upstream asks `method`: answered for the one call in flight, through its asking.
    fn ask<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Option<T>, ErrorData> {
        let Some(call) = self.calls.only() else {
            tracing::info!(
                upstream = %self.name, %method,
                "the upstream asked with no single call in flight; answered no"
            );
            return Ok(None);
        };
        match call.asking.request(method, params) {
            Reply::Answer(answer) => serde_json::from_value(answer).map(Some).map_err(|err| {
                ErrorData::internal_error(format!("the client's answer is unusable: {err}"), None)
            }),
            Reply::Asked | Reply::Refused => Ok(None),
        }
    }
}

impl ClientHandler for Client {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or_default();
        let no =
            || serde_json::from_value(json!({"action": "decline"})).expect("an elicitation result");
        Ok(self.ask("elicitation/create", params)?.unwrap_or_else(no))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let params = serde_json::to_value(&params).unwrap_or_default();
        self.ask("sampling/createMessage", params)?.ok_or_else(|| {
            ErrorData::invalid_request("the client cannot sample for this call", None)
        })
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(self.ask("roots/list", json!({}))?.unwrap_or_default())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // rmcp gives every request a progress token of its own; like a request, a progress
        // notification is taken as the one call's in flight.
        if let Some(host) = self.calls.only().and_then(|call| call.host.clone()) {
            host.send(CallEvent::Progress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level)
            .ok()
            .and_then(|level| level_of(level.as_str()?))
            .unwrap_or(LogLevel::Info);
        match self.calls.only().and_then(|call| call.host.clone()) {
            Some(host) => {
                host.send(CallEvent::Log {
                    level,
                    logger: params.logger,
                    data: params.data,
                });
            }
            None => tracing::debug!(upstream = %self.name, data = %params.data, "upstream log"),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(upstream = %self.name, "the upstream's tools changed; listing them again");
        (self.list_changed)();
    }

    fn get_info(&self) -> ClientConfig {
        // 2025-11-25: the revision every SDK's server speaks, with `initialize`; what the host
        // can ask its own clients for is declared, so the upstream may ask for it.
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}, "sampling": {}, "roots": {}},
            "clientInfo": {"name": "turnstile", "version": env!("CARGO_PKG_VERSION")},
        }))
        .expect("a client configuration")
    }
}

/// The ABI's level of MCP's level name.
fn level_of(name: &str) -> Option<LogLevel> {
    Some(match name {
        "debug" => LogLevel::Debug,
        "info" => LogLevel::Info,
        "notice" => LogLevel::Notice,
        "warning" => LogLevel::Warning,
        "error" => LogLevel::Error,
        "critical" => LogLevel::Critical,
        "alert" => LogLevel::Alert,
        "emergency" => LogLevel::Emergency,
        _ => return None,
    })
}
