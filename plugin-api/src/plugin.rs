//! The safe side of the ABI for plugins written in Rust: implement [`Plugin`], then
//! [`export_plugin!`](crate::export_plugin) turns it into the C entry points.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Manifest;

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
}

/// Why a tool call did not produce a result. Crosses the ABI as a status code plus
/// `{"message": ...}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolError {
    /// The tool ran and failed; the agent sees an `isError` result with this message.
    Failed(String),
    /// The arguments are unusable; the agent sees an `isError` result with this message.
    BadInput(String),
    /// The plugin has no such tool (the host only calls tools from the manifest, so this means
    /// the manifest and `call` disagree). The string is the tool name.
    UnknownTool(String),
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
        }
    }
}

impl std::error::Error for ToolError {}

/// Deserialises a tool's arguments into `T`, turning a mismatch into [`ToolError::BadInput`]
/// with serde's explanation ("missing field `reason`").
pub fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input)
        .map_err(|err| ToolError::bad_input(format!("invalid input: {err}")))
}
