//! The safe side of the ABI for plugins written in Rust: implement [`Plugin`], then
//! [`export_plugin!`](crate::export_plugin) turns it into the C entry points.

use std::{
    ffi::{CString, c_void},
    fmt,
};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{
    Manifest,
    abi::{HostIsCancelledFn, HostLogFn, HostProgressFn, Status},
};

/// A tool plugin.
///
/// One value is created per loaded library (by `Default`, or the constructor given to
/// [`export_plugin!`](crate::export_plugin)) and shared by every call: the host calls
/// [`Plugin::call`] from several threads at once, for different workflow instances, hence
/// `Send + Sync`. Keep per-instance data keyed by [`CallContext::handle`] behind a lock, or
/// better in the workflow state itself, which the host persists.
///
/// A panic in either method is caught by the generated glue and reported to the host as
/// [`Status::PANIC`](crate::abi::Status::PANIC); the plugin value stays in use afterwards, so
/// leave no lock poisoned that matters.
pub trait Plugin: Send + Sync + 'static {
    /// Describes the plugin: its workflows and tools. Called once, right after construction.
    fn manifest(&self) -> Manifest;

    /// Runs the tool named `tool` with its arguments `input` (already checked by the host against
    /// the tool's input schema, but a plugin should still reject what it cannot handle with
    /// [`ToolError::BadInput`]). The returned value becomes the tool result; see the crate docs'
    /// output convention.
    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError>;

    /// [`Plugin::call`], its result written as JSON text: what the C entry point hands the
    /// host. The default writes `call`'s value. A plugin that can write its result directly
    /// overrides it, saving a `Value` built only to be written (the SDK's toolkit writes each
    /// handler's typed output in one pass).
    fn call_json(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Vec<u8>, ToolError> {
        let output = self.call(tool, input, ctx)?;
        serde_json::to_vec(&output)
            .map_err(|error| ToolError::failed(format!("cannot serialise the output: {error}")))
    }

    /// Decides the named guard `name` (one the manifest lists in `guards`) for a transition of
    /// one of this plugin's workflows: `params` as written in the machine (`null` when none),
    /// the instance's `context`, and the whole `event` (`{"type", "input", "output"}`). Must be
    /// pure and quick (see [`crate::abi::GuardFn`]); an error makes the guard false. The default
    /// implements no guard.
    fn guard(
        &self,
        name: &str,
        params: &Value,
        context: &Value,
        event: &Value,
    ) -> Result<bool, ToolError> {
        let _ = (params, context, event);
        Err(ToolError::failed(format!(
            "this plugin implements no guard {name:?}"
        )))
    }

    /// Produces the content of the prompt or resource named `name` in the manifest (ABI 1.3):
    /// `request` and the output are as [`ReadKind`](crate::abi::ReadKind) describes for `kind`.
    /// `ctx` describes the instance the client is working on (its state and machine context);
    /// its host services are a no-op. The default has no content for anything
    /// ([`ToolError::UnknownTool`]): a plugin whose prompts and resources all carry static
    /// `text` in the manifest need not implement it.
    fn read(
        &self,
        kind: PrimitiveKind,
        name: &str,
        request: Value,
        ctx: &CallContext,
    ) -> Result<Value, ToolError> {
        let _ = (kind, request, ctx);
        Err(ToolError::UnknownTool(name.to_owned()))
    }

    /// Completes one argument of the prompt or resource template `name` (ABI 1.4,
    /// `completion/complete`): `request` is `{"ref": "prompt" | "resource", "argument":
    /// {"name", "value"}, "arguments": {...}}` (see [`ReadKind::COMPLETION`](crate::abi::ReadKind::COMPLETION)),
    /// and the answer the values that fit, as `{"values": [...]}` or a list of strings. `ctx`
    /// describes the instance the client works on, as for [`Plugin::read`]. The default
    /// completes nothing ([`ToolError::UnknownTool`]); the host completes an instance
    /// template's `{handle}` itself.
    fn complete(&self, name: &str, request: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        let _ = (request, ctx);
        Err(ToolError::UnknownTool(name.to_owned()))
    }
}

/// What [`Plugin::read`] is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimitiveKind {
    /// A prompt (`prompts/get`).
    Prompt,
    /// A resource, fixed or from a template (`resources/read`).
    Resource,
}

impl PrimitiveKind {
    /// The ABI's code for this kind.
    pub const fn raw(self) -> crate::abi::ReadKind {
        match self {
            PrimitiveKind::Prompt => crate::abi::ReadKind::PROMPT,
            PrimitiveKind::Resource => crate::abi::ReadKind::RESOURCE,
        }
    }

    /// The kind the ABI's code names, if any.
    pub fn from_raw(raw: crate::abi::ReadKind) -> Option<PrimitiveKind> {
        match raw {
            crate::abi::ReadKind::PROMPT => Some(PrimitiveKind::Prompt),
            crate::abi::ReadKind::RESOURCE => Some(PrimitiveKind::Resource),
            _ => None,
        }
    }

    /// `"prompt"` or `"resource"`, for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            PrimitiveKind::Prompt => "prompt",
            PrimitiveKind::Resource => "resource",
        }
    }
}

/// What the host says about the call, beside the arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallContext {
    /// A unique id for this call (logs, idempotency keys).
    pub call_id: String,
    /// The handle of the workflow instance the call runs against; empty when the tool is bound
    /// to no workflow.
    pub handle: String,
    /// The instance's current state value (XState state value: `"draft"` or
    /// `{"parent": "child"}`); `null` when there is no instance.
    pub state: Value,
    /// Logging to the client, progress and cancellation, when the host offers them (ABI 1.1);
    /// on an older host every service is a no-op.
    pub host: HostServices,
    /// The instance's machine context (XState `context`) before this call: what guards and
    /// assignments read, so a handler can act on what earlier calls recorded. `null` when the
    /// tool is bound to no workflow, the machine declares no context, or the host is older than
    /// ABI 1.2.
    pub context: Value,
    /// A key that is the same for every run of this tool on this instance at its current
    /// version, on any server, and different for anything else; empty when the tool is bound to
    /// no workflow or the host is older than ABI 1.4. Pass it as the idempotency key of the
    /// outside services a handler calls (a payment provider's `Idempotency-Key`): a transition
    /// that a paused server started and another server took over then acts on the outside world
    /// once.
    pub idempotency_key: String,
    /// What the handler may ask for and what it has been told (ABI 1.4): read it through
    /// [`CallContext::answer`], [`CallContext::can_ask`] and [`CallContext::ask`] (see
    /// `asking.rs`). `null` when the host cannot ask for this call.
    pub asking: Value,
}

/// The configuration the host passed at `init` (ABI 1.1), set once per loaded library.
pub(crate) static CONFIG: std::sync::OnceLock<Value> = std::sync::OnceLock::new();

/// This plugin's configuration from the server's (a JSON object; `null` when the server gave
/// none or is older than ABI 1.1). One per loaded library: the first `init` sets it. Set before the plugin's constructor runs, so a constructor
/// given to [`export_plugin!`](crate::export_plugin) can read it. It may hold secrets (API keys):
/// never log it or return it in a tool's output.
pub fn plugin_config() -> &'static Value {
    static NONE: Value = Value::Null;
    CONFIG.get().unwrap_or(&NONE)
}

/// A duration in whole milliseconds above 0 from a plugin's configuration `config` under `key`
/// (a string, as the environment and config file give it; spaces around it are allowed), or
/// `default` when `key` is absent. A value that is not one is an error naming the environment
/// variable that sets it, `TURNSTILE_PLUGIN_<PLUGIN>_<KEY>` (`plugin` is the library's short
/// name): return it from the constructor to refuse the load.
pub fn config_ms(config: &Value, plugin: &str, key: &str, default: u64) -> Result<u64, String> {
    let Some(value) = config.get(key) else {
        return Ok(default);
    };
    value
        .as_str()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .ok_or_else(|| {
            format!(
                "TURNSTILE_PLUGIN_{}_{} must be a whole number of milliseconds above 0, not \
                 {value}",
                plugin.to_uppercase(),
                key.to_uppercase()
            )
        })
}

/// A number of 0 or more from a plugin's configuration `config` under `key` (a string, as the
/// environment and config file give it), or `default` when `key` is absent. A value that is
/// not one is an error naming the environment variable that sets it.
pub fn config_number(config: &Value, plugin: &str, key: &str, default: f64) -> Result<f64, String> {
    let Some(value) = config.get(key) else {
        return Ok(default);
    };
    value
        .as_str()
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|number| number.is_finite() && *number >= 0.0)
        .ok_or_else(|| {
            format!(
                "TURNSTILE_PLUGIN_{}_{} must be a number of 0 or more, not {value}",
                plugin.to_uppercase(),
                key.to_uppercase()
            )
        })
}

/// A log message's severity, as MCP names them (RFC 5424's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The MCP name: `"debug"`, `"info"`, … `"emergency"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named `name` (an MCP level name).
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str() == name)
    }
}

/// The host's services during one call: copied out of the ABI's `RawHostServices`, so it may be
/// kept and used from other threads while the call runs (after the call returns, the host
/// ignores it). `Default` is a host that offers nothing: every method is a no-op.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostServices {
    /// The host's opaque name for the call (a pointer-sized id, never dereferenced here).
    pub(crate) call: usize,
    pub(crate) log: Option<HostLogFn>,
    pub(crate) progress: Option<HostProgressFn>,
    pub(crate) is_cancelled: Option<HostIsCancelledFn>,
}

/// By call, not by function address (function pointers have no meaningful identity).
impl PartialEq for HostServices {
    fn eq(&self, other: &Self) -> bool {
        self.call == other.call && self.is_offered() == other.is_offered()
    }
}

impl HostServices {
    /// Sends `data` (any JSON value, typically a string or an object) to the client as a log
    /// message at `level`. Returns whether the host took it (false on a host without logging;
    /// the session's level may still filter it out).
    pub fn log(&self, level: LogLevel, data: &Value) -> bool {
        self.log_as(level, None, data)
    }

    /// [`HostServices::log`] under a logger name.
    pub fn log_as(&self, level: LogLevel, logger: Option<&str>, data: &Value) -> bool {
        let Some(log) = self.log else { return false };
        let level = CString::new(level.as_str()).expect("level names hold no NUL");
        let logger = logger.and_then(|logger| CString::new(logger).ok());
        let Ok(data) = CString::new(data.to_string()) else {
            return false;
        };
        let logger_ptr = logger.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
        // SAFETY: `log` came from the host's services struct for this call, which declares it
        // with this signature; every string is NUL-terminated and outlives the call; the host
        // treats `call` as an id and ignores a stale one.
        let status = unsafe {
            log(
                self.call as *const c_void,
                level.as_ptr(),
                logger_ptr,
                data.as_ptr(),
            )
        };
        status == Status::OK
    }

    /// Reports progress: `progress` so far, of `total` when known, with an optional message.
    /// Sent only if the client asked for progress on this call. Returns whether the host took it.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) -> bool {
        let Some(report) = self.progress else {
            return false;
        };
        let message = message.and_then(|message| CString::new(message).ok());
        let message_ptr = message.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
        // SAFETY: as in `log_as`: the host's function, a live NUL-terminated string or NULL.
        let status = unsafe {
            report(
                self.call as *const c_void,
                progress,
                total.unwrap_or(-1.0),
                message_ptr,
            )
        };
        status == Status::OK
    }

    /// Whether the client has cancelled this call (or its deadline passed). Long-running tools
    /// should poll it and return an error early: a call that returns an error fires nothing.
    pub fn is_cancelled(&self) -> bool {
        let Some(is_cancelled) = self.is_cancelled else {
            return false;
        };
        // SAFETY: as in `log_as`.
        unsafe { is_cancelled(self.call as *const c_void) != 0 }
    }

    /// Whether the host offers any service at all (false on a host older than ABI 1.1).
    pub fn is_offered(&self) -> bool {
        self.log.is_some() || self.progress.is_some() || self.is_cancelled.is_some()
    }
}

/// Why a tool call did not produce a result. Crosses the ABI as a status code plus
/// `{"message": ...}` (and `inputRequests` for [`ToolError::NeedsInput`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolError {
    /// The tool ran and failed; the agent sees an `isError` result with this message.
    Failed(String),
    /// The arguments are unusable; the agent sees an `isError` result with this message.
    BadInput(String),
    /// The plugin has no such tool (the host only calls tools from the manifest, so this means
    /// the manifest and `call` disagree). The string is the tool name.
    UnknownTool(String),
    /// The tool needs input before it can go on (ABI 1.4; see [`CallContext::ask`]): the
    /// requests by key, each `{"method", "params"}`. Nothing fires; the host asks, and runs the
    /// tool again with the answers.
    NeedsInput(serde_json::Map<String, Value>),
}

impl ToolError {
    /// A [`ToolError::Failed`] from anything printable.
    pub fn failed(message: impl fmt::Display) -> ToolError {
        ToolError::Failed(message.to_string())
    }

    /// A [`ToolError::BadInput`] from anything printable.
    pub fn bad_input(message: impl fmt::Display) -> ToolError {
        ToolError::BadInput(message.to_string())
    }

    /// The message sent across the ABI.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Failed(message) | ToolError::BadInput(message) => f.write_str(message),
            ToolError::UnknownTool(tool) => write!(f, "unknown tool {tool}"),
            ToolError::NeedsInput(requests) => {
                let keys: Vec<&str> = requests.keys().map(String::as_str).collect();
                write!(f, "needs input: {}", keys.join(", "))
            }
        }
    }
}

impl std::error::Error for ToolError {}

/// Deserialises a tool's arguments into `T`, turning a mismatch into [`ToolError::BadInput`]
/// with serde's explanation and where in the arguments it is ("invalid input at
/// `lines[1].quantity`: invalid type: string \"two\", expected u32"; at the top level just
/// "invalid input: missing field `reason`").
pub fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(input).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." {
            ToolError::bad_input(format!("invalid input: {inner}"))
        } else {
            ToolError::bad_input(format!("invalid input at `{path}`: {inner}"))
        }
    })
}
