//! The `extern "C"` glue between the ABI and a [`Plugin`]; what
//! [`export_plugin!`](crate::export_plugin!) expands to calls into here. Not public API: only the
//! macro may name these items.
//!
//! Every function body runs inside `catch_unwind`, because an unwinding panic that reaches an
//! `extern "C"` frame aborts the host process. Panics become [`Status::PANIC`] with the panic
//! message.
//!
//! The instance pointer handed to the host is `Box::<T>::into_raw`; `destroy` takes it back.
//! Output buffers are `Box<[u8]>` turned into `(ptr, len)`; `free_buffer` rebuilds the box, which
//! is why it needs `len` (a C plugin can ignore it and call `free`).

use std::{
    any::Any,
    ffi::{CStr, c_char, c_void},
    panic::{AssertUnwindSafe, catch_unwind},
    ptr,
};

use serde_json::{Value, json};

use crate::{
    CallContext, HostServices, Plugin, PrimitiveKind, ToolError,
    abi::{
        ABI_VERSION, CALL_CONTEXT_V1_0_SIZE, HOST_SERVICES_V1_1_SIZE, INIT_PARAMS_V1_0_SIZE,
        InitFn, PluginTableV1, RawBuffer, RawCallContext, RawHostServices, RawInitParams, ReadKind,
        Status, covers,
    },
};

/// Generates the two exported symbols for a [`Plugin`](crate::Plugin) type.
///
/// `export_plugin!(MyPlugin)` constructs the plugin with `Default`;
/// `export_plugin!(MyPlugin, constructor)` with `constructor: FnOnce() -> Result<MyPlugin, String>`
/// (an `Err` makes the load fail with that message). Use it once per `cdylib`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        $crate::export_plugin!($plugin, || {
            ::core::result::Result::<$plugin, ::std::string::String>::Ok(
                <$plugin as ::core::default::Default>::default(),
            )
        });
    };
    ($plugin:ty, $constructor:expr) => {
        const _: () = {
            unsafe extern "C" fn __turnstile_init(
                params: *const $crate::abi::RawInitParams,
                out_instance: *mut *mut ::core::ffi::c_void,
                out_error: *mut $crate::abi::RawBuffer,
            ) -> $crate::abi::Status {
                // SAFETY: the host calls `init` under the contract of `InitFn`, which is exactly
                // what `export::init` requires; the arguments are forwarded unchanged.
                unsafe {
                    $crate::export::init::<$plugin>(params, out_instance, out_error, $constructor)
                }
            }

            static TABLE: $crate::abi::PluginTableV1 =
                $crate::export::table::<$plugin>(__turnstile_init);

            /// The ABI version this plugin was built for (`turnstile_plugin_abi_version`).
            #[unsafe(no_mangle)]
            pub extern "C" fn turnstile_plugin_abi_version() -> u32 {
                $crate::abi::ABI_VERSION
            }

            /// The plugin's function table (`turnstile_plugin_v1`).
            #[unsafe(no_mangle)]
            pub extern "C" fn turnstile_plugin_v1() -> *const $crate::abi::PluginTableV1 {
                &TABLE
            }
        };
    };
}

/// The function table for plugin type `T`, with the macro-generated `init`.
pub const fn table<T: Plugin>(init: InitFn) -> PluginTableV1 {
    PluginTableV1 {
        struct_size: size_of::<PluginTableV1>(),
        abi_version: ABI_VERSION,
        init: Some(init),
        destroy: Some(destroy::<T>),
        manifest: Some(manifest::<T>),
        call: Some(call::<T>),
        free_buffer: Some(free_buffer),
        guard: Some(guard::<T>),
        read: Some(read::<T>),
    }
}

/// A failure to report: the status and the message for `{"message": ...}`.
type Failure = (Status, String);

/// `init`: constructs `T` and hands the host a `Box<T>` as the instance.
///
/// # Safety
///
/// `params` is null or points to a valid [`RawInitParams`]; `out_instance` is null or writable;
/// `out_error` is null or points to a valid, host-initialised [`RawBuffer`].
pub unsafe fn init<T: Plugin>(
    params: *const RawInitParams,
    out_instance: *mut *mut c_void,
    out_error: *mut RawBuffer,
    constructor: impl FnOnce() -> Result<T, String>,
) -> Status {
    respond(out_error, || {
        // SAFETY: the caller guarantees `params` is null or valid for reads.
        let params = unsafe { params.as_ref() }.ok_or_else(|| internal("init: params is null"))?;
        if params.struct_size < INIT_PARAMS_V1_0_SIZE {
            return Err(internal("init: params.struct_size is too small"));
        }
        // SAFETY: `params` is valid for `struct_size` bytes; `config_json` is read only where
        // they cover it, and is then null or NUL-terminated.
        let config = unsafe { init_config(params)? };
        // Kept for `plugin_config()`, before the constructor runs so that it can read it.
        let _ = crate::plugin::CONFIG.set(config);
        if out_instance.is_null() {
            return Err(internal("init: out_instance is null"));
        }
        let plugin = constructor().map_err(|message| (Status::INTERNAL, message))?;
        // SAFETY: checked non-null above; the caller guarantees it is writable.
        unsafe { *out_instance = Box::into_raw(Box::new(plugin)).cast() };
        Ok(None)
    })
}

/// The configuration in `params` (ABI 1.1): a JSON object, or `null` when the host passed none
/// or is older.
///
/// # Safety
///
/// `params` is valid for reads of `params.struct_size` bytes, and `config_json`, where covered,
/// is null or NUL-terminated.
unsafe fn init_config(params: &RawInitParams) -> Result<Value, Failure> {
    let covered = covers(
        params.struct_size,
        std::mem::offset_of!(RawInitParams, config_json),
        size_of::<*const c_char>(),
    );
    if !covered || params.config_json.is_null() {
        return Ok(Value::Null);
    }
    // SAFETY: as the caller guarantees.
    let text = unsafe { c_str(params.config_json, "init: config_json")? };
    match serde_json::from_str::<Value>(text) {
        Ok(config @ Value::Object(_)) => Ok(config),
        // The message must not echo the text: a configuration may hold secrets.
        _ => Err(internal("init: config_json is not a JSON object")),
    }
}

/// `destroy`: drops the `Box<T>` created by [`init`].
///
/// # Safety
///
/// `instance` came from [`init`] for the same `T` and is not used afterwards.
pub unsafe extern "C" fn destroy<T: Plugin>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    // A panic in `Drop` is swallowed: there is nobody left to report it to, and letting it
    // unwind into the host would abort the process.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller guarantees `instance` is the `Box<T>` from `init`, given back once.
        drop(unsafe { Box::from_raw(instance.cast::<T>()) });
    }));
}

/// `manifest`: serialises [`Plugin::manifest`].
///
/// # Safety
///
/// `instance` came from [`init`] for the same `T`; `out` is null or a valid [`RawBuffer`].
pub unsafe extern "C" fn manifest<T: Plugin>(instance: *mut c_void, out: *mut RawBuffer) -> Status {
    respond(out, || {
        // SAFETY: the caller guarantees `instance` is a live `Box<T>` from `init`.
        let plugin =
            unsafe { instance.cast::<T>().as_ref() }.ok_or_else(|| internal("instance is null"))?;
        let json = serde_json::to_vec(&plugin.manifest())
            .map_err(|err| internal(format!("cannot serialise the manifest: {err}")))?;
        Ok(Some(json))
    })
}

/// `call`: decodes the arguments, runs [`Plugin::call`] and encodes its result.
///
/// # Safety
///
/// `instance` came from [`init`] for the same `T`; `tool` and `input_json` are null or
/// NUL-terminated; `ctx` is null or a valid [`RawCallContext`] whose strings are null or
/// NUL-terminated; `out` is null or a valid [`RawBuffer`]. All live for the duration of the call.
pub unsafe extern "C" fn call<T: Plugin>(
    instance: *mut c_void,
    tool: *const c_char,
    input_json: *const c_char,
    ctx: *const RawCallContext,
    out: *mut RawBuffer,
) -> Status {
    respond(out, || {
        // SAFETY: the caller guarantees `instance` is a live `Box<T>` from `init`; `T: Sync`
        // makes the shared reference sound while other threads hold one too.
        let plugin =
            unsafe { instance.cast::<T>().as_ref() }.ok_or_else(|| internal("instance is null"))?;
        // SAFETY: the caller guarantees each pointer is null or NUL-terminated and live.
        let (tool, input) = unsafe { (c_str(tool, "tool")?, c_str(input_json, "input_json")?) };
        let input: Value = serde_json::from_str(input)
            .map_err(|err| bad_input(format!("input is not JSON: {err}")))?;
        // SAFETY: as above, for the context and its strings.
        let ctx = unsafe { call_context(ctx)? };
        match plugin.call_json(tool, input, &ctx) {
            Ok(json) => Ok(Some(json)),
            Err(err) => Err(failure(&err)),
        }
    })
}

/// `guard`: decodes the arguments, runs [`Plugin::guard`] and writes its answer (`true` or
/// `false`).
///
/// # Safety
///
/// `instance` came from [`init`] for the same `T`; the strings are null or NUL-terminated; `out`
/// is null or a valid [`RawBuffer`]. All live for the duration of the call.
pub unsafe extern "C" fn guard<T: Plugin>(
    instance: *mut c_void,
    name: *const c_char,
    params_json: *const c_char,
    context_json: *const c_char,
    event_json: *const c_char,
    out: *mut RawBuffer,
) -> Status {
    respond(out, || {
        // SAFETY: as in `call`: a live `Box<T>` from `init`, shared across threads (`T: Sync`).
        let plugin =
            unsafe { instance.cast::<T>().as_ref() }.ok_or_else(|| internal("instance is null"))?;
        // SAFETY: the caller guarantees each pointer is null or NUL-terminated and live.
        let (name, params, context, event) = unsafe {
            (
                c_str(name, "name")?,
                c_str(params_json, "params_json")?,
                c_str(context_json, "context_json")?,
                c_str(event_json, "event_json")?,
            )
        };
        let json = |what: &str, text: &str| -> Result<Value, Failure> {
            if text.is_empty() {
                return Ok(Value::Null);
            }
            serde_json::from_str(text)
                .map_err(|err| bad_input(format!("{what} is not JSON: {err}")))
        };
        let (params, context, event) = (
            json("params_json", params)?,
            json("context_json", context)?,
            json("event_json", event)?,
        );
        match plugin.guard(name, &params, &context, &event) {
            Ok(answer) => Ok(Some(if answer {
                b"true".to_vec()
            } else {
                b"false".to_vec()
            })),
            Err(err) => Err((Status::TOOL_ERROR, err.message())),
        }
    })
}

/// `read` (ABI 1.3): decodes the request, runs [`Plugin::read`] and encodes its output, with
/// the same status mapping as [`call`].
///
/// # Safety
///
/// As for [`call`], with `name` and `request_json` in place of `tool` and `input_json`.
pub unsafe extern "C" fn read<T: Plugin>(
    instance: *mut c_void,
    kind: ReadKind,
    name: *const c_char,
    request_json: *const c_char,
    ctx: *const RawCallContext,
    out: *mut RawBuffer,
) -> Status {
    respond(out, || {
        // SAFETY: as in `call`.
        let plugin =
            unsafe { instance.cast::<T>().as_ref() }.ok_or_else(|| internal("instance is null"))?;
        // SAFETY: the caller guarantees each pointer is null or NUL-terminated and live.
        let (name, request) =
            unsafe { (c_str(name, "name")?, c_str(request_json, "request_json")?) };
        if kind == ReadKind::COMPLETION {
            let request: Value = serde_json::from_str(request)
                .map_err(|err| bad_input(format!("request is not JSON: {err}")))?;
            // SAFETY: as in `call`.
            let ctx = unsafe { call_context(ctx)? };
            return match plugin.complete(name, request, &ctx) {
                Ok(value) => serde_json::to_vec(&value)
                    .map(Some)
                    .map_err(|err| internal(format!("cannot serialise the output: {err}"))),
                Err(err) => Err(failure(&err)),
            };
        }
        let Some(kind) = PrimitiveKind::from_raw(kind) else {
            return Err((
                Status::UNKNOWN_TOOL,
                format!("unknown read kind {}", kind.0),
            ));
        };
        let request: Value = serde_json::from_str(request)
            .map_err(|err| bad_input(format!("request is not JSON: {err}")))?;
        // SAFETY: as in `call`.
        let ctx = unsafe { call_context(ctx)? };
        match plugin.read(kind, name, request, &ctx) {
            Ok(value) => serde_json::to_vec(&value)
                .map(Some)
                .map_err(|err| internal(format!("cannot serialise the output: {err}"))),
            Err(err) => Err(failure(&err)),
        }
    })
}

/// `err` as it crosses the ABI: its status and message, or for a request for input its status
/// and whole body (`{"message", "inputRequests"}`, written as is by `respond`).
fn failure(err: &ToolError) -> Failure {
    match err {
        ToolError::NeedsInput(requests) => (
            Status::NEEDS_INPUT,
            json!({"message": err.message(), "inputRequests": requests}).to_string(),
        ),
        err => (status_of(err), err.message()),
    }
}

/// The status a [`ToolError`] crosses the ABI as.
fn status_of(err: &ToolError) -> Status {
    match err {
        ToolError::Failed(_) => Status::TOOL_ERROR,
        ToolError::BadInput(_) => Status::BAD_INPUT,
        ToolError::UnknownTool(_) => Status::UNKNOWN_TOOL,
        ToolError::NeedsInput(_) => Status::NEEDS_INPUT,
    }
}

/// `free_buffer`: frees a buffer written by this module (`respond`).
///
/// # Safety
///
/// `data` and `len` are exactly what this plugin wrote to a [`RawBuffer`], freed once.
pub unsafe extern "C" fn free_buffer(data: *mut u8, len: usize) {
    if data.is_null() {
        return;
    }
    // SAFETY: `(data, len)` came from `Box::<[u8]>::into_raw` in `write_buffer`, and the caller
    // frees it once.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(data, len)) });
}

/// Runs `body` with panics caught, writes its output (or `{"message"}`) to `out`, and returns the
/// status. `Ok(None)` means success without output (only `init` does that).
fn respond(out: *mut RawBuffer, body: impl FnOnce() -> Result<Option<Vec<u8>>, Failure>) -> Status {
    let result = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err((Status::PANIC, panic_message(&*payload).to_owned())));
    let (status, bytes) = match result {
        Ok(bytes) => (Status::OK, bytes),
        // A request for input is the whole body already (see `failure`).
        Err((Status::NEEDS_INPUT, body)) => (Status::NEEDS_INPUT, Some(body.into_bytes())),
        Err((status, message)) => (
            status,
            Some(json!({ "message": message }).to_string().into_bytes()),
        ),
    };
    if let Some(bytes) = bytes {
        // SAFETY: every entry point's caller guarantees `out` is null or a valid `RawBuffer`.
        unsafe { write_buffer(out, bytes) };
    }
    status
}

/// Hands `bytes` to the host through `out`, or drops them when `out` is unusable (null or from a
/// host that knows a smaller struct): the status still tells the host what happened.
///
/// # Safety
///
/// `out` is null or points to a valid, writable [`RawBuffer`].
unsafe fn write_buffer(out: *mut RawBuffer, bytes: Vec<u8>) {
    // SAFETY: the caller guarantees `out` is null or valid for reads and writes.
    let Some(out) = (unsafe { out.as_mut() }) else {
        return;
    };
    if out.struct_size < size_of::<RawBuffer>() {
        return;
    }
    let raw = Box::into_raw(bytes.into_boxed_slice());
    out.data = raw.cast::<u8>();
    out.len = raw.len();
}

/// Builds the safe [`CallContext`] from the host's struct.
///
/// # Safety
///
/// `ctx` is null or a valid [`RawCallContext`] whose strings are null or NUL-terminated.
unsafe fn call_context(ctx: *const RawCallContext) -> Result<CallContext, Failure> {
    // SAFETY: the caller guarantees `ctx` is null or valid for reads.
    let ctx = unsafe { ctx.as_ref() }.ok_or_else(|| internal("ctx is null"))?;
    if ctx.struct_size < CALL_CONTEXT_V1_0_SIZE {
        return Err(internal("ctx.struct_size is too small"));
    }
    // SAFETY: the caller guarantees `ctx` is valid for `struct_size` bytes; `host` is read only
    // when the host's struct has it (ABI 1.1 and later).
    let host = unsafe { host_services(ctx) };
    // SAFETY: the caller guarantees the strings are null or NUL-terminated and live.
    let (call_id, handle, state) = unsafe {
        (
            c_str(ctx.call_id, "ctx.call_id")?,
            c_str(ctx.handle, "ctx.handle")?,
            c_str(ctx.state_json, "ctx.state_json")?,
        )
    };
    let state = if state.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(state)
            .map_err(|err| bad_input(format!("ctx.state_json is not JSON: {err}")))?
    };
    // SAFETY: as above; `context_json` is read only when the host's struct has it (ABI 1.2).
    let context = unsafe { machine_context(ctx) }?;
    // SAFETY: as above; `idempotency_key` is read only when the host's struct has it (ABI 1.4).
    let idempotency_key = unsafe { idempotency_key(ctx) }?;
    // SAFETY: as above, for `asking_json` (ABI 1.4).
    let asking = unsafe { asking(ctx) }?;
    Ok(CallContext {
        call_id: call_id.to_owned(),
        handle: handle.to_owned(),
        state,
        host,
        context,
        idempotency_key,
        asking,
    })
}

/// What the handler may ask for and has been told, from `ctx`, or `null` when the host is older
/// than ABI 1.4 or passed NULL.
///
/// # Safety
///
/// `ctx` is valid for reads of `ctx.struct_size` bytes, and `ctx.asking_json`, where present, is
/// null or NUL-terminated.
unsafe fn asking(ctx: &RawCallContext) -> Result<Value, Failure> {
    let has_field = covers(
        ctx.struct_size,
        std::mem::offset_of!(RawCallContext, asking_json),
        size_of::<*const c_char>(),
    );
    if !has_field || ctx.asking_json.is_null() {
        return Ok(Value::Null);
    }
    // SAFETY: `struct_size` covers the field; the caller guarantees the string.
    let text = unsafe { c_str(ctx.asking_json, "ctx.asking_json") }?;
    serde_json::from_str(text)
        .map_err(|err| bad_input(format!("ctx.asking_json is not JSON: {err}")))
}

/// The call's idempotency key from `ctx`, or empty when the host is older than ABI 1.4 or
/// passed NULL.
///
/// # Safety
///
/// `ctx` is valid for reads of `ctx.struct_size` bytes, and `ctx.idempotency_key`, where
/// present, is null or NUL-terminated.
unsafe fn idempotency_key(ctx: &RawCallContext) -> Result<String, Failure> {
    let has_key = covers(
        ctx.struct_size,
        std::mem::offset_of!(RawCallContext, idempotency_key),
        size_of::<*const c_char>(),
    );
    if !has_key {
        return Ok(String::new());
    }
    // SAFETY: `struct_size` covers the field; the caller guarantees the string.
    unsafe { c_str(ctx.idempotency_key, "ctx.idempotency_key") }.map(str::to_owned)
}

/// The instance's machine context from `ctx`, or `null` when the host is older than ABI 1.2 or
/// passed NULL.
///
/// # Safety
///
/// `ctx` is valid for reads of `ctx.struct_size` bytes, and `ctx.context_json`, where present,
/// is null or NUL-terminated.
unsafe fn machine_context(ctx: &RawCallContext) -> Result<Value, Failure> {
    let has_context = covers(
        ctx.struct_size,
        std::mem::offset_of!(RawCallContext, context_json),
        size_of::<*const c_char>(),
    );
    if !has_context {
        return Ok(Value::Null);
    }
    // SAFETY: `struct_size` covers the field; the caller guarantees the string.
    let text = unsafe { c_str(ctx.context_json, "ctx.context_json") }?;
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
        .map_err(|err| bad_input(format!("ctx.context_json is not JSON: {err}")))
}

/// Copies the host's services out of `ctx`, or none when the host is older than ABI 1.1, passed
/// NULL, or gave a services struct too small to read.
///
/// # Safety
///
/// `ctx` is valid for reads of `ctx.struct_size` bytes, and `ctx.host`, where present, is null or
/// points to a [`RawHostServices`] valid for reads of its `struct_size` bytes.
unsafe fn host_services(ctx: &RawCallContext) -> HostServices {
    let has_host = covers(
        ctx.struct_size,
        std::mem::offset_of!(RawCallContext, host),
        size_of::<*const RawHostServices>(),
    );
    if !has_host {
        return HostServices::default();
    }
    // SAFETY: the caller guarantees `host` is null or valid; `struct_size` is checked before any
    // other field is read.
    let Some(services) = (unsafe { ctx.host.as_ref() }) else {
        return HostServices::default();
    };
    if services.struct_size < HOST_SERVICES_V1_1_SIZE {
        return HostServices::default();
    }
    // SAFETY: the caller guarantees these are the host's services for this call, and their
    // size was checked just above.
    unsafe { HostServices::from_raw(services) }
}

/// Borrows a NUL-terminated UTF-8 string; null reads as `""`.
///
/// # Safety
///
/// `ptr` is null or NUL-terminated and live for `'a`.
unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Ok("");
    }
    // SAFETY: the caller guarantees `ptr` is NUL-terminated and live for `'a`.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|err| bad_input(format!("{what} is not UTF-8: {err}")))
}

fn internal(message: impl Into<String>) -> Failure {
    (Status::INTERNAL, message.into())
}

fn bad_input(message: impl Into<String>) -> Failure {
    (Status::BAD_INPUT, message.into())
}

/// The text of a panic payload: `panic!` with a literal gives `&str`, with arguments `String`.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}
