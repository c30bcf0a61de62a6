//! The manifest a plugin describes itself with: the JSON its `manifest` entry point returns.
//!
//! These types are the single definition shared by plugins (which serialise them) and the host
//! (which parses and validates them). Unknown fields are rejected: manifests of C plugins are
//! written by hand, and a misspelt `"transtion"` silently ignored would make a tool that never
//! advances its workflow. The rules beyond the shape (unique names, MCP's tool-name rule, object
//! schemas) are [`Manifest::check`] (`manifest/check.rs`), which the host and the SDK both run.
//!
//! ```json
//! {
//!   "name": "invoice",
//!   "version": "0.1.0",
//!   "workflows": [{"id": "invoice", "initial": "draft", "states": {"...": {}}}],
//!   "tools": [{
//!     "name": "invoice.submit",
//!     "description": "Submits the draft invoice for review...",
//!     "compact_description": "Submit the invoice for review.",
//!     "input_schema": {"type": "object", "properties": {"amount": {"type": "number"}}},
//!     "workflow": "invoice",
//!     "states": ["draft"],
//!     "transition": "SUBMIT"
//!   }],
//!   "prompts": [{
//!     "name": "invoice.review_checklist",
//!     "description": "What to check before approving an invoice.",
//!     "workflow": "invoice",
//!     "states": ["review"]
//!   }],
//!   "resource_templates": [{
//!     "uri_template": "invoice://{handle}",
//!     "name": "invoice",
//!     "workflow": "invoice",
//!     "states": ["review", "approved"]
//!   }]
//! }
//! ```
//!
//! Prompts and resources (ABI 1.3) are bound to a workflow and states exactly as tools are: a
//! client sees one only while the instance it is working on is in one of its states. Their
//! content comes from the plugin's `read` entry point, or, for a prompt or a fixed resource, from
//! the static `text` the manifest gives. The fields are left out of the JSON when empty, so a
//! plugin that declares none still loads on a host older than 1.3; one that declares some is
//! refused by such a host (it rejects unknown fields), which is the honest outcome.

mod check;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::check::{MAX_TOOL_NAME, check_tool_name};

/// A plugin's self-description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name, e.g. `"invoice"`. Used in logs and error messages.
    pub name: String,
    /// The plugin's version, free-form (semver recommended).
    pub version: String,
    /// The workflow machines this plugin brings, as XState v5 JSON machine configs (objects with
    /// at least `id`). The host's catalog parses and checks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<Value>,
    /// The tools this plugin provides.
    #[serde(default)]
    pub tools: Vec<ToolManifest>,
    /// The named guards this plugin implements (ABI 1.2's `guard` entry point), which its own
    /// workflows may name (`guard: "name"` or `{"type": "name", "params": …}`). A machine naming
    /// a guard its plugin does not list is refused at load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<String>,
    /// The prompts this plugin provides (ABI 1.3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PromptManifest>,
    /// The resources with a fixed URI this plugin provides (ABI 1.3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceManifest>,
    /// The resource templates (RFC 6570 URI templates, `{name}` variables) this plugin provides
    /// (ABI 1.3). A template with a `{handle}` variable names a workflow instance: see
    /// [`ResourceTemplateManifest`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_templates: Vec<ResourceTemplateManifest>,
    /// Run this plugin in a process of its own (`turnstile plugin-host`) instead of inside the
    /// server: a call that aborts or crashes it fails alone (`PLUGIN_CRASHED`) and the process is
    /// restarted. Calls cost a round trip over a pipe. Absent or `false`: in the server's process,
    /// unless the operator isolates the plugin by name (`serve --isolate NAME`). A host older than
    /// this field refuses it as unknown; left out when `false`, so other manifests are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub isolate: bool,
    /// A fixture for tests, not a plugin to serve (its tools may misbehave on purpose, even end
    /// the process): `turnstile serve` refuses it unless started with `--allow-test-plugins`.
    /// Left out when `false`; a host older than this field refuses the plugin as unknown, which
    /// is the safe outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test_fixture: bool,
}

/// One prompt (MCP `prompts/list`, `prompts/get`) and its binding to a workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptManifest {
    /// The prompt name as clients see it (the tool-name alphabet: `A-Z a-z 0-9 _ - .`).
    pub name: String,
    /// A human-readable name for display (MCP `title`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the prompt is for.
    pub description: String,
    /// The arguments a client fills in (MCP prompt arguments are strings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgumentManifest>,
    /// The workflow (machine `id`) the prompt belongs to; `None` for a free-standing prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The states in which the prompt is listed and may be got (a state matches when it or a
    /// descendant is active). Empty means: always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// The prompt's one user message, when the plugin does not produce it with `read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The prompt's renderer may ask the person or the client for input (ABI 1.4, as a tool's
    /// handler may: [`ToolManifest::asks`]). Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asks: bool,
}

/// One argument of a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptArgumentManifest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The host refuses a `prompts/get` without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// One resource with a fixed URI (MCP `resources/list`, `resources/read`) and its binding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceManifest {
    /// The resource's URI, e.g. `policy://refunds`.
    pub uri: String,
    /// The programmatic name; also what `read` is asked for.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content's MIME type, e.g. `text/markdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The workflow the resource belongs to; `None` for a free-standing resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The states in which it is listed and readable; empty means: always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// The content, when the plugin does not produce it with `read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A family of resources named by a URI template (MCP `resources/templates/list`); their content
/// always comes from the plugin's `read`.
///
/// A template with the variable `{handle}` is an **instance resource**: the variable names a
/// workflow instance of the template's `workflow` (a handle, or `session` for the caller's own
/// session instance), whose state gates the read and whose state and context the plugin renders.
/// The host lists one concrete resource per instance the caller sees in a bound state, and tells
/// clients subscribed to one (`resources/subscribe`) when its instance moves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceTemplateManifest {
    /// The URI template, e.g. `invoice://{handle}`: literal text and `{name}` variables, each
    /// matching one or more characters other than `/`.
    pub uri_template: String,
    /// The programmatic name; also what `read` is asked for.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
}

/// The template variable that names a workflow instance (see [`ResourceTemplateManifest`]).
pub const HANDLE_VARIABLE: &str = "handle";

/// One tool and its binding to a workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolManifest {
    /// The tool name as clients see it (MCP: 1–128 characters of `A-Z a-z 0-9 _ - .`).
    pub name: String,
    /// The full description, shown once the workflow has left its initial state.
    pub description: String,
    /// A short description shown while the instance is still in the machine's initial state
    /// (when the agent is looking at the menu for the first time and long texts cost tokens).
    /// `None` means: always show `description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_description: Option<String>,
    /// The JSON Schema of the tool's arguments; an object schema (`{"type": "object", ...}`).
    pub input_schema: Value,
    /// The workflow (machine `id`) this tool belongs to; `None` for a free-standing tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The states in which the tool is visible and callable (a state matches when it or a
    /// descendant is active). Empty means: not gated, always visible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// The event fired on the workflow after a successful call, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    /// The event fired on the workflow when the handler fails (returns a tool error), if any:
    /// `PAYMENT_FAILED` into a rollback state, say. The caller still gets its `isError` result.
    /// The event is `{"type", "input": <arguments>, "error": {"message"}}`. A call that timed
    /// out, crashed or was refused before the plugin ran fires nothing: whether its handler
    /// failed is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// The event fired on the workflow when the call, running as an MCP task (`task`), is
    /// cancelled by its client, if any: into a state that undoes a half-done step, say. Without
    /// it a cancelled call fires nothing and its instance stays where it was. The event is
    /// `{"type", "input": <arguments>}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cancel: Option<String>,
    /// A human-readable name for display (MCP `title`); clients show `name` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Hints about the tool's behaviour (MCP `annotations`), passed to clients unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// The JSON Schema of the tool's structured output (an object schema). When given, the host
    /// checks every successful output against it before anything else happens: a mismatch is a
    /// tool error that fires no transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The tool answers within this many milliseconds (1 to [`MAX_QUICK_MS`]) and does no I/O: the
    /// host may then run it on the thread that handles the request instead of handing it to a
    /// worker thread, which saves two thread switches per call. A synchronous call cannot be cut
    /// off, so a quick call that overruns its budget (by its own CPU time, or by blocking; being
    /// paused by a busy machine does not count) is noted; when overruns are more than a rare
    /// few (see the host's `plugin/quick.rs`), the host logs it and the plugin's later calls all
    /// go to its worker threads. `None`: the tool may block; it always runs on a worker thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_ms: Option<u32>,
    /// Whether the host appends its note on when the tool can be used to the description of a
    /// tool bound to a workflow ("Use while the invoice is in `review` …", generated from the
    /// machine; protocol 2026-07-28 lists every tool, whatever the instance's state). `false`:
    /// the description is the plugin's alone. Default `true`.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub usage_note: bool,
    /// The handler may ask the person or the client for input (ABI 1.4, `asking.rs`): the host
    /// then tells it what it may ask, and serves its calls where it can send requests to the
    /// client. A handler of a tool without it is told it may ask nothing. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asks: bool,
    /// A person confirms each call before the handler runs (ABI 1.4; the plugin-free way to put
    /// a person in front of a destructive step). The host asks with a form, as an elicitation
    /// on the 2025 revisions and an input-required result on 2026-07-28: a decline runs
    /// nothing and fires nothing (`DECLINED`); an accept runs the handler, and the form's
    /// content is the event's `input.confirmation` (guards and `xstate.assign` read it) and is
    /// kept in the audit trail. A client that cannot show a form gets `INPUT_UNAVAILABLE` (on
    /// 2026-07-28, a -32021 error naming the form capability) unless the server runs with
    /// `--confirm-fallback allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<ConfirmManifest>,
    /// The tool's calls may run as MCP tasks (`execution.taskSupport`; the 2026-07-28 tasks
    /// extension): the client gets a task at once and polls it, and a call still running holds
    /// its instance. `None`: never a task. Meant for steps that take longer than a client waits
    /// for one request (a migration, a report, a payment settled by a bank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskSupport>,
}

/// Whether a tool's calls run as tasks (see [`ToolManifest::task`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// A call runs as a task when the client can follow one, and as a plain call otherwise.
    Optional,
    /// A call runs only as a task: a client that cannot follow one is refused.
    Required,
}

impl TaskSupport {
    /// As MCP spells it in a tool's `execution.taskSupport`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// What a person is asked before a tool runs (see [`ToolManifest::confirm`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmManifest {
    /// What the person is asked, e.g. "Pay out this invoice? The money leaves at once."
    pub message: String,
    /// The fields the person fills in, as a flat object schema (strings, numbers, integers,
    /// booleans, enums; MCP's elicitation schema); `None`: a plain yes or no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// A JSON Logic rule over `{"context", "input"}` (the instance's machine context and the
    /// call's arguments): the person is asked only when it holds; `None`: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Value>,
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

/// The largest budget a tool may declare with `quick_ms`: longer calls belong on worker threads,
/// where they cannot hold up the requests of other clients.
pub const MAX_QUICK_MS: u32 = 20;

/// MCP tool annotations: hints for clients, never guarantees. Field names as MCP spells them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates (meaningful when not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches an open world of external entities (the web, other systems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl Manifest {
    /// A manifest with no workflows and no tools yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Manifest {
        Manifest {
            name: name.into(),
            version: version.into(),
            workflows: Vec::new(),
            tools: Vec::new(),
            guards: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            resource_templates: Vec::new(),
            isolate: false,
            test_fixture: false,
        }
    }

    /// Asks the host to run this plugin in a process of its own (see [`Manifest::isolate`]).
    pub fn isolated(mut self) -> Manifest {
        self.isolate = true;
        self
    }

    /// Marks this plugin a test fixture, served only with `--allow-test-plugins` (see
    /// [`Manifest::test_fixture`]).
    pub fn test_fixture(mut self) -> Manifest {
        self.test_fixture = true;
        self
    }

    /// Adds a workflow machine (XState v5 JSON).
    pub fn workflow(mut self, machine: Value) -> Manifest {
        self.workflows.push(machine);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: ToolManifest) -> Manifest {
        self.tools.push(tool);
        self
    }

    /// Adds a prompt.
    pub fn prompt(mut self, prompt: PromptManifest) -> Manifest {
        self.prompts.push(prompt);
        self
    }

    /// Adds a resource with a fixed URI.
    pub fn resource(mut self, resource: ResourceManifest) -> Manifest {
        self.resources.push(resource);
        self
    }

    /// Adds a resource template.
    pub fn resource_template(mut self, template: ResourceTemplateManifest) -> Manifest {
        self.resource_templates.push(template);
        self
    }
}

impl PromptManifest {
    /// A prompt bound to no workflow, without arguments, produced by the plugin's `read`.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> PromptManifest {
        PromptManifest {
            name: name.into(),
            title: None,
            description: description.into(),
            arguments: Vec::new(),
            workflow: None,
            states: Vec::new(),
            text: None,
            asks: false,
        }
    }

    /// Declares that the prompt's renderer may ask for input (see [`PromptManifest::asks`]).
    pub fn asks(mut self) -> PromptManifest {
        self.asks = true;
        self
    }

    /// Adds an argument.
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> PromptManifest {
        self.arguments.push(PromptArgumentManifest {
            name: name.into(),
            description: Some(description.into()),
            required,
        });
        self
    }

    /// Makes `text` the prompt (one user message), so the plugin's `read` is not asked.
    pub fn text(mut self, text: impl Into<String>) -> PromptManifest {
        self.text = Some(text.into());
        self
    }
}

impl ResourceManifest {
    /// A resource bound to no workflow, produced by the plugin's `read`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> ResourceManifest {
        ResourceManifest {
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            workflow: None,
            states: Vec::new(),
            text: None,
        }
    }

    pub fn mime_type(mut self, mime_type: impl Into<String>) -> ResourceManifest {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Makes `text` the content, so the plugin's `read` is not asked.
    pub fn text(mut self, text: impl Into<String>) -> ResourceManifest {
        self.text = Some(text.into());
        self
    }
}

impl ResourceTemplateManifest {
    /// A template bound to no workflow.
    pub fn new(
        uri_template: impl Into<String>,
        name: impl Into<String>,
    ) -> ResourceTemplateManifest {
        ResourceTemplateManifest {
            uri_template: uri_template.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            workflow: None,
            states: Vec::new(),
        }
    }

    pub fn mime_type(mut self, mime_type: impl Into<String>) -> ResourceTemplateManifest {
        self.mime_type = Some(mime_type.into());
        self
    }
}

impl ToolManifest {
    /// An ungated tool bound to no workflow.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> ToolManifest {
        ToolManifest {
            name: name.into(),
            description: description.into(),
            compact_description: None,
            input_schema,
            workflow: None,
            states: Vec::new(),
            transition: None,
            on_error: None,
            on_cancel: None,
            title: None,
            annotations: None,
            output_schema: None,
            quick_ms: None,
            usage_note: true,
            asks: false,
            confirm: None,
            task: None,
        }
    }

    /// Lets the tool's calls run as tasks (see [`ToolManifest::task`]).
    pub fn task(mut self, support: TaskSupport) -> ToolManifest {
        self.task = Some(support);
        self
    }

    /// Has a person confirm each call before the handler runs (see [`ToolManifest::confirm`]).
    pub fn confirm(mut self, confirm: ConfirmManifest) -> ToolManifest {
        self.confirm = Some(confirm);
        self
    }

    /// Declares that the handler may ask for input (see [`ToolManifest::asks`]).
    pub fn asks(mut self) -> ToolManifest {
        self.asks = true;
        self
    }

    /// Leaves the host's note on when the tool can be used out of its description (see
    /// [`ToolManifest::usage_note`]).
    pub fn without_usage_note(mut self) -> ToolManifest {
        self.usage_note = false;
        self
    }

    /// Sets the display title.
    pub fn title(mut self, title: impl Into<String>) -> ToolManifest {
        self.title = Some(title.into());
        self
    }

    /// Sets the behaviour hints.
    pub fn annotations(mut self, annotations: ToolAnnotations) -> ToolManifest {
        self.annotations = Some(annotations);
        self
    }

    /// Declares the schema of the tool's structured output (checked by the host).
    pub fn output_schema(mut self, schema: Value) -> ToolManifest {
        self.output_schema = Some(schema);
        self
    }

    /// Declares that the tool answers within `budget_ms` milliseconds without blocking, so the
    /// host may run it on the request's own thread (see [`ToolManifest::quick_ms`]).
    pub fn quick(mut self, budget_ms: u32) -> ToolManifest {
        self.quick_ms = Some(budget_ms);
        self
    }

    /// Sets the short description shown in the workflow's initial state.
    pub fn compact(mut self, compact_description: impl Into<String>) -> ToolManifest {
        self.compact_description = Some(compact_description.into());
        self
    }

    /// Binds the tool to `workflow`, visible in `states` (empty: always visible).
    pub fn workflow<S: Into<String>>(
        mut self,
        workflow: impl Into<String>,
        states: impl IntoIterator<Item = S>,
    ) -> ToolManifest {
        self.workflow = Some(workflow.into());
        self.states = states.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the event fired after a successful call.
    pub fn transition(mut self, event: impl Into<String>) -> ToolManifest {
        self.transition = Some(event.into());
        self
    }

    /// Sets the event fired when the handler fails (see [`ToolManifest::on_error`]).
    pub fn on_error(mut self, event: impl Into<String>) -> ToolManifest {
        self.on_error = Some(event.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn round_trips_and_omits_defaults() {
        let manifest = Manifest::new("p", "1").tool(
            ToolManifest::new("p.t", "Does t.", json!({"type": "object"}))
                .workflow("w", ["a"])
                .transition("GO"),
        );
        let text = serde_json::to_value(&manifest).unwrap();
        assert_eq!(
            text,
            json!({"name": "p", "version": "1", "tools": [{
                "name": "p.t", "description": "Does t.", "input_schema": {"type": "object"},
                "workflow": "w", "states": ["a"], "transition": "GO"}]})
        );
        assert_eq!(serde_json::from_value::<Manifest>(text).unwrap(), manifest);
    }

    #[test]
    fn isolation_is_absent_unless_asked_for() {
        let plain = Manifest::new("p", "1");
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"name": "p", "version": "1", "tools": []}),
            "an old host reads a manifest that does not ask for isolation"
        );
        let isolated = plain.isolated();
        let text = serde_json::to_value(&isolated).unwrap();
        assert_eq!(text["isolate"], json!(true));
        assert_eq!(serde_json::from_value::<Manifest>(text).unwrap(), isolated);
    }

    #[test]
    fn rejects_unknown_fields() {
        let err = serde_json::from_value::<Manifest>(json!({"name": "p", "version": "1",
            "tools": [{"name": "t", "description": "", "input_schema": {}, "transtion": "GO"}]}))
        .unwrap_err();
        assert!(err.to_string().contains("transtion"), "{err}");
    }
}
