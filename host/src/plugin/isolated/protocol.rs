//! The messages between the server and an isolated plugin's process (`turnstile plugin-host`),
//! each sent as one frame (`frame.rs`) on the child's stdin (to the child) or stdout (from it).
//!
//! A conversation: the child loads its library and sends [`FromChild::Ready`] with the manifest
//! unasked (or [`FromChild::LoadFailed`], then exits). From then on the server sends
//! [`ToChild::Call`]s, each with an id of its choosing, without waiting for earlier answers: the
//! child runs calls concurrently and answers each with [`FromChild::Done`] under the same id,
//! in whatever order they finish. While a call runs, what the plugin logs or reports through
//! its host services comes as [`FromChild::Log`] and [`FromChild::Progress`] under the call's
//! id, before its `Done`. [`ToChild::Cancel`] tells the child that a call is no longer wanted
//! (the client cancelled, or its deadline passed), which the plugin sees through
//! `is_cancelled`: the server pushes it, so polling `is_cancelled` costs no round trip. The
//! server closing the child's stdin means "exit".
//!
//! Every message is a JSON object tagged by `"type"`, e.g.
//! `{"type":"call","id":1,"tool":"invoice.submit","input":{..},"call_id":"..","handle":"..",
//! "state":"draft","services":true}` and `{"type":"done","id":1,"outcome":{"kind":"success",
//! "output":{..}}}`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use turnstile_plugin_abi::{LogLevel, Manifest};

use crate::plugin::{CallEvent, PluginError, PluginOutput};

/// From the server to the child.
#[derive(Debug, Serialize, Deserialize)]
// One message at a time is built, sent and dropped; none is ever stored.
#[allow(clippy::large_enum_variant)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToChild {
    /// Run `tool` with `input`; the call context's fields are flattened in.
    Call {
        id: u64,
        tool: String,
        input: Value,
        call_id: String,
        handle: String,
        state: Value,
        /// The instance's machine context (ABI 1.2); absent from an older server: `null`.
        #[serde(default)]
        context: Value,
        /// The call's idempotency key (ABI 1.4); absent from an older server: empty.
        #[serde(default)]
        idempotency_key: String,
        /// What the handler may ask for and has been told (ABI 1.4); absent: `null`, nothing.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        asking: Value,
        /// Whether the call gets host services (logging, progress, cancellation).
        services: bool,
    },
    /// The call `id` is no longer wanted.
    Cancel { id: u64 },
}

/// The tool name a `call` carries to ask the child for the plugin's named guard (ABI 1.2)
/// instead of a tool: this prefix, then the guard's name; the input is
/// `{"params", "context", "event"}` and a success's output is `true` or `false`. No tool name
/// can start with it (tool names are letters, digits, `_`, `.` and `-`).
pub const GUARD_CALL_PREFIX: &str = "\u{0}guard:";

/// From the child to the server.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromChild {
    /// The library loaded; its manifest, checked by the child as the server checks it.
    Ready { manifest: Manifest },
    /// The library did not load; the child exits after sending this.
    LoadFailed { message: String },
    /// The plugin logged during call `id`.
    Log {
        id: u64,
        level: String,
        logger: Option<String>,
        data: Value,
    },
    /// The plugin reported progress during call `id`.
    Progress {
        id: u64,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// Call `id` returned.
    Done { id: u64, outcome: Outcome },
}

/// How a call ended, as the child's own loader interpreted the plugin's answer: the variants of
/// `Result<PluginOutput, PluginError>` a call can produce, without the library's path (the
/// server names its own).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Success {
        output: Value,
    },
    ToolError {
        message: String,
    },
    BadInput {
        message: String,
    },
    /// ABI 1.4: the requests for input, checked by the child (and again by the server).
    NeedsInput {
        requests: serde_json::Map<String, Value>,
    },
    UnknownTool,
    Panicked {
        message: String,
    },
    BadArgument {
        what: String,
    },
    /// Any other failure: the plugin broke the protocol of the ABI.
    BadResponse {
        reason: String,
    },
}

impl Outcome {
    /// What the child's call produced, for the wire.
    pub fn of(result: Result<PluginOutput, PluginError>) -> Outcome {
        match result {
            Ok(PluginOutput::Success(output)) => Outcome::Success {
                output: output.value,
            },
            Ok(PluginOutput::ToolError(message)) => Outcome::ToolError { message },
            Ok(PluginOutput::BadInput(message)) => Outcome::BadInput { message },
            Ok(PluginOutput::NeedsInput(requests)) => Outcome::NeedsInput { requests },
            Err(PluginError::UnknownTool { .. }) => Outcome::UnknownTool,
            Err(PluginError::Panicked { message, .. }) => Outcome::Panicked { message },
            Err(PluginError::BadArgument { what, .. }) => Outcome::BadArgument {
                what: what.to_owned(),
            },
            Err(PluginError::BadResponse { reason, .. }) => Outcome::BadResponse { reason },
            // A call produces none of the loading errors; say what it was if one ever comes.
            Err(other) => Outcome::BadResponse {
                reason: other.to_string(),
            },
        }
    }

    /// The result of calling `tool` of the library at `path`, as an in-process call would have
    /// given it.
    pub fn into_result(self, path: &Path, tool: &str) -> Result<PluginOutput, PluginError> {
        let (path, tool_name) = (path.to_owned(), tool.to_owned());
        match self {
            Outcome::Success { output } => Ok(PluginOutput::success(output)),
            Outcome::ToolError { message } => Ok(PluginOutput::ToolError(message)),
            Outcome::BadInput { message } => Ok(PluginOutput::BadInput(message)),
            Outcome::NeedsInput { requests } => {
                let body = serde_json::json!({ "inputRequests": requests });
                turnstile_plugin_abi::asking::check_requests(&body)
                    .map(PluginOutput::NeedsInput)
                    .map_err(|reason| PluginError::BadResponse {
                        path,
                        tool: tool_name,
                        reason,
                    })
            }
            Outcome::UnknownTool => Err(PluginError::UnknownTool {
                path,
                tool: tool_name,
            }),
            Outcome::Panicked { message } => Err(PluginError::Panicked {
                path,
                tool: tool_name,
                message,
            }),
            Outcome::BadArgument { what } => Err(PluginError::BadArgument {
                path,
                tool: tool_name,
                what: argument_name(&what),
            }),
            Outcome::BadResponse { reason } => Err(PluginError::BadResponse {
                path,
                tool: tool_name,
                reason,
            }),
        }
    }
}

/// The static name `PluginError::BadArgument` carries, for one that came over the wire.
fn argument_name(what: &str) -> &'static str {
    [
        "the tool name",
        "the input",
        "the call id",
        "the handle",
        "the state",
    ]
    .into_iter()
    .find(|known| *known == what)
    .unwrap_or("an argument")
}

impl FromChild {
    /// `event`, said by the plugin during call `id`.
    pub fn event(id: u64, event: CallEvent) -> FromChild {
        match event {
            CallEvent::Log {
                level,
                logger,
                data,
            } => FromChild::Log {
                id,
                level: level.as_str().to_owned(),
                logger,
                data,
            },
            CallEvent::Progress {
                progress,
                total,
                message,
            } => FromChild::Progress {
                id,
                progress,
                total,
                message,
            },
        }
    }

    /// The call id and event of a `Log` or `Progress`; `None` for other messages and for a log
    /// at a level this server does not know (the child checks levels, so only a broken child
    /// sends one).
    pub fn into_event(self) -> Option<(u64, CallEvent)> {
        match self {
            FromChild::Log {
                id,
                level,
                logger,
                data,
            } => Some((
                id,
                CallEvent::Log {
                    level: LogLevel::parse(&level)?,
                    logger,
                    data,
                },
            )),
            FromChild::Progress {
                id,
                progress,
                total,
                message,
            } => Some((
                id,
                CallEvent::Progress {
                    progress,
                    total,
                    message,
                },
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_are_tagged_objects() {
        let call = ToChild::Call {
            id: 1,
            tool: "t".into(),
            input: json!({"a": 1}),
            call_id: "c".into(),
            handle: String::new(),
            context: Value::Null,
            idempotency_key: "h/v1/t".into(),
            asking: Value::Null,
            state: Value::Null,
            services: true,
        };
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"type": "call", "id": 1, "tool": "t", "input": {"a": 1}, "call_id": "c",
                   "handle": "", "state": null, "context": null,
                   "idempotency_key": "h/v1/t", "services": true})
        );
        let done = FromChild::Done {
            id: 1,
            outcome: Outcome::Success { output: json!(2) },
        };
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            json!({"type": "done", "id": 1, "outcome": {"kind": "success", "output": 2}})
        );
    }

    #[test]
    fn outcomes_come_back_as_the_errors_an_in_process_call_gives() {
        let path = Path::new("/plugins/libp.so");
        let panicked = Outcome::of(Err(PluginError::Panicked {
            path: "/tmp/copy.so".into(),
            tool: "t".into(),
            message: "boom".into(),
        }));
        match panicked.into_result(path, "t") {
            Err(PluginError::Panicked {
                path: named,
                message,
                ..
            }) => {
                assert_eq!(named, path, "the server's path, not the child's copy");
                assert_eq!(message, "boom");
            }
            other => panic!("{other:?}"),
        }
        let bad = Outcome::BadArgument {
            what: "the handle".into(),
        };
        assert!(matches!(
            bad.into_result(path, "t"),
            Err(PluginError::BadArgument {
                what: "the handle",
                ..
            })
        ));
        let event = CallEvent::Log {
            level: LogLevel::Warning,
            logger: None,
            data: json!("hi"),
        };
        let (id, back) = FromChild::event(3, event.clone()).into_event().unwrap();
        assert_eq!((id, back), (3, event));
    }
}
