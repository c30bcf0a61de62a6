//! The gate: which tools an instance in a given state may see and call.
//!
//! Pure decisions over a [`Workflow`] (its machine and tools) and a [`Snapshot`]; no I/O, no actors, no MCP types. The
//! instance actor asks it before running a tool, and the MCP layer asks it to build
//! `tools/list`, so listing and calling can never disagree.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::{
    catalog::{ToolEntry, Workflow},
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
}

/// Checks a call of `tool` with `arguments` on an instance of `workflow` in `snapshot`: `None`
/// when it may run, else why not (outside its states, or no transition its guards allow for
/// these arguments: the plugin never runs for a call that could not move the instance). A tool that is not one of `workflow`'s (the instance runs an older version of
/// the machine, which did not have it) is refused like one outside its states.
pub fn refusal(
    workflow: &Workflow,
    tool: &ToolEntry,
    snapshot: &Snapshot,
    arguments: &Value,
) -> Option<Refusal> {
    if workflow.tool(tool.name()).is_some()
        && is_visible(tool, snapshot)
        && may_fire(workflow, tool, snapshot, Known::Input(arguments))
    {
        return None;
    }
    Some(Refusal {
        tool: tool.name().to_string(),
        workflow: workflow.id.clone(),
        state: snapshot.value(),
        allowed: menu(workflow, snapshot)
            .iter()
            .map(|tool| tool.name().to_string())
            .collect(),
    })
}
