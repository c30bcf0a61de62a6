//! Streamable HTTP on axum: the listener and its connections (with their caps and clocks), the
//! `/mcp` endpoint in front of rmcp's service, the fast path for live sessions' answer-only
//! requests (`direct.rs`), the event streams and the other responses held open, the probes and
//! `/metrics`, and the HTTP session records.

pub mod accept;
pub mod body_clock;
pub mod caller;
pub mod caps;
pub mod connections;
pub mod direct;
pub mod endpoint;
pub mod event_stream;
pub mod handshake;
pub mod header_names;
pub mod health;
pub mod held;
pub mod host_check;
pub mod idle;
pub mod listener;
pub mod metrics;
pub mod request_body;
pub mod reserve;
pub mod session_owners;
pub mod session_records;
pub mod tls;
