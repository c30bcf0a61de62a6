//! The manifest a plugin describes itself with: the JSON its `manifest` entry point returns.
//!
//! These types are the single definition shared by plugins (which serialise them) and the host
//! (which parses and validates them). Unknown fields are rejected: manifests of C plugins are
//! written by hand, and a misspelt `"transtion"` silently ignored would make a tool that never
//! advances its workflow. The host adds semantic checks of its own (unique tool names, schema
//! shape); this module only defines the shape.
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
//!   }]
//! }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// Run this plugin in a process of its own (`turnstile plugin-host`) instead of inside the
    /// server: a call that aborts or crashes it fails alone (`PLUGIN_CRASHED`) and the process is
    /// restarted. Calls cost a round trip over a pipe. Absent or `false`: in the server's process,
    /// unless the operator isolates the plugin by name (`serve --isolate NAME`). A host older than
    /// this field refuses it as unknown; left out when `false`, so other manifests are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub isolate: bool,
}

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
    /// off, so a quick call that overruns its budget is logged, and the plugin's later calls all
    /// go to its worker threads. `None`: the tool may block; it always runs on a worker thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_ms: Option<u32>,
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
            isolate: false,
        }
    }

    /// Asks the host to run this plugin in a process of its own (see [`Manifest::isolate`]).
    pub fn isolated(mut self) -> Manifest {
        self.isolate = true;
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
            title: None,
            annotations: None,
            output_schema: None,
            quick_ms: None,
        }
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
