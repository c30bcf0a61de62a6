//! [`ToolError`]: why a call into a plugin did not produce a result. It crosses the ABI as a
//! status code and `{"message"}`, never as this type: a Rust plugin's handlers and the SDK's
//! glue speak it, and it sits with the contract because [`CallContext::ask`](crate::CallContext)
//! (ABI 1.4) returns it.

use std::fmt;

use serde_json::Value;

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
    /// The tool needs input before it can go on (ABI 1.4; see
    /// [`CallContext::ask`](crate::CallContext::ask)): the requests by key, each
    /// `{"method", "params"}`. Nothing fires; the host asks, and runs the tool again with the
    /// answers.
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
