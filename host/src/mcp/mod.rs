//! The MCP side: rmcp's `ServerHandler` for Turnstile, and the two transports.
//!
//! - `server.rs`: [`TurnstileServer`], one per session; turns `tools/list` and `tools/call` into
//!   questions for the gate and the actors.
//! - `primitives.rs`: prompts and resources, gated like the tools (same instances, same gate).
//! - `call_events.rs`: what a plugin logs or reports during a call, sent ahead of its result.
//! - `reply.rs`: every result and error a client can see is built there, in one place.
//! - `direct.rs`: a live session's answer-only requests (`tools/call`, `tools/list`, ...) served
//!   on the HTTP task, past rmcp's per-session worker and service loop.
//! - `outbox.rs`: where a session's unprompted messages go (`list_changed`, log messages);
//!   `event_stream.rs`: a live session's GET stream, served here and fed by its outbox.
//! - `session.rs`: a session's identity, its listener for `list_changed`, and its end.
//! - `target.rs`: which instance a request is about (session, or handle).
//! - `stdio.rs`, `http.rs`: serving over stdin/stdout, and Streamable HTTP on axum.
//! - `connections.rs`: the accept loop (connection cap, back-pressure); `idle.rs`: when a
//!   connection is idle and for how long it may stay so (header and keep-alive timeouts).
//! - `handshake.rs`: sessions that sent `initialize` but not `notifications/initialized`, ended
//!   after `--handshake-timeout`.
//! - `host_check.rs`: the `Host` check (403 for a foreign one) on every HTTP route but the probes.
//! - `health.rs`: `GET /healthz` and `GET /readyz`, for orchestrators' probes.
//! - `metrics.rs`: each call's span and count, and `GET /metrics` (Prometheus text).
//! - `http_layer.rs`: the middleware in front of rmcp's HTTP service that turns its plain-text
//!   refusals into JSON-RPC errors and answers `DELETE` with 204 / 404.
//! - `jsonrpc_errors.rs`: what is wrong with input that is not a message (-32700, -32600), for
//!   both transports.
//!
//! **Architecture Invariant:** only this module names rmcp types.

mod asking;
mod auth;
mod call_events;
mod completion;
mod connections;
mod direct;
mod event_stream;
mod handshake;
mod header_names;
mod health;
mod host_check;
mod http;
mod http_layer;
mod idle;
mod instance_resource;
mod jsonrpc_errors;
mod metrics;
mod oauth;
mod outbox;
mod primitives;
mod quotas;
mod reply;
mod request_body;
mod server;
mod session;
mod session_owners;
mod session_records;
mod stdio;
mod target;
mod tls;

/// For `host/fuzz`: a POST body as the HTTP layer reads it: the request it holds, and the
/// JSON-RPC error a body that is none is answered with.
#[doc(hidden)]
pub fn fuzz_request_body(bytes: &[u8]) {
    let _ = request_body::parse(bytes);
    let _ = jsonrpc_errors::classify(bytes).to_bytes();
}

pub use self::{
    asking::StateSeal,
    connections::{ConnectionLimits, default_max_connections},
    health::Readiness,
    http::{DEFAULT_SESSION_PASSIVATE_AFTER, HttpOptions, TlsFiles, serve_http},
    oauth::OAuthOptions,
    quotas::{QuotaLimits, Quotas},
    reply::NextStepMode,
    server::{Shared, TurnstileServer},
    stdio::serve_stdio,
    target::{DEFAULT_HANDLE_KEY, HandleMode},
};
