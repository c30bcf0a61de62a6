//! What a plugin's tool call produced, wherever the plugin runs (in this process, or isolated
//! in its own: the answer crosses the pipe as the same type).

use serde_json::Value;

#[cfg(doc)]
use super::PluginError;

/// What a tool call produced.
///
/// A plugin panic is not a variant here: it is [`PluginError::Panicked`], because it is a bug
/// in the plugin that an operator should see, not an answer for the agent. The host should
/// still turn it into an `isError` tool result (and fire no transition).
#[derive(Clone, Debug, PartialEq)]
pub enum PluginOutput {
    /// The tool's result (status `OK`): any JSON value. Shown as the tool result's text and,
    /// when it is an object, as `structuredContent`.
    Success(Returned),
    /// The tool failed in a way the agent should read (status `TOOL_ERROR`): return an
    /// `isError` result with this message; its transition does not fire, its `on_error` does.
    ToolError(String),
    /// The plugin refused the call's input (status `BAD_INPUT`): an `isError` result as for a
    /// tool error, but nothing fires, not even `on_error`: the handler did not fail, the caller
    /// asked wrongly, and may ask again.
    BadInput(String),
    /// The tool needs input before it can go on (status `NEEDS_INPUT`, ABI 1.4): the requests
    /// by key, checked (`turnstile_plugin_abi::asking::check_requests`). Nothing fires; the
    /// caller asks (`mcp/handler/asking.rs`) and calls again with the answers.
    NeedsInput(serde_json::Map<String, Value>),
}

/// A tool's result: its JSON value and, for a plugin in this process, the text the plugin wrote
/// it as. The text is kept because every successful call needs its output as JSON text twice
/// more (the result size check and the result's text block): writing the value out again for
/// them was 4% of a status call's instructions (BENCHMARKS.md's history, session 17).
///
/// Two results are equal when their values are: the text is the same value, written.
#[derive(Clone, Debug)]
pub struct Returned {
    /// The value, to check against the output schema, fire transitions with and show.
    pub value: Value,
    /// The plugin's own JSON text of `value` (any whitespace and escapes it chose; a key it
    /// wrote twice shows twice here, and once, with its last value, in `value`), while
    /// nothing has changed the value since; `None` once something has, or when the output did
    /// not come as text (an isolated plugin's crosses the pipe parsed, a replay is stored).
    text: Option<String>,
}

impl PluginOutput {
    /// A success with `value`, not written by a plugin (see [`Returned`]).
    pub fn success(value: Value) -> Self {
        PluginOutput::Success(value.into())
    }
}

impl Returned {
    /// `value` as the plugin wrote it, `text`; `text` must be JSON text of exactly `value`.
    pub(crate) fn written(value: Value, text: String) -> Self {
        Returned {
            value,
            text: Some(text),
        }
    }

    /// The plugin's JSON text of the value, if it is still the value's.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// The value and the plugin's text of it (see [`Returned::text`]).
    pub fn into_parts(self) -> (Value, Option<String>) {
        (self.value, self.text)
    }
}

impl From<Value> for Returned {
    fn from(value: Value) -> Self {
        Returned { value, text: None }
    }
}

impl PartialEq for Returned {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}
