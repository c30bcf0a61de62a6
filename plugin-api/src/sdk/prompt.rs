//! [`PromptBuilder`]: one prompt declared in one chain, ending in its text or its renderer;
//! [`Prompt`], what the chain produces.
//!
//! A prompt is bound to workflow states exactly like a tool ([`PromptBuilder::visible_in`]): the
//! host lists it, and lets a client get it, only while the instance the client works on is in
//! one of those states. So the review checklist is offered while an invoice is in review, and
//! not before. Its arguments come from the renderer's argument type, as a tool's input schema
//! does (MCP prompt arguments are strings, so each field is a `String` or an `Option<String>`).
//! Checking the prompt against its machine is the toolkit's job, not this module's.

use std::fmt;

use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::{schema, workflow::Workflow};
use crate::{CallContext, PromptArgumentManifest, PromptManifest, ToolError, parse_input};

/// The function the dispatcher calls for a prompt or resource: the request JSON in (see
/// [`ReadKind`](crate::abi::ReadKind)), the content out.
pub(crate) type Reader =
    Box<dyn Fn(Value, &CallContext) -> Result<Value, ToolError> + Send + Sync + 'static>;

/// A prompt declared so far. Start one with [`Workflow::prompt`] or [`prompt`]; finish it with
/// [`text`](PromptBuilder::text) or [`render`](PromptBuilder::render).
#[must_use = "a prompt is declared only once `text` or `render` finishes it"]
pub struct PromptBuilder {
    manifest: PromptManifest,
    workflow: Option<Workflow>,
}

/// A declared prompt, ready for [`Toolkit::prompt`](super::Toolkit::prompt).
pub struct Prompt {
    pub(crate) manifest: PromptManifest,
    pub(crate) workflow: Option<Workflow>,
    /// `None`: the manifest's static `text` is the prompt.
    pub(crate) reader: Option<Reader>,
    /// The argument type's schema, kept for the toolkit's check that every argument is a string.
    pub(crate) arguments_schema: Value,
    /// Completions by argument name ([`Prompt::complete`]).
    pub(crate) completers: Vec<(String, Completer)>,
}

/// Completes one argument: what the client typed so far and the instance's context in, the
/// values that fit out (ABI 1.4, `completion/complete`).
pub(crate) type Completer = Box<dyn Fn(&str, &CallContext) -> Vec<String> + Send + Sync + 'static>;

impl Prompt {
    /// Completes the argument `argument` with `complete`: given what the client typed so far
    /// and the instance's context, the values that fit (the host sends at most 100). The host
    /// asks only while the prompt is offered in the instance's state.
    pub fn complete<F>(mut self, argument: impl Into<String>, complete: F) -> Prompt
    where
        F: Fn(&str, &CallContext) -> Vec<String> + Send + Sync + 'static,
    {
        self.completers.push((argument.into(), Box::new(complete)));
        self
    }
}

impl fmt::Debug for Prompt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prompt")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

/// Starts a prompt bound to no workflow: always listed.
pub fn prompt(name: impl Into<String>) -> PromptBuilder {
    PromptBuilder::new(name.into(), None)
}

impl PromptBuilder {
    pub(crate) fn new(name: String, workflow: Option<Workflow>) -> PromptBuilder {
        PromptBuilder {
            manifest: PromptManifest {
                name,
                title: None,
                description: String::new(),
                arguments: Vec::new(),
                workflow: workflow.as_ref().map(|workflow| workflow.id().to_owned()),
                states: Vec::new(),
                text: None,
                asks: false,
            },
            workflow,
        }
    }

    /// What the prompt is for (shown in `prompts/list`).
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.manifest.description = description.into();
        self
    }

    /// A human-readable name for display (MCP `title`).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.manifest.title = Some(title.into());
        self
    }

    /// Lists the prompt only in these states (besides any given before). A prompt of a
    /// workflow that names no state is listed in every state.
    pub fn visible_in<S: Into<String>>(mut self, states: impl IntoIterator<Item = S>) -> Self {
        self.manifest
            .states
            .extend(states.into_iter().map(Into::into));
        self
    }

    /// Finishes the prompt with fixed text: one user message, the same for every instance.
    pub fn text(mut self, text: impl Into<String>) -> Prompt {
        self.manifest.text = Some(text.into());
        Prompt {
            manifest: self.manifest,
            workflow: self.workflow,
            reader: None,
            arguments_schema: schema::input::<super::NoInput>(),
            completers: Vec::new(),
        }
    }

    /// Finishes the prompt with its renderer. `A` is the arguments' type: each field is one
    /// prompt argument (its doc comment the description; `Option` fields are optional) and must
    /// be a string. The renderer gets the instance's context (`ctx.state`, `ctx.context`) and
    /// returns a string (one user message) or `{"description"?, "messages": [...]}` as MCP's
    /// `prompts/get` result has it.
    pub fn render<A, O, F>(mut self, renderer: F) -> Prompt
    where
        A: DeserializeOwned + JsonSchema + 'static,
        O: Serialize + 'static,
        F: Fn(A, &CallContext) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        let arguments_schema = schema::input::<A>();
        self.manifest.arguments = arguments_of(&arguments_schema);
        let name = self.manifest.name.clone();
        let reader: Reader = Box::new(move |request, ctx| {
            let arguments = request
                .get("arguments")
                .cloned()
                .filter(|arguments| !arguments.is_null())
                .unwrap_or_else(|| Value::Object(Default::default()));
            let output = renderer(parse_input::<A>(arguments)?, ctx)?;
            serde_json::to_value(output).map_err(|error| {
                ToolError::failed(format!(
                    "prompt {name} produced what JSON cannot hold: {error}"
                ))
            })
        });
        Prompt {
            manifest: self.manifest,
            workflow: self.workflow,
            reader: Some(reader),
            arguments_schema,
            completers: Vec::new(),
        }
    }
}

/// The prompt arguments an object schema describes, in its property order.
fn arguments_of(schema: &Value) -> Vec<PromptArgumentManifest> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| PromptArgumentManifest {
            name: name.clone(),
            description: property["description"].as_str().map(str::to_owned),
            required: required.contains(&name.as_str()),
        })
        .collect()
}

/// The arguments of `schema` that are not strings, which MCP prompt arguments must be.
pub(crate) fn non_string_arguments(schema: &Value) -> Vec<String> {
    let Some(properties) = schema["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .filter(|(_, property)| property["type"] != "string")
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    struct Focus {
        /// What to look at first.
        focus: Option<String>,
        /// Who reads it.
        reader: String,
    }

    #[test]
    fn arguments_come_from_the_type_and_reach_the_renderer() {
        let prompt = prompt("p.check")
            .describe("Checks.")
            .render(|args: Focus, ctx| {
                Ok(format!(
                    "{} / {:?} / {}",
                    args.reader, args.focus, ctx.state
                ))
            });
        assert_eq!(
            prompt.manifest.arguments,
            [
                PromptArgumentManifest {
                    name: "focus".into(),
                    description: Some("What to look at first.".into()),
                    required: false,
                },
                PromptArgumentManifest {
                    name: "reader".into(),
                    description: Some("Who reads it.".into()),
                    required: true,
                },
            ]
        );
        let ctx = CallContext {
            state: json!("review"),
            ..CallContext::default()
        };
        let reader = prompt.reader.as_ref().unwrap();
        let out = reader(json!({"arguments": {"reader": "Ada"}}), &ctx).unwrap();
        assert_eq!(out, json!("Ada / None / \"review\""));
        let err = reader(json!({"arguments": {}}), &ctx).unwrap_err();
        assert_eq!(
            err,
            ToolError::BadInput("invalid input: missing field `reader`".into())
        );
        assert!(non_string_arguments(&prompt.arguments_schema).is_empty());
    }

    #[test]
    fn a_static_prompt_carries_its_text() {
        let prompt = prompt("p.hello").describe("Hi.").text("Say hello.");
        assert_eq!(prompt.manifest.text.as_deref(), Some("Say hello."));
        assert!(prompt.reader.is_none());
        assert!(prompt.manifest.arguments.is_empty());
    }
}
