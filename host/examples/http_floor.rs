//! The limit of HTTP on this machine: what the shared load generator
//! (`../shared/bench/lifecycle_load.mjs`) costs a server that does nothing but answer it.
//!
//! An axum server with `TCP_NODELAY` that speaks just enough Streamable HTTP for the load
//! generator's loop and lifecycle modes: `initialize` opens a session (a random id), a
//! notification is accepted with 202, a GET opens the session's event stream, `tools/call`
//! answers the state the invoice workflow would reach (by the tool's name alone: no state, no
//! gate, no plugin), DELETE ends the session. With `--notify` every call also sends
//! `notifications/tools/list_changed` on its session's stream, the floor of a gated transition;
//! without it, run the load generator with `--no-verify-notify`.
//!
//! BENCHMARKS.md reads every Turnstile figure as a multiple of this one:
//!
//! ```text
//! cargo run --release --example http_floor -- 127.0.0.1:8099 --notify &
//! node ../shared/bench/lifecycle_load.mjs http://127.0.0.1:8099/mcp --mode loop --sessions 64 \
//!     --duration 8 --server-pid $!
//! ```
//!
//! A benchmark fixture, not a server: it checks nothing a real server must.

use std::{convert::Infallible, sync::Arc};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::Response,
    routing::post,
    serve::ListenerExt,
};
use dashmap::DashMap;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Each open session's event stream.
type Streams = Arc<DashMap<String, mpsc::UnboundedSender<Bytes>>>;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let address = args.next().unwrap_or_else(|| "127.0.0.1:8099".into());
    let notify = args.any(|arg| arg == "--notify");
    let streams: Streams = Arc::default();
    let app = Router::new()
        .route(
            "/mcp",
            post(move |state, headers, body| answer(state, headers, body, notify))
                .get(open_stream)
                .delete(end),
        )
        .with_state(streams);
    let listener = tokio::net::TcpListener::bind(&address).await?;
    eprintln!("http_floor on http://{address}/mcp (notify: {notify})");
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await
}

fn session_of(headers: &HeaderMap) -> String {
    headers
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

async fn answer(
    State(streams): State<Streams>,
    headers: HeaderMap,
    body: Bytes,
    notify: bool,
) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Some(id) = message.get("id").cloned() else {
        return status(StatusCode::ACCEPTED);
    };
    let method = message["method"].as_str().unwrap_or_default();
    let result = match method {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "http_floor", "version": "0"},
        }),
        "tools/call" => {
            let tool = message["params"]["name"].as_str().unwrap_or_default();
            let state = match tool {
                "invoice.submit" => "review",
                "invoice.reject" => "draft",
                "invoice.approve" => "approved",
                "invoice.discharge" => "discharged",
                _ => "draft",
            };
            if notify && let Some(stream) = streams.get(&session_of(&headers)) {
                let _ = stream.send(Bytes::from_static(
                    b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
                ));
            }
            json!({
                "content": [{"type": "text", "text": format!("{tool}: {state}")}],
                "structuredContent": {"state": state},
            })
        }
        _ => json!({}),
    };
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
        .expect("a Value serializes");
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if method == "initialize" {
        let session = uuid::Uuid::new_v4().simple().to_string();
        response
            .headers_mut()
            .insert("mcp-session-id", session.parse().expect("hex is a header"));
    }
    response
}

async fn open_stream(State(streams): State<Streams>, headers: HeaderMap) -> Response {
    let (sender, receiver) = mpsc::unbounded_channel();
    streams.insert(session_of(&headers), sender);
    let events = tokio_stream_of(receiver).map(Ok::<_, Infallible>);
    let mut response = Response::new(Body::from_stream(events));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

async fn end(State(streams): State<Streams>, headers: HeaderMap) -> StatusCode {
    streams.remove(&session_of(&headers));
    StatusCode::NO_CONTENT
}

fn status(code: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = code;
    response
}

/// The receiver as a stream (without a dependency on tokio-stream).
fn tokio_stream_of(
    receiver: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|bytes| (bytes, receiver))
    })
}
