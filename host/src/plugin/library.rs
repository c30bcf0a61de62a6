//! One loaded plugin library and its instance: the only place in the host that touches raw
//! pointers of the plugin ABI.
//!
//! [`Library::open`] follows the ABI's loading protocol step by step, so a broken file stops at
//! the first check it fails, before anything later is touched: magic bytes, `dlopen`, the ABI
//! version symbol, the entry symbol, the table's `struct_size` and function pointers, `init`,
//! `manifest`. [`Library::call`] runs one tool and copies the output before handing the plugin's
//! buffer back to the plugin's own `free_buffer` (each side frees only what it allocated).
//!
//! This module does not interpret outputs (status → result mapping lives in
//! [`super::loaded`]) and does not keep the library alive by itself: callers hold it in an `Arc`
//! for as long as any call may run, and dropping the last one destroys the instance and unloads.

use std::{
    ffi::{CStr, c_void},
    fs::File,
    io::{self, Read},
    path::Path,
    ptr, slice,
};

use turnstile_plugin_abi::abi::{
    ABI_VERSION, ABI_VERSION_SYMBOL, AbiVersionFn, CallFn, DestroyFn, ENTRY_SYMBOL_V1, EntryFnV1,
    FreeBufferFn, GuardFn, InitFn, ManifestFn, PLUGIN_TABLE_V1_0_SIZE, PluginTableV1, RawBuffer,
    RawCallContext, RawHostServices, RawInitParams, ReadFn, ReadKind, Status, covers,
};

use super::error::PluginError;

/// A loaded library with a live plugin instance.
pub(super) struct Library {
    /// The plugin's entry points, copied out of its table (the table itself is never read again).
    table: Table,
    /// The opaque instance from `init`; handed to every call and finally to `destroy`.
    instance: *mut c_void,
    /// Keeps the code mapped. Dropped (unloaded) after `destroy`, by `Drop` below.
    library: Option<libloading::Library>,
}

// SAFETY: the ABI requires the instance and all entry points to be usable from any thread and
// concurrently (Rust plugins enforce it with `Plugin: Send + Sync`; the C header states it), and
// `Library` hands out no interior references: its fields are only read after construction.
unsafe impl Send for Library {}
// SAFETY: see `Send`; `call` takes `&self` and only reads the fields.
unsafe impl Sync for Library {}

/// The non-null entry points of a [`PluginTableV1`], and the optional ones it has.
#[derive(Clone, Copy)]
struct Table {
    destroy: DestroyFn,
    manifest: ManifestFn,
    call: CallFn,
    free_buffer: FreeBufferFn,
    /// ABI 1.2: named guards; `None` when the table is older or the plugin has none.
    guard: Option<GuardFn>,
    /// ABI 1.3; `None` when the table is older or the plugin left it NULL.
    read: Option<ReadFn>,
}

/// The strings of one guard decision, NUL-terminated as the ABI requires.
pub(super) struct GuardArgs<'a> {
    pub name: &'a CStr,
    pub params_json: &'a CStr,
    pub context_json: &'a CStr,
    pub event_json: &'a CStr,
}

/// The result of one `call` (or `manifest`): the status and the output bytes, copied out of the
/// plugin's buffer.
pub(super) struct RawOutput {
    pub status: Status,
    pub bytes: Vec<u8>,
}

/// The strings of one call, NUL-terminated as the ABI requires.
pub(super) struct CallArgs<'a> {
    pub tool: &'a CStr,
    pub input_json: &'a CStr,
    pub call_id: &'a CStr,
    pub handle: &'a CStr,
    pub state_json: &'a CStr,
    /// The instance's machine context (ABI 1.2); `null` when there is none.
    pub context_json: &'a CStr,
    /// The call's idempotency key (ABI 1.4); empty for a tool bound to no workflow.
    pub idempotency_key: &'a CStr,
    /// What the handler may ask for and has been told (ABI 1.4); `None`: nothing may be asked.
    pub asking_json: Option<&'a CStr>,
    /// The host services for this call (ABI 1.1), if any.
    pub host: Option<&'a RawHostServices>,
}

/// The strings of one `read` (ABI 1.3), NUL-terminated as the ABI requires.
pub(super) struct ReadArgs<'a> {
    pub kind: ReadKind,
    pub name: &'a CStr,
    pub request_json: &'a CStr,
    pub call_id: &'a CStr,
    pub handle: &'a CStr,
    pub state_json: &'a CStr,
    pub context_json: &'a CStr,
    /// As for a call (ABI 1.4): a prompt may ask too.
    pub asking_json: Option<&'a CStr>,
}

impl Library {
    /// Loads the library at `path` and creates its plugin instance; returns it with the raw
    /// manifest bytes (parsing them is the caller's job).
    ///
    /// `path` is used for error messages as given; `file` is the file actually opened (the same,
    /// or a private copy, see [`super::load_private_copy`]).
    /// `config` (a JSON object's text) reaches the plugin's `init` (ABI 1.1); it may hold
    /// secrets, so it appears in no error or log.
    pub(super) fn open(
        path: &Path,
        file: &Path,
        config: Option<&CStr>,
    ) -> Result<(Library, Vec<u8>), PluginError> {
        check_magic(path, file)?;
        let library = dlopen(path, file)?;

        // SAFETY: the ABI declares this symbol as `uint32_t (void)`. If the library lies about
        // that, nothing the host can do makes it safe; this is the inherent trust of loading code.
        let version = unsafe { symbol::<AbiVersionFn>(&library, path, ABI_VERSION_SYMBOL)?() };
        if version != ABI_VERSION {
            return Err(PluginError::UnsupportedAbi {
                path: path.to_owned(),
                found: version,
            });
        }
        // SAFETY: as above, the v1 entry symbol is declared as `const TurnstilePluginV1 *(void)`.
        let table = unsafe { symbol::<EntryFnV1>(&library, path, ENTRY_SYMBOL_V1)?() };
        // SAFETY: the ABI says the table is static and valid while the library is loaded.
        let (table, init) =
            unsafe { read_table(table) }.map_err(|reason| PluginError::BadTable {
                path: path.to_owned(),
                reason,
            })?;

        let params = RawInitParams {
            struct_size: size_of::<RawInitParams>(),
            host_abi_version: ABI_VERSION,
            config_json: config.map_or(ptr::null(), CStr::as_ptr),
        };
        let mut instance = ptr::null_mut();
        let mut error = RawBuffer::empty();
        // SAFETY: `init` gets valid params and out-pointers that live across the call, as
        // `InitFn` requires.
        let status = unsafe { init(&params, &mut instance, &mut error) };
        // SAFETY: `error` was written (or left empty) by this library's `init`.
        let error = unsafe { take_buffer(table.free_buffer, &error) };
        if status != Status::OK {
            return Err(PluginError::Init {
                path: path.to_owned(),
                message: error_message(status, &error),
            });
        }

        let library = Library {
            table,
            instance,
            library: Some(library),
        };
        // From here on, dropping `library` on an error runs `destroy` and unloads.
        let manifest = library.manifest();
        if manifest.status != Status::OK {
            return Err(PluginError::BadManifest {
                path: path.to_owned(),
                reason: error_message(manifest.status, &manifest.bytes),
            });
        }
        Ok((library, manifest.bytes))
    }

    /// Calls the plugin's `manifest`.
    fn manifest(&self) -> RawOutput {
        let mut out = RawBuffer::empty();
        // SAFETY: `instance` came from this library's `init` and is live until `Drop`; `out`
        // is a valid, host-initialised buffer.
        let status = unsafe { (self.table.manifest)(self.instance, &mut out) };
        // SAFETY: `out` was written (or left empty) by this library.
        let bytes = unsafe { take_buffer(self.table.free_buffer, &out) };
        RawOutput { status, bytes }
    }

    /// Runs one tool. Blocking for as long as the plugin takes; safe to call from several
    /// threads at once.
    pub(super) fn call(&self, args: &CallArgs<'_>) -> RawOutput {
        let ctx = RawCallContext {
            struct_size: size_of::<RawCallContext>(),
            call_id: args.call_id.as_ptr(),
            handle: args.handle.as_ptr(),
            state_json: args.state_json.as_ptr(),
            host: args.host.map_or(ptr::null(), ptr::from_ref),
            context_json: args.context_json.as_ptr(),
            idempotency_key: args.idempotency_key.as_ptr(),
            asking_json: args.asking_json.map_or(ptr::null(), CStr::as_ptr),
        };
        let mut out = RawBuffer::empty();
        // SAFETY: `instance` is live until `Drop` (which cannot run while `&self` is held); all
        // strings are NUL-terminated and, like `ctx` and `out`, outlive the call; the ABI makes
        // `call` thread-safe.
        let status = unsafe {
            (self.table.call)(
                self.instance,
                args.tool.as_ptr(),
                args.input_json.as_ptr(),
                &ctx,
                &mut out,
            )
        };
        // SAFETY: `out` was written (or left empty) by this library.
        let bytes = unsafe { take_buffer(self.table.free_buffer, &out) };
        RawOutput { status, bytes }
    }
}

impl Library {
    /// Decides one named guard; `None` when the plugin has no `guard` entry point (its table
    /// is older than ABI 1.2, or the entry is NULL).
    pub(super) fn guard(&self, args: &GuardArgs<'_>) -> Option<RawOutput> {
        let guard = self.table.guard?;
        let mut out = RawBuffer::empty();
        // SAFETY: as for `call`: a live instance, NUL-terminated strings and `out` that outlive
        // the call; the ABI makes `guard` thread-safe.
        let status = unsafe {
            guard(
                self.instance,
                args.name.as_ptr(),
                args.params_json.as_ptr(),
                args.context_json.as_ptr(),
                args.event_json.as_ptr(),
                &mut out,
            )
        };
        // SAFETY: `out` was written (or left empty) by this library.
        let bytes = unsafe { take_buffer(self.table.free_buffer, &out) };
        Some(RawOutput { status, bytes })
    }

    /// Whether the plugin has a `read` entry point (ABI 1.3).
    pub(super) fn reads(&self) -> bool {
        self.table.read.is_some()
    }

    /// Produces a prompt's or resource's content; `None` when the plugin has no `read`. Blocking
    /// for as long as the plugin takes; safe to call from several threads at once.
    pub(super) fn read(&self, args: &ReadArgs<'_>) -> Option<RawOutput> {
        let read = self.table.read?;
        let ctx = RawCallContext {
            struct_size: size_of::<RawCallContext>(),
            call_id: args.call_id.as_ptr(),
            handle: args.handle.as_ptr(),
            state_json: args.state_json.as_ptr(),
            // Reads report nothing back: no progress, no logs, nothing to cancel.
            host: ptr::null(),
            context_json: args.context_json.as_ptr(),
            // A read changes nothing: there is no attempt to name.
            idempotency_key: c"".as_ptr(),
            asking_json: args.asking_json.map_or(ptr::null(), CStr::as_ptr),
        };
        let mut out = RawBuffer::empty();
        // SAFETY: as in `call`: a live instance, NUL-terminated strings and a context and buffer
        // that outlive the call; the ABI makes `read` thread-safe like `call`.
        let status = unsafe {
            read(
                self.instance,
                args.kind,
                args.name.as_ptr(),
                args.request_json.as_ptr(),
                &ctx,
                &mut out,
            )
        };
        // SAFETY: `out` was written (or left empty) by this library.
        let bytes = unsafe { take_buffer(self.table.free_buffer, &out) };
        Some(RawOutput { status, bytes })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: `instance` came from `init`, which succeeded (a `Library` exists only then);
        // no call is running, since calls borrow `self`; it is destroyed exactly once.
        unsafe { (self.table.destroy)(self.instance) };
        // Unload only after `destroy`: the instance's code lives in the library.
        drop(self.library.take());
    }
}

/// The first bytes of a shared library on this platform, checked before `dlopen` so that a
/// stray text file gets a clear "not a shared library" instead of a loader message.
fn check_magic(path: &Path, file: &Path) -> Result<(), PluginError> {
    let io_error = |source: io::Error| PluginError::Io {
        path: path.to_owned(),
        action: "cannot read".into(),
        source,
    };
    let mut magic = [0u8; 4];
    let mut reader = File::open(file).map_err(io_error)?;
    let mut read = 0;
    while read < magic.len() {
        match reader.read(&mut magic[read..]).map_err(io_error)? {
            0 => break,
            n => read += n,
        }
    }
    if read == magic.len() && is_library_magic(magic) {
        Ok(())
    } else {
        Err(PluginError::NotALibrary {
            path: path.to_owned(),
        })
    }
}

#[cfg(target_vendor = "apple")]
fn is_library_magic(magic: [u8; 4]) -> bool {
    // Mach-O 32/64-bit in either byte order, and universal ("fat") binaries.
    let be = u32::from_be_bytes(magic);
    [
        0xfeed_face,
        0xfeed_facf,
        0xcefa_edfe,
        0xcffa_edfe,
        0xcafe_babe,
    ]
    .contains(&be)
}

#[cfg(windows)]
fn is_library_magic(magic: [u8; 4]) -> bool {
    magic[..2] == *b"MZ"
}

#[cfg(not(any(target_vendor = "apple", windows)))]
fn is_library_magic(magic: [u8; 4]) -> bool {
    magic == *b"\x7fELF"
}

/// `dlopen(file, RTLD_NOW | RTLD_LOCAL)`: `NOW` so that an unresolved symbol fails here rather
/// than in the middle of a call; `LOCAL` so that two plugins defining the same symbol (every
/// plugin exports `turnstile_plugin_v1`) never resolve to each other's.
#[cfg(unix)]
fn dlopen(path: &Path, file: &Path) -> Result<libloading::Library, PluginError> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading runs the library's initialisers; trusting them is the point of a plugin
    // directory, which the operator controls.
    unsafe { Library::open(Some(file), RTLD_NOW | RTLD_LOCAL) }
        .map(libloading::Library::from)
        .map_err(|err| open_error(path, err))
}

#[cfg(not(unix))]
fn dlopen(path: &Path, file: &Path) -> Result<libloading::Library, PluginError> {
    // SAFETY: as on unix, loading runs the library's initialisers.
    unsafe { libloading::Library::new(file) }.map_err(|err| open_error(path, err))
}

fn open_error(path: &Path, err: libloading::Error) -> PluginError {
    PluginError::Open {
        path: path.to_owned(),
        reason: std::error::Error::source(&err)
            .map_or_else(|| err.to_string(), ToString::to_string),
    }
}

/// Looks up `name` as a `T` (a function pointer type).
///
/// # Safety
///
/// `T` must be the symbol's real type.
unsafe fn symbol<T: Copy>(
    library: &libloading::Library,
    path: &Path,
    name: &'static str,
) -> Result<T, PluginError> {
    // SAFETY: the caller guarantees `T` matches the symbol; the copy is used only while
    // `library` stays loaded (the `Library` struct keeps it until after `destroy`).
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|symbol| *symbol)
        .map_err(|_| PluginError::MissingSymbol {
            path: path.to_owned(),
            symbol: name,
        })
}

/// Validates the table behind `table` and copies the entry points out.
///
/// # Safety
///
/// `table` is null or points to memory readable for at least `struct_size` bytes, whose first
/// field is `struct_size`.
unsafe fn read_table(table: *const PluginTableV1) -> Result<(Table, InitFn), String> {
    if table.is_null() {
        return Err(format!("{ENTRY_SYMBOL_V1} returned NULL"));
    }
    // Read only `struct_size` first: a table smaller than ABI 1.0's must not be read at all.
    // SAFETY: non-null, and the ABI puts a `size_t struct_size` first in every struct.
    let struct_size = unsafe { ptr::addr_of!((*table).struct_size).read_unaligned() };
    if struct_size < PLUGIN_TABLE_V1_0_SIZE {
        return Err(format!(
            "struct_size is {struct_size}, expected at least {PLUGIN_TABLE_V1_0_SIZE} (ABI 1.0's table)"
        ));
    }
    // Fields are read one at a time through the raw pointer, never through a reference to the
    // whole struct: an older plugin's table is shorter than this build's `PluginTableV1`. ABI
    // 1.0's fields are covered by the size check; a field appended later is read only where
    // `abi::covers(struct_size, ..)` says the plugin's table has it (the growth rule in
    // `turnstile_plugin_abi::abi`).
    macro_rules! field {
        ($name:ident) => {
            // SAFETY: `table` is non-null and readable for `struct_size` bytes, and every caller
            // below reads a field that `struct_size` covers.
            unsafe { ptr::addr_of!((*table).$name).read_unaligned() }
        };
    }
    let abi_version = field!(abi_version);
    if abi_version != ABI_VERSION {
        return Err(format!(
            "table abi_version is {abi_version}, expected {ABI_VERSION}"
        ));
    }
    let missing = |name: &str| format!("function pointer {name} is NULL");
    let has_guard = covers(
        struct_size,
        std::mem::offset_of!(PluginTableV1, guard),
        size_of::<Option<GuardFn>>(),
    );
    let has_read = covers(
        struct_size,
        std::mem::offset_of!(PluginTableV1, read),
        size_of::<Option<ReadFn>>(),
    );
    Ok((
        Table {
            destroy: field!(destroy).ok_or_else(|| missing("destroy"))?,
            manifest: field!(manifest).ok_or_else(|| missing("manifest"))?,
            call: field!(call).ok_or_else(|| missing("call"))?,
            free_buffer: field!(free_buffer).ok_or_else(|| missing("free_buffer"))?,
            // ABI 1.2 and 1.3, optional: an older table ends before them.
            guard: if has_guard { field!(guard) } else { None },
            read: if has_read { field!(read) } else { None },
        },
        field!(init).ok_or_else(|| missing("init"))?,
    ))
}

/// Copies a plugin-written buffer and gives it back to the plugin.
///
/// # Safety
///
/// `buffer` was passed to this library's entry point as an out-parameter initialised with
/// [`RawBuffer::empty`], and is not used again.
unsafe fn take_buffer(free_buffer: FreeBufferFn, buffer: &RawBuffer) -> Vec<u8> {
    if buffer.data.is_null() {
        return Vec::new();
    }
    // SAFETY: the plugin wrote `len` readable bytes at `data`.
    let bytes = unsafe { slice::from_raw_parts(buffer.data, buffer.len) }.to_vec();
    // SAFETY: `(data, len)` is what the plugin wrote; freed once, by the plugin.
    unsafe { free_buffer(buffer.data, buffer.len) };
    bytes
}

/// The `message` of an error output, or a description of what the plugin sent instead.
pub(super) fn error_message(status: Status, bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|value| value.get("message")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            format!(
                "status {} without a {{\"message\"}} output (got {:?})",
                status.0,
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        })
}
