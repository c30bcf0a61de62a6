//! [`LoadedPlugin`]: the safe handle the rest of the host uses to call a plugin.
//!
//! It owns the translation between Rust values and the ABI (JSON text, NUL-terminated strings,
//! status codes) and the mapping of statuses to [`PluginOutput`] / [`PluginError`], and hides
//! where the plugin runs: in this process, or isolated in one of its own (`isolated`), whose
//! calls come back as the same results. It does not know about workflows, gating or MCP: it
//! runs the tool it is asked to run.

use std::{
    ffi::{CStr, CString},
    path::{Path, PathBuf},
    sync::Arc,
};

use serde_json::{Value, json};
use turnstile_plugin_abi::{CallContext, Manifest, PrimitiveKind, ToolManifest, abi::Status};

use super::{
    config::PluginConfigs,
    error::PluginError,
    isolated::{Isolated, Isolation},
    library::{CallArgs, GuardArgs, Library, ReadArgs, error_message},
    manifest,
    output::{PluginOutput, Returned},
    pool::CallPool,
    services::{HostCall, Registered},
    upstream::Upstream,
};

/// A plugin library, loaded and initialised, with its checked manifest.
///
/// A cheap handle: clones share one library. The library stays loaded, and its instance alive,
/// until the last clone is dropped, so a call running on a blocking thread with its own clone
/// is safe even if the registry drops the plugin meanwhile (reload). `Send + Sync`; `call` may
/// run on many threads at once.
#[derive(Clone)]
pub struct LoadedPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    /// The path the plugin was loaded from (the original, also for a private copy).
    path: PathBuf,
    manifest: Manifest,
    backend: Backend,
    /// The bound on this plugin's concurrent calls (see `pool`).
    pool: CallPool,
    /// What loading refused without refusing the plugin (an upstream's binding of a tool it
    /// does not have), one line each.
    notes: Vec<String>,
}

/// Where the plugin's code runs.
enum Backend {
    /// Loaded into this process.
    InProcess(Library),
    /// In a process of its own (see `isolated`).
    Isolated(Isolated),
    /// An MCP server, reached as its client (see `upstream`).
    Upstream(Upstream),
}

impl LoadedPlugin {
    /// Loads the library at `path`, checks its ABI version, creates the plugin instance, and
    /// reads and checks its manifest. Blocking (file I/O, `dlopen`, plugin initialisers).
    pub fn load(path: &Path) -> Result<LoadedPlugin, PluginError> {
        LoadedPlugin::load_file(path, path, &PluginConfigs::default())
    }

    /// Loads `file` but names it `path` everywhere (errors, [`LoadedPlugin::path`]), giving its
    /// `init` the configuration `configs` has for `path`; used for private copies.
    pub(super) fn load_file(
        path: &Path,
        file: &Path,
        configs: &PluginConfigs,
    ) -> Result<LoadedPlugin, PluginError> {
        LoadedPlugin::load_file_with(path, file, configs.for_plugin(path).as_ref())
    }

    /// Loads the library at `path` and gives its `init` the configuration `config` (a JSON
    /// object) instead of what the environment says.
    pub fn load_with_config(path: &Path, config: &Value) -> Result<LoadedPlugin, PluginError> {
        LoadedPlugin::load_file_with(path, path, Some(config))
    }

    fn load_file_with(
        path: &Path,
        file: &Path,
        config: Option<&Value>,
    ) -> Result<LoadedPlugin, PluginError> {
        // JSON text holds no raw NUL, so this cannot fail for a JSON value.
        let config = config.and_then(|config| CString::new(config.to_string()).ok());
        let (library, manifest) = Library::open(path, file, config.as_deref())?;
        let manifest = manifest::parse(&manifest)
            .and_then(|manifest| {
                manifest::check_content_source(&manifest, library.reads())?;
                Ok(manifest)
            })
            .map_err(|reason| PluginError::BadManifest {
                path: path.to_owned(),
                reason,
            })?;
        Ok(LoadedPlugin {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                manifest,
                backend: Backend::InProcess(library),
                pool: CallPool::default(),
                notes: Vec::new(),
            }),
        })
    }

    /// This plugin, moved into a process of its own: the instance in this process is destroyed
    /// and a process started on `image`, the bytes this plugin was loaded from (see
    /// `isolated`). Only right after loading, before the handle is shared.
    pub(super) fn into_isolated(
        self,
        image: Vec<u8>,
        isolation: &Isolation,
    ) -> Result<LoadedPlugin, PluginError> {
        let (path, manifest) = (self.inner.path.clone(), self.inner.manifest.clone());
        // Destroyed first: a plugin that holds something exclusive (a port, a lock file) must
        // have let go of it before its process takes it.
        drop(self);
        let isolated = Isolated::start(&path, &manifest, image, isolation)?;
        Ok(LoadedPlugin {
            inner: Arc::new(Inner {
                path,
                manifest,
                backend: Backend::Isolated(isolated),
                pool: CallPool::default(),
                notes: Vec::new(),
            }),
        })
    }

    /// The upstream file at `path`, connected and listed (see `upstream`). Blocking, until the
    /// upstream answered. `list_changed` is called when the upstream says its tools changed.
    pub(super) fn load_upstream(
        path: &Path,
        list_changed: super::upstream::ListChanged,
    ) -> Result<LoadedPlugin, PluginError> {
        let loaded = Upstream::load(path, list_changed)?;
        Ok(LoadedPlugin {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                manifest: loaded.manifest,
                backend: Backend::Upstream(loaded.upstream),
                pool: CallPool::default(),
                notes: loaded.notes,
            }),
        })
    }

    /// What loading refused without refusing the plugin, one line each (bindings of an
    /// upstream's file that name tools it does not have).
    pub fn notes(&self) -> &[String] {
        &self.inner.notes
    }

    /// Whether the plugin is an upstream MCP server rather than a library.
    pub fn is_upstream(&self) -> bool {
        matches!(self.inner.backend, Backend::Upstream(_))
    }

    /// Whether the plugin runs in a process of its own.
    pub fn is_isolated(&self) -> bool {
        matches!(self.inner.backend, Backend::Isolated(_))
    }

    /// For an isolated plugin, how many times its process ended while serving; `None` for a
    /// plugin in this process.
    pub fn crashes(&self) -> Option<u64> {
        match &self.inner.backend {
            Backend::InProcess(_) | Backend::Upstream(_) => None,
            Backend::Isolated(isolated) => Some(isolated.crashes()),
        }
    }

    /// Sets how many calls of this plugin may run at once. Only before the handle is shared
    /// (right after loading); returns whether it took effect.
    pub fn set_pool_size(&mut self, size: usize) -> bool {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                inner.pool = CallPool::new(size);
                true
            }
            None => false,
        }
    }

    /// The bound on this plugin's concurrent calls.
    pub fn pool(&self) -> &CallPool {
        &self.inner.pool
    }

    /// The file the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The plugin's manifest, as parsed and checked at load time.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The manifest entry of the tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolManifest> {
        self.inner
            .manifest
            .tools
            .iter()
            .find(|tool| tool.name == name)
    }

    /// Runs `tool` with `input` in `ctx`.
    ///
    /// Blocking for as long as the plugin takes; the host runs it on a blocking thread. Calls
    /// for different instances may run concurrently. A tool that is not in the manifest is
    /// refused without calling the plugin.
    pub fn call(
        &self,
        tool: &str,
        input: &Value,
        ctx: &CallContext,
    ) -> Result<PluginOutput, PluginError> {
        self.call_with(tool, input, ctx, None)
    }

    /// [`LoadedPlugin::call`] with host services (ABI 1.1): what the plugin logs or reports
    /// while it runs goes to `host`, which also says whether the call was cancelled.
    pub fn call_with(
        &self,
        tool: &str,
        input: &Value,
        ctx: &CallContext,
        host: Option<Arc<HostCall>>,
    ) -> Result<PluginOutput, PluginError> {
        let path = &self.inner.path;
        if self.tool(tool).is_none() {
            return Err(PluginError::UnknownTool {
                path: path.clone(),
                tool: tool.to_owned(),
            });
        }
        let library = match &self.inner.backend {
            Backend::InProcess(library) => library,
            Backend::Isolated(isolated) => return isolated.call(tool, input, ctx, host),
            Backend::Upstream(upstream) => return upstream.call(path, tool, input, ctx, host),
        };
        let bad_argument = |what: &'static str| PluginError::BadArgument {
            path: path.clone(),
            tool: tool.to_owned(),
            what,
        };
        // Buffers ending in their NUL, lent to the plugin as `&CStr`: a `CString` shrinks its
        // buffer to fit when made, a reallocation per string. JSON text never holds a raw NUL
        // (serde_json escapes control characters), so only the tool name, call id and handle
        // can fail here.
        let tool_name = with_nul(tool.as_bytes());
        let input_json = json_with_nul(input);
        let instance = InstanceStrings::new(ctx);
        let c_str = |bytes, what| CStr::from_bytes_with_nul(bytes).map_err(|_| bad_argument(what));
        let args = CallArgs {
            tool: c_str(&tool_name, "the tool name")?,
            input_json: c_str(&input_json, "the input")?,
            call_id: c_str(&instance.call_id, "the call id")?,
            handle: c_str(&instance.handle, "the handle")?,
            state_json: c_str(&instance.state_json, "the state")?,
            context_json: c_str(&instance.context_json, "the context")?,
            idempotency_key: c_str(&instance.idempotency_key, "the idempotency key")?,
            asking_json: match &instance.asking_json {
                Some(asking) => Some(c_str(asking, "what may be asked")?),
                None => None,
            },
            host: None,
        };
        // Registered for exactly the duration of the plugin's call.
        let services = host.map(Registered::new);
        let output = library.call(&CallArgs {
            host: services.as_ref().map(|services| &services.raw),
            ..args
        });
        drop(services);
        self.interpret(tool, output.status, output.bytes)
    }

    /// Decides the plugin's named guard `name` (ABI 1.2) over `params`, the instance's
    /// `context` and the whole `event`. Blocking for as long as the plugin takes (guards are
    /// meant to be pure and quick). An error says why there is no answer: the plugin has no
    /// guard entry point, failed, panicked or answered something that is not a boolean.
    pub fn guard(
        &self,
        name: &str,
        params: &Value,
        context: &Value,
        event: &Value,
    ) -> Result<bool, PluginError> {
        let path = &self.inner.path;
        let refused = |reason: String| PluginError::BadResponse {
            path: path.clone(),
            tool: format!("guard {name}"),
            reason,
        };
        let library = match &self.inner.backend {
            Backend::InProcess(library) => library,
            Backend::Isolated(isolated) => {
                // Across the pipe as a call the child recognizes by its name.
                let request = serde_json::json!({
                    "params": params, "context": context, "event": event,
                });
                let name = format!("{}{name}", super::isolated::GUARD_CALL_PREFIX);
                return match isolated.call(&name, &request, &CallContext::default(), None) {
                    Ok(PluginOutput::Success(Returned {
                        value: Value::Bool(answer),
                        ..
                    })) => Ok(answer),
                    Ok(other) => Err(refused(format!("the guard answered {other:?}"))),
                    Err(error) => Err(refused(error.to_string())),
                };
            }
            // An upstream's manifest names no guards, so its machine can name none.
            Backend::Upstream(_) => {
                return Err(refused("an upstream has no guards".into()));
            }
        };
        // As in `call_with`: buffers ending in their NUL, of which only the name can hold one.
        let name_c = with_nul(name.as_bytes());
        let params_json = json_with_nul(params);
        let context_json = json_with_nul(context);
        let event_json = json_with_nul(event);
        let c_str = |bytes| {
            CStr::from_bytes_with_nul(bytes)
                .map_err(|_| refused("the guard name holds a NUL byte".into()))
        };
        let output = library.guard(&GuardArgs {
            name: c_str(&name_c)?,
            params_json: c_str(&params_json)?,
            context_json: c_str(&context_json)?,
            event_json: c_str(&event_json)?,
        });
        let Some(output) = output else {
            return Err(refused(
                "the plugin has no guard entry point (its ABI table is older than 1.2)".into(),
            ));
        };
        match (output.status, serde_json::from_slice(&output.bytes)) {
            (Status::OK, Ok(Value::Bool(answer))) => Ok(answer),
            (Status::OK, _) => Err(refused("the guard's answer is not true or false".into())),
            (status, _) => Err(refused(error_message(status, &output.bytes))),
        }
    }

    /// Produces the content of the prompt or resource `name` (ABI 1.3 `read`) for the instance
    /// `ctx` describes: `request` and the output are as `turnstile_plugin_abi::abi::ReadKind`
    /// describes. Blocking, like [`LoadedPlugin::call`]. A plugin error the client should read
    /// (status `TOOL_ERROR` or `BAD_INPUT`) is a [`PluginOutput`] like a tool's; a plugin without
    /// `read`, one that does not know `name`, a panic or a broken answer is a
    /// [`PluginError::ReadFailed`].
    pub fn read(
        &self,
        kind: PrimitiveKind,
        name: &str,
        request: &Value,
        ctx: &CallContext,
    ) -> Result<PluginOutput, PluginError> {
        let what = format!("{} {name}", kind.as_str());
        let failed = |reason: String| PluginError::ReadFailed {
            path: self.inner.path.clone(),
            what: what.clone(),
            reason,
        };
        let library = match &self.inner.backend {
            Backend::InProcess(library) => library,
            Backend::Isolated(_) => {
                return Err(failed(
                    "the plugin runs isolated, and prompts and resources are not read across \
                     the process boundary yet"
                        .into(),
                ));
            }
            Backend::Upstream(upstream) => {
                return upstream.read(kind, name, request, ctx).map_err(failed);
            }
        };
        let output = read_raw(library, kind.raw(), name, request, ctx)
            .map_err(failed)?
            .ok_or_else(|| failed("the plugin has no read entry point (ABI 1.3)".into()))?;
        let bytes = &output.bytes;
        match output.status {
            Status::OK => serde_json::from_slice(bytes)
                .map(PluginOutput::success)
                .map_err(|err| failed(format!("output is not JSON: {err}"))),
            Status::TOOL_ERROR | Status::BAD_INPUT => match message(bytes) {
                Some(message) if output.status == Status::BAD_INPUT => {
                    Ok(PluginOutput::BadInput(message))
                }
                Some(message) => Ok(PluginOutput::ToolError(message)),
                None => Err(failed(error_message(output.status, bytes))),
            },
            Status::NEEDS_INPUT => needs_input(bytes).map_err(failed),
            Status::UNKNOWN_TOOL => Err(failed(format!(
                "the plugin's read does not know it: {}",
                error_message(output.status, bytes)
            ))),
            Status::PANIC => Err(failed(format!(
                "panicked: {}",
                error_message(output.status, bytes)
            ))),
            status => Err(failed(format!(
                "plugin error (status {}): {}",
                status.0,
                error_message(status, bytes)
            ))),
        }
    }

    /// Completions of one argument of the prompt or resource template `name` (ABI 1.4's
    /// `ReadKind::COMPLETION`; `request` as it describes). Blocking, like [`LoadedPlugin::read`].
    /// A plugin that completes nothing (no `read`, an older plugin, `UNKNOWN_TOOL`) or runs
    /// isolated gives none; what it answers past [`MAX_COMPLETIONS`] is dropped.
    pub fn complete(
        &self,
        name: &str,
        request: &Value,
        ctx: &CallContext,
    ) -> Result<Vec<String>, PluginError> {
        let failed = |reason: String| PluginError::ReadFailed {
            path: self.inner.path.clone(),
            what: format!("completion of {name}"),
            reason,
        };
        let Backend::InProcess(library) = &self.inner.backend else {
            return Ok(Vec::new());
        };
        let kind = turnstile_plugin_abi::abi::ReadKind::COMPLETION;
        let Some(output) = read_raw(library, kind, name, request, ctx).map_err(failed)? else {
            return Ok(Vec::new());
        };
        match output.status {
            Status::OK => {
                let answer: Value = serde_json::from_slice(&output.bytes)
                    .map_err(|err| failed(format!("output is not JSON: {err}")))?;
                let values = answer.get("values").unwrap_or(&answer);
                let values = values
                    .as_array()
                    .filter(|values| values.iter().all(Value::is_string))
                    .ok_or_else(|| failed("the answer is not a list of strings".into()))?;
                Ok(values
                    .iter()
                    .filter_map(Value::as_str)
                    .take(MAX_COMPLETIONS)
                    .map(str::to_owned)
                    .collect())
            }
            Status::UNKNOWN_TOOL => Ok(Vec::new()),
            status => Err(failed(format!(
                "plugin error (status {}): {}",
                status.0,
                error_message(status, &output.bytes)
            ))),
        }
    }

    /// The static content the manifest gives `name` of `kind` (a prompt's or fixed resource's
    /// `text`), if it gives one.
    pub fn static_text(&self, kind: PrimitiveKind, name: &str) -> Option<Value> {
        let manifest = &self.inner.manifest;
        let text = match kind {
            PrimitiveKind::Prompt => manifest
                .prompts
                .iter()
                .find(|prompt| prompt.name == name)?
                .text
                .as_ref(),
            PrimitiveKind::Resource => manifest
                .resources
                .iter()
                .find(|resource| resource.name == name)?
                .text
                .as_ref(),
        };
        text.map(|text| json!(text))
    }

    /// Maps a status and its output to the result; see [`PluginOutput`] and [`PluginError`].
    fn interpret(
        &self,
        tool: &str,
        status: Status,
        bytes: Vec<u8>,
    ) -> Result<PluginOutput, PluginError> {
        // The common case, a JSON answer, keeps its text (see `Returned`); an error names the
        // plugin and the tool.
        if status == Status::OK {
            let not_json = |reason: String| PluginError::BadResponse {
                path: self.inner.path.clone(),
                tool: tool.to_owned(),
                reason: format!("output is not JSON: {reason}"),
            };
            let text = String::from_utf8(bytes).map_err(|err| not_json(err.to_string()))?;
            return match serde_json::from_str(&text) {
                Ok(value) => Ok(PluginOutput::Success(Returned::written(value, text))),
                Err(err) => Err(not_json(err.to_string())),
            };
        }
        let bytes = &bytes[..];
        let path = self.inner.path.clone();
        let tool = tool.to_owned();
        let bad_response = |path, tool, reason| PluginError::BadResponse { path, tool, reason };
        match status {
            Status::TOOL_ERROR | Status::BAD_INPUT => match message(bytes) {
                Some(message) if status == Status::BAD_INPUT => Ok(PluginOutput::BadInput(message)),
                Some(message) => Ok(PluginOutput::ToolError(message)),
                None => Err(bad_response(path, tool, error_message(status, bytes))),
            },
            Status::NEEDS_INPUT => {
                needs_input(bytes).map_err(|reason| bad_response(path, tool, reason))
            }
            Status::UNKNOWN_TOOL => Err(PluginError::UnknownTool { path, tool }),
            Status::PANIC => Err(PluginError::Panicked {
                path,
                tool,
                message: error_message(status, bytes),
            }),
            Status::INTERNAL => Err(bad_response(
                path,
                tool,
                format!("plugin internal error: {}", error_message(status, bytes)),
            )),
            Status(other) => Err(bad_response(path, tool, format!("unknown status {other}"))),
        }
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.inner.path)
            .field("name", &self.inner.manifest.name)
            .field("version", &self.inner.manifest.version)
            .field("isolated", &self.is_isolated())
            .finish_non_exhaustive()
    }
}

/// Asks `library`'s `read` for `kind` of `name` (`None`: it has no `read`), with the strings
/// the ABI wants: buffers ending in their NUL, as in `call_with`. JSON text never holds a raw
/// NUL; only the name, call id and handle could, which is the error.
fn read_raw(
    library: &Library,
    kind: turnstile_plugin_abi::abi::ReadKind,
    name: &str,
    request: &Value,
    ctx: &CallContext,
) -> Result<Option<super::library::RawOutput>, String> {
    let name_c = with_nul(name.as_bytes());
    let request_json = json_with_nul(request);
    let instance = InstanceStrings::new(ctx);
    let c_str = |bytes| {
        CStr::from_bytes_with_nul(bytes).map_err(|_| "an argument contains a NUL byte".to_owned())
    };
    Ok(library.read(&ReadArgs {
        kind,
        name: c_str(&name_c)?,
        request_json: c_str(&request_json)?,
        call_id: c_str(&instance.call_id)?,
        handle: c_str(&instance.handle)?,
        state_json: c_str(&instance.state_json)?,
        context_json: c_str(&instance.context_json)?,
        asking_json: match &instance.asking_json {
            Some(asking) => Some(c_str(asking)?),
            None => None,
        },
    }))
}

/// The most completions one answer carries (MCP's limit on `completion.values`).
pub const MAX_COMPLETIONS: usize = 100;

/// What a call or a read tells the plugin of its instance, as buffers ending in their NUL.
struct InstanceStrings {
    call_id: Vec<u8>,
    handle: Vec<u8>,
    state_json: Vec<u8>,
    context_json: Vec<u8>,
    idempotency_key: Vec<u8>,
    /// `None` when the host cannot ask for this call (`ctx.asking` is `null`).
    asking_json: Option<Vec<u8>>,
}

impl InstanceStrings {
    fn new(ctx: &CallContext) -> Self {
        InstanceStrings {
            call_id: with_nul(ctx.call_id.as_bytes()),
            handle: with_nul(ctx.handle.as_bytes()),
            state_json: json_with_nul(&ctx.state),
            context_json: json_with_nul(&ctx.context),
            idempotency_key: with_nul(ctx.idempotency_key.as_bytes()),
            asking_json: (!ctx.asking.is_null()).then(|| json_with_nul(&ctx.asking)),
        }
    }
}

/// `text` followed by a NUL, in a buffer of exactly that size.
fn with_nul(text: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text);
    bytes.push(0);
    bytes
}

/// `value` as JSON text for the plugin, followed by a NUL (the buffer starts at 128 bytes and
/// doubles, so the NUL mostly fits without growing it). `serde_json::to_vec`, not `Value`'s
/// `Display` (`to_string`): that one writes each piece through a `fmt::Formatter`, several times
/// slower, and a call writes three (BENCHMARKS.md's history, sessions 14 and 15).
fn json_with_nul(value: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("a JSON value always serializes");
    bytes.push(0);
    bytes
}

/// The requests of a `NEEDS_INPUT` answer (ABI 1.4), checked, or why they are unusable.
fn needs_input(bytes: &[u8]) -> Result<PluginOutput, String> {
    let body: Value = serde_json::from_slice(bytes)
        .map_err(|err| format!("its request for input is not JSON: {err}"))?;
    turnstile_plugin_abi::asking::check_requests(&body).map(PluginOutput::NeedsInput)
}

/// The `message` string of `{"message": ...}`, if that is what `bytes` holds.
fn message(bytes: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    value.get("message")?.as_str().map(str::to_owned)
}
