//! Turnstile plugin ABI, version 1.
//!
//! This crate owns the contract between the Turnstile host and a tool plugin (a shared library):
//! the `#[repr(C)]` structs and function table that cross the boundary ([`abi`]), the JSON
//! manifest a plugin describes itself with ([`Manifest`]), and for plugins written in Rust a safe
//! trait ([`Plugin`]) plus a macro ([`export_plugin!`]) that generates the exported symbols. It
//! must not do I/O or know anything about the host's runtime: the loader and its safe wrapper
//! live in the host (`host/src/plugin/`). The C header `include/turnstile_plugin.h` declares the
//! same types for plugins written in C and is checked against this crate by `tests/header.rs`.
//!
//! # Layout
//!
//! - [`abi`]: the `#[repr(C)]` types, status codes and symbol names. Start reading here.
//! - [`manifest`]: the serde types of the manifest JSON, shared with the host.
//! - [`plugin`]: the safe [`Plugin`] trait, [`CallContext`] and [`ToolError`].
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
//!    Rust plugins this is the `Send + Sync` bound on [`Plugin`]).
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
//!   checks the structured part against it first; a mismatch fires nothing.
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
//! ```
//! use serde_json::{Value, json};
//! use turnstile_plugin_api::{CallContext, Manifest, Plugin, ToolError, ToolManifest};
//!
//! #[derive(Default)]
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn manifest(&self) -> Manifest {
//!         Manifest::new("hello", "0.1.0").tool(ToolManifest::new(
//!             "hello.greet",
//!             "Greets someone by name.",
//!             json!({"type": "object", "properties": {"name": {"type": "string"}}}),
//!         ))
//!     }
//!
//!     fn call(&self, tool: &str, input: Value, _ctx: &CallContext) -> Result<Value, ToolError> {
//!         match tool {
//!             "hello.greet" => Ok(json!({"greeting": format!("Hello, {}!", input["name"])})),
//!             other => Err(ToolError::UnknownTool(other.to_owned())),
//!         }
//!     }
//! }
//!
//! turnstile_plugin_api::export_plugin!(Hello);
//! # fn main() {}
//! ```
//!
//! The crate must be built as a `cdylib`; the host loads `lib<crate_name>.so`.

pub mod abi;
#[doc(hidden)]
pub mod export;
pub mod manifest;
pub mod plugin;

pub use crate::{
    abi::ABI_VERSION,
    manifest::{MAX_QUICK_MS, Manifest, ToolAnnotations, ToolManifest},
    plugin::{CallContext, HostServices, LogLevel, Plugin, ToolError, parse_input, plugin_config},
};
