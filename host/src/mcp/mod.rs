//! The MCP side: rmcp's `ServerHandler` for Turnstile, and the two transports, split along
//! rmcp's own nouns (one arrow each way only: a transport knows the handler, never the reverse).
//!
//! - `handler/`: the handler, one [`TurnstileServer`] per session; turns `tools/list`,
//!   `tools/call`, prompts, resources and completion into questions for the gate and the actors,
//!   and builds every client-visible answer (`handler/reply.rs`). It names no HTTP type: what
//!   it needs of the transport comes as a `Caller` in the request's extensions.
//! - `session/`: a session's scope (identity, listener for `list_changed`, end), its outbox for
//!   unprompted messages, and their SSE framing.
//! - `http/`: Streamable HTTP on axum: the listener, connections, the `/mcp` endpoint, the fast
//!   path (`http/direct.rs`, the only code that tracks rmcp's dispatch), event streams, probes,
//!   `/metrics`, TLS, host checks, session records and owners.
//! - `auth/`: bearer tokens and OAuth, one `Principal`.
//! - `stdio.rs`: serving over stdin/stdout. `jsonrpc_errors.rs`: what is wrong with input that
//!   is not a message (-32700, -32600), for both transports. `legacy_tasks.rs`: the 2025-11-25
//!   task requests, renamed for the handler before rmcp parses them, for both transports. `quotas.rs`: per-client limits,
//!   asked by the HTTP endpoint (sessions, streams) and the handler (mints).
//!
//! **Architecture Invariant:** only this module names rmcp types.

pub mod auth;
mod handler;
mod http;
mod jsonrpc_errors;
mod legacy_tasks;
mod quotas;
mod session;
mod stdio;

/// For `host/fuzz`: a POST body as the HTTP layer reads it: the request it holds, and the
/// JSON-RPC error a body that is none is answered with.
#[doc(hidden)]
pub fn fuzz_request_body(bytes: &[u8]) {
    let _ = http::request_body::parse(bytes);
    let _ = jsonrpc_errors::classify(bytes).to_bytes();
}

pub use self::{
    auth::oauth::OAuthOptions,
    handler::{
        asking::StateSeal,
        caller::{Caller, CallerOf, TraceparentOf, no_traceparent},
        reply::NextStepMode,
        server::{Shared, TurnstileServer},
        target::{DEFAULT_HANDLE_KEY, HandleMode},
    },
    http::{
        caller::{of as http_caller, traceparent as http_traceparent},
        connections::{ConnectionLimits, default_max_connections},
        listener::{DEFAULT_SESSION_PASSIVATE_AFTER, HttpOptions, TlsFiles, serve_http},
    },
    quotas::{QuotaLimits, Quotas},
    stdio::serve_stdio,
};
