//! The Rust SDK for writing Turnstile plugins, on top of the ABI crate.
//!
//! Two crates, for two readers (the shape of datafusion-ffi's and nushell's plugin crates):
//!
//! - **The ABI contract** is `turnstile-plugin-abi` (`plugin-api/abi/`): the `#[repr(C)]`
//!   structs and function table that cross the boundary, the JSON manifest a plugin describes
//!   itself with and its one set of rules ([`Manifest::check`]), and the C header
//!   `plugin-api/abi/include/turnstile_plugin.h`. This is all an author of a plugin in C (or any
//!   other language) reads, and all the host's loader builds on. This crate re-exports it whole
//!   ([`abi`], [`manifest`], [`uri_template`], [`asking`] and the root items), so a Rust plugin
//!   depends on this one crate.
//! - **The Rust SDK** is this crate ([`sdk`]): declare a workflow and its tools in one chain
//!   each, with input and output schemas derived from Rust types, dispatch by the SDK, bindings
//!   checked against the machine by a unit test (read by the host's own statechart engine,
//!   `turnstile-statechart`), and [`export_toolkit!`] for the exported symbols. Start there to
//!   write a plugin in Rust. Underneath it sits the lower-level [`Plugin`] trait with
//!   [`export_plugin!`] (one `manifest` and one `call` written by hand), for plugins that build
//!   their tool list at run time. [`testing`] holds what a plugin's unit tests share.
//!
//! It must not do I/O or know anything about the host's runtime: the loader and its safe
//! wrapper live in the host (`host/src/plugin/`). The contract itself (how the host talks to a
//! plugin, who frees what, the output JSON convention) is documented in the ABI crate.
//!
//! # Layout
//!
//! - [`sdk`]: the typed SDK ([`sdk::Workflow`], [`sdk::Toolkit`], [`export_toolkit!`]). Start
//!   reading here to write a plugin in Rust.
//! - [`plugin`]: the safe [`Plugin`] trait (which the SDK implements for you), the plugin's
//!   configuration ([`plugin_config`]) and [`parse_input`].
//! - [`testing`]: what a plugin's unit tests share (the plugin built, a call's context, a
//!   manifest's bindings).
//! - `export`: the `extern "C"` glue behind [`export_plugin!`] (not public API).
//! - Re-exported from `turnstile-plugin-abi`: [`abi`] (the `#[repr(C)]` types), [`manifest`],
//!   [`uri_template`], [`asking`], [`CallContext`], [`ToolError`], [`HostServices`].
//!
//! # Writing a plugin in Rust
//!
//! With the SDK (see [`sdk`] for the whole walk-through):
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use turnstile_plugin::sdk::{Toolkit, action};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Greet {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! fn toolkit() -> Toolkit {
//!     Toolkit::new("hello", "0.1.0").tool(
//!         action("hello.greet")
//!             .describe("Greets someone by name.")
//!             .handle(|input: Greet, _ctx| Ok(json!({"greeting": format!("Hello, {}!", input.name)}))),
//!     )
//! }
//!
//! turnstile_plugin::export_toolkit!(toolkit);
//! # fn main() { toolkit().build().unwrap(); }
//! ```
//!
//! The crate must be built as a `cdylib`; the host loads `lib<crate_name>.so`.

#[doc(hidden)]
pub mod export;
pub mod plugin;
pub mod sdk;
pub mod testing;

pub use turnstile_plugin_abi::{
    ABI_VERSION, CallContext, ConfirmManifest, HANDLE_VARIABLE, HostServices, InputKind,
    InputRequest, LogLevel, MAX_QUICK_MS, Manifest, PrimitiveKind, PromptArgumentManifest,
    PromptManifest, ResourceManifest, ResourceTemplateManifest, TaskSupport, ToolAnnotations,
    ToolError, ToolManifest, abi, asking, manifest, uri_template,
};

pub use crate::plugin::{Plugin, config_ms, config_number, parse_input, plugin_config};
