//! The JSON-RPC errors a request gets when the handler cannot serve it as sent: a tool or
//! method nobody serves, malformed `_meta` (an idempotency key, handles), a 2026-07-28 retry's
//! `inputResponses` and `requestState`, a 2026-07-28 request that needs a client capability it
//! did not declare, an instance it names that cannot be read or watched.
//!
//! The rooms of the handler that find these problems say what is wrong; only these functions
//! make an error of it, so that the codes and `data` a client reads are decided here. A
//! prompt's or resource's own refusals are in `primitives.rs`.

use rmcp::{ErrorData, model::ClientCapabilities};
use serde_json::{Value, json};

use crate::{
    actors::InstanceError,
    mcp::handler::{asking::Unusable, clip::clip},
};

/// JSON-RPC -32602: no plugin provides a tool by that name.
pub fn unknown_tool(name: &str) -> ErrorData {
    let name = clip(name);
    ErrorData::invalid_params(
        format!("unknown tool: {name}"),
        Some(json!({ "tool": name })),
    )
}

/// The longest idempotency key accepted, in characters.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;

/// JSON-RPC -32602: `_meta.idempotencyKey` is not a string of 1 to
/// [`MAX_IDEMPOTENCY_KEY_CHARS`] characters. Nothing ran.
pub fn invalid_idempotency_key(key: &Value) -> ErrorData {
    let problem = match key {
        Value::String(text) if text.is_empty() => "is empty".to_owned(),
        Value::String(text) => format!("is {} characters long", text.chars().count()),
        other => format!("is not a string but {}", json_kind(other)),
    };
    ErrorData::invalid_params(
        format!(
            "_meta.idempotencyKey {problem}: it must be a string of 1 to \
             {MAX_IDEMPOTENCY_KEY_CHARS} characters"
        ),
        Some(json!({ "field": "_meta.idempotencyKey" })),
    )
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// JSON-RPC error for a request rmcp could not route: `tools/call` with malformed params
/// (-32602, naming the problem), or a method this server does not serve (-32601, naming it; on
/// 2026-07-28 that includes the methods the revision removed, such as `initialize`).
pub fn unroutable_request(method: &str, params: Option<&Value>) -> ErrorData {
    if method == "tools/call" {
        let params = params.cloned().unwrap_or(Value::Null);
        if let Err(problem) = serde_json::from_value::<rmcp::model::CallToolRequestParams>(params) {
            // serde's message may quote the offending value.
            return ErrorData::invalid_params(
                format!(
                    "invalid params for tools/call: {}",
                    clip(&problem.to_string())
                ),
                Some(json!({ "method": method })),
            );
        }
    }
    let method = clip(method);
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method}"),
        Some(json!({ "method": method })),
    )
}

/// A listing or read (`tools/list`, `prompts/get`, `resources/read`, …) could not read the state
/// of the instance it names. An unknown handle is the caller's mistake (-32602), with the stable code
/// `UNKNOWN_HANDLE` a tool call's refusal carries; anything else is the server's (-32603).
pub fn instance_unreadable(instance: &str, error: &InstanceError) -> ErrorData {
    match error {
        InstanceError::UnknownHandle(_) => {
            ErrorData::invalid_params(error.to_string(), Some(json!({ "code": "UNKNOWN_HANDLE" })))
        }
        other => ErrorData::internal_error(
            format!("cannot read the state of {instance}: {other}"),
            Some(json!({ "code": "STATE_UNAVAILABLE" })),
        ),
    }
}

/// JSON-RPC -32602: the handles a request's `_meta` names are not handles, or too many
/// (`target.rs`' [`HandleMode::handles_in`](crate::mcp::handler::target::HandleMode::handles_in)
/// says which, echoing what the client sent only through [`clip`]).
pub fn invalid_handles(problem: String) -> ErrorData {
    ErrorData::invalid_params(problem, None)
}

/// JSON-RPC -32602: a handle a request names is of a workflow no loaded plugin defines.
pub fn handle_of_unloaded_workflow(workflow: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no workflow \"{}\" is loaded", clip(workflow)),
        None,
    )
}

/// JSON-RPC -32603: a prompt or template of the catalog being served is bound to a workflow that
/// catalog does not have, which the catalog's checks rule out: the server's fault.
pub fn unloaded_workflow(workflow: &str) -> ErrorData {
    ErrorData::internal_error(format!("no workflow \"{workflow}\" is loaded"), None)
}

/// JSON-RPC -32602: `subscriptions/listen` names an instance (in `_meta`) it cannot watch.
pub fn unwatchable(error: &InstanceError) -> ErrorData {
    ErrorData::invalid_params(error.to_string(), None)
}

/// JSON-RPC -32602: a 2026-07-28 retry's `inputResponses` or `requestState` cannot be used
/// (`asking.rs` says why), with `data.code` `REQUEST_STATE_INVALID` and the `reason`, or
/// `INVALID_INPUT_RESPONSES` for an answer that is not an object.
pub fn unusable_answers(why: &Unusable) -> ErrorData {
    match why {
        Unusable::OtherRevision => ErrorData::invalid_params(
            "inputResponses and requestState belong to protocol 2026-07-28; this request \
             speaks an earlier revision, where the server asks the client itself",
            Some(json!({"code": "REQUEST_STATE_INVALID", "reason": "wrong protocol revision"})),
        ),
        Unusable::NotAnObject(key) => ErrorData::invalid_params(
            format!(
                "inputResponses[{}] is not an object: each answer is the client's result for \
                 the request of that key",
                clip(key)
            ),
            Some(json!({"code": "INVALID_INPUT_RESPONSES"})),
        ),
        Unusable::State(why) => ErrorData::invalid_params(
            format!(
                "requestState {why}; start the call again without it (the answers it held \
                 will be asked again)"
            ),
            Some(json!({"code": "REQUEST_STATE_INVALID", "reason": why})),
        ),
    }
}

/// JSON-RPC -32021 (2026-07-28's MissingRequiredClientCapabilityError): `name`, a tool or a
/// prompt, asked for input (`needed`, in words: `reply::needed`) that the request's client did
/// not declare it can give; `data.requiredCapabilities` names the capabilities, a
/// `ClientCapabilities` object. The handler ran up to its question; nothing fired.
pub fn missing_client_capability(
    name: &str,
    needed: &str,
    required: ClientCapabilities,
) -> ErrorData {
    let mut error = ErrorData::missing_required_client_capability(required);
    error.message = format!(
        "{} needs input this client did not declare it can give: {}; declare it in \
         io.modelcontextprotocol/clientCapabilities",
        clip(name),
        clip(needed)
    )
    .into();
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_names_are_clipped() {
        let name = "x".repeat(1 << 20);
        let error = unknown_tool(&name);
        assert!(error.message.len() < 200, "{}", error.message.len());
        assert!(error.data.unwrap().to_string().len() < 200);
        let error = unroutable_request(&name, None);
        assert!(error.message.len() < 200, "{}", error.message.len());
    }

    #[test]
    fn an_unusable_request_state_says_why_in_its_data() {
        let error = unusable_answers(&Unusable::State("has expired"));
        let data = error.data.unwrap();
        assert_eq!(
            (data["code"].as_str(), data["reason"].as_str()),
            (Some("REQUEST_STATE_INVALID"), Some("has expired"))
        );
        assert!(error.message.starts_with("requestState has expired; "));
    }
}
