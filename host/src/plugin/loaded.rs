//! [`LoadedPlugin`]: the safe handle the rest of the host uses to call a plugin.
//!
//! It owns the translation between Rust values and the ABI (JSON text, NUL-terminated strings,
//! status codes) and the mapping of statuses to [`PluginOutput`] / [`PluginError`], and hides
//! where the plugin runs: in this process, or isolated in one of its own (`isolated`), whose
//! calls come back as the same results. It does not know about workflows, gating or MCP: it
//! runs the tool it is asked to run.

use std::{
    ffi::CString,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde_json::Value;
use turnstile_plugin_api::{CallContext, Manifest, ToolManifest, abi::Status};

use super::{
    error::PluginError,
    isolated::{Isolated, Isolation},
    library::{CallArgs, Library, error_message},
    manifest,
    pool::CallPool,
    services::{HostCall, Registered},
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
}

/// Where the plugin's code runs.
enum Backend {
    /// Loaded into this process.
    InProcess(Library),
    /// In a process of its own (see `isolated`).
    Isolated(Isolated),
}

/// What a tool call produced.
///
/// A plugin panic is not a variant here: it is [`PluginError::Panicked`], because it is a bug
/// in the plugin that an operator should see, not an answer for the agent. The host should
/// still turn it into an `isError` tool result (and fire no transition).
#[derive(Clone, Debug, PartialEq)]
pub enum PluginOutput {
    /// The tool's result (status `OK`): any JSON value. Shown as the tool result's text and,
    /// when it is an object, as `structuredContent`.
    Success(Value),
    /// The tool failed in a way the agent should read (status `TOOL_ERROR` or `BAD_INPUT`):
    /// return an `isError` result with this message and fire no transition.
    ToolError(String),
}

impl LoadedPlugin {
    /// Loads the library at `path`, checks its ABI version, creates the plugin instance, and
    /// reads and checks its manifest. Blocking (file I/O, `dlopen`, plugin initialisers).
    pub fn load(path: &Path) -> Result<LoadedPlugin, PluginError> {
        LoadedPlugin::load_file(path, path)
    }

    /// Loads `file` but names it `path` everywhere (errors, [`LoadedPlugin::path`]); used for
    /// private copies.
    pub(super) fn load_file(path: &Path, file: &Path) -> Result<LoadedPlugin, PluginError> {
        LoadedPlugin::load_file_with(path, file, super::config::from_env(path).as_ref())
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
        let manifest = manifest::parse(&manifest).map_err(|reason| PluginError::BadManifest {
            path: path.to_owned(),
            reason,
        })?;
        Ok(LoadedPlugin {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                manifest,
                backend: Backend::InProcess(library),
                pool: CallPool::default(),
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
            }),
        })
    }

    /// Whether the plugin runs in a process of its own.
    pub fn is_isolated(&self) -> bool {
        matches!(self.inner.backend, Backend::Isolated(_))
    }

    /// For an isolated plugin, how many times its process ended while serving; `None` for a
    /// plugin in this process.
    pub fn crashes(&self) -> Option<u64> {
        match &self.inner.backend {
            Backend::InProcess(_) => None,
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
        };
        let c_string = |what: &'static str, text: String| {
            CString::new(text).map_err(|_| PluginError::BadArgument {
                path: path.clone(),
                tool: tool.to_owned(),
                what,
            })
        };
        // JSON text never holds a raw NUL (serde_json escapes control characters), so only the
        // tool name, call id and handle can fail here.
        let tool_name = c_string("the tool name", tool.to_owned())?;
        let input_json = c_string("the input", input.to_string())?;
        let call_id = c_string("the call id", ctx.call_id.clone())?;
        let handle = c_string("the handle", ctx.handle.clone())?;
        let state_json = c_string("the state", ctx.state.to_string())?;
        // Registered for exactly the duration of the plugin's call.
        let services = host.map(Registered::new);
        let output = library.call(&CallArgs {
            tool: &tool_name,
            input_json: &input_json,
            call_id: &call_id,
            handle: &handle,
            state_json: &state_json,
            host: services.as_ref().map(|services| &services.raw),
        });
        drop(services);
        self.interpret(tool, output.status, &output.bytes)
    }

    /// Maps a status and its output to the result; see [`PluginOutput`] and [`PluginError`].
    fn interpret(
        &self,
        tool: &str,
        status: Status,
        bytes: &[u8],
    ) -> Result<PluginOutput, PluginError> {
        // The common case, a JSON answer, borrows; an error names the plugin and the tool.
        if status == Status::OK {
            return serde_json::from_slice(bytes)
                .map(PluginOutput::Success)
                .map_err(|err| PluginError::BadResponse {
                    path: self.inner.path.clone(),
                    tool: tool.to_owned(),
                    reason: format!("output is not JSON: {err}"),
                });
        }
        let path = self.inner.path.clone();
        let tool = tool.to_owned();
        let bad_response = |path, tool, reason| PluginError::BadResponse { path, tool, reason };
        match status {
            Status::TOOL_ERROR | Status::BAD_INPUT => match message(bytes) {
                Some(message) => Ok(PluginOutput::ToolError(message)),
                None => Err(bad_response(path, tool, error_message(status, bytes))),
            },
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

/// The `message` string of `{"message": ...}`, if that is what `bytes` holds.
fn message(bytes: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    value.get("message")?.as_str().map(str::to_owned)
}
