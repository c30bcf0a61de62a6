//! Turnstile plugin ABI, version 1: the contract between the host and a plugin library, and
//! nothing else.
//!
//! This crate is what both sides of the boundary read (the shape of datafusion-ffi's and
//! nushell's plugin crates): the host's loader (`host/src/plugin/`) and the Rust SDK
//! (`turnstile-plugin`, which re-exports all of this, so a plugin author depends on that one
//! crate) build on it, and a C author reads it through `include/turnstile_plugin.h`, which
//! `tests/header.rs` checks field by field against [`abi`].
//!
//! It must not do I/O, know the host's runtime, or carry the SDK (no schema derivation, no
//! export macros, no statechart): it holds types, the rules of the manifest, and the few
//! conversions both sides make the same way.
//!
//! # Layout
//!
//! - [`abi`]: the `#[repr(C)]` types, status codes and symbol names. Start reading here for the
//!   contract.
//! - [`manifest`]: the serde types of the manifest JSON and [`Manifest::check`], its rules
//!   beyond the shape (one definition: the host checks every manifest with it, the SDK the one it
//!   writes), with MCP's tool-name rule ([`manifest::check_tool_name`]).
//! - [`uri_template`]: what a resource template's URI template matches.
//! - [`CallContext`] and [`PrimitiveKind`] (`call.rs`), [`HostServices`] and [`LogLevel`]
//!   (`host_services.rs`), [`ToolError`] (`tool_error.rs`): the Rust meaning of what crosses
//!   with a call, built by the host and received by a Rust plugin.
//! - [`asking`]: ABI 1.4's input requests, the format both sides hold a `NEEDS_INPUT` output to.
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
//!    Rust plugins this is the `Send + Sync` bound on the SDK's `Plugin`). `read` (ABI 1.3,
//!    optional) produces the content of a prompt or resource the manifest declares, the same
//!    way (the SDK's `Plugin::read`, and its `.prompt(...)` and `.resource(...)` chains).
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

pub mod abi;
pub mod asking;
mod call;
mod host_services;
pub mod manifest;
mod tool_error;
pub mod uri_template;

pub use crate::{
    abi::ABI_VERSION,
    asking::{InputKind, InputRequest},
    call::{CallContext, PrimitiveKind},
    host_services::{HostServices, LogLevel},
    manifest::{
        ConfirmManifest, HANDLE_VARIABLE, MAX_QUICK_MS, Manifest, PromptArgumentManifest,
        PromptManifest, ResourceManifest, ResourceTemplateManifest, TaskSupport, ToolAnnotations,
        ToolManifest,
    },
    tool_error::ToolError,
};
