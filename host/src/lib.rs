//! Turnstile: an MCP server host whose tools are gated by workflow state machines.
//!
//! # Layout
//!
//! The path of one `tools/call`, top to bottom, is the order of this list:
//!
//! - [`mcp`]: rmcp's server handler and the stdio / Streamable HTTP transports.
//! - [`catalog`]: every tool and workflow the plugins bring, checked against each other.
//! - [`actors`]: the registry, one actor per workflow instance, and the notifier.
//! - [`gate`]: which tools an instance in a given state may see and call.
//! - [`statechart`]: the XState v5 engine (pure code), the crate `turnstile-statechart`
//!   (`plugin-api/statechart/`), which the plugin SDK checks bindings with too.
//! - [`invoke`]: running one plugin tool on a blocking thread, with a deadline.
//! - [`plugin`]: loading plugin libraries and calling them through the C ABI.
//! - [`store`]: where instance snapshots are saved, with compare-and-set versions.
//! - [`commands`]: the `turnstile` subcommands.
//! - [`console`]: the operator console at `/console` on the HTTP listener.
//! - [`instances`]: instances as an operator sees them (listing, showing, reset, delete),
//!   shared by `turnstile instances` and the console.
//! - [`config`]: `serve`'s settings from flags, `TURNSTILE_*` variables and a TOML file.
//! - [`hotplug`]: the plugin directory's changes, applied to the catalog while serving.
//! - [`timers`]: the task that wakes instances whose timers (or retention) fall due.
//! - [`retention`]: when an instance's record is deleted.
//! - [`memory`]: the allocator, and giving freed memory back to the OS.
//! - [`fast_hash`]: the hasher of the tables a call looks things up in.
//! - [`metrics`]: what the server counts, and the Prometheus text of `GET /metrics`.
//! - [`logs`]: the log's format (`--log-format`) and filters (`RUST_LOG`, rmcp at debug only).
//! - [`load`]: `turnstile load`, a load tester and contract checker for any MCP server (a
//!   client: it uses none of the modules above).
//!
//! See `ARCHITECTURE.md` at the repository root for the map and its invariants.

/// jemalloc for everything the host allocates (see [`memory`]); plugins keep their own.
#[global_allocator]
static ALLOCATOR: memory::Allocator = tikv_jemallocator::Jemalloc;

pub mod actors;
pub mod catalog;
pub mod cli;
pub mod commands;
pub mod config;
pub mod confirm;
pub mod console;
pub mod fast_hash;
pub mod gate;
pub mod hotplug;
pub mod instances;
pub mod invoke;
pub mod load;
pub mod logs;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod plugin;
pub mod retention;
pub mod shutdown;
pub mod store;
pub mod tasks;
pub mod timers;
pub mod tombstones;

/// The XState engine lives in a crate of its own so that the plugin SDK reads machines with the
/// same code the host runs them with; host code keeps naming it `crate::statechart`.
pub use turnstile_statechart as statechart;
