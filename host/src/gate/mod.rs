//! The gate: which tools, prompts and resources an instance in a given state may see and use.
//!
//! Pure decisions over a [`Workflow`] (its machine and tools), the catalog's prompts and
//! resources, and a [`Snapshot`]; no I/O, no actors, no MCP types. The instance actor asks it
//! before running a tool, and the MCP layer asks it to build `tools/list`, `prompts/list` and
//! `resources/list` and before serving a prompt or resource, so listing and using can never
//! disagree.

mod change;

pub use change::{Affected, CatalogChange};

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::{
    catalog::{Bound, Catalog, PromptEntry, ResourceEntry, TemplateEntry, ToolEntry, Workflow},
    statechart::{Known, Snapshot},
};

/// Whether `tool` is on the menu of an instance in `snapshot`: ungated tools always are; a gated
/// tool is when one of its bound states is active (a compound state counts while any descendant
/// is, like XState's `snapshot.matches`).
pub fn is_visible(tool: &ToolEntry, snapshot: &Snapshot) -> bool {
    !tool.is_gated()
        || tool
            .manifest
            .states
            .iter()
            .any(|state| snapshot.matches(state))
}

/// Whether `tool`'s event could still move an instance in `snapshot`, knowing `known` of the
/// call: a tool that fires no event always may; one whose event no transition could take (every
/// candidate's guard is false on what is known, e.g. "amount over 10,000" on the context) may not.
/// Guards that read what is not known yet count as possibly true (see `Machine::may_take`).
fn may_fire(workflow: &Workflow, tool: &ToolEntry, snapshot: &Snapshot, known: Known<'_>) -> bool {
    tool.manifest
        .transition
        .as_deref()
        .is_none_or(|event| workflow.machine.may_take(snapshot, event, known))
}

/// The tools of `workflow` an agent should be offered in `snapshot`, in catalog order: visible in
/// the state, and, for a tool that fires an event, with a transition its guards may still allow.
/// (The workflow's own tools: an instance still running on an older version of the machine sees
/// that version's tools.)
pub fn menu(workflow: &Workflow, snapshot: &Snapshot) -> Vec<Arc<ToolEntry>> {
    workflow
        .tools
        .iter()
        .filter(|tool| {
            is_visible(tool, snapshot) && may_fire(workflow, tool, snapshot, Known::TypeOnly)
        })
        .cloned()
        .collect()
}

/// The description an agent should read: the compact one while the instance sits in the
/// machine's initial configuration (the agent has not started, so the menu should be cheap to
/// read), the full one afterwards.
pub fn description<'a>(tool: &'a ToolEntry, workflow: &Workflow, snapshot: &Snapshot) -> &'a str {
    match &tool.manifest.compact_description {
        Some(compact) if workflow.machine.is_initial(snapshot) => compact,
        _ => &tool.manifest.description,
    }
}

/// The description a list that is the same for every instance gives `tool` (protocol
/// 2026-07-28): the compact one for a tool not offered in the machine's initial state (an agent
/// looking at the list for the first time cannot use it yet), the full one otherwise; then the
/// note on when it can be used ([`usage_note`]), unless the plugin turned it off.
pub fn catalog_description(
    tool: &ToolEntry,
    workflow: &Workflow,
    handle_key: Option<&str>,
) -> String {
    let own = match &tool.manifest.compact_description {
        Some(compact) if !is_visible(tool, &workflow.machine.initial_snapshot()) => compact,
        _ => &tool.manifest.description,
    };
    match usage_note(tool, workflow, handle_key) {
        Some(note) if own.trim().is_empty() => note,
        Some(note) => format!("{} {note}", own.trim_end()),
        None => own.clone(),
    }
}

/// When `tool` of `workflow` can be used, in one sentence generated from the machine: "Use while
/// the invoice is in `review` (pass `handle`); it moves the invoice to `approved`." `handle_key`
/// is the argument that names an instance, in handle mode. `None` when the plugin turned the
/// note off (`usage_note: false`).
pub fn usage_note(
    tool: &ToolEntry,
    workflow: &Workflow,
    handle_key: Option<&str>,
) -> Option<String> {
    if !tool.manifest.usage_note {
        return None;
    }
    let targets = match &tool.manifest.transition {
        Some(event) => workflow.machine.targets_of(&tool.manifest.states, event),
        None => Vec::new(),
    };
    let starts = handle_key.map(|key| (key, starts_instance(tool, workflow)));
    Some(compose_note(
        &workflow.id,
        &tool.manifest.states,
        starts,
        &targets,
    ))
}

/// [`usage_note`]'s sentence: for an instance of `noun` in one of `states` (none: any), passing
/// the handle key (and whether the tool may start an instance without it), moving it to one of
/// `targets`.
fn compose_note(
    noun: &str,
    states: &[String],
    handle: Option<(&str, bool)>,
    targets: &[String],
) -> String {
    let mut note = if states.is_empty() {
        format!("Use at any step of the {noun}")
    } else {
        format!("Use while the {noun} is in {}", code_list(states))
    };
    match handle {
        Some((key, true)) => note.push_str(&format!(" (omit `{key}` to start a new {noun})")),
        Some((key, false)) => note.push_str(&format!(" (pass `{key}`)")),
        None => {}
    }
    if !targets.is_empty() {
        note.push_str(&format!("; it moves the {noun} to {}", code_list(targets)));
    }
    note.push('.');
    note
}

/// "`a`", "`a` or `b`", "`a`, `b` or `c`".
fn code_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Whether calling `tool` starts a new instance of `workflow` in handle mode: it is gated, and on
/// the menu of the machine's initial state. (An ungated tool such as a status report is on every
/// menu, but calling it starts nothing.)
pub fn starts_instance(tool: &ToolEntry, workflow: &Workflow) -> bool {
    tool.is_gated() && is_visible(tool, &workflow.machine.initial_snapshot())
}

/// The names of the tools that start a new instance of `workflow`.
pub fn starters(workflow: &Workflow) -> Vec<String> {
    workflow
        .tools
        .iter()
        .filter(|tool| starts_instance(tool, workflow))
        .map(|tool| tool.name().to_string())
        .collect()
}

/// Why a call was refused: the tool exists but is not on this instance's menu.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub tool: String,
    pub workflow: String,
    /// The instance's state value, in XState's shape.
    pub state: Value,
    /// The tools that are available in this state, so the agent can recover in one turn.
    pub allowed: Vec<String>,
    /// Whether the instance has reached a final state (its next step is: none).
    #[serde(skip)]
    pub done: bool,
}

/// Where an instance stands after a call, and which tools may come next: what every result of
/// a workflow tool reports. Many clients never re-read `tools/list` after `list_changed`, and a
/// 2026-07-28 list does not follow the instance at all, so this is how the order reaches a model
/// on every client.
#[derive(Debug, Clone, PartialEq)]
pub struct NextStep {
    /// The instance's state value, in XState's shape.
    pub state: Value,
    /// A final state: nothing more to do.
    pub done: bool,
    /// The tools on the instance's menu now, in catalog order; none in a final state.
    pub available: Vec<String>,
    /// A step running as a task holds the instance: until it ends, a call that would move it
    /// is refused and one that reads is served.
    pub running: Option<RunningStep>,
}

/// A step running on an instance as an MCP task.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningStep {
    pub task_id: String,
    pub tool: String,
}

/// The next step of an instance of `workflow` in `snapshot`.
pub fn next_step(workflow: &Workflow, snapshot: &Snapshot) -> NextStep {
    let done = is_done(snapshot);
    NextStep {
        state: snapshot.value(),
        done,
        available: if done {
            Vec::new()
        } else {
            menu_names(workflow, snapshot)
        },
        running: None,
    }
}

/// The names of [`menu`]'s tools.
fn menu_names(workflow: &Workflow, snapshot: &Snapshot) -> Vec<String> {
    menu(workflow, snapshot)
        .iter()
        .map(|tool| tool.name().to_string())
        .collect()
}

/// Whether `snapshot` is in a top-level final state.
fn is_done(snapshot: &Snapshot) -> bool {
    snapshot.status() == crate::statechart::Status::Done
}

impl NextStep {
    /// The next step a refusal implies: the instance stays where it was, with the menu the
    /// refusal lists.
    pub fn of_refusal(refusal: &Refusal) -> NextStep {
        NextStep {
            state: refusal.state.clone(),
            done: refusal.done,
            available: if refusal.done {
                Vec::new()
            } else {
                refusal.allowed.clone()
            },
            running: None,
        }
    }
}

/// Checks a call of `tool` with `arguments` on an instance of `workflow` in `snapshot`: `None`
/// when it may run, else why not (outside its states, or no transition its guards allow for
/// these arguments: the plugin never runs for a call that could not move the instance). `tool`
/// is `workflow`'s own; a name the instance's version of the machine lacks is refused by
/// [`not_offered`] before this is asked.
pub fn refusal(
    workflow: &Workflow,
    tool: &ToolEntry,
    snapshot: &Snapshot,
    arguments: &Value,
) -> Option<Refusal> {
    if is_visible(tool, snapshot) && may_fire(workflow, tool, snapshot, Known::Input(arguments)) {
        return None;
    }
    Some(not_offered(workflow, tool.name(), snapshot))
}

/// The refusal of a call of the tool `name` to an instance of `workflow` in `snapshot`,
/// whose menu does not have it: out of its states, or not a tool of the machine version the
/// instance runs on.
pub fn not_offered(workflow: &Workflow, name: &str, snapshot: &Snapshot) -> Refusal {
    Refusal {
        tool: name.to_owned(),
        workflow: workflow.id.clone(),
        state: snapshot.value(),
        allowed: menu_names(workflow, snapshot),
        done: is_done(snapshot),
    }
}

/// Whether a prompt or resource is offered to an instance in `snapshot`: one bound to no state
/// always is; otherwise when one of its states is active (as for a tool, see [`is_visible`]).
pub fn offers(entry: &impl Bound, snapshot: &Snapshot) -> bool {
    entry.states().is_empty() || entry.states().iter().any(|state| snapshot.matches(state))
}

/// The prompts and resources of one workflow offered to an instance in one state, in catalog
/// order.
#[derive(Default)]
pub struct Offer {
    pub prompts: Vec<Arc<PromptEntry>>,
    pub resources: Vec<Arc<ResourceEntry>>,
    pub templates: Vec<Arc<TemplateEntry>>,
}

/// What `catalog` offers an instance of workflow `workflow` in `snapshot` besides its tools.
pub fn offer(catalog: &Catalog, workflow: &str, snapshot: &Snapshot) -> Offer {
    fn pick<E: Bound>(
        entries: impl Iterator<Item = Arc<E>>,
        workflow: &str,
        snapshot: &Snapshot,
    ) -> Vec<Arc<E>> {
        entries
            .filter(|entry| entry.workflow() == Some(workflow) && offers(&**entry, snapshot))
            .collect()
    }
    Offer {
        prompts: pick(catalog.prompts().cloned(), workflow, snapshot),
        resources: pick(catalog.resources().cloned(), workflow, snapshot),
        templates: pick(catalog.templates().cloned(), workflow, snapshot),
    }
}

impl Offer {
    /// The names of the prompts offered.
    pub fn prompt_names(&self) -> Vec<String> {
        self.prompts
            .iter()
            .map(|prompt| prompt.manifest.name.clone())
            .collect()
    }

    /// The URIs of the resources offered, and of the templates (an instance's own resource under
    /// its URI when `token` names the instance, see `TemplateEntry::instance_uri`).
    pub fn resource_uris(&self, token: Option<&str>) -> Vec<String> {
        let fixed = self.resources.iter().map(|r| r.manifest.uri.clone());
        let templates = self.templates.iter().map(|template| match token {
            Some(token) if template.is_instance() => template.instance_uri(token),
            _ => template.manifest.uri_template.clone(),
        });
        fixed.chain(templates).collect()
    }
}

/// The names of what an instance is offered besides its tools, to compare before and after a
/// move ([`ListsChanged::between`]). Empty, and free to build, for a workflow with no prompts
/// or resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Offered {
    prompts: Vec<String>,
    resources: Vec<String>,
}

impl Offered {
    /// What `catalog` offers an instance of `workflow` in `snapshot`.
    fn of(catalog: &Catalog, workflow: &str, snapshot: &Snapshot) -> Offered {
        let offer = offer(catalog, workflow, snapshot);
        Offered {
            prompts: offer.prompt_names(),
            resources: offer.resource_uris(None),
        }
    }
}

/// Which of an instance's lists besides its tools a move changed: what decides whether its
/// watchers are sent `prompts/list_changed` and `resources/list_changed` (their tool list is
/// reported changed on every move, DESIGN 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListsChanged {
    pub prompts: bool,
    pub resources: bool,
}

impl ListsChanged {
    /// Both lists, for a change whose before and after are not known (another server's).
    pub const ALL: ListsChanged = ListsChanged {
        prompts: true,
        resources: true,
    };

    /// What a move from an instance offered `before` to one offered `after` changed.
    fn between(before: &Offered, after: &Offered) -> Self {
        ListsChanged {
            prompts: before.prompts != after.prompts,
            resources: before.resources != after.resources,
        }
    }

    /// What a move of an instance of `workflow` from `before` to `after` changed, by what
    /// `catalog` offers it in each (nothing to compute for a workflow without prompts or
    /// resources).
    pub fn of_move(catalog: &Catalog, workflow: &str, before: &Snapshot, after: &Snapshot) -> Self {
        ListsChanged::between(
            &Offered::of(catalog, workflow, before),
            &Offered::of(catalog, workflow, after),
        )
    }
}

/// Why a prompt or resource was not served: it exists, but not for this instance's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Withheld {
    /// `"prompt"` or `"resource"`.
    pub kind: &'static str,
    /// The prompt's name, or the URI asked for.
    pub name: String,
    pub workflow: String,
    /// The instance's state value, in XState's shape.
    pub state: Value,
    /// What of that kind is available in this state (prompt names, or resource URIs), so the
    /// agent can recover in one turn.
    pub available: Vec<String>,
}

/// Checks a `prompts/get` of `prompt` (of `workflow`) on an instance in `snapshot`: `None`
/// when it may be served.
pub fn withheld_prompt(
    catalog: &Catalog,
    prompt: &PromptEntry,
    workflow: &str,
    snapshot: &Snapshot,
) -> Option<Withheld> {
    (!offers(prompt, snapshot)).then(|| Withheld {
        kind: "prompt",
        name: prompt.manifest.name.clone(),
        workflow: workflow.to_owned(),
        state: snapshot.value(),
        available: offer(catalog, workflow, snapshot).prompt_names(),
    })
}

/// Checks a `resources/read` of `uri` (a resource of `entry`, of `workflow`) on an instance in
/// `snapshot`, which `token` names in instance resources' URIs: `None` when it may be served.
pub fn withheld_resource(
    catalog: &Catalog,
    entry: &impl Bound,
    uri: &str,
    workflow: &str,
    snapshot: &Snapshot,
    token: Option<&str>,
) -> Option<Withheld> {
    (!offers(entry, snapshot)).then(|| Withheld {
        kind: "resource",
        name: uri.to_owned(),
        workflow: workflow.to_owned(),
        state: snapshot.value(),
        available: offer(catalog, workflow, snapshot).resource_uris(token),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn the_usage_note_says_when_and_where_to() {
        assert_eq!(
            compose_note(
                "invoice",
                &names(&["review"]),
                Some(("handle", false)),
                &names(&["approved"])
            ),
            "Use while the invoice is in `review` (pass `handle`); it moves the invoice to \
             `approved`."
        );
        assert_eq!(
            compose_note(
                "invoice",
                &names(&["draft"]),
                Some(("handle", true)),
                &names(&["review"])
            ),
            "Use while the invoice is in `draft` (omit `handle` to start a new invoice); it moves \
             the invoice to `review`."
        );
        assert_eq!(
            compose_note("payment", &[], None, &[]),
            "Use at any step of the payment."
        );
        assert_eq!(
            compose_note(
                "migration",
                &names(&["a", "b", "c"]),
                None,
                &names(&["x", "y"])
            ),
            "Use while the migration is in `a`, `b` or `c`; it moves the migration to `x` or `y`."
        );
    }
}
