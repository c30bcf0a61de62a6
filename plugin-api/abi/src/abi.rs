//! The `#[repr(C)]` types that cross the plugin boundary, mirrored one-to-one by
//! `include/turnstile_plugin.h`.
//!
//! Rules shared by every struct here:
//!
//! - It starts with `struct_size`, set by the side that allocates the struct to
//!   `size_of::<Struct>()` as that side knows it. The reader checks it is at least the size it
//!   knows before reading any other field, so a later minor revision can append fields without
//!   breaking older readers. Within ABI major version 1 fields are only ever appended.
//! - Strings from the host are NUL-terminated UTF-8 (`*const c_char`), borrowed for the duration
//!   of the call. JSON text never contains a raw NUL byte, so nothing is lost by that choice, and
//!   a C plugin can hand them straight to a C JSON parser.
//! - Function pointers are `Option<..>` so that a null pointer from a broken plugin is a checked
//!   error in the host instead of undefined behaviour.
//!
//! # How ABI 1 grows (the compatibility rule)
//!
//! Within major version 1, a struct or table only ever gains fields **at its end**, and every
//! field added after the first layout (ABI 1.0) is optional. The reader of a struct (the host for
//! the function table, the plugin for the call context and init parameters) therefore:
//!
//! 1. refuses a struct smaller than its **first** layout (the `*_V1_0_SIZE` constants below),
//!    never one merely smaller than the layout it was built with;
//! 2. reads a later field only when `struct_size` covers it ([`covers`]); a field past the end,
//!    or a NULL function pointer, means "not supported" and the reader carries on without it;
//! 3. ignores bytes past the fields it knows (the writer is newer).
//!
//! So a new host runs old plugins, and a new plugin runs on an old host with the features that
//! host lacks switched off. Fields added since 1.0:
//!
//! | struct | field | since | meaning when absent |
//! |---|---|---|---|
//! | [`RawCallContext`] | `host` | 1.1 | no host services: logging, progress and cancellation are no-ops |
//! | [`RawInitParams`] | `config_json` | 1.1 | no configuration: the plugin's config is `null` |
//! | [`RawCallContext`] | `context_json` | 1.2 | the instance's machine context is unknown: `null` |
//! | [`PluginTableV1`] | `guard` | 1.2 | the plugin implements no named guards |
//! | [`PluginTableV1`] | `read` | 1.3 | the plugin produces no prompt or resource content: only the static `text` its manifest declares is served |
//! | [`RawCallContext`] | `idempotency_key` | 1.4 | no key: the plugin has none to pass on to the services it calls |
//! | [`RawCallContext`] | `asking_json` | 1.4 | the host cannot ask the person: a handler must not return [`Status::NEEDS_INPUT`] |
//!
//! Nothing in this module allocates or frees; see each type for who does.

use std::{
    ffi::{c_char, c_void},
    mem::offset_of,
};

/// The ABI version this crate describes. Returned by [`ABI_VERSION_SYMBOL`]; the entry symbol
/// carries the same number in its name ([`ENTRY_SYMBOL_V1`]).
pub const ABI_VERSION: u32 = 1;

/// `uint32_t turnstile_plugin_abi_version(void)`: the first symbol the host looks up. The host
/// calls nothing else in a library whose answer differs from [`ABI_VERSION`].
pub const ABI_VERSION_SYMBOL: &str = "turnstile_plugin_abi_version";

/// `const TurnstilePluginV1 *turnstile_plugin_v1(void)`: returns the plugin's static function
/// table. A future major version adds `turnstile_plugin_v2` beside it.
pub const ENTRY_SYMBOL_V1: &str = "turnstile_plugin_v1";

/// A status code returned by `init`, `manifest` and `call`.
///
/// A plain `i32` newtype rather than a Rust enum: a C plugin may return any integer, and an
/// out-of-range value in a `#[repr(i32)]` enum would be undefined behaviour in the host.
/// With every status but [`Status::OK`] the output buffer holds `{"message": "..."}` (and with
/// [`Status::NEEDS_INPUT`], `inputRequests` beside it).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

impl Status {
    /// Success; the output is the tool's result (any JSON value).
    pub const OK: Status = Status(0);
    /// The tool ran and failed (a business error the agent can read and act on).
    pub const TOOL_ERROR: Status = Status(1);
    /// The input (tool arguments or context) was unusable: not JSON, wrong shape, out of range.
    pub const BAD_INPUT: Status = Status(2);
    /// The plugin has no tool of that name.
    pub const UNKNOWN_TOOL: Status = Status(3);
    /// The plugin panicked (or, in C, hit what it considers a bug); the message says where.
    pub const PANIC: Status = Status(4);
    /// The plugin could not do its part of the protocol: a struct from the host was too small,
    /// `init` failed, output could not be serialised.
    pub const INTERNAL: Status = Status(5);
    /// Since ABI 1.4: the tool needs input from the person or the client before it can go on
    /// (see [`RawCallContext::asking_json`]). The output buffer holds `{"message", "inputRequests":
    /// {key: {"method", "params"}}}`, each request an MCP `elicitation/create`,
    /// `sampling/createMessage` or `roots/list`. The host fires nothing and saves nothing, gets
    /// the answers, and calls the tool again with them. A host older than 1.4 never asks for
    /// this (it passes no `asking_json`), and reports the status as unknown.
    pub const NEEDS_INPUT: Status = Status(6);
}

/// What `read` ([`ReadFn`], ABI 1.3) is asked to produce.
///
/// A plain `i32` newtype, like [`Status`], so that any integer a C host or plugin passes is a
/// defined value; a plugin answers an unknown kind with [`Status::UNKNOWN_TOOL`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadKind(pub i32);

impl ReadKind {
    /// A prompt (`prompts/get`): `name` is the prompt's name; the request is
    /// `{"arguments": {<name>: <string>}}`; the output is `{"description"?, "messages":
    /// [{"role": "user" | "assistant", "content": <MCP content block>}]}`, or a string (one user
    /// message of that text).
    pub const PROMPT: ReadKind = ReadKind(1);
    /// A resource (`resources/read`): `name` is the manifest name of the resource or resource
    /// template; the request is `{"uri": <the URI read>, "variables": {<template variable>:
    /// <string>}}`; the output is `{"contents": [{"uri"?, "mimeType"?, "text" | "blob"}]}`, a
    /// string (one text content of the URI read, with the declared MIME type), or any other JSON
    /// value (one text content holding its JSON, `application/json` unless a type is declared).
    pub const RESOURCE: ReadKind = ReadKind(2);
    /// Since ABI 1.4: completions of one argument (`completion/complete`): `name` is the
    /// prompt's or resource template's manifest name; the request is `{"ref": "prompt" |
    /// "resource", "argument": {"name", "value"}, "arguments": {<the other arguments given so
    /// far>}}`; the output is `{"values": [<string>, ...], "total"?, "hasMore"?}` or a list of
    /// strings, the ones that fit `value` (at most 100 are used). A plugin without completions
    /// answers [`Status::UNKNOWN_TOOL`], as an older plugin does for a kind it does not know:
    /// the client gets no values.
    pub const COMPLETION: ReadKind = ReadKind(3);
}

/// A byte buffer allocated by the plugin and freed by the plugin.
///
/// The host allocates the struct itself (on its stack), sets `struct_size`, `data = NULL`,
/// `len = 0`, and passes a pointer to it as an out-parameter. The plugin may set `data` and
/// `len` to a buffer it allocated; it touches no other field. The host copies the bytes and then
/// calls the table's `free_buffer(data, len)` exactly once if `data` is non-null; it never frees
/// `data` any other way. The bytes are UTF-8 JSON (see the crate docs), not NUL-terminated.
#[repr(C)]
#[derive(Debug)]
pub struct RawBuffer {
    /// Set by the host to `size_of::<RawBuffer>()`.
    pub struct_size: usize,
    /// Set by the plugin; owned by the plugin.
    pub data: *mut u8,
    /// Set by the plugin: the number of bytes at `data`.
    pub len: usize,
}

impl RawBuffer {
    /// An empty buffer, ready to be passed as an out-parameter.
    pub const fn empty() -> RawBuffer {
        RawBuffer {
            struct_size: size_of::<RawBuffer>(),
            data: std::ptr::null_mut(),
            len: 0,
        }
    }
}

impl Default for RawBuffer {
    fn default() -> Self {
        RawBuffer::empty()
    }
}

/// What the host tells `init`. Allocated, filled and freed by the host; read-only for the plugin
/// and borrowed only for the duration of `init`.
#[repr(C)]
#[derive(Debug)]
pub struct RawInitParams {
    /// Set by the host to `size_of::<RawInitParams>()`.
    pub struct_size: usize,
    /// The ABI version the host speaks (equal to [`ABI_VERSION`] today).
    pub host_abi_version: u32,
    /// Since ABI 1.1 (read it only when `struct_size` covers it, see [`covers`]): the plugin's
    /// configuration from the server's, as a NUL-terminated JSON object, or NULL when there is
    /// none. Borrowed for the duration of `init`. It may hold secrets: never log it.
    pub config_json: *const c_char,
}

/// The context of one tool call. Allocated, filled and freed by the host; read-only for the
/// plugin and borrowed only for the duration of `call` (copy what you keep).
#[repr(C)]
#[derive(Debug)]
pub struct RawCallContext {
    /// Set by the host to `size_of::<RawCallContext>()`.
    pub struct_size: usize,
    /// A unique id for this call, for logs and idempotency keys. NUL-terminated UTF-8.
    pub call_id: *const c_char,
    /// The handle of the workflow instance the call runs against (empty for a tool bound to no
    /// workflow). NUL-terminated UTF-8.
    pub handle: *const c_char,
    /// The instance's current state value as JSON (XState state value: `"draft"`, or
    /// `{"parent":"child"}` for nested states; `null` when there is no instance).
    /// NUL-terminated UTF-8.
    pub state_json: *const c_char,
    /// Since ABI 1.1 (read it only when `struct_size` covers it, see [`covers`]): what the host
    /// offers the plugin during this call, or NULL when it offers nothing. Borrowed for the
    /// duration of `call`, like the rest of the context.
    pub host: *const RawHostServices,
    /// Since ABI 1.2 (read it only when `struct_size` covers it): the instance's machine
    /// context (XState `context`) before this call, as NUL-terminated JSON, or NULL when there
    /// is no instance. Borrowed for the duration of `call`.
    pub context_json: *const c_char,
    /// Since ABI 1.4 (read it only when `struct_size` covers it): a key that is the same for
    /// every run of this tool on this instance at its current version, on any server, and
    /// different for anything else, as NUL-terminated UTF-8; empty for a tool bound to no
    /// workflow. Pass it on as the idempotency key of the outside services the handler calls
    /// (a payment provider): if a server is paused mid-call and another takes the transition
    /// over, both runs send the same key, and the service acts once. Borrowed for the duration
    /// of `call`.
    pub idempotency_key: *const c_char,
    /// Since ABI 1.4 (read it only when `struct_size` covers it): what the handler may ask for
    /// and what it has been told, as a NUL-terminated JSON object `{"canAsk": [...],
    /// "responses": {key: answer}}`, or NULL when the host cannot ask for this call. `canAsk`
    /// lists the kinds of input the client can give (`"elicitation.form"`,
    /// `"elicitation.url"`, `"sampling"`, `"roots"`); `responses` holds the answers to the
    /// requests earlier runs of this call returned with [`Status::NEEDS_INPUT`], by their keys.
    /// Borrowed for the duration of `call`.
    pub asking_json: *const c_char,
}

/// `log`: sends a log message to the client that made the call (MCP `notifications/message`),
/// if the session's log level lets it through. `level` is an MCP level name (`"debug"`, `"info"`,
/// `"notice"`, `"warning"`, `"error"`, `"critical"`, `"alert"`, `"emergency"`), `logger` an
/// optional name (NULL for none) and `data_json` any JSON value. Returns [`Status::OK`], or
/// [`Status::BAD_INPUT`] for an unknown level or data that is not JSON.
pub type HostLogFn = unsafe extern "C" fn(
    call: *const c_void,
    level: *const c_char,
    logger: *const c_char,
    data_json: *const c_char,
) -> Status;

/// `progress`: reports how far the call has got (MCP `notifications/progress`), if the client
/// asked for progress. `total` is negative when unknown; `message` may be NULL.
pub type HostProgressFn = unsafe extern "C" fn(
    call: *const c_void,
    progress: f64,
    total: f64,
    message: *const c_char,
) -> Status;

/// `is_cancelled`: 1 once the client has cancelled the call (MCP `notifications/cancelled`) or
/// its deadline has passed, else 0. A plugin doing long work should poll it and stop early with
/// a tool error; the host fires no transition for a call that returns an error.
pub type HostIsCancelledFn = unsafe extern "C" fn(call: *const c_void) -> i32;

/// What the host offers a plugin during one call (ABI 1.1). Allocated, filled and freed by the
/// host; read-only for the plugin and borrowed for the duration of `call`. Pass its `call` value
/// to each function. The functions and `call` may be copied out and used from any thread while
/// the call runs; used after the call has returned they do nothing and return
/// [`Status::INTERNAL`] (or 0), since the host names calls by an id, not by a pointer.
///
/// Every function is safe to call from any thread while the call runs, and each may be NULL
/// (not offered). Later revisions append functions after `is_cancelled`.
#[repr(C)]
#[derive(Debug)]
pub struct RawHostServices {
    /// Set by the host to `size_of::<RawHostServices>()`.
    pub struct_size: usize,
    /// The host's name for this call, passed back to each function. Opaque to the plugin.
    pub call: *const c_void,
    /// See [`HostLogFn`].
    pub log: Option<HostLogFn>,
    /// See [`HostProgressFn`].
    pub progress: Option<HostProgressFn>,
    /// See [`HostIsCancelledFn`].
    pub is_cancelled: Option<HostIsCancelledFn>,
}

/// The size of [`PluginTableV1`] as ABI 1.0 laid it out: the smallest table the host accepts.
pub const PLUGIN_TABLE_V1_0_SIZE: usize =
    offset_of!(PluginTableV1, free_buffer) + size_of::<Option<FreeBufferFn>>();

/// The size of [`RawCallContext`] as ABI 1.0 laid it out (without `host`): the smallest context
/// a plugin may accept.
pub const CALL_CONTEXT_V1_0_SIZE: usize = offset_of!(RawCallContext, host);

/// The size of [`RawInitParams`] as ABI 1.0 laid it out.
pub const INIT_PARAMS_V1_0_SIZE: usize =
    offset_of!(RawInitParams, host_abi_version) + size_of::<u32>();

/// The size of [`RawHostServices`] as ABI 1.1 first laid it out.
pub const HOST_SERVICES_V1_1_SIZE: usize =
    offset_of!(RawHostServices, is_cancelled) + size_of::<Option<HostIsCancelledFn>>();

/// Whether a struct whose `struct_size` is `struct_size` holds the field at `offset` of `size`
/// bytes: `covers(ctx.struct_size, offset_of!(RawCallContext, host), size_of::<*const _>())`.
pub const fn covers(struct_size: usize, offset: usize, size: usize) -> bool {
    struct_size >= offset + size
}

/// `init`: creates the plugin instance.
///
/// On [`Status::OK`] the plugin has written an opaque instance pointer (possibly null, if it keeps
/// no state) to `*out_instance`; the host passes it back to every other call and finally to
/// `destroy`. On any other status the plugin may write `{"message"}` to `out_error` and the host
/// will not call `destroy`.
pub type InitFn = unsafe extern "C" fn(
    params: *const RawInitParams,
    out_instance: *mut *mut c_void,
    out_error: *mut RawBuffer,
) -> Status;

/// `destroy`: drops the instance created by `init`. Called once, after every `call` returned,
/// right before the host unloads the library.
pub type DestroyFn = unsafe extern "C" fn(instance: *mut c_void);

/// `manifest`: writes the manifest JSON (see [`crate::Manifest`]) to `out`. Called once, after
/// `init`.
pub type ManifestFn = unsafe extern "C" fn(instance: *mut c_void, out: *mut RawBuffer) -> Status;

/// `call`: runs one tool. `tool` and `input_json` are NUL-terminated UTF-8 borrowed for the
/// call; the result or error JSON goes to `out` (see the crate's output convention).
///
/// **Called concurrently from several host threads with the same instance**: the instance must
/// be thread-safe.
pub type CallFn = unsafe extern "C" fn(
    instance: *mut c_void,
    tool: *const c_char,
    input_json: *const c_char,
    ctx: *const RawCallContext,
    out: *mut RawBuffer,
) -> Status;

/// `read` (ABI 1.3, optional): produces the content of one of the prompts or resources the
/// manifest declares, for the instance described by `ctx` (its state and machine context; `ctx`'s
/// `host` is NULL: reads report no progress). `name` and `request_json` are NUL-terminated UTF-8
/// borrowed for the call; see [`ReadKind`] for their shape and the output's, which goes to `out`
/// under the crate's output convention. [`Status::UNKNOWN_TOOL`] means "no such prompt or
/// resource"; [`Status::TOOL_ERROR`] and [`Status::BAD_INPUT`] carry a message the client sees.
///
/// Reads change nothing (the host fires no event for them) and, like `call`, run concurrently
/// from several host threads with the same instance.
pub type ReadFn = unsafe extern "C" fn(
    instance: *mut c_void,
    kind: ReadKind,
    name: *const c_char,
    request_json: *const c_char,
    ctx: *const RawCallContext,
    out: *mut RawBuffer,
) -> Status;

/// `free_buffer`: frees a buffer this plugin wrote to a [`RawBuffer`]. Never called with a null
/// `data`. Must not depend on the instance: it also frees `init`'s error message.
pub type FreeBufferFn = unsafe extern "C" fn(data: *mut u8, len: usize);

/// The function table returned by the entry symbol [`ENTRY_SYMBOL_V1`].
///
/// Allocated by the plugin, normally as a `static`, and never freed: the host reads it, copies
/// the function pointers out, and does not write to it. It must stay valid until the library is
/// unloaded. The function pointers of ABI 1.0 (`init` to `free_buffer`) must be non-null;
/// entries appended later are optional (see the module docs' growth rule).
#[repr(C)]
#[derive(Debug)]
pub struct PluginTableV1 {
    /// Set by the plugin to `size_of::<PluginTableV1>()`.
    pub struct_size: usize,
    /// The ABI version the table was built for; must equal [`ABI_VERSION`].
    pub abi_version: u32,
    /// See [`InitFn`].
    pub init: Option<InitFn>,
    /// See [`DestroyFn`].
    pub destroy: Option<DestroyFn>,
    /// See [`ManifestFn`].
    pub manifest: Option<ManifestFn>,
    /// See [`CallFn`].
    pub call: Option<CallFn>,
    /// See [`FreeBufferFn`].
    pub free_buffer: Option<FreeBufferFn>,
    /// Since ABI 1.2, optional (read it only when `struct_size` covers it; NULL: no guards):
    /// see [`GuardFn`].
    pub guard: Option<GuardFn>,
    /// Since ABI 1.3 (read it only when `struct_size` covers it, see [`covers`]): see
    /// [`ReadFn`]. NULL: the plugin serves only the static text its manifest declares for its
    /// prompts and resources.
    pub read: Option<ReadFn>,
}

/// `guard` (ABI 1.2): decides the named guard `name`, one the plugin lists in its manifest's
/// `guards`, for a transition of one of its workflows. `params_json` is the guard's `params`
/// in the machine (`null` when it has none), `context_json` the instance's machine context and
/// `event_json` the whole event (`{"type", "input", "output"}` for one a tool fired), all
/// NUL-terminated JSON borrowed for the call. On [`Status::OK`] the plugin writes `true` or
/// `false` (JSON) to `out`; any other status or output makes the guard false, and the host logs
/// why.
///
/// A guard must be **pure and quick**: the host calls it while it decides a transition, on the
/// instance's own thread, possibly more than once per event, and concurrently for different
/// instances. Until the call has run, the host does not know what a plugin's guard reads, so
/// while listing tools and before running a call it counts the guard as possibly true; it
/// decides with the full event.
pub type GuardFn = unsafe extern "C" fn(
    instance: *mut c_void,
    name: *const c_char,
    params_json: *const c_char,
    context_json: *const c_char,
    event_json: *const c_char,
    out: *mut RawBuffer,
) -> Status;

/// `uint32_t turnstile_plugin_abi_version(void)`.
pub type AbiVersionFn = unsafe extern "C" fn() -> u32;

/// `const TurnstilePluginV1 *turnstile_plugin_v1(void)`.
pub type EntryFnV1 = unsafe extern "C" fn() -> *const PluginTableV1;
