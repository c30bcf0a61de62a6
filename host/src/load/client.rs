//! One MCP client over Streamable HTTP, written here rather than taken from rmcp's client so
//! that the load tester sees every message as the server sent it: the raw `tools/call` result
//! (`isError`, `structuredContent.error.code`), and every `list_changed`, whether it came on the
//! session's GET stream or on a POST's own SSE response.
//!
//! Owns the wire: headers, the handshake of each protocol revision, SSE framing, the session's
//! event stream (and, with `--stdio`, a server process per session: `stdio.rs`). It decides
//! nothing about the contract (see `contract.rs`) and keeps no statistics beyond the
//! notifications it counted (`wire.rs`, shared with `stdio.rs`).

use std::{sync::Arc, time::Duration};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{
    sse::SseParser,
    stdio::StdioLink,
    wire::{ClientError, Notices, Tally, is_list_changed, is_list_changed_event},
};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// The protocol revision a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Protocol {
    #[value(name = "2025-06-18")]
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    #[value(name = "2025-11-25")]
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    #[value(name = "2026-07-28")]
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V2025_06_18 => "2025-06-18",
            Protocol::V2025_11_25 => "2025-11-25",
            Protocol::V2026_07_28 => "2026-07-28",
        }
    }

    /// 2025 revisions open a session with `initialize`; 2026-07-28 has none, and every request
    /// carries its client's identity in `_meta`.
    pub fn has_sessions(self) -> bool {
        self != Protocol::V2026_07_28
    }
}

/// Where the clients connect, and how: one keep-alive connection pool shared by every session,
/// or, over stdio, the command that starts one server process per session.
pub struct Endpoint {
    http: reqwest::Client,
    url: String,
    stdio: Option<Vec<String>>,
    protocol: Protocol,
    timeout: Duration,
    /// What its sessions heard, together.
    heard: Arc<Tally>,
}

impl Endpoint {
    pub fn new(url: &str, protocol: Protocol, timeout: Duration) -> Result<Endpoint, ClientError> {
        let http = reqwest::Client::builder()
            // Every call is a small request and a small answer: Nagle would add ~40 ms to each.
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|error| ClientError::Connect(error.to_string()))?;
        Ok(Endpoint {
            http,
            url: url.to_string(),
            stdio: None,
            protocol,
            timeout,
            heard: Arc::default(),
        })
    }

    /// Over stdio: every session starts `command` and talks to it on its stdin and stdout.
    pub fn stdio(
        command: Vec<String>,
        protocol: Protocol,
        timeout: Duration,
    ) -> Result<Endpoint, ClientError> {
        let mut endpoint =
            Endpoint::new(&format!("stdio: {}", command.join(" ")), protocol, timeout)?;
        endpoint.stdio = Some(command);
        Ok(endpoint)
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The `list_changed` its sessions heard, together.
    pub fn heard(&self) -> &Arc<Tally> {
        &self.heard
    }
}

/// One client's conversation with the server: an MCP session on 2025 revisions (its id and its
/// GET event stream), a run of independent requests on 2026-07-28.
pub struct Session {
    endpoint: Arc<Endpoint>,
    /// The server process of this session, over stdio.
    stdio: Option<StdioLink>,
    id: Option<HeaderValue>,
    next_request: u64,
    notices: Arc<Notices>,
    stream: Option<JoinHandle<()>>,
}

impl Session {
    /// Opens a session: `initialize`, `notifications/initialized` and the GET event stream on
    /// 2025 revisions (returning only once the stream is open, so that no notification can
    /// precede it); nothing to do on 2026-07-28.
    pub async fn open(endpoint: Arc<Endpoint>) -> Result<Session, ClientError> {
        let notices = Arc::new(Notices::counted_in(endpoint.heard.clone()));
        let stdio = match &endpoint.stdio {
            Some(command) => Some(StdioLink::spawn(command, notices.clone())?),
            None => None,
        };
        let mut session = Session {
            endpoint,
            stdio,
            id: None,
            next_request: 0,
            notices,
            stream: None,
        };
        if !session.endpoint.protocol.has_sessions() {
            return Ok(session);
        }
        let params = json!({
            "protocolVersion": session.endpoint.protocol.as_str(),
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let (answer, headers) = session.exchange("initialize", None, params).await?;
        if let Some(error) = answer.get("error") {
            return Err(ClientError::BadAnswer(format!(
                "initialize refused: {error}"
            )));
        }
        session.id = headers.get(SESSION_HEADER).cloned();
        session
            .notify("notifications/initialized", json!({}))
            .await?;
        if session.id.is_some() {
            session.stream = session.open_event_stream().await?;
        }
        Ok(session)
    }

    /// The notifications this session has heard.
    pub fn notices(&self) -> &Arc<Notices> {
        &self.notices
    }

    /// The session id the server gave, if any (for violation samples).
    pub fn id(&self) -> Option<&str> {
        self.id.as_ref().and_then(|id| id.to_str().ok())
    }

    /// Sends a request and returns the JSON-RPC response (with `result` or `error`).
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let (answer, _) = self.exchange(method, name.as_deref(), params).await?;
        Ok(answer)
    }

    /// Ends the session (`DELETE`), then its event stream: the server closes the stream as part
    /// of ending the session, where a client hanging up first can look like a failure to it.
    pub async fn close(mut self) {
        if let Some(link) = self.stdio.take() {
            link.close().await;
            return;
        }
        if let Some(id) = self.id.take() {
            // Best effort: a server that already forgot the session answers 404, which is fine.
            let _ = self
                .endpoint
                .http
                .delete(&self.endpoint.url)
                .header(SESSION_HEADER, id)
                .header(PROTOCOL_HEADER, self.endpoint.protocol.as_str())
                .timeout(self.endpoint.timeout)
                .send()
                .await;
        }
        if let Some(stream) = self.stream.take() {
            stream.abort();
        }
    }

    fn headers(&self, method: &str, name: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(6);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(
            PROTOCOL_HEADER,
            HeaderValue::from_static(self.endpoint.protocol.as_str()),
        );
        if let Some(id) = &self.id {
            headers.insert(SESSION_HEADER, id.clone());
        }
        if !self.endpoint.protocol.has_sessions() {
            // 2026-07-28 routes on these without reading the body.
            if let Ok(method) = HeaderValue::from_str(method) {
                headers.insert("mcp-method", method);
            }
            if let Some(Ok(name)) = name.map(HeaderValue::from_str) {
                headers.insert("mcp-name", name);
            }
        }
        headers
    }

    /// POSTs one request; returns its response and the HTTP headers. Notifications that arrive
    /// on the response's own stream are counted on the way.
    async fn exchange(
        &mut self,
        method: &str,
        name: Option<&str>,
        mut params: Value,
    ) -> Result<(Value, HeaderMap), ClientError> {
        self.next_request += 1;
        let id = self.next_request;
        if !self.endpoint.protocol.has_sessions() {
            add_sessionless_meta(&mut params, self.endpoint.protocol);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Some(link) = &mut self.stdio {
            let answer = link.request(id, &body, self.endpoint.timeout).await?;
            return Ok((answer, HeaderMap::new()));
        }
        let response = self.post(method, name, &body).await?;
        let headers = response.headers().clone();
        let is_sse = is_event_stream(&headers);
        let timeout = self.endpoint.timeout;
        let bytes = response
            .bytes()
            .await
            .map_err(|error| ClientError::from_reqwest(error, timeout))?;
        let answer = if is_sse {
            let mut answer = None;
            let mut parser = SseParser::default();
            let mut on_event = |data: &[u8]| match serde_json::from_slice::<Value>(data) {
                Ok(message) if is_list_changed(&message) => self.notices.record(),
                Ok(message) if message.get("id").and_then(Value::as_u64) == Some(id) => {
                    answer = Some(message)
                }
                _ => {}
            };
            parser.feed(&bytes, &mut on_event);
            parser.finish(&mut on_event);
            answer.ok_or_else(|| {
                ClientError::BadAnswer(format!("the event stream for {method} had no response"))
            })?
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|error| ClientError::BadAnswer(format!("{method}: {error}")))?
        };
        Ok((answer, headers))
    }

    async fn notify(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Some(link) = &mut self.stdio {
            return link.send(&body).await;
        }
        self.post(method, None, &body).await.map(drop)
    }

    async fn post(
        &self,
        method: &str,
        name: Option<&str>,
        body: &Value,
    ) -> Result<reqwest::Response, ClientError> {
        let timeout = self.endpoint.timeout;
        let body = serde_json::to_vec(body).expect("a JSON value always serializes");
        let response = self
            .endpoint
            .http
            .post(&self.endpoint.url)
            .headers(self.headers(method, name))
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|error| ClientError::from_reqwest(error, timeout))?;
        match response.status().as_u16() {
            200..=299 => Ok(response),
            404 if self.id.is_some() => Err(ClientError::SessionGone),
            status => Err(ClientError::Status(status)),
        }
    }

    /// Opens the session's GET stream and counts what it brings, in a task of its own. `None`
    /// when the server offers no such stream (405): notifications then come only on POSTs.
    async fn open_event_stream(&self) -> Result<Option<JoinHandle<()>>, ClientError> {
        let mut headers = self.headers("", None);
        headers.remove(CONTENT_TYPE);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        // No per-request timeout here: reqwest's covers the body, and this body never ends.
        // The wait for the headers is bounded below instead.
        let request = self.endpoint.http.get(&self.endpoint.url).headers(headers);
        let notices = self.notices.clone();
        let (status_tx, status_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut response = match request.send().await {
                Ok(response) => response,
                Err(error) => {
                    let _ = status_tx.send(Err(error.to_string()));
                    return;
                }
            };
            let success = response.status().is_success();
            let _ = status_tx.send(Ok(response.status().as_u16()));
            if !success {
                return;
            }
            let mut parser = SseParser::default();
            while let Ok(Some(chunk)) = response.chunk().await {
                parser.feed(&chunk, |data| {
                    if is_list_changed_event(data) {
                        notices.record();
                    }
                });
            }
        });
        match tokio::time::timeout(self.endpoint.timeout, status_rx).await {
            Ok(Ok(Ok(200..=299))) => Ok(Some(task)),
            Ok(Ok(Ok(405))) => Ok(None),
            Ok(Ok(Ok(status))) => Err(ClientError::Status(status)),
            Ok(Ok(Err(error))) => Err(ClientError::Connect(error)),
            Ok(Err(_)) => Err(ClientError::BadAnswer("the event stream task ended".into())),
            Err(_) => {
                task.abort();
                Err(ClientError::Timeout(self.endpoint.timeout))
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            stream.abort();
        }
    }
}

fn client_info() -> Value {
    json!({"name": "turnstile-load", "version": env!("CARGO_PKG_VERSION")})
}

/// The protocol extension (Turnstile's, SEP-2133 naming) under which a 2026-07-28 server's
/// lists follow the instances a request names. The load tester judges gating by the menus it
/// is shown, so it declares it; a server that does not know it ignores it (and its stable lists
/// then read as menus that never change).
const GATED_LISTS_EXTENSION: &str = "dev.turnstile/gated-lists";

/// 2026-07-28 requests carry what `initialize` used to say, in every request's `_meta`.
fn add_sessionless_meta(params: &mut Value, protocol: Protocol) {
    if !params.is_object() {
        *params = json!({});
    }
    let meta = params
        .as_object_mut()
        .expect("made an object above")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            protocol.as_str().into(),
        );
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            json!({"extensions": {GATED_LISTS_EXTENSION: {}}}),
        );
        meta.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}
