//! What a client sees of prompts and resources: their listings, their content, and every error
//! `prompts/get` and `resources/read` can answer with.
//!
//! These methods have no `isError` result, so every refusal is a JSON-RPC error whose `data`
//! carries a stable `code`, as a tool result's `structuredContent.error` does: `FORBIDDEN` (with
//! the state and what is available, like a refused tool call), `INVALID_ARGUMENTS`,
//! `TOOL_ERROR`, `BAD_OUTPUT`, and the codes of a failed plugin run (`TOOL_TIMEOUT`, `BUSY`,
//! `PLUGIN_FAILED`, ...). A resource that does not exist, or an instance resource whose handle
//! names no instance of the caller's, is -32002 (MCP's "resource not found").

use rmcp::{
    ErrorData,
    model::{
        GetPromptResult, Prompt, PromptArgument, ReadResourceResult, Resource, ResourceContents,
        ResourceTemplate,
    },
};
use serde_json::{Value, json};

use crate::{
    catalog::{PromptEntry, ResourceEntry, TemplateEntry},
    gate::Withheld,
    invoke::InvokeError,
    mcp::handler::clip::clip,
    plugin::{PluginOutput, PrimitiveKind},
};

/// A `prompts/list` entry.
pub fn listed_prompt(entry: &PromptEntry) -> Prompt {
    let manifest = &entry.manifest;
    let arguments = manifest
        .arguments
        .iter()
        .map(|argument| {
            let listed = PromptArgument::new(&argument.name).with_required(argument.required);
            match &argument.description {
                Some(description) => listed.with_description(description),
                None => listed,
            }
        })
        .collect::<Vec<_>>();
    let arguments = (!arguments.is_empty()).then_some(arguments);
    let listed = Prompt::new(&manifest.name, Some(&manifest.description), arguments);
    match &manifest.title {
        Some(title) => listed.with_title(title),
        None => listed,
    }
}

/// A `resources/list` entry for a resource with a fixed URI.
pub fn listed_resource(entry: &ResourceEntry) -> Resource {
    let manifest = &entry.manifest;
    described(
        Resource::new(&manifest.uri, &manifest.name),
        manifest.title.as_deref(),
        manifest.description.as_deref(),
        manifest.mime_type.as_deref(),
    )
}

/// A `resources/list` entry for one instance's resource of an instance template.
pub fn listed_instance_resource(template: &TemplateEntry, uri: String) -> Resource {
    let manifest = &template.manifest;
    described(
        Resource::new(uri, &manifest.name),
        manifest.title.as_deref(),
        manifest.description.as_deref(),
        manifest.mime_type.as_deref(),
    )
}

fn described(
    mut resource: Resource,
    title: Option<&str>,
    description: Option<&str>,
    mime_type: Option<&str>,
) -> Resource {
    resource.title = title.map(str::to_owned);
    resource.description = description.map(str::to_owned);
    resource.mime_type = mime_type.map(str::to_owned);
    resource
}

/// A `resources/templates/list` entry.
pub fn listed_template(entry: &TemplateEntry) -> ResourceTemplate {
    let manifest = &entry.manifest;
    let mut template = ResourceTemplate::new(&manifest.uri_template, &manifest.name);
    template.title = manifest.title.clone();
    template.description = manifest.description.clone();
    template.mime_type = manifest.mime_type.clone();
    template
}

/// The host's template of `workflow`'s instances (`turnstile://{workflow}/{handle}`).
pub fn listed_instance_template(workflow: &str) -> ResourceTemplate {
    let mut template = ResourceTemplate::new(
        crate::mcp::handler::instance_resource::template(workflow),
        format!("{workflow} instance"),
    );
    template.description = Some(format!(
        "Where a {workflow} instance is and what it may do next: its state, the tools, prompts \
         and resources available now, and its latest transitions. {{handle}} is the instance's \
         handle (`session` for a session's own instance). Subscribe to hear of every transition."
    ));
    template.mime_type = Some("application/json".to_string());
    template
}

/// What one instance is, as its host resource reads.
pub struct InstanceDocument<'a> {
    pub workflow: &'a str,
    /// How its URI names it: a handle, or `session`.
    pub token: &'a str,
    pub state: Value,
    pub done: bool,
    pub tools: Vec<String>,
    pub prompts: Vec<String>,
    pub resources: Vec<String>,
    /// Saves so far (0: never saved, still in its initial state).
    pub version: u64,
    pub updated_at_ms: u64,
    /// The newest entries of its audit trail, oldest first.
    pub audit: Vec<crate::store::AuditEntry>,
}

/// The content of `uri`, a host instance resource: `document` as JSON. No context: what a
/// machine keeps may be private to the plugin.
pub fn instance_document(uri: &str, document: InstanceDocument<'_>) -> ReadResourceResult {
    let updated_at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(document.updated_at_ms);
    let body = json!({
        "workflow": document.workflow,
        "handle": document.token,
        "state": document.state,
        "status": if document.done { "done" } else { "active" },
        "available": {
            "tools": document.tools,
            "prompts": document.prompts,
            "resources": document.resources,
        },
        "version": document.version,
        "updatedAt": humantime::format_rfc3339_millis(updated_at).to_string(),
        "audit": document.audit,
    });
    let text = serde_json::to_string(&body).expect("a JSON value always serializes");
    ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ])
}

/// JSON-RPC -32602: no plugin provides a prompt by that name.
pub fn unknown_prompt(name: &str) -> ErrorData {
    let name = clip(name);
    ErrorData::invalid_params(
        format!("unknown prompt: {name}"),
        Some(json!({ "prompt": name })),
    )
}

/// JSON-RPC -32600: a prompt needs input this client cannot give (or did not give).
pub fn prompt_input_unavailable(name: &str, needed: &str) -> ErrorData {
    let (name, needed) = (clip(name), clip(needed));
    ErrorData::invalid_request(
        format!("prompt {name} needs input this client cannot give: {needed}"),
        Some(json!({ "code": "INPUT_UNAVAILABLE", "needed": needed })),
    )
}

/// JSON-RPC -32602: a completion names an argument the prompt or template does not have.
pub fn unknown_completion_argument(kind: &str, name: &str, argument: &str) -> ErrorData {
    let (name, argument) = (clip(name), clip(argument));
    ErrorData::invalid_params(
        format!("{kind} {name} has no argument {argument}"),
        Some(json!({ "code": "UNKNOWN_ARGUMENT", "argument": argument })),
    )
}

/// JSON-RPC -32602: `completion/complete` names a kind of reference this server completes
/// nothing of (it completes prompts' arguments and resource templates' variables).
pub fn uncompletable_reference(kind: &str) -> ErrorData {
    ErrorData::invalid_params(format!("cannot complete a {kind} reference"), None)
}

/// JSON-RPC -32603: the completions found could not be put in a result (rmcp refuses more than
/// it allows in one, which the handler never offers it).
pub fn completions_unlisted(error: &dyn std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(error.to_string(), None)
}

/// JSON-RPC -32602: a completion names a resource template nobody serves.
pub fn unknown_template(uri_template: &str) -> ErrorData {
    let uri_template = clip(uri_template);
    ErrorData::invalid_params(
        format!("unknown resource template: {uri_template}"),
        Some(json!({ "uriTemplate": uri_template })),
    )
}

/// JSON-RPC -32603: the completions of `what` could not be had (the plugin failed, or the
/// store did not answer).
pub fn completion_failed(what: &str, error: &dyn std::fmt::Display) -> ErrorData {
    let message = clip(&error.to_string()).into_owned();
    ErrorData::internal_error(
        format!("cannot complete {}: {message}", clip(what)),
        Some(json!({ "code": "COMPLETION_FAILED", "message": message })),
    )
}

/// JSON-RPC -32002: no resource has that URI, or its handle names no instance the caller has.
/// (An instance of another principal, or of another session, is not found either: whether it
/// exists is not the caller's business.)
pub fn resource_not_found(uri: &str) -> ErrorData {
    let uri = clip(uri);
    ErrorData::resource_not_found(
        format!("resource not found: {uri}"),
        Some(json!({ "uri": uri })),
    )
}

/// JSON-RPC -32602 with `data.code` `FORBIDDEN`: the prompt or resource exists, but not in the
/// current state of the instance (the counterpart of a refused tool call, DESIGN behaviour 2).
pub fn withheld(withheld: &Withheld) -> ErrorData {
    let kind = withheld.kind;
    let available = if withheld.available.is_empty() {
        "none".to_owned()
    } else {
        withheld.available.join(", ")
    };
    let name = clip(&withheld.name);
    ErrorData::invalid_params(
        format!(
            "{kind} {name} is not available in the current state of workflow {workflow} \
             ({state}). Available now: {available}.",
            workflow = withheld.workflow,
            state = withheld.state,
        ),
        Some(json!({
            "code": "FORBIDDEN",
            "kind": kind,
            "name": name,
            "workflow": withheld.workflow,
            "state": withheld.state,
            "available": withheld.available,
        })),
    )
}

/// JSON-RPC -32602 with `data.code` `INVALID_ARGUMENTS`: a required prompt argument is missing,
/// or an argument is not a string.
pub fn invalid_prompt_arguments(name: &str, problems: &[String]) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "invalid arguments for prompt {}: {}",
            clip(name),
            problems.join("; ")
        ),
        Some(json!({ "code": "INVALID_ARGUMENTS", "prompt": clip(name), "problems": problems })),
    )
}

/// The `prompts/get` result for what the plugin produced: a string is one user message; an
/// object is the result as MCP spells it (`{"description"?, "messages": [...]}`).
pub fn prompt_result(name: &str, output: PluginOutput) -> Result<GetPromptResult, ErrorData> {
    let what = format!("prompt {name}");
    match succeeded(&what, output)? {
        Value::String(text) => Ok(GetPromptResult::new(vec![
            rmcp::model::PromptMessage::new_text(rmcp::model::Role::User, text),
        ])),
        // What a plugin writes has no `resultType`: the messages are the whole result, which
        // 2026-07-28 says with "complete" (rmcp clears it for an older peer).
        value => serde_json::from_value::<GetPromptResult>(value)
            .map(|mut result| {
                result
                    .result_type
                    .get_or_insert(rmcp::model::ResultType::COMPLETE);
                result
            })
            .map_err(|error| bad_output(&what, &error.to_string())),
    }
}

/// The `resources/read` result for what the plugin produced for `uri`: `{"contents": [...]}`
/// as MCP spells it, each content's `uri` and `mimeType` defaulting to `uri` and the declared
/// MIME type; a string is one text content (`text/plain` when no type is declared); any other
/// value one text content holding its JSON (`application/json` when none is declared).
pub fn resource_result(
    uri: &str,
    mime_type: Option<&str>,
    output: PluginOutput,
) -> Result<ReadResourceResult, ErrorData> {
    let what = format!("resource {uri}");
    let contents = match succeeded(&what, output)? {
        Value::String(text) => {
            vec![
                ResourceContents::text(text, uri).with_mime_type(mime_type.unwrap_or("text/plain")),
            ]
        }
        Value::Object(mut object) if object.contains_key("contents") => {
            let Some(Value::Array(mut contents)) = object.remove("contents") else {
                return Err(bad_output(&what, "its \"contents\" is not a list"));
            };
            for content in &mut contents {
                if let Value::Object(content) = content {
                    content.entry("uri").or_insert_with(|| json!(uri));
                    if let Some(mime_type) = mime_type {
                        content
                            .entry("mimeType")
                            .or_insert_with(|| json!(mime_type));
                    }
                }
            }
            serde_json::from_value(Value::Array(contents))
                .map_err(|error| bad_output(&what, &error.to_string()))?
        }
        value => vec![
            ResourceContents::text(value.to_string(), uri)
                .with_mime_type(mime_type.unwrap_or("application/json")),
        ],
    };
    Ok(ReadResourceResult::new(contents))
}

/// The plugin's output, or the error its failure is for the client.
fn succeeded(what: &str, output: PluginOutput) -> Result<Value, ErrorData> {
    match output {
        PluginOutput::Success(output) => Ok(output.value),
        PluginOutput::BadInput(message) => Err(ErrorData::invalid_params(
            format!("{what}: {message}"),
            Some(json!({ "code": "INVALID_ARGUMENTS", "message": message })),
        )),
        PluginOutput::ToolError(message) => Err(ErrorData::internal_error(
            format!("{what} failed: {message}"),
            Some(json!({ "code": "TOOL_ERROR", "message": message })),
        )),
        // Asked where nothing may be asked (`mcp/handler/asking.rs` answers every request it can).
        PluginOutput::NeedsInput(requests) => {
            let needed = super::needed(&requests);
            Err(ErrorData::invalid_request(
                format!("{what} needs input this client cannot give: {needed}"),
                Some(json!({ "code": "INPUT_UNAVAILABLE", "needed": needed })),
            ))
        }
    }
}

/// The plugin produced content of the wrong shape.
fn bad_output(what: &str, problem: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("{what} produced unusable content: {problem}"),
        Some(json!({ "code": "BAD_OUTPUT", "message": problem })),
    )
}

/// The plugin produced nothing (it failed, timed out, was busy...). A plugin's own failure goes
/// to the server log with its library's path; the client gets the reason without it.
pub fn read_failure(kind: PrimitiveKind, name: &str, error: &InvokeError) -> ErrorData {
    let what = format!("{} {}", kind.as_str(), clip(name));
    let (code, message) = match error {
        InvokeError::Plugin(error) => {
            tracing::warn!(%what, %error, "plugin failure");
            let full = error.to_string();
            let prefix = format!("{}: ", error.path().display());
            (
                "PLUGIN_FAILED",
                full.strip_prefix(&prefix).unwrap_or(&full).to_owned(),
            )
        }
        InvokeError::TimedOut(_) => ("TOOL_TIMEOUT", error.to_string()),
        InvokeError::Busy(_) | InvokeError::InstanceBusy => ("BUSY", error.to_string()),
        InvokeError::ShuttingDown => ("SHUTTING_DOWN", error.to_string()),
        InvokeError::ResultTooLarge { .. } => ("RESULT_TOO_LARGE", error.to_string()),
        InvokeError::BadOutput(_) => ("BAD_OUTPUT", error.to_string()),
        InvokeError::Worker(_) => ("INTERNAL", error.to_string()),
    };
    ErrorData::internal_error(
        format!("{what} could not be produced: {message}"),
        Some(json!({ "code": code, "message": message })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_state_and_what_is_available() {
        let error = withheld(&Withheld {
            kind: "prompt",
            name: "invoice.review_checklist".into(),
            workflow: "invoice".into(),
            state: json!("draft"),
            available: vec![],
        });
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(
            error.data,
            Some(json!({"code": "FORBIDDEN", "kind": "prompt",
                "name": "invoice.review_checklist", "workflow": "invoice", "state": "draft",
                "available": []}))
        );
        assert!(
            error.message.contains("Available now: none."),
            "{}",
            error.message
        );
    }

    #[test]
    fn content_shorthands_and_full_forms_become_results() {
        let result = prompt_result("p", PluginOutput::success(json!("Check it."))).unwrap();
        assert_eq!(
            serde_json::to_value(&result.messages).unwrap(),
            json!([{"role": "user", "content": {"type": "text", "text": "Check it."}}])
        );
        let full = json!({"description": "d", "messages": [
            {"role": "assistant", "content": {"type": "text", "text": "ok"}}]});
        let result = prompt_result("p", PluginOutput::success(full)).unwrap();
        assert_eq!(result.description.as_deref(), Some("d"));
        let error = prompt_result("p", PluginOutput::success(json!({"messages": 3}))).unwrap_err();
        assert_eq!(error.data.unwrap()["code"], "BAD_OUTPUT");

        let result = resource_result(
            "a://x",
            Some("text/markdown"),
            PluginOutput::success(json!("# A")),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&result.contents).unwrap(),
            json!([{"uri": "a://x", "mimeType": "text/markdown", "text": "# A"}])
        );
        let blob = json!({"contents": [{"blob": "AAEC", "mimeType": "image/png"}]});
        let result = resource_result("a://x", None, PluginOutput::success(blob)).unwrap();
        assert_eq!(
            serde_json::to_value(&result.contents).unwrap(),
            json!([{"uri": "a://x", "mimeType": "image/png", "blob": "AAEC"}])
        );
        let result =
            resource_result("a://x", None, PluginOutput::success(json!({"a": 1}))).unwrap();
        assert_eq!(
            serde_json::to_value(&result.contents).unwrap(),
            json!([{"uri": "a://x", "mimeType": "application/json", "text": "{\"a\":1}"}])
        );
        let error = resource_result("a://x", None, PluginOutput::success(json!({"contents": 1})))
            .unwrap_err();
        assert_eq!(error.data.unwrap()["code"], "BAD_OUTPUT");
        let error =
            resource_result("a://x", None, PluginOutput::ToolError("no".into())).unwrap_err();
        assert_eq!(error.data.unwrap()["code"], "TOOL_ERROR");
    }
}
