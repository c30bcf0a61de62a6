//! A live session's answer-only requests, served on the HTTP task that read them.
//!
//! rmcp serves a session's request through its session machinery: the HTTP task hands the
//! message to the session's worker task, which hands it to the session's service loop, which
//! spawns a task for the handler; the answer travels back through the service loop's sink, the
//! worker and an SSE channel to hyper. Four task hand-offs and an SSE stream for every
//! `tools/call`, and that, not the gate or the plugin, was most of a call's cost
//! (BENCHMARKS.md's history, session 8).
//!
//! A request whose response can carry nothing but its result does not need any of it. So for a
//! request of a **live** session (its handshake done, not passivated) that is one of
//! [`ANSWER_ONLY`] and asks for no progress, this module does what rmcp's service loop would do
//! for it, on the spot: the same handler (the session's [`TurnstileServer`]), the same
//! `RequestContext` (the session's peer, the request's `_meta` and HTTP parts, a cancellation
//! token that `notifications/cancelled` reaches through [`SessionScope::cancel`]), and answers
//! with the JSON-RPC response as `application/json`, which every client accepting
//! `text/event-stream` must also accept.
//!
//! What the handler says about the request before its result (a plugin's log lines, through
//! [`RequestStream`]) goes on the request's own stream, as MCP asks (the GET stream is for
//! messages unrelated to a running request): the answer becomes an SSE stream from the first
//! such message, which is sent at once, and ends with the result, so a client has every line
//! before the call returns. So does the `list_changed` of the caller's own move: on the GET
//! stream it would come after the result, where a client that closes once its call returns
//! meets it while closing (the Python SDK 1.x logs an ERROR then). Every other session watching
//! the instance hears of the move on its GET stream.
//!
//! A request with a progress token goes to rmcp, whose worker routes the progress onto the
//! request's own stream. rmcp's own client sends a token with every request, so a client built
//! on rmcp is served by rmcp's machinery for its POSTs (its GET stream is still Turnstile's); the
//! Python and TypeScript SDKs send one only when asked to report progress.
//!
//! Everything else goes to rmcp as before, and so does anything this module is not sure of: a
//! request with an `Origin` (rmcp checks it), a protocol revision of the standard-headers era,
//! a body without `Content-Length` or over rmcp's limit, a body that does not parse (rmcp's
//! refusal, turned into JSON-RPC by `http/endpoint.rs`, is the one a client gets).
//!
//! It must not decide anything a handler decides: it only moves the request to the handler.
//!
//! **What it mirrors** (rmcp 3.11, `Cargo.lock` pins the patch): `StreamableHttpService::
//! handle_post` (rmcp's `transport/streamable_http_server/tower.rs`: the `Accept`, content type,
//! `Origin` and protocol-version checks, and the body limit, answered by [`may_serve`] the way
//! rmcp lets a request through), and `Service::handle_request` for `tools/call` (rmcp's
//! `handler/server.rs`: [`call_tool`]). It is the only code in Turnstile that tracks rmcp's
//! dispatch; `tests/sessions.rs` sends one corpus of requests through rmcp and through here and
//! fails where the answers differ. On an rmcp upgrade, read those two functions again.

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts},
    response::Response,
};
use futures_util::StreamExt;
use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler, Service,
    model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientRequest, GetExtensions,
        GetMeta, ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult,
    },
    service::RequestContext,
};

use super::{
    accept::accepts,
    event_stream,
    header_names::{PROTOCOL_VERSION, SESSION_ID},
    request_body,
};
use crate::mcp::{
    handler::server::TurnstileServer,
    session::{request_stream::RequestStream, sse},
};

/// The methods served here: each one's response is its result alone (no progress asked).
const ANSWER_ONLY: &[&str] = &[
    "ping",
    "tools/list",
    // A 2025 `tools/list`, renamed for the handler (`mcp/legacy_tasks.rs`).
    LEGACY_TOOLS_LIST,
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// `tools/list` under `LEGACY_TASKS_PREFIX` (a test checks they agree).
const LEGACY_TOOLS_LIST: &str = "dev.turnstile/2025-11-25/tools/list";

/// rmcp's limit on a request body (its `DEFAULT_MAX_REQUEST_BODY_BYTES`, not exported); a larger
/// body goes to rmcp, which refuses it.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// What serves one live session's requests here: its handler and its peer (set when its
/// handshake is done, dropped when it passivates or ends).
#[derive(Clone)]
pub struct Served {
    handler: TurnstileServer,
    peer: Peer<RoleServer>,
}

impl Served {
    pub fn new(handler: TurnstileServer, peer: Peer<RoleServer>) -> Self {
        Served { handler, peer }
    }
}

/// Whether a POST with these headers may be served here once its body is read: the checks rmcp
/// would make first that need no body, answered the way rmcp would let the request through.
/// `Some(length)`: the body's declared length.
pub fn may_serve(headers: &HeaderMap) -> Option<usize> {
    if !headers.contains_key(SESSION_ID) || headers.contains_key(header::ORIGIN) {
        return None;
    }
    if !accepts(headers, &["application/json", "text/event-stream"]) {
        return None;
    }
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return None;
    }
    if let Some(version) = headers.get(PROTOCOL_VERSION) {
        let version = version.to_str().ok()?;
        let known = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .any(|known| known.as_str() == version);
        // From this revision on rmcp checks `Mcp-Method` and `Mcp-Param-*` against the body.
        if !known || version >= ProtocolVersion::STANDARD_HEADERS.as_str() {
            return None;
        }
    }
    declared_length(headers)
}

/// The body's declared length, if it has one within rmcp's limit ([`MAX_BODY_BYTES`]).
pub fn declared_length(headers: &HeaderMap) -> Option<usize> {
    let length: usize = headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    (length <= MAX_BODY_BYTES).then_some(length)
}

/// Serves `body`, the whole request body of a POST of the session `served` serves, if it is an
/// answer-only request; otherwise gives the request's parts back, for rmcp to serve it.
#[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
pub fn serve(
    served: Served,
    parts: Parts,
    body: &Bytes,
) -> impl Future<Output = Result<Response, Parts>> + '_ {
    async move {
        let Some((id, mut request)) = request_body::parse(body) else {
            return Err(parts);
        };
        let meta = request.get_meta();
        let answer_only = ANSWER_ONLY.contains(&request.method())
            && meta.get_progress_token().is_none()
            && meta.protocol_version().is_none();
        if !answer_only {
            return Err(parts);
        }
        // A call whose handler asks the client for input (`asking.rs`) sends it requests related
        // to the call, which rmcp's machinery routes onto the call's own stream: such a call,
        // once it asks, is handed to rmcp to serve from the start (it fired nothing).
        let reroutable = match &request {
            ClientRequest::CallToolRequest(call) if served.handler.may_ask(&call.params.name) => {
                Some(parts.clone())
            }
            ClientRequest::GetPromptRequest(get)
                if served.handler.prompt_may_ask(&get.params.name) =>
            {
                Some(parts.clone())
            }
            _ => None,
        };
        // The handler reads who is calling from the request's parts, as it does under rmcp.
        request.extensions_mut().insert(parts);
        let Served { handler, peer } = served;
        let initialized = peer.peer_info().is_some();
        let mut context = RequestContext::new(id.clone(), peer);
        std::mem::swap(&mut context.meta, request.get_meta_mut());
        std::mem::swap(&mut context.extensions, request.extensions_mut());
        let said = RequestStream::new(reroutable.is_some());
        context.extensions.insert(said.clone());
        let scope = Arc::clone(handler.session());
        let cancelled = context.ct.clone();
        // Two futures, each boxed on its own: one future for both would be as large as rmcp's
        // dispatch, and be copied whole into its box for every call.
        let mut answering: Answering = match request {
            ClientRequest::CallToolRequest(call) if initialized => Box::pin(async move {
                let _cancellable = scope.cancellable(id.clone(), cancelled);
                message(call_tool(&handler, call.params, context).await, id)
            }),
            request => Box::pin(async move {
                let _cancellable = scope.cancellable(id.clone(), cancelled);
                message(handler.handle_request(request, context).await, id)
            }),
        };
        Ok(tokio::select! {
            biased;
            message = &mut answering => {
                if let Some(parts) = reroutable.filter(|_| said.rerouted()) {
                    return Err(parts);
                }
                let before = said.take();
                if before.is_empty() {
                    json_response(&message)
                } else {
                    event_stream::streaming(Body::from([&before[..], &sse::message(&message)].concat()))
                }
            }
            () = said.arrived() => {
                let events = the_rest(answering, said).map(Ok::<_, Infallible>);
                event_stream::streaming(Body::from_stream(events))
            }
        })
    }
}

/// A request being answered: the JSON-RPC message its answer will be.
type Answering = Pin<Box<dyn Future<Output = ServerJsonRpcMessage> + Send>>;

/// The JSON-RPC response of request `id` answered with `answer`.
fn message(answer: Result<ServerResult, ErrorData>, id: RequestId) -> ServerJsonRpcMessage {
    match answer {
        Ok(result) => ServerJsonRpcMessage::response(result, id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    }
}

/// A `tools/call` answered as rmcp's dispatch (`Service::handle_request`, in rmcp's
/// `handler/server.rs`) answers it for a session that negotiated with `initialize` and whose
/// request names no protocol version of its own (the only ones [`serve`] takes), without the
/// dispatch: its future has room for every method's handler, rmcp's own `subscriptions/listen`
/// the largest (16 KiB, copied into its box on every request), where this one has room for the
/// call's alone (BENCHMARKS.md's history, sessions 14 and 15).
///
/// What rmcp does around the handler for such a request, done here the same way: no check of
/// per-request metadata (a session that initialized keeps the session model); a task the
/// client did not declare it can take is refused; a handler's error is passed on as it is; an
/// `InputRequired` result is refused before protocol revision 2026-07-28; the result keeps the
/// shape older revisions know (no `resultType: "complete"`, no structured content that is not
/// an object) unless the revision is 2026-07-28 or later. A test in `tests/sessions.rs` checks
/// that the same calls get the same answers from rmcp and from here. The two errors built here
/// are rmcp's, worded as rmcp words them; Turnstile's own are built in `handler/reply.rs`.
#[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
fn call_tool(
    handler: &TurnstileServer,
    params: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> impl Future<Output = Result<ServerResult, ErrorData>> + '_ {
    async move {
        // ISO `YYYY-MM-DD` versions compare lexically the same as chronologically.
        let is_2026_07_28_or_later = context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let client_declared_tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        let response = handler.call_tool(params, context).await?;
        if matches!(response, CallToolResponse::Task(_)) && !client_declared_tasks {
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let mut result = ServerResult::from(response);
        if is_2026_07_28_or_later {
            result.fill_missing_cache_hints();
        } else if matches!(result, ServerResult::InputRequiredResult(_)) {
            return Err(ErrorData::invalid_request(
                "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                None,
            ));
        } else {
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
        }
        Ok(result)
    }
}

/// The request's stream once its handler has said something: what it says, as it says it, then
/// the result. The handler runs as the body is read, as it runs within the request without a
/// stream; a client that hangs up drops it with the body.
fn the_rest(
    answering: impl Future<Output = ServerJsonRpcMessage> + Unpin,
    said: RequestStream,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::unfold(Some((answering, said)), |running| async move {
        let (mut answering, said) = running?;
        loop {
            let now = said.take();
            if !now.is_empty() {
                return Some((Bytes::from(now), Some((answering, said))));
            }
            tokio::select! {
                biased;
                message = &mut answering => {
                    let last = [&said.take()[..], &sse::message(&message)].concat();
                    return Some((Bytes::from(last), None));
                }
                () = said.arrived() => {}
            }
        }
    })
}

/// Room for a typical answer (a tool result with its text block is most of a kilobyte), so
/// that writing it does not grow the buffer three times from `serde_json::to_vec`'s 128 bytes.
const ANSWER_BYTES: usize = 1024;

/// `message` as a 200 `application/json` response.
fn json_response(message: &ServerJsonRpcMessage) -> Response {
    let mut bytes = Vec::with_capacity(ANSWER_BYTES);
    match serde_json::to_writer(&mut bytes, message) {
        Ok(()) => {
            let mut response = Response::new(Body::from(bytes));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(error) => {
            // A result the handler built is always serializable; say so loudly if not.
            tracing::error!(%error, "cannot serialize a response");
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

#[cfg(test)]
pub(in crate::mcp) mod tests {
    use super::*;

    /// A header map of `(name, value)` pairs (also for `event_stream.rs`'s tests).
    pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    const GOOD: &[(&str, &str)] = &[
        ("mcp-session-id", "abc"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("content-length", "120"),
        ("mcp-protocol-version", "2025-11-25"),
    ];

    fn without(name: &str) -> Vec<(&'static str, &'static str)> {
        GOOD.iter().copied().filter(|(n, _)| *n != name).collect()
    }

    fn with(name: &'static str, value: &'static str) -> Vec<(&'static str, &'static str)> {
        let mut pairs = without(name);
        pairs.push((name, value));
        pairs
    }

    #[test]
    fn the_renamed_tools_list_is_served_here() {
        use crate::mcp::handler::legacy_tasks::LEGACY_TASKS_PREFIX;
        assert_eq!(
            LEGACY_TOOLS_LIST,
            format!("{LEGACY_TASKS_PREFIX}tools/list")
        );
    }

    #[test]
    fn a_plain_session_post_may_be_served_here() {
        assert_eq!(may_serve(&headers(GOOD)), Some(120));
        assert_eq!(
            may_serve(&headers(&without("mcp-protocol-version"))),
            Some(120)
        );
        assert_eq!(
            may_serve(&headers(&with(
                "content-type",
                "Application/JSON; charset=utf-8"
            ))),
            Some(120)
        );
    }

    fn message(json: serde_json::Value) -> ServerJsonRpcMessage {
        serde_json::from_value(json).expect("a server message")
    }

    fn line(step: u32) -> ServerJsonRpcMessage {
        message(
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": {"step": step}}}),
        )
    }

    /// What a request's stream carries, event by event: the `data` of each SSE event.
    fn events(chunk: &Bytes) -> Vec<serde_json::Value> {
        std::str::from_utf8(chunk)
            .unwrap()
            .split_terminator("\n\n")
            .map(|event| serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_request_stream_carries_each_line_as_it_is_said_then_the_result() {
        let said = RequestStream::default();
        let stream_of_request = said.clone();
        let (finish, finished) = tokio::sync::oneshot::channel::<()>();
        let answering = Box::pin({
            let stream_of_request = stream_of_request.clone();
            async move {
                finished.await.unwrap();
                // Said as the handler returns: still ahead of the result.
                stream_of_request.send(&line(3));
                message(serde_json::json!({"jsonrpc": "2.0", "id": 7, "result": {}}))
            }
        });
        let mut stream = Box::pin(the_rest(answering, said));
        stream_of_request.send(&line(1));
        let first = events(&stream.next().await.unwrap());
        assert_eq!(first[0]["params"]["data"]["step"], 1, "{first:?}");
        stream_of_request.send(&line(2));
        let second = events(&stream.next().await.unwrap());
        assert_eq!(second[0]["params"]["data"]["step"], 2, "{second:?}");
        finish.send(()).unwrap();
        let last = events(&stream.next().await.unwrap());
        assert_eq!(last.len(), 2, "{last:?}");
        assert_eq!(last[0]["params"]["data"]["step"], 3);
        assert_eq!(last[1]["id"], 7);
        assert!(
            stream.next().await.is_none(),
            "the stream ends with the result"
        );
    }

    #[test]
    fn what_rmcp_must_check_goes_to_rmcp() {
        for pairs in [
            without("mcp-session-id"),
            without("content-length"),
            without("accept"),
            with("accept", "application/json"),
            with("accept", "application/json, text/event-stream;q=0"),
            with("content-type", "text/plain"),
            with("mcp-protocol-version", "2026-07-28"),
            with("mcp-protocol-version", "1999-01-01"),
            with("content-length", "99999999"),
            with("origin", "http://localhost:3000"),
        ] {
            assert_eq!(may_serve(&headers(&pairs)), None, "{pairs:?}");
        }
    }
}
