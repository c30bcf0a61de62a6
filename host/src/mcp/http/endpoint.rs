//! The `/mcp` endpoint: rmcp's service, with this module in front of it changing only the
//! answers rmcp gets wrong (and `direct.rs` and `event_stream.rs` serving what rmcp need not).
//!
//! rmcp answers what it refuses as plain text: 415 for a body that is not a JSON-RPC message (not
//! JSON, a batch, a bad `params`...), 406 / 415 / 413 for a wrong `Accept`, `Content-Type` or a
//! body over 4 MiB, 403 for a foreign `Host` or `Origin`, 404 for an unknown session. Clients
//! read JSON-RPC, so this layer rewrites every such answer into a JSON-RPC error body (same
//! status, except that an unreadable message becomes 400 with -32700 or -32600 as
//! `jsonrpc_errors.rs` decides). And rmcp answers `DELETE` with 202 whether the session existed
//! or not; here it is 204 for a live session and 404 for an unknown one.
//!
//! It must not parse or copy what rmcp serves: a POST body is passed through as it streams in,
//! and the layer keeps only reference-counted handles on its chunks (a `Bytes` clone, no copy),
//! which it reads only when rmcp has refused the body. On the success path the cost is two small
//! allocations (the chunk list, the boxed body stream), one uncontended lock per body chunk and
//! a look at the response status and `Content-Type`: well under a microsecond against a
//! `tools/list` round trip of ~1.2 ms (debug build). Measured with 2000 sequential `tools/list`
//! calls in one session (`timing_of_valid_requests` in `tests/protocol_errors.rs`), runs with
//! and without the layer overlap (1216–1454 µs vs 1199–1672 µs a call): no measurable cost.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, atomic::AtomicUsize},
    task::{Context, Poll},
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, response::Parts},
    response::Response,
};
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::{
    StreamableHttpService,
    session::{SessionId, local::LocalSessionManager},
};
use serde_json::Value;

use super::{
    caller,
    caps::{BUSY_RETRY_AFTER_S, Place, busy, over_quota},
    direct::{self, Served},
    event_stream,
    handshake::{Handshakes, is_initialized_notification, is_method},
    header_names::{PROTOCOL_VERSION, SESSION_ID},
    held::{self, HeldStreams},
    idle,
    session_owners::SessionOwners,
    session_records::{SessionRecords, Visit},
};
use crate::mcp::{
    auth::principal::Principal,
    handler::server::TurnstileServer,
    jsonrpc_errors::{self, INTERNAL_ERROR, INVALID_REQUEST, Rejection},
    legacy_tasks,
    quotas::{self, Quotas},
};

/// rmcp's answer when the body it read is not a JSON-RPC message it accepts (its 415).
const UNREADABLE_BODY_PREFIX: &str = "fail to deserialize";

/// The longest rmcp plain-text error body read back to become a JSON-RPC message (they are one
/// line; this only bounds the read).
const MAX_REJECTION_TEXT: usize = 64 * 1024;

/// What the layer needs besides the request: rmcp's service, the sessions held, to tell a live
/// session from an unknown one on `DELETE`, to hold their number under `max_sessions`, and to
/// count each session's requests (an idle one is passivated).
pub struct McpLayer {
    /// rmcp's service, for everything not served here.
    pub rmcp: StreamableHttpService<TurnstileServer, LocalSessionManager>,
    pub sessions: Arc<SessionRecords>,
    /// `--max-sessions`: a request that would open a session past it gets 503.
    pub max_sessions: Option<usize>,
    /// `--stateless`: no request opens a session.
    pub stateless: bool,
    /// Sessions that have not finished their handshake, ended after `--handshake-timeout`.
    pub handshakes: Arc<Handshakes>,
    /// With authentication on: who opened each session (only they may use it).
    pub owners: Option<Arc<SessionOwners>>,
    /// How often an event stream served here says it is alive.
    pub sse_keep_alive: std::time::Duration,
    /// Cancelled when a shutdown closes the event streams.
    pub closing_streams: tokio_util::sync::CancellationToken,
    /// Sessions admitted under `--max-sessions` whose `initialize` is still being answered:
    /// counted with the sessions held, so that concurrent `initialize`s cannot all pass the
    /// check before any of them is held.
    pub opening: Arc<AtomicUsize>,
    /// The responses held open (event streams and listens), under `--stream-share` of
    /// `--max-connections` and each holder's `--max-streams-per-principal`.
    pub held: Arc<HeldStreams>,
    /// What one principal (or client address) may hold: sessions.
    pub quotas: Arc<Quotas>,
}

impl McpLayer {
    /// `request` served by rmcp.
    async fn through_rmcp(&self, request: Request) -> Response {
        self.rmcp.handle(request).await.map(Body::new)
    }
}

/// The `/mcp` route's service (`Router::route_service`). A service of its own rather than a
/// middleware (`axum::middleware::from_fn`) around rmcp's: a middleware clones and boxes the
/// service it wraps on every request, and this endpoint needs rmcp's only for some requests.
/// axum clones a route's service for every request too: a clone of this one is one reference
/// count.
#[derive(Clone)]
pub struct McpEndpoint(Arc<McpLayer>);

impl McpEndpoint {
    pub fn new(layer: McpLayer) -> McpEndpoint {
        McpEndpoint(Arc::new(layer))
    }
}

impl tower::Service<Request> for McpEndpoint {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let layer = self.0.clone();
        Box::pin(async move { Ok(by_the_book(&layer, request).await) })
    }
}

/// One request to `/mcp`.
#[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
fn by_the_book(layer: &McpLayer, request: Request) -> impl Future<Output = Response> + '_ {
    async move {
        if let Some(owners) = &layer.owners
            && let Some(session) = session_of(request.headers())
            && owners.is_foreign(session, request.extensions().get::<Principal>())
        {
            return unknown_session();
        }
        // A session's request is its activity until the response is sent in full (an event stream
        // until it closes): a session with none in flight for a while is passivated.
        let mut visit = match session_of(request.headers()) {
            Some(session) => layer.sessions.visit(session).await,
            None => None,
        };
        let response = match *request.method() {
            Method::POST => match admit(layer, request).await {
                Err(refusal) => refusal,
                Ok((request, _opening, _its_place)) => {
                    let served = visit.as_mut().and_then(Visit::take_served);
                    post(layer, request, served).await
                }
            },
            // The others boxed: this future is copied whole into its box for every request, and
            // most are POSTs (BENCHMARKS.md's history, session 16).
            Method::DELETE => Box::pin(delete(layer, request)).await,
            Method::GET => {
                let response = Box::pin(get(layer, request)).await;
                if response
                    .extensions()
                    .get::<event_stream::Watching>()
                    .is_some()
                    && let Some(visit) = visit.as_mut()
                {
                    visit.watching();
                }
                response
            }
            _ => {
                Box::pin(async { as_json_rpc(layer.through_rmcp(request).await, &[]).await }).await
            }
        };
        match visit {
            Some(visit) => idle::hold_until_sent(response, visit),
            None => response,
        }
    }
}

/// The `Mcp-Session-Id` a request names.
pub(in crate::mcp) fn session_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(SESSION_ID)
        .and_then(|value| value.to_str().ok())
}

/// The answer for a request naming a session that does not exist (or that the caller may not
/// know exists: `session_owners.rs`).
fn unknown_session() -> Response {
    Rejection::invalid_request(
        Value::Null,
        "Not Found: no session has this Mcp-Session-Id (it ended, or never existed)",
    )
    .into_response(StatusCode::NOT_FOUND)
}

/// Serves a GET: a live session's event stream right here (`event_stream.rs`), any other
/// through rmcp, which then gets the session's messages. Either is held open: it takes its
/// places among the held streams first (`held.rs`), given back when it closes.
async fn get(layer: &McpLayer, request: Request) -> Response {
    layer
        .held
        .serve(request, |request| get_stream(layer, request))
        .await
}

/// Serves a GET: the session's event stream, here or through rmcp.
async fn get_stream(layer: &McpLayer, request: Request) -> Response {
    if let Some((outbox, live)) =
        session_of(request.headers()).and_then(|id| layer.sessions.outbox(id))
    {
        // A passivated session may be watching: its open stream was served here, and a second
        // one gets keep-alives here too (rmcp would restore the session and take the route).
        if (live || outbox.has_open_stream()) && event_stream::may_serve(request.headers()) {
            return event_stream::serve(
                &outbox,
                layer.sse_keep_alive,
                layer.closing_streams.child_token(),
            );
        }
        outbox.route_through_peer();
    }
    as_json_rpc(layer.through_rmcp(request).await, &[]).await
}

/// Serves a POST: a live session's answer-only request right here (`direct.rs`, with `served`,
/// the session's), anything else through rmcp. A body of a declared length within rmcp's limit
/// is read here whoever serves it, so that a 2025-11-25 task request reaches the handler renamed
/// (`legacy_tasks.rs`); any other body streams to rmcp as sent.
#[allow(clippy::manual_async_fn)] // An `async fn` keeps each argument twice: `Runtime::call`.
fn post(
    layer: &McpLayer,
    request: Request,
    served: Option<Served>,
) -> impl Future<Output = Response> + '_ {
    async move {
        if direct::declared_length(request.headers()).is_none() {
            // Boxed, as below: room for rmcp's path is not carried by every call served here.
            return Box::pin(post_to_rmcp(layer, request)).await;
        }
        let served = served.filter(|_| direct::may_serve(request.headers()).is_some());
        let (mut parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, direct::MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(error) => {
                // The declared length was within the limit: the client sent more, or went away.
                tracing::debug!(%error, "cannot read a request body");
                return Rejection::invalid_request(Value::Null, format!("Bad Request: {error}"))
                    .into_response(StatusCode::BAD_REQUEST);
            }
        };
        let body = match legacy_tasks::renamed(&body, crate::catalog::served_task_tools()) {
            Some(renamed) => {
                parts
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(renamed.len()));
                Bytes::from(renamed)
            }
            None => body,
        };
        let Some(served) = served else {
            let request = Request::from_parts(parts, Body::from(body));
            return Box::pin(post_to_rmcp(layer, request)).await;
        };
        match direct::serve(served, parts, &body).await {
            Ok(response) => response,
            Err(parts) => {
                let request = Request::from_parts(parts, Body::from(body));
                Box::pin(post_to_rmcp(layer, request)).await
            }
        }
    }
}

/// Serves a POST through rmcp; a `subscriptions/listen`, whose answer is held open as long as
/// its client listens, first takes its places among the held streams (`held.rs`), as a GET does.
async fn post_to_rmcp(layer: &McpLayer, request: Request) -> Response {
    if !held::is_listen(request.headers()) {
        return post_through_rmcp(layer, request).await;
    }
    layer
        .held
        .serve(request, |request| post_through_rmcp(layer, request))
        .await
}

/// Serves a POST through rmcp, keeping handles on the body's chunks in case rmcp refuses it (or,
/// on a session still in its handshake, to see whether it is the `notifications/initialized`
/// that ends it).
async fn post_through_rmcp(layer: &McpLayer, request: Request) -> Response {
    let session = session_of(request.headers()).map(str::to_owned);
    let principal = request.extensions().get::<Principal>().cloned();
    let holder = caller::of_request(&request).quota_holder();
    let (parts, body) = request.into_parts();
    let chunks: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let recorder = chunks.clone();
    let body = Body::from_stream(body.into_data_stream().inspect(move |chunk| {
        if let Ok(chunk) = chunk {
            // A std Mutex: nothing awaits while it is held, and only this body and, after rmcp
            // has answered, the code below ever take it.
            recorder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(chunk.clone());
        }
    }));
    let response = layer.through_rmcp(Request::from_parts(parts, body)).await;
    if !is_plain_rejection(&response) {
        follow_handshake(&layer.handshakes, session.as_deref(), &response, &chunks);
        // A response that opened a session: the `initialize` answer.
        let Some(opened) = session_of(response.headers()).filter(|_| session.is_none()) else {
            return response;
        };
        if let Some(holder) = holder {
            layer
                .quotas
                .opened(opened, holder, |id| layer.sessions.exists(id));
        }
        if let (Some(owners), Some(principal)) = (&layer.owners, principal) {
            owners.opened(opened, principal, &layer.sessions);
        }
        return legacy_tasks::with_tasks_capability(response).await;
    }
    let chunks = std::mem::take(&mut *chunks.lock().unwrap_or_else(PoisonError::into_inner));
    as_json_rpc(response, &chunks.concat()).await
}

/// Tells `handshakes` about a session that `response` opened (an `initialize` answered with a
/// new `Mcp-Session-Id`) or one whose handshake the request finished. The body is looked at only
/// for a session still in its handshake, answered 202 (how rmcp accepts a notification).
fn follow_handshake(
    handshakes: &Arc<Handshakes>,
    session: Option<&str>,
    response: &Response,
    chunks: &Mutex<Vec<Bytes>>,
) {
    match session {
        None => {
            if let Some(opened) = response
                .headers()
                .get(SESSION_ID)
                .and_then(|value| value.to_str().ok())
            {
                handshakes.begun(SessionId::from(opened));
            }
        }
        Some(id) if response.status() == StatusCode::ACCEPTED && handshakes.is_pending(id) => {
            let body = chunks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .concat();
            if is_initialized_notification(&body) {
                handshakes.finished(id);
            }
        }
        Some(_) => {}
    }
}

/// Admits a POST under `--max-sessions`: one that would open a session (an `initialize`
/// without `Mcp-Session-Id`, whatever protocol header came with it) takes a place among the
/// sessions held, or gets 503 when they are all taken. The place is taken in one atomic step
/// with the check, and kept (a [`Place`]) until the request is answered, by which time the new
/// session is held. Requests of live sessions, `--stateless` servers and other sessionless
/// requests (2026-07-28) pass without a count; a 2026-07-28 request is read first to see
/// whether it is an `initialize` (only when a cap is set).
async fn admit(
    layer: &McpLayer,
    request: Request,
) -> Result<(Request, Option<Place>, Option<quotas::Place>), Response> {
    if layer.max_sessions.is_none() && !layer.quotas.counts_sessions() {
        return Ok((request, None, None));
    }
    if layer.stateless || request.headers().contains_key(SESSION_ID) {
        return Ok((request, None, None));
    }
    let says_2026 = request
        .headers()
        .get(PROTOCOL_VERSION)
        .is_some_and(|version| version == "2026-07-28");
    let request = if says_2026 {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, direct::MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(error) => {
                tracing::debug!(%error, "cannot read a request body");
                return Err(Rejection::invalid_request(
                    Value::Null,
                    format!("Bad Request: {error}"),
                )
                .into_response(StatusCode::BAD_REQUEST));
            }
        };
        let opens_session = is_method(&body, "initialize");
        let request = Request::from_parts(parts, Body::from(body));
        if !opens_session {
            return Ok((request, None, None));
        }
        request
    } else {
        request
    };
    // The client's own share first, then the server's: a client over its quota takes no place
    // among the sessions.
    let its_place = match caller::of_request(&request).quota_holder().map(|holder| {
        layer
            .quotas
            .admit_session(&holder, |id| layer.sessions.exists(id))
    }) {
        Some(Err(refusal)) => return Err(over_quota(&refusal)),
        Some(Ok(place)) => place,
        None => None,
    };
    let Some(max) = layer.max_sessions else {
        return Ok((request, None, its_place));
    };
    let fits = |opening| layer.sessions.count() + opening < max;
    if let Some(place) = Place::take(&layer.opening, fits) {
        return Ok((request, Some(place), its_place));
    }
    tracing::info!(
        max_sessions = max,
        "session limit reached; refusing a new session"
    );
    Err(busy(format!(
        "Service Unavailable: this server holds its maximum of {max} sessions; retry in \
         {BUSY_RETRY_AFTER_S} s, or end a session you no longer use (DELETE)"
    )))
}

/// Serves a DELETE: 204 when it ended a live session, 404 when there was none to end.
async fn delete(layer: &McpLayer, request: Request) -> Response {
    // Checked before rmcp runs, so that rmcp still validates the request (Host, Origin, protocol
    // version) first; two DELETEs racing for one session may both see it alive, and both get 204.
    let session = session_of(request.headers()).map(str::to_owned);
    let unknown = session
        .as_deref()
        .is_some_and(|id| !layer.sessions.exists(id));
    let response = layer.through_rmcp(request).await;
    if response.status() != StatusCode::ACCEPTED {
        return as_json_rpc(response, &[]).await;
    }
    if unknown {
        return unknown_session();
    }
    if let (Some(owners), Some(session)) = (&layer.owners, &session) {
        owners.ended(session);
    }
    let (mut parts, _) = response.into_parts();
    parts.status = StatusCode::NO_CONTENT;
    Response::from_parts(parts, Body::empty())
}

/// An error rmcp answered in plain text (its JSON-RPC errors and streams pass untouched).
fn is_plain_rejection(response: &Response) -> bool {
    let status = response.status();
    (status.is_client_error() || status.is_server_error())
        && !response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| {
                value
                    .trim_start()
                    .get(..16)
                    .is_some_and(|essence| essence.eq_ignore_ascii_case("application/json"))
            })
}

/// `response` as a JSON-RPC error when it is one of rmcp's plain-text rejections; `request_body`
/// is what rmcp read of the request, for the `id` and for classifying an unreadable message.
async fn as_json_rpc(response: Response, request_body: &[u8]) -> Response {
    if !is_plain_rejection(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let text = text.trim();
    let rejection = if parts.status == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && text.starts_with(UNREADABLE_BODY_PREFIX)
    {
        // JSON-RPC over HTTP: a message that cannot be read is a bad request, not a media type.
        parts.status = StatusCode::BAD_REQUEST;
        jsonrpc_errors::classify(request_body)
    } else {
        Rejection {
            code: if parts.status.is_server_error() {
                INTERNAL_ERROR
            } else {
                INVALID_REQUEST
            },
            message: if text.is_empty() {
                parts
                    .status
                    .canonical_reason()
                    .unwrap_or("rejected")
                    .to_string()
            } else {
                text.to_string()
            },
            id: id_in(request_body),
        }
    };
    json_response(parts, &rejection)
}

/// The `id` of a request body rmcp read, when there is one to read.
fn id_in(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut message)) => match message.remove("id") {
            Some(id @ (Value::String(_) | Value::Number(_))) => id,
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// `parts` (status and headers, such as `Allow` on a 405) with `rejection` as its JSON body.
fn json_response(mut parts: Parts, rejection: &Rejection) -> Response {
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(rejection.to_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: StatusCode, content_type: Option<&str>, body: &str) -> Response {
        let mut builder = Response::builder().status(status);
        if let Some(content_type) = content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        builder.body(Body::from(body.to_string())).unwrap()
    }

    async fn json_of(response: Response) -> Value {
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn only_plain_text_errors_are_rejections() {
        assert!(is_plain_rejection(&response(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "Not Acceptable"
        )));
        assert!(is_plain_rejection(&response(
            StatusCode::BAD_REQUEST,
            Some("text/plain; charset=utf-8"),
            "no"
        )));
        assert!(!is_plain_rejection(&response(
            StatusCode::NOT_FOUND,
            Some("application/json"),
            "{}"
        )));
        assert!(!is_plain_rejection(&response(
            StatusCode::OK,
            Some("text/event-stream"),
            ""
        )));
    }

    #[tokio::test]
    async fn an_unreadable_body_becomes_a_400_with_the_code_that_fits() {
        let refused = response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            "fail to deserialize request body unrecognized JSON-RPC message",
        );
        let answer = as_json_rpc(
            refused,
            br#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":1}"#,
        )
        .await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        assert_eq!(answer.headers()[header::CONTENT_TYPE], "application/json");
        let body = json_of(answer).await;
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["id"], 9);
    }

    #[tokio::test]
    async fn other_refusals_keep_their_status_and_headers() {
        let mut refused = response(StatusCode::METHOD_NOT_ALLOWED, None, "Method Not Allowed");
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        let answer = as_json_rpc(refused, &[]).await;
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(answer.headers()[header::ALLOW], "POST");
        let body = json_of(answer).await;
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["error"]["message"], "Method Not Allowed");
        assert_eq!(body["id"], Value::Null);
    }
}
