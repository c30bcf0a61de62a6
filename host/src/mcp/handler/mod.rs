//! The handler: rmcp's `ServerHandler` for Turnstile, one per session, and what it builds its
//! answers from. It is the same whatever carried the request (stdio, a session over HTTP, a
//! sessionless 2026-07-28 request); what it needs of the transport comes in the request as a
//! [`Caller`](caller::Caller).
//!
//! **Architecture Invariant:** nothing here names an axum, hyper or `http` type
//! (`host/tests/architecture.rs` checks the `use` lines).

pub mod asking;
pub mod call_events;
pub mod call_record;
pub mod caller;
mod cancel_elsewhere;
pub mod clip;
pub mod completion;
pub mod dispatch;
pub mod era;
pub mod instance_resource;
pub mod legacy_tasks;
pub mod primitives;
pub mod reply;
pub mod server;
pub mod target;
pub mod tasks;
pub mod tools;
