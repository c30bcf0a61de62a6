//! [`CatalogChange`]: what replacing one catalog by another changes for whom.
//!
//! A client is told its tool list changed only when it did (issue 12): a tool bound to no
//! workflow, a tool that starts an instance, or a workflow's ungated tool is on every client's
//! menu, so a change to one concerns everyone; a tool gated on states concerns only the
//! instances in one of those states (before or after the change). This module decides that from
//! the two catalogs alone; who watches which instance is the notifier's business.

use std::collections::{BTreeMap, BTreeSet};

use super::starts_instance;
use crate::{
    catalog::{Catalog, ToolEntry},
    statechart::Snapshot,
};

/// Which clients a catalog replacement concerns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CatalogChange {
    /// Every client's menu changed (see the module docs).
    pub everyone: bool,
    /// Per workflow, which of its instances see a different menu.
    pub workflows: BTreeMap<String, Affected>,
    /// The prompts or resources the plugins offer changed. Told to every client, coarser than
    /// the tools (a reload that changes them is rare; a spurious `list_changed` costs a re-read).
    pub primitives: bool,
}

/// The instances of one workflow that a change concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Affected {
    All,
    /// Those in (or in a descendant of) one of these states.
    InStates(BTreeSet<String>),
}

impl CatalogChange {
    /// What replacing `old` by `new` changes.
    pub fn between(old: &Catalog, new: &Catalog) -> CatalogChange {
        let mut change = CatalogChange {
            primitives: !old.same_primitives_as(new),
            ..CatalogChange::default()
        };
        let workflow_ids: BTreeSet<&String> = (old.workflows().chain(new.workflows()))
            .map(|workflow| &workflow.id)
            .collect();
        for id in workflow_ids {
            match (old.workflow(id), new.workflow(id)) {
                (Some(before), Some(after)) if before.version == after.version => {}
                // Added, removed, or a new machine: every instance's menu may differ, and so may
                // the tools that start one, which every client sees.
                _ => {
                    change.everyone = true;
                    change.workflows.insert(id.clone(), Affected::All);
                }
            }
        }
        let tool_names: BTreeSet<&str> = (old.tools().chain(new.tools()))
            .map(|tool| tool.name())
            .collect();
        for name in tool_names {
            let (before, after) = (old.tool(name), new.tool(name));
            if let (Some(before), Some(after)) = (before, after)
                && before.manifest == after.manifest
            {
                continue;
            }
            for (catalog, tool) in [(old, before), (new, after)] {
                if let Some(tool) = tool {
                    change.add_tool(catalog, tool);
                }
            }
        }
        change
    }

    /// Records that `tool` (as `catalog` has it) appeared, vanished or changed.
    fn add_tool(&mut self, catalog: &Catalog, tool: &ToolEntry) {
        let Some(workflow) = tool.workflow().and_then(|id| catalog.workflow(id)) else {
            // Bound to no workflow: on every menu.
            self.everyone = true;
            return;
        };
        if !tool.is_gated() {
            self.everyone = true;
            self.workflows.insert(workflow.id.clone(), Affected::All);
            return;
        }
        if starts_instance(tool, workflow) {
            self.everyone = true;
        }
        let affected = self
            .workflows
            .entry(workflow.id.clone())
            .or_insert_with(|| Affected::InStates(BTreeSet::new()));
        if let Affected::InStates(states) = affected {
            states.extend(tool.manifest.states.iter().cloned());
        }
    }

    /// Whether nobody's menu changed.
    pub fn is_empty(&self) -> bool {
        !self.everyone && self.workflows.is_empty() && !self.primitives
    }

    /// Whether an instance of `workflow` in `snapshot` sees a different menu.
    pub fn concerns(&self, workflow: &str, snapshot: &Snapshot) -> bool {
        match self.workflows.get(workflow) {
            None => false,
            Some(Affected::All) => true,
            Some(Affected::InStates(states)) => states.iter().any(|state| snapshot.matches(state)),
        }
    }
}
