//! The tools the official MCP conformance suite (`@modelcontextprotocol/conformance`, server
//! scenarios) calls, with the results its reference server gives, so the suite can run against
//! Turnstile (`tests/conformance/run.sh`). Built with the workspace; not loaded by the demo
//! command, and not an example of a workflow plugin: none of these tools is gated.
//!
//! Content blocks other than text go out through the output convention's `_content` key; logs
//! and progress through the host services of ABI 1.1. The suite's prompts and resources come
//! from the manifest's static text where it is fixed, and from `read` (ABI 1.3) where it is not.

use std::{thread, time::Duration};

use serde_json::{Value, json};
use turnstile_plugin::{
    CallContext, ConfirmManifest, InputKind, InputRequest, LogLevel, Manifest, Plugin,
    PrimitiveKind, PromptManifest, ResourceManifest, ResourceTemplateManifest, TaskSupport,
    ToolError, ToolManifest,
};

/// A 1×1 PNG (the suite checks that an image block has data and a MIME type).
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// A tiny WAV file (the suite checks for `audio/wav`).
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// How long the logging and progress tools wait between steps, as the reference server does.
const STEP: Duration = Duration::from_millis(50);

#[derive(Default)]
pub struct Conformance;

turnstile_plugin::export_plugin!(Conformance);

fn tool(name: &str, description: &str) -> ToolManifest {
    ToolManifest::new(
        name,
        description,
        json!({"type": "object", "properties": {}}),
    )
}

fn image() -> Value {
    json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})
}

impl Plugin for Conformance {
    fn manifest(&self) -> Manifest {
        // A fixture for the conformance suite: served only with `--allow-test-plugins`.
        Manifest::new("conformance", env!("CARGO_PKG_VERSION"))
            .test_fixture()
            .tool(tool("test_simple_text", "Returns a simple text response."))
            .tool(tool("test_image_content", "Returns an image (a 1x1 PNG)."))
            .tool(tool("test_audio_content", "Returns a short WAV sound."))
            .tool(tool(
                "test_embedded_resource",
                "Returns an embedded text resource.",
            ))
            .tool(tool(
                "test_multiple_content_types",
                "Returns text, an image and an embedded resource.",
            ))
            .tool(tool(
                "test_tool_with_logging",
                "Logs three messages to the client while it runs.",
            ))
            .tool(tool(
                "test_tool_with_progress",
                "Reports progress three times while it runs.",
            ))
            .tool(tool(
                "test_error_handling",
                "Always fails, to show how a tool error looks.",
            ))
            .tool(ToolManifest::new(
                "json_schema_2020_12_tool",
                "Takes input described with JSON Schema 2020-12 features.",
                // SEP-1613's keywords, and SEP-2106's broader vocabulary (an anchor, composition,
                // a conditional), which a 2026-07-28 listing must keep as they are.
                json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "$anchor": "addressDef",
                            "type": "object",
                            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                        }
                    },
                    "properties": {
                        "name": {"type": "string"},
                        "address": {"$ref": "#/$defs/address"},
                        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                        "phone": {"type": "string"},
                        "email": {"type": "string"}
                    },
                    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                    "if": {
                        "properties": {"contactMethod": {"const": "phone"}},
                        "required": ["contactMethod"]
                    },
                    "then": {"required": ["phone"]},
                    "else": {"required": ["email"]},
                    "additionalProperties": false
                }),
            ))
            .tool(ToolManifest::new(
                "test_custom_headers",
                "Takes a region that clients mirror into the Mcp-Param-Region header (SEP-2243).",
                json!({
                    "type": "object",
                    "properties": {
                        "region": {
                            "type": "string",
                            "description": "Mirrored into the Mcp-Param-Region header.",
                            "x-mcp-header": "Region"
                        },
                        "query": {"type": "string", "description": "Not mirrored."}
                    },
                    "required": ["region"]
                }),
            ))
            .tool(
                ToolManifest::new(
                    "test_sampling",
                    "Asks the client's model to answer a prompt (sampling).",
                    json!({"type": "object", "properties": {"prompt": {"type": "string"}},
                        "required": ["prompt"]}),
                )
                .asks(),
            )
            .tool(
                ToolManifest::new(
                    "test_elicitation",
                    "Asks the user for their username and email (elicitation).",
                    json!({"type": "object", "properties": {"message": {"type": "string"}},
                        "required": ["message"]}),
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_elicitation_sep1034_defaults",
                    "Asks with a form whose fields have defaults (SEP-1034).",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_elicitation_sep1330_enums",
                    "Asks with a form of every enum kind (SEP-1330).",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_elicitation",
                    "Asks the user's name.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_sampling",
                    "Asks the client's model a question.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_list_roots",
                    "Asks for the client's roots.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_request_state",
                    "Asks for a confirmation, keeping state.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_multiple_inputs",
                    "Asks for a form, a completion and the roots at once.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_multi_round",
                    "Asks twice, one question after the other.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_tampered_state",
                    "Asks for a confirmation; its state must not be tampered with.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_input_required_result_capabilities",
                    "Asks only what the client can answer.",
                )
                .asks(),
            )
            // The stateless scenario's (SEP-2575): a tool that needs the client's model, one
            // that asks the person mid-call, one that logs. What the suite checks is the host's
            // part: a request not declaring sampling is refused -32021, the question comes back
            // as an input-required result (never a request of the server's on the stream), and
            // no log reaches a request that named no `logLevel`.
            .tool(
                tool(
                    "test_missing_capability",
                    "Asks the client's model for a word (sampling): a client must declare it can \
                     sample to call it.",
                )
                .asks(),
            )
            .tool(
                tool(
                    "test_streaming_elicitation",
                    "Asks the user whether to go on (elicitation), then reports its progress \
                     and answers.",
                )
                .asks(),
            )
            .tool(tool(
                "test_logging_tool",
                "Logs a message to the client while it runs (if the client asked for logs).",
            ))
            // The tasks extension's scenarios (SEP-2663): a call that never runs as a task, one
            // that may, one that must; ones that ask while they run as tasks, and one that
            // confirms before its task.
            // First in the 2026-07-28 list (sorted by name), which the header scenarios call
            // with no arguments as a plain call: refused its missing filename, a tool result.
            .tool(
                ToolManifest::new(
                    "confirm_delete",
                    "Asks whether to delete the file it is given, then says what it did.",
                    json!({"type": "object", "properties": {"filename": {"type": "string"}},
                        "required": ["filename"]}),
                )
                .asks()
                .task(TaskSupport::Optional),
            )
            .tool(ToolManifest::new(
                "echo",
                "Answers with the message it is given.",
                json!({"type": "object", "properties": {"message": {"type": "string"}}}),
            ))
            .tool(ToolManifest::new(
                "greet",
                "Greets someone by name; always answers at once.",
                json!({"type": "object", "properties": {"name": {"type": "string"}},
                    "required": ["name"]}),
            ))
            .tool(
                ToolManifest::new(
                    "slow_compute",
                    "Works for the given number of seconds (stopping early when cancelled), \
                     then answers with its label.",
                    json!({"type": "object", "properties": {
                        "seconds": {"type": "number", "minimum": 0},
                        "label": {"type": "string"}}}),
                )
                .task(TaskSupport::Optional),
            )
            .tool(
                tool(
                    "failing_job",
                    "Works for a second, then fails with a tool error; runs only as a task.",
                )
                .task(TaskSupport::Required),
            )
            .tool(
                tool(
                    "multi_input",
                    "Asks two questions at once, then answers with both answers.",
                )
                .asks()
                .task(TaskSupport::Optional),
            )
            .tool(
                tool(
                    "protocol_error_job",
                    "Answers with output its declared output schema refuses: the call cannot \
                     give a result, and its task ends failed.",
                )
                .output_schema(json!({"type": "object", "properties": {
                    "answer": {"type": "string"}}, "required": ["answer"]}))
                .task(TaskSupport::Optional),
            )
            .tool(
                tool(
                    "test_tool_with_task",
                    "Has the person give their name before it runs, then greets them; runs \
                     only as a task.",
                )
                .confirm(ConfirmManifest {
                    message: "What is your name?".into(),
                    schema: Some(json!({"type": "object", "properties": {
                        "name": {"type": "string", "description": "Your name."}},
                        "required": ["name"]})),
                    when: None,
                })
                .task(TaskSupport::Required),
            )
            .prompt(
                PromptManifest::new(
                    "test_input_required_result_prompt",
                    "A prompt that asks what context it should use.",
                )
                .asks(),
            )
            .prompt(
                PromptManifest::new("test_simple_prompt", "A simple prompt without arguments.")
                    .text("This is a simple prompt for testing."),
            )
            .prompt(
                PromptManifest::new(
                    "test_prompt_with_arguments",
                    "A prompt with two arguments, both substituted into its text.",
                )
                .argument("arg1", "The first argument.", true)
                .argument("arg2", "The second argument.", true),
            )
            .prompt(
                PromptManifest::new(
                    "test_prompt_with_embedded_resource",
                    "A prompt that embeds the resource it is given.",
                )
                .argument("resourceUri", "The URI of the resource to embed.", true),
            )
            .prompt(PromptManifest::new(
                "test_prompt_with_image",
                "A prompt with an image (a 1x1 PNG).",
            ))
            .resource(
                ResourceManifest::new("test://static-text", "static-text")
                    .mime_type("text/plain")
                    .text("This is the content of the static text resource."),
            )
            .resource(
                ResourceManifest::new("test://static-binary", "static-binary")
                    .mime_type("image/png"),
            )
            .resource(
                ResourceManifest::new("test://watched-resource", "watched-resource")
                    .mime_type("text/plain")
                    .text("Watched resource content."),
            )
            .resource_template(
                ResourceTemplateManifest::new("test://template/{id}/data", "template-data")
                    .mime_type("application/json"),
            )
    }

    fn read(
        &self,
        kind: PrimitiveKind,
        name: &str,
        request: Value,
        ctx: &CallContext,
    ) -> Result<Value, ToolError> {
        let argument = |name: &str| request["arguments"][name].as_str().unwrap_or("").to_owned();
        match (kind, name) {
            (PrimitiveKind::Prompt, "test_input_required_result_prompt") => {
                let answer = ctx.ask(
                    "user_context",
                    form_of("What context should the prompt use?", "context"),
                )?;
                let context = answer["content"]["context"].as_str().unwrap_or("none");
                Ok(json!(format!("Use this context: {context}")))
            }
            (PrimitiveKind::Prompt, "test_prompt_with_arguments") => Ok(json!(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                argument("arg1"),
                argument("arg2")
            ))),
            (PrimitiveKind::Prompt, "test_prompt_with_embedded_resource") => Ok(json!({
                "messages": [
                    {"role": "user", "content": {"type": "resource", "resource": {
                        "uri": argument("resourceUri"),
                        "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."
                    }}},
                    {"role": "user", "content": {"type": "text",
                        "text": "Please process the embedded resource above."}}
                ]
            })),
            (PrimitiveKind::Prompt, "test_prompt_with_image") => Ok(json!({
                "messages": [
                    {"role": "user", "content": image()},
                    {"role": "user", "content": {"type": "text",
                        "text": "Please analyze the image above."}}
                ]
            })),
            (PrimitiveKind::Resource, "static-binary") => {
                Ok(json!({"contents": [{"blob": PNG_1X1}]}))
            }
            (PrimitiveKind::Resource, "template-data") => {
                let id = request["variables"]["id"].as_str().unwrap_or("");
                Ok(json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}))
            }
            _ => Err(ToolError::UnknownTool(name.to_owned())),
        }
    }

    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        if let Some(answer) = asking(tool, &input, ctx) {
            return answer;
        }
        match tool {
            "test_simple_text" => Ok(json!("This is a simple text response for testing.")),
            "test_image_content" => Ok(json!({ "_content": [image()] })),
            "test_audio_content" => Ok(json!({
                "_content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]
            })),
            "test_embedded_resource" => Ok(json!({
                "_content": [{"type": "resource", "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content."
                }}]
            })),
            "test_multiple_content_types" => Ok(json!({
                "_content": [
                    {"type": "text", "text": "Multiple content types test:"},
                    image(),
                    {"type": "resource", "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": "{\"test\":\"data\",\"value\":123}"
                    }}
                ]
            })),
            "test_tool_with_logging" => {
                for message in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ] {
                    ctx.host.log(LogLevel::Info, &json!(message));
                    thread::sleep(STEP);
                }
                Ok(json!("Logging test completed."))
            }
            "test_logging_tool" => {
                ctx.host
                    .log(LogLevel::Info, &json!("Diagnostic trace logging activated"));
                Ok(json!("Logging evaluated."))
            }
            "test_tool_with_progress" => {
                for progress in [0.0, 50.0, 100.0] {
                    ctx.host.progress(progress, Some(100.0), None);
                    thread::sleep(STEP);
                }
                Ok(json!("Progress test completed."))
            }
            "test_error_handling" => Err(ToolError::failed(
                "This tool intentionally returns an error for testing",
            )),
            "json_schema_2020_12_tool" => Ok(json!("Input accepted.")),
            "echo" => Ok(json!(input["message"].as_str().unwrap_or_default())),
            "greet" => Ok(json!(format!(
                "Hello, {}!",
                input["name"].as_str().unwrap_or("world")
            ))),
            "slow_compute" => {
                let seconds = input["seconds"].as_f64().unwrap_or(0.0).clamp(0.0, 3600.0);
                let label = input["label"].as_str().unwrap_or("slow_compute");
                if !work_for(Duration::from_secs_f64(seconds), ctx) {
                    return Err(ToolError::failed(format!("{label}: cancelled")));
                }
                Ok(json!(format!("{label}: computed for {seconds} seconds")))
            }
            "failing_job" => {
                work_for(Duration::from_secs(1), ctx);
                Err(ToolError::failed("failing_job failed, as it always does"))
            }
            "confirm_delete" => {
                let filename = input["filename"].as_str().unwrap_or_default();
                let answer = ctx.ask(
                    "confirm",
                    InputRequest::form(
                        format!("Delete {filename}?"),
                        json!({"type": "object", "properties": {
                            "confirm": {"type": "boolean", "title": "Delete it"}},
                            "required": ["confirm"]}),
                    ),
                )?;
                let confirmed =
                    answer["action"] == "accept" && answer["content"]["confirm"] == true;
                Ok(json!(if confirmed {
                    format!("Deleted {filename}.")
                } else {
                    format!("Kept {filename}.")
                }))
            }
            "multi_input" => {
                let answers = ctx.ask_all([
                    ("name", form_of("What is your name?", "name")),
                    (
                        "confirm",
                        InputRequest::form(
                            "Go ahead?",
                            json!({"type": "object", "properties": {
                                "confirm": {"type": "boolean"}}, "required": ["confirm"]}),
                        ),
                    ),
                ])?;
                Ok(json!(format!(
                    "name: {}, confirm: {}",
                    answers[0]["content"]["name"].as_str().unwrap_or("none"),
                    answers[1]["content"]["confirm"]
                )))
            }
            // Its declared output needs an `answer`.
            "protocol_error_job" => Ok(json!({"result": "no answer"})),
            "test_tool_with_task" => {
                let name = ctx
                    .confirmation()
                    .and_then(|confirmed| confirmed["name"].as_str())
                    .unwrap_or("nobody");
                Ok(json!(format!("Hello, {name}!")))
            }
            "test_custom_headers" => Ok(json!("Custom headers test completed.")),
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}

/// Works (sleeps) for `how_long`, looking every 50 ms whether the call was cancelled; whether
/// it worked the whole time.
fn work_for(how_long: Duration, ctx: &CallContext) -> bool {
    let until = std::time::Instant::now() + how_long;
    while std::time::Instant::now() < until {
        if ctx.host.is_cancelled() {
            return false;
        }
        thread::sleep(STEP.min(until.saturating_duration_since(std::time::Instant::now())));
    }
    true
}

/// A form with one string field.
fn form_of(message: &str, field: &str) -> InputRequest {
    InputRequest::form(
        message,
        json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}),
    )
}

/// A yes-or-no form.
fn confirm(message: &str) -> InputRequest {
    InputRequest::form(
        message,
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    )
}

/// The tools that ask (ABI 1.4), as the suite's scenarios expect them to: `None` for the others.
fn asking(tool: &str, input: &Value, ctx: &CallContext) -> Option<Result<Value, ToolError>> {
    let content = |answer: &Value| answer["content"].clone();
    Some(match tool {
        "test_sampling" => (|| {
            let prompt = input["prompt"].as_str().unwrap_or_default();
            let answer = ctx.ask("answer", InputRequest::sample(prompt, 100))?;
            let text = answer["content"]["text"].as_str().unwrap_or_default();
            Ok(json!(format!("LLM response: {text}")))
        })(),
        "test_elicitation" => (|| {
            let message = input["message"]
                .as_str()
                .unwrap_or("Please provide your information");
            let answer = ctx.ask(
                "information",
                InputRequest::form(
                    message,
                    json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}},
                    "required": ["username", "email"]}),
                ),
            )?;
            Ok(json!(format!(
                "User response: action={}, content={}",
                answer["action"].as_str().unwrap_or("?"),
                content(&answer)
            )))
        })(),
        "test_elicitation_sep1034_defaults" => (|| {
            let answer = ctx.ask(
                "defaults",
                InputRequest::form("Please review and update the form fields with defaults", json!({
                    "type": "object", "required": [], "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status",
                        "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}}})),
            )?;
            Ok(json!(format!(
                "Elicitation completed: action={}, content={}",
                answer["action"].as_str().unwrap_or("?"),
                content(&answer)
            )))
        })(),
        "test_elicitation_sep1330_enums" => {
            (|| {
                let titled = |prefix: &str, titles: [&str; 3]| -> Value {
                    titles.iter().enumerate()
                    .map(|(n, title)| json!({"const": format!("{prefix}{}", n + 1), "title": title}))
                    .collect()
                };
                let answer = ctx.ask(
                "enums",
                InputRequest::form("Please select options from the enum fields", json!({
                    "type": "object", "required": [], "properties": {
                    "untitledSingle": {"type": "string", "description": "Select one option",
                        "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Select one option with titles",
                        "oneOf": titled("value", ["First Option", "Second Option", "Third Option"])},
                    "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                        "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Select multiple options",
                        "minItems": 1, "maxItems": 3,
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                        "minItems": 1, "maxItems": 3,
                        "items": {"anyOf": titled("value", ["First Choice", "Second Choice", "Third Choice"])}}}})),
            )?;
                Ok(json!(format!(
                    "Elicitation completed: action={}, content={}",
                    answer["action"].as_str().unwrap_or("?"),
                    content(&answer)
                )))
            })()
        }
        "test_input_required_result_elicitation" => (|| {
            let answer = ctx.ask("user_name", form_of("What is your name?", "name"))?;
            Ok(json!(format!(
                "Hello, {}!",
                answer["content"]["name"].as_str().unwrap_or("?")
            )))
        })(),
        "test_input_required_result_sampling" => (|| {
            let answer = ctx.ask(
                "capital_question",
                InputRequest::sample("What is the capital of France?", 100),
            )?;
            Ok(json!(format!(
                "The model said: {}",
                answer["content"]["text"].as_str().unwrap_or("?")
            )))
        })(),
        "test_input_required_result_list_roots" => (|| {
            let answer = ctx.ask("client_roots", InputRequest::roots())?;
            let roots = answer["roots"].as_array().map_or(0, Vec::len);
            Ok(json!(format!("Found {roots} root(s)")))
        })(),
        "test_input_required_result_request_state" => (|| {
            let answer = ctx.ask("confirm", confirm("Please confirm"))?;
            Ok(json!(format!(
                "state-ok: confirmed={}",
                answer["content"]["ok"]
            )))
        })(),
        "test_input_required_result_multiple_inputs" => (|| {
            let answers = ctx.ask_all([
                ("user_name", form_of("What is your name?", "name")),
                ("greeting", InputRequest::sample("Generate a greeting", 50)),
                ("client_roots", InputRequest::roots()),
            ])?;
            Ok(json!(format!("Received {} answers", answers.len())))
        })(),
        "test_input_required_result_multi_round" => (|| {
            let name = ctx.ask("step1", form_of("Step 1: What is your name?", "name"))?;
            let color = ctx.ask(
                "step2",
                form_of("Step 2: What is your favorite color?", "color"),
            )?;
            Ok(json!(format!(
                "{} likes {}",
                name["content"]["name"].as_str().unwrap_or("?"),
                color["content"]["color"].as_str().unwrap_or("?")
            )))
        })(),
        "test_input_required_result_tampered_state" => (|| {
            ctx.ask("confirm", confirm("Please confirm"))?;
            Ok(json!("Confirmed."))
        })(),
        "test_missing_capability" => (|| {
            let answer = ctx.ask("word", InputRequest::sample("Answer with one word.", 10))?;
            Ok(json!(format!(
                "The model said: {}",
                answer["content"]["text"].as_str().unwrap_or("?")
            )))
        })(),
        "test_streaming_elicitation" => (|| {
            let answer = ctx.ask("go_on", confirm("Stream the results?"))?;
            if answer["action"] != "accept" || answer["content"]["ok"] != true {
                return Ok(json!("Streaming cancelled."));
            }
            for progress in [50.0, 100.0] {
                ctx.host.progress(progress, Some(100.0), None);
            }
            Ok(json!("Streaming complete."))
        })(),
        "test_input_required_result_capabilities" => (|| {
            let mut requests = Vec::new();
            if ctx.can_ask(InputKind::Form) {
                requests.push(("user_input", form_of("Your input?", "input")));
            }
            if ctx.can_ask(InputKind::Sampling) {
                requests.push(("sample_input", InputRequest::sample("Sample request", 50)));
            }
            if requests.is_empty() {
                return Err(ToolError::failed(
                    "the client can answer nothing this tool asks",
                ));
            }
            let answers = ctx.ask_all(requests)?;
            Ok(json!(format!(
                "capabilities-ok: received {} answer(s)",
                answers.len()
            )))
        })(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_tool_answers() {
        let plugin = Conformance;
        for tool in plugin.manifest().tools {
            let answer = plugin.call(&tool.name, json!({}), &CallContext::default());
            match tool.name.as_str() {
                "test_error_handling" | "failing_job" => assert!(answer.is_err()),
                // Asked without being able to ask: it needs input, or refuses.
                _ if tool.asks => assert!(answer.is_err()),
                name => assert!(answer.is_ok(), "{name}: {answer:?}"),
            }
        }
    }

    #[test]
    fn the_task_tools_ask_then_answer_with_what_they_were_told() {
        let plugin = Conformance;
        let told = |responses: Value| CallContext {
            asking: json!({"canAsk": ["elicitation.form"], "responses": responses}),
            ..CallContext::default()
        };
        let yes = json!({"action": "accept", "content": {"confirm": true}});
        let file = json!({"filename": "a.txt"});
        let Err(ToolError::NeedsInput(asked)) =
            plugin.call("confirm_delete", file.clone(), &told(json!({})))
        else {
            panic!("confirm_delete asks first");
        };
        assert_eq!(asked.keys().collect::<Vec<_>>(), ["confirm"]);
        let deleted = plugin.call("confirm_delete", file, &told(json!({"confirm": yes})));
        assert_eq!(deleted.unwrap(), json!("Deleted a.txt."));
        // Two questions at once; answered one at a time, it asks only what is left.
        let Err(ToolError::NeedsInput(asked)) =
            plugin.call("multi_input", json!({}), &told(json!({})))
        else {
            panic!("multi_input asks first");
        };
        assert_eq!(asked.keys().collect::<Vec<_>>(), ["name", "confirm"]);
        let named = json!({"action": "accept", "content": {"name": "partial-1"}});
        let Err(ToolError::NeedsInput(asked)) =
            plugin.call("multi_input", json!({}), &told(json!({"name": named})))
        else {
            panic!("one answer of two");
        };
        assert_eq!(asked.keys().collect::<Vec<_>>(), ["confirm"]);
        let both = plugin.call(
            "multi_input",
            json!({}),
            &told(json!({"name": named, "confirm": yes})),
        );
        assert_eq!(both.unwrap(), json!("name: partial-1, confirm: true"));
        // What the person confirmed reaches the handler (the host asks, before it runs).
        let confirmed = json!({"action": "accept", "content": {"name": "Alice"}});
        let greeted = plugin.call(
            "test_tool_with_task",
            json!({}),
            &told(json!({"turnstile.confirm": confirmed})),
        );
        assert_eq!(greeted.unwrap(), json!("Hello, Alice!"));
    }

    #[test]
    fn the_stateless_tools_ask_for_sampling_and_a_form_then_answer() {
        let plugin = Conformance;
        let told = |responses: Value| CallContext {
            asking: json!({"canAsk": ["elicitation.form", "sampling"], "responses": responses}),
            ..CallContext::default()
        };
        // It asks whatever the client declared: the host refuses a client that cannot sample.
        let Err(ToolError::NeedsInput(asked)) = plugin.call(
            "test_missing_capability",
            json!({}),
            &CallContext::default(),
        ) else {
            panic!("test_missing_capability asks first");
        };
        assert_eq!(asked["word"]["method"], "sampling/createMessage");
        let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "yes"}});
        let answered = plugin.call(
            "test_missing_capability",
            json!({}),
            &told(json!({"word": sampled})),
        );
        assert_eq!(answered.unwrap(), json!("The model said: yes"));
        let Err(ToolError::NeedsInput(asked)) =
            plugin.call("test_streaming_elicitation", json!({}), &told(json!({})))
        else {
            panic!("test_streaming_elicitation asks first");
        };
        assert_eq!(asked["go_on"]["method"], "elicitation/create");
        let go_on = |ok: bool| json!({"go_on": {"action": "accept", "content": {"ok": ok}}});
        let streamed = plugin.call("test_streaming_elicitation", json!({}), &told(go_on(true)));
        assert_eq!(streamed.unwrap(), json!("Streaming complete."));
        let stopped = plugin.call("test_streaming_elicitation", json!({}), &told(go_on(false)));
        assert_eq!(stopped.unwrap(), json!("Streaming cancelled."));
    }

    #[test]
    fn every_prompt_and_resource_without_text_is_read() {
        let plugin = Conformance;
        let manifest = plugin.manifest();
        let request = json!({"arguments": {"arg1": "a", "arg2": "b", "resourceUri": "test://x"},
            "variables": {"id": "123"}});
        let ctx = CallContext::default();
        for prompt in manifest.prompts.iter().filter(|p| p.text.is_none()) {
            let answer = plugin.read(PrimitiveKind::Prompt, &prompt.name, request.clone(), &ctx);
            // One that asks needs input first.
            assert_eq!(answer.is_err(), prompt.asks, "{}: {answer:?}", prompt.name);
        }
        let names = (manifest.resources.iter().filter(|r| r.text.is_none()))
            .map(|r| r.name.as_str())
            .chain(manifest.resource_templates.iter().map(|t| t.name.as_str()));
        for name in names {
            let answer = plugin.read(PrimitiveKind::Resource, name, request.clone(), &ctx);
            assert!(answer.is_ok(), "{name}: {answer:?}");
        }
        let data = plugin
            .read(PrimitiveKind::Resource, "template-data", request, &ctx)
            .unwrap();
        assert_eq!(data["id"], "123");
    }
}
