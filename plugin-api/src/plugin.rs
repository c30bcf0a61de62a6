//! The safe side of the ABI for plugins written in Rust: implement [`Plugin`], then
//! [`export_plugin!`](crate::export_plugin) turns it into the C entry points.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{CallContext, Manifest, PrimitiveKind, ToolError};

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
