//! Turnstile plugin ABI, version 1, and the Rust SDK for writing plugins.
//!
//! The crate has two halves, for two readers:
//!
//! - **The ABI contract** ([`abi`], [`manifest`], [`uri_template`], and the C header
//!   `include/turnstile_plugin.h`): the `#[repr(C)]` structs and function table that cross the
//!   boundary, and the JSON manifest a plugin describes itself with. This is all an author of a
//!   plugin in C (or any other language) reads; `tests/header.rs` checks the header against it.
//! - **The Rust SDK** ([`sdk`]): declare a workflow and its tools in one chain each, with input
//!   and output schemas derived from Rust types, dispatch by the SDK, bindings checked against
//!   the machine by a unit test, and [`export_toolkit!`] for the exported symbols. Start there
//!   to write a plugin in Rust. Underneath it sits the lower-level [`Plugin`] trait with
//!   [`export_plugin!`] (one `manifest` and one `call` written by hand), for plugins that build
//!   their tool list at run time.
//!
//! It must not do I/O or know anything about the host's runtime: the loader and its safe
//! wrapper live in the host (`host/src/plugin/`).
//!
//! # Layout
//!
//! - [`abi`]: the `#[repr(C)]` types, status codes and symbol names. Start reading here for the
//!   contract.
//! - [`manifest`]: the serde types of the manifest JSON, shared with the host.
//! - [`uri_template`]: what a resource template's URI template matches (shared with the host).
//! - [`sdk`]: the typed SDK ([`sdk::Workflow`], [`sdk::Toolkit`], [`export_toolkit!`]). Start
//!   reading here to write a plugin in Rust.
//! - [`plugin`]: the safe [`Plugin`] trait, [`CallContext`] and [`ToolError`], which the SDK
//!   implements for you.
//! - `export`: the `extern "C"` glue behind [`export_plugin!`] (not public API).
//!
//! # How the host talks to a plugin
//!
//! 1. `dlopen` with `RTLD_NOW | RTLD_LOCAL`.
//! 2. Look up `turnstile_plugin_abi_version` and call it; anything but [`ABI_VERSION`] stops the
//!    load before any other symbol is touched.
//! 3. Look up `turnstile_plugin_v1` (the major version is in the name, so a v2 host can look for
//!    `turnstile_plugin_v2` in the same library) and call it: it returns a pointer to a static
//!    [`abi::PluginTableV1`]. The host checks `struct_size` before reading any other field.
//! 4. `init` creates the plugin instance (an opaque pointer), `manifest` describes it.
//! 5. `call` runs a tool, from any thread, concurrently: the instance must be thread-safe (for
//!    Rust plugins this is the `Send + Sync` bound on [`Plugin`]). `read` (ABI 1.3, optional)
//!    produces the content of a prompt or resource the manifest declares, the same way
//!    ([`Plugin::read`]; the SDK's `.prompt(...)` and `.resource(...)` chains).
//! 6. `destroy` drops the instance; then the host unloads the library. A plugin must have joined
//!    any thread it started by then.
//!
//! # Ownership
//!
//! Each side frees only what it allocated. Strings passed by the host (tool name, input JSON,
//! context fields) are borrowed for the duration of the call. Output buffers ([`abi::RawBuffer`])
//! are allocated by the plugin and handed back to the plugin's `free_buffer` by the host once it
//! has copied them.
//!
//! # Output JSON convention
//!
//! Every entry point that produces output writes UTF-8 JSON:
//!
//! - [`abi::Status::OK`]: any JSON value, the tool's result. The host shows it as the tool
//!   result's text (the JSON serialised) and, when it is an object, as `structuredContent`.
//!   To return MCP content blocks (text, image, audio, embedded resource), return an object
//!   with `"_content": [blocks]`, each block as MCP spells it (`{"type": "image", "data": …,
//!   "mimeType": …}`): they become the result's content, and the rest of the object, if any,
//!   its `structuredContent`. When the manifest gives the tool an `output_schema`, the host
//!   checks the structured part against it first; a mismatch fires nothing. For a tool of a
//!   workflow the host then adds `"state"` (the instance's state value after the call) to an
//!   object result that has no `state` of its own, and to the published output schema: a tool
//!   reports what it did, the host where the workflow went.
//! - any other status: `{"message": "..."}`. For [`abi::Status::TOOL_ERROR`] and
//!   [`abi::Status::BAD_INPUT`] the host returns an `isError` tool result carrying that message;
//!   the other statuses are plugin faults the host reports as errors of its own.
//!
//! Errors cross the boundary as these strings, never as Rust types, and no panic ever unwinds
//! across `extern "C"`: every generated entry point runs inside `catch_unwind` (an unwinding
//! panic across `extern "C"` aborts the whole host). A plugin built with `panic = "abort"` gives
//! that up and takes the host down on its first panic.
//!
//! # Writing a plugin in Rust
//!
//! With the SDK (see [`sdk`] for the whole walk-through):
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use serde_json::json;
//! use turnstile_plugin_api::sdk::{Toolkit, action};
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
//! turnstile_plugin_api::export_toolkit!(toolkit);
//! # fn main() { toolkit().build().unwrap(); }
//! ```
//!
//! The crate must be built as a `cdylib`; the host loads `lib<crate_name>.so`.

pub mod abi;
pub mod asking;
#[doc(hidden)]
pub mod export;
pub mod manifest;
pub mod plugin;
pub mod sdk;
pub mod uri_template;

pub use crate::{
    abi::ABI_VERSION,
    asking::{InputKind, InputRequest},
    manifest::{
        ConfirmManifest, HANDLE_VARIABLE, MAX_QUICK_MS, Manifest, PromptArgumentManifest,
        PromptManifest, ResourceManifest, ResourceTemplateManifest, ToolAnnotations, ToolManifest,
    },
    plugin::{
        CallContext, HostServices, LogLevel, Plugin, PrimitiveKind, ToolError, config_ms,
        config_number, parse_input, plugin_config,
    },
};
