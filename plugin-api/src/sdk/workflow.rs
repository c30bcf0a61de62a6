//! [`Workflow`]: a workflow machine declared once, and the start of every tool bound to it.
//!
//! The machine is XState v5 JSON, as Stately or XState export it, so the host runs exactly what
//! the author drew. Tools started with [`Workflow::action`] carry the workflow with them: its id
//! is written once, in the machine, and the toolkit brings the machine into the manifest with
//! its first tool.

use std::sync::Arc;

use serde_json::Value;

use super::{
    machine::Outline, prompt::PromptBuilder, resource::ResourceBuilder, tool::ToolBuilder,
};

/// A workflow machine (cheap to clone: clones share it).
#[derive(Clone)]
pub struct Workflow {
    inner: Arc<Inner>,
}

struct Inner {
    machine: Value,
    /// The machine's states and events, or why the JSON is not a machine (reported by
    /// [`Toolkit::build`](super::Toolkit::build), since a chain cannot fail half-way).
    outline: Result<Outline, String>,
}

impl Workflow {
    /// The workflow defined by `machine`, an XState v5 machine config in JSON (an object with
    /// at least `id`, `initial` and `states`).
    pub fn new(machine: Value) -> Workflow {
        let outline = Outline::parse(&machine);
        Workflow {
            inner: Arc::new(Inner { machine, outline }),
        }
    }

    /// Starts a tool of this workflow. Until it is bound to states
    /// ([`ToolBuilder::bind_state`], [`ToolBuilder::visible_in`]) it is visible in every state
    /// and fires nothing: a status tool.
    pub fn action(&self, name: impl Into<String>) -> ToolBuilder {
        ToolBuilder::new(name.into(), Some(self.clone()))
    }

    /// Starts a prompt of this workflow. Until it is bound to states
    /// ([`PromptBuilder::visible_in`]) it is listed in every state.
    pub fn prompt(&self, name: impl Into<String>) -> PromptBuilder {
        PromptBuilder::new(name.into(), Some(self.clone()))
    }

    /// Starts a resource of this workflow (a template when `uri` has a `{variable}`; with
    /// `{handle}`, one resource per instance). Until it is bound to states
    /// ([`ResourceBuilder::visible_in`]) it is served in every state.
    pub fn resource(&self, uri: impl Into<String>, name: impl Into<String>) -> ResourceBuilder {
        ResourceBuilder::new(uri.into(), name.into(), Some(self.clone()))
    }

    /// The machine's `id` (empty when the JSON has none; the toolkit refuses it then).
    pub fn id(&self) -> &str {
        self.inner
            .outline
            .as_ref()
            .map_or("", |outline| outline.id())
    }

    /// The machine's JSON, as given.
    pub fn machine(&self) -> &Value {
        &self.inner.machine
    }

    pub(crate) fn outline(&self) -> Result<&Outline, &str> {
        self.inner.outline.as_ref().map_err(String::as_str)
    }

    /// Whether `other` is this very declaration (not merely an equal one).
    pub(crate) fn same(&self, other: &Workflow) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow").field("id", &self.id()).finish()
    }
}
