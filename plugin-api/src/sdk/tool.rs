//! [`ToolBuilder`]: one tool declared in one chain, ending in its handler; [`Tool`], what the
//! chain produces.
//!
//! The chain collects what the manifest says of the tool (description, binding, schemas) and
//! [`ToolBuilder::handle`] turns a typed handler into the untyped function the dispatcher calls:
//! arguments deserialised into the handler's input type (a mismatch is
//! [`ToolError::BadInput`] naming where in the arguments it is), the output serialised back.
//! The input schema comes from the same type, so the schema a model sees and the struct the
//! handler reads cannot drift apart. Checking the tool against its workflow's machine is the
//! toolkit's job ([`Toolkit::build`](super::Toolkit::build)), not this module's.

use std::{fmt, marker::PhantomData, sync::Arc};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::{schema, workflow::Workflow};
use crate::{CallContext, ToolAnnotations, ToolError, ToolManifest, parse_input};

/// The input of a tool that takes no arguments: `{}` (extra properties are ignored).
#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema)]
pub struct NoInput {}

/// Marks a [`ToolBuilder`] whose output has no declared schema: the handler may return any
/// serialisable value.
pub struct Untyped;

/// Marks a [`ToolBuilder`] whose output schema was derived from `O`: the handler must return `O`.
pub struct Typed<O>(PhantomData<fn() -> O>);

/// The function the dispatcher calls for a tool: JSON arguments in, the result out as JSON
/// text, written straight from the handler's output type.
pub(crate) type Handler =
    Box<dyn Fn(Value, &CallContext) -> Result<Vec<u8>, ToolError> + Send + Sync + 'static>;

/// A tool declared so far. Start one with [`Workflow::action`] (a tool of that workflow) or
/// [`action`] (a tool bound to no workflow); finish it with `handle`.
#[must_use = "a tool is declared only once `handle` gives it a handler"]
pub struct ToolBuilder<Output = Untyped> {
    manifest: ToolManifest,
    workflow: Option<Workflow>,
    output: PhantomData<Output>,
}

/// A declared tool with its handler, ready for [`Toolkit::tool`](super::Toolkit::tool).
pub struct Tool {
    pub(crate) manifest: ToolManifest,
    pub(crate) workflow: Option<Workflow>,
    pub(crate) handler: Handler,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

/// Starts a tool bound to no workflow: always visible, fires nothing.
pub fn action(name: impl Into<String>) -> ToolBuilder {
    ToolBuilder::new(name.into(), None)
}

impl ToolBuilder {
    pub(crate) fn new(name: String, workflow: Option<Workflow>) -> ToolBuilder {
        let mut manifest = ToolManifest::new(name, "", Value::Null);
        manifest.workflow = workflow.as_ref().map(|workflow| workflow.id().to_owned());
        ToolBuilder {
            manifest,
            workflow,
            output: PhantomData,
        }
    }

    /// Declares the output type: its schema becomes the tool's `output_schema` (the host checks
    /// every result against it, and clients may too), and the handler must return an `O`.
    pub fn output<O: JsonSchema + Serialize>(self) -> ToolBuilder<Typed<O>> {
        let mut manifest = self.manifest;
        manifest.output_schema = Some(schema::output::<O>());
        ToolBuilder {
            manifest,
            workflow: self.workflow,
            output: PhantomData,
        }
    }

    /// Finishes the tool with its handler. `I` is the arguments' type: its derived schema is
    /// the tool's input schema (doc comments become property descriptions). The handler's
    /// result becomes the tool result: see the crate docs' output convention.
    pub fn handle<I, O, F>(self, handler: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + 'static,
        O: Serialize + 'static,
        F: Fn(I, &CallContext) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        self.finish(handler)
    }
}

impl<O: Serialize + 'static> ToolBuilder<Typed<O>> {
    /// Finishes the tool with its handler, which returns the declared output type. See
    /// [`ToolBuilder::handle`].
    pub fn handle<I, F>(self, handler: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + 'static,
        F: Fn(I, &CallContext) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        self.finish(handler)
    }
}

impl<Output> ToolBuilder<Output> {
    /// The full description, shown once the workflow has left its initial state (and always for
    /// a tool of no workflow). Say what the tool does, what it needs and what comes next.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.manifest.description = description.into();
        self
    }

    /// A short description, shown while the instance is still in the machine's initial state
    /// (and, in a 2026-07-28 list, for a tool not offered in that state).
    pub fn compact(mut self, description: impl Into<String>) -> Self {
        self.manifest.compact_description = Some(description.into());
        self
    }

    /// Leaves the host's note on when the tool can be used ("Use while the invoice is in
    /// `review` …", which a 2026-07-28 list appends) out of this tool's description: for a
    /// description that says it already.
    pub fn without_usage_note(mut self) -> Self {
        self.manifest.usage_note = false;
        self
    }

    /// Makes the tool visible in `state` (besides any other state bound before) and fire
    /// `event` after a successful call. The host moves the instance and reports the state it
    /// reached in the result: the handler never names it.
    pub fn bind_state(mut self, state: impl Into<String>, event: impl Into<String>) -> Self {
        self.manifest.states.push(state.into());
        self.manifest.transition = Some(event.into());
        self
    }

    /// Makes the tool visible in these states, firing nothing (unless [`ToolBuilder::fires`]).
    /// A tool of a workflow that names no state is visible in every state.
    pub fn visible_in<S: Into<String>>(mut self, states: impl IntoIterator<Item = S>) -> Self {
        self.manifest
            .states
            .extend(states.into_iter().map(Into::into));
        self
    }

    /// The event fired after a successful call.
    pub fn fires(mut self, event: impl Into<String>) -> Self {
        self.manifest.transition = Some(event.into());
        self
    }

    /// Fires `event` when the handler fails (returns an error): into a rollback state, say. The
    /// caller still gets its error.
    pub fn on_error(mut self, event: impl Into<String>) -> Self {
        self.manifest.on_error = Some(event.into());
        self
    }

    /// Fires `event` when the call, running as an MCP task, is cancelled by its client: into a
    /// state that undoes a half-done step, say. Without it a cancel fires nothing.
    pub fn on_cancel(mut self, event: impl Into<String>) -> Self {
        self.manifest.on_cancel = Some(event.into());
        self
    }

    /// A human-readable name for display (MCP `title`).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.manifest.title = Some(title.into());
        self
    }

    /// Hints about the tool's behaviour (MCP `annotations`).
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.manifest.annotations = Some(annotations);
        self
    }

    /// Declares that the tool answers within `budget_ms` milliseconds (1 to
    /// [`crate::MAX_QUICK_MS`]) without blocking or I/O, so the host may run it on the request's
    /// own thread (see [`ToolManifest::quick_ms`]).
    pub fn quick(mut self, budget_ms: u32) -> Self {
        self.manifest.quick_ms = Some(budget_ms);
        self
    }

    /// Lets the tool's calls run as MCP tasks (see
    /// [`ToolManifest::task`](crate::ToolManifest::task)): `TaskSupport::Required` for a step
    /// that takes longer than a client waits for one request.
    pub fn task(mut self, support: crate::TaskSupport) -> Self {
        self.manifest.task = Some(support);
        self
    }

    /// Declares that the handler may ask the person or the client for input
    /// ([`CallContext::ask`](crate::CallContext::ask); see `asking.rs`). Without it the handler
    /// is told it may ask nothing.
    pub fn asks(mut self) -> Self {
        self.manifest.asks = true;
        self
    }

    /// Has a person confirm each call with a yes or no before the handler runs (see
    /// [`ToolManifest::confirm`](crate::ToolManifest::confirm)).
    pub fn confirm(self, message: impl Into<String>) -> Self {
        self.confirm_with(message, None, None)
    }

    /// Has a person confirm each call before the handler runs, filling in the fields of
    /// `schema` (a flat object schema) when given, and only when the JSON Logic rule `when`
    /// holds over `{"context", "input"}` when given.
    pub fn confirm_with(
        mut self,
        message: impl Into<String>,
        schema: Option<serde_json::Value>,
        when: Option<serde_json::Value>,
    ) -> Self {
        self.manifest.confirm = Some(crate::ConfirmManifest {
            message: message.into(),
            schema,
            when,
        });
        self
    }

    /// Marks the tool read-only and idempotent: it changes nothing, so calling it again is
    /// harmless (the annotations a status or lookup tool carries).
    pub fn read_only(self) -> Self {
        self.annotations(ToolAnnotations {
            read_only_hint: Some(true),
            idempotent_hint: Some(true),
            ..ToolAnnotations::default()
        })
    }

    fn finish<I, O, F>(self, handler: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + 'static,
        O: Serialize + 'static,
        F: Fn(I, &CallContext) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        let mut manifest = self.manifest;
        manifest.input_schema = schema::input::<I>();
        let name: Arc<str> = manifest.name.as_str().into();
        let handler: Handler = Box::new(move |input, ctx| {
            let output = handler(parse_input::<I>(input)?, ctx)?;
            serde_json::to_vec(&output).map_err(|error| {
                ToolError::failed(format!(
                    "{name} produced an output JSON cannot hold: {error}"
                ))
            })
        });
        Tool {
            manifest,
            workflow: self.workflow,
            handler,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    struct Greet {
        /// Who to greet.
        name: String,
    }

    #[derive(Serialize, JsonSchema)]
    struct Greeting {
        text: String,
    }

    #[test]
    fn the_handler_gets_typed_arguments_and_its_output_comes_back_as_json() {
        let tool = action("hello.greet")
            .describe("Greets.")
            .output::<Greeting>()
            .handle(|input: Greet, ctx| {
                Ok(Greeting {
                    text: format!("Hello, {} ({})", input.name, ctx.call_id),
                })
            });
        let ctx = CallContext {
            call_id: "c1".into(),
            ..CallContext::default()
        };
        let out = (tool.handler)(json!({"name": "Ada", "extra": 1}), &ctx).unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out, json!({"text": "Hello, Ada (c1)"}));
        assert_eq!(
            tool.manifest.input_schema["properties"]["name"]["description"],
            "Who to greet."
        );
        assert_eq!(
            tool.manifest.output_schema.unwrap()["required"],
            json!(["text"])
        );
    }

    #[test]
    fn arguments_of_the_wrong_shape_are_bad_input_naming_where() {
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Order {
            lines: Vec<Line>,
        }
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Line {
            quantity: u32,
        }
        let tool = action("shop.order").handle(|_: Order, _| Ok(json!({})));
        let ctx = CallContext::default();
        let err = (tool.handler)(
            json!({"lines": [{"quantity": 1}, {"quantity": "two"}]}),
            &ctx,
        )
        .unwrap_err();
        let ToolError::BadInput(message) = err else {
            panic!("{err:?}")
        };
        assert!(message.contains("lines[1].quantity"), "{message}");
        let err = (tool.handler)(json!({}), &ctx).unwrap_err();
        assert_eq!(
            err,
            ToolError::BadInput("invalid input: missing field `lines`".into())
        );
    }

    #[test]
    fn no_input_is_an_empty_object() {
        let tool = action("t").handle(|_: NoInput, _| Ok("done"));
        assert_eq!(
            tool.manifest.input_schema,
            json!({"type": "object", "properties": {}})
        );
        let out = (tool.handler)(json!({"ignored": true}), &CallContext::default()).unwrap();
        assert_eq!(out, br#""done""#);
    }
}
