//! [`Workflow`]: a workflow machine declared once, and the start of every tool bound to it.
//!
//! The machine is XState v5 JSON, as Stately or XState export it, so the host runs exactly what
//! the author drew. Tools started with [`Workflow::action`] carry the workflow with them: its id
//! is written once, in the machine, and the toolkit brings the machine into the manifest with
//! its first tool.
//!
//! The machine is read by the host's own statechart engine (`turnstile-statechart`), so the
//! bindings [`Toolkit::build`](super::Toolkit::build) checks against it, and the machine itself,
//! are judged as the host will judge them when it loads the plugin.

use std::sync::Arc;

use serde_json::Value;
use turnstile_statechart::{Event, Guards, Machine};

use super::{prompt::PromptBuilder, resource::ResourceBuilder, tool::ToolBuilder};

/// A workflow machine (cheap to clone: clones share it).
#[derive(Clone)]
pub struct Workflow {
    inner: Arc<Inner>,
}

struct Inner {
    machine: Value,
    /// The machine as the host reads it, or why the JSON is not one (reported by
    /// [`Toolkit::build`](super::Toolkit::build), since a chain cannot fail half-way).
    parsed: Result<Machine, String>,
}

impl Workflow {
    /// The workflow defined by `machine`, an XState v5 machine config in JSON (an object with
    /// at least `id`, `initial` and `states`).
    pub fn new(machine: Value) -> Workflow {
        let parsed = parse(&machine);
        Workflow {
            inner: Arc::new(Inner { machine, parsed }),
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
            .parsed
            .as_ref()
            .map_or("", |_| self.inner.machine["id"].as_str().unwrap_or(""))
    }

    /// The machine's JSON, as given.
    pub fn machine(&self) -> &Value {
        &self.inner.machine
    }

    /// The machine, or why the JSON is not one the host would load.
    pub(crate) fn parsed(&self) -> Result<&Machine, &str> {
        self.inner.parsed.as_ref().map_err(String::as_str)
    }

    /// Whether `other` is this very declaration (not merely an equal one).
    pub(crate) fn same(&self, other: &Workflow) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Reads `machine` as the host does; `Err` says why it is not a machine it would load. The first
/// two checks keep the SDK's own words for the commonest mistakes.
fn parse(machine: &Value) -> Result<Machine, String> {
    let Some(config) = machine.as_object() else {
        return Err("a workflow machine must be a JSON object".to_owned());
    };
    if !config.get("id").is_some_and(Value::is_string) {
        return Err("a workflow machine needs a string \"id\"".to_owned());
    }
    Machine::from_json_with_guards(machine, Arc::new(AnyNamedGuard)).map_err(|e| e.to_string())
}

/// Stands in for the toolkit's named guards while the machine is read: a workflow is declared
/// before the guards its toolkit implements ([`Toolkit::guard`](super::Toolkit::guard)), and
/// the SDK only reads the machine, never steps it. (The host checks, at load, that every named
/// guard is one the plugin lists.)
struct AnyNamedGuard;

impl Guards for AnyNamedGuard {
    fn contains(&self, _name: &str) -> bool {
        true
    }

    fn eval(&self, _name: &str, _params: Option<&Value>, _event: &Event) -> bool {
        false
    }
}

impl std::fmt::Debug for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow").field("id", &self.id()).finish()
    }
}
