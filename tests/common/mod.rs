//! The one home of the end-to-end tests' fixtures: the real `turnstile` binary, the real plugin
//! libraries built by `cargo build --workspace`, a real MCP client (rmcp's), and the raw
//! transports for what that client hides. One concept per module:
//!
//! - [`plugins`]: where the built binary and plugins are, and a private plugin directory;
//! - [`server`]: the one way to start the binary as a server ([`start`], on [`Server`]), and
//!   the files it is started with;
//! - [`client`]: the rmcp client that records what the server pushes ([`serve_and_connect`]);
//! - [`results`]: reading a tool result (text, error code, handle, state);
//! - [`raw_http`]: Streamable HTTP by hand; [`stdio`]: JSON-RPC lines to `serve --stdio`;
//! - [`stores`]: the Redis and PostgreSQL servers the tests share, and the macros that run a
//!   scenario once per store;
//! - [`cutter`]: a TCP proxy before a store that breaks a connection right after a save went
//!   through it;
//! - [`partition`]: a TCP proxy before a store that holds back one server's requests, and
//!   delivers them late;
//! - [`workflows`]: menus and the invoice walk; [`metrics`]: `GET /metrics` parsed;
//! - [`wait`]: polling until what the server does in its own time has happened;
//! - [`durability`] and [`python`]: the fixtures only the durability and Python tests need;
//!   [`browser`]: headless Chromium through chromedriver, for the console's test;
//! - [`upstreams`]: upstream files, the example ticket desk over stdio and Streamable HTTP (and
//!   its TypeScript twin), and the desk's own record of the calls it received.
//!
//! Every test binary compiles this module on its own and uses a different part of it, hence
//! the `allow`s below.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod browser;
pub mod client;
pub mod cutter;
pub mod durability;
pub mod metrics;
pub mod partition;
pub mod plugins;
pub mod python;
pub mod raw_http;
pub mod results;
pub mod server;
pub mod stdio;
pub mod stores;
pub mod upstreams;
pub mod wait;
pub mod workflows;

pub use client::*;
pub use cutter::*;
pub use metrics::*;
pub use partition::*;
pub use plugins::*;
pub use raw_http::*;
pub use results::*;
pub use server::*;
pub use stdio::*;
pub use stores::*;
pub use upstreams::*;
pub use wait::*;
pub use workflows::*;
