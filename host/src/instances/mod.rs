//! Workflow instances as an operator sees them, wherever they are: in a store (`query.rs`:
//! list, find and show; `repair.rs`: reset and delete written to the store, for `turnstile
//! instances`; `recount.rs`: the store's counts by state made again, for `turnstile instances
//! repair`), or behind a running server (`remote.rs`: the same through the console's JSON
//! API). `turnstile instances` and the console (`console/`) share this code, so they list,
//! filter and describe instances alike.
//!
//! It must not run instances: a server resets or deletes through the instance's actor
//! (`actors/operator.rs`), and only falls back to `repair.rs` for an instance no actor of its
//! own holds.

pub mod query;
pub mod recount;
pub mod remote;
pub mod repair;

pub use query::{Filter, Summary, active_paths, age, find, list, show, state_text, utc};
