//! Diagrams of a machine and of what is offered in each state: Mermaid ([`mermaid`]), Graphviz
//! DOT ([`dot`]) and a self-drawn SVG ([`svg`]).
//!
//! Owns presentation only: it reads the parsed tree and never steps the machine. This module
//! holds what every format shares, so that the three pictures cannot disagree: which names are
//! offered in which state, how a transition is labelled, and which edges there are. A tool is
//! shown on every state where it is visible (the states it is bound to and all their
//! descendants); tools bound to no state are always visible and are listed once, in a separate
//! note. Bound paths that name no state are listed in that note too, so a typo is visible in the
//! picture.

use std::fmt::Write;

use super::{
    Machine,
    tree::{Guard, Kind, NodeId, ROOT, Transition, Tree},
};

mod dot;
mod mermaid;
pub mod svg;

pub use svg::{UnknownState, highlighted, leaf_states, render_svg};

/// Output format of [`render_offered`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiagramFormat {
    /// Mermaid `stateDiagram-v2`.
    #[default]
    Mermaid,
    /// Graphviz DOT.
    Dot,
    /// SVG laid out here (no Graphviz needed); see [`render_svg`] to highlight states.
    Svg,
}

/// One name and the state paths it is bound to (as in bindings: dot paths from the root or
/// `#id`; none: every state).
pub type Bound = (String, Vec<String>);

/// What a workflow offers, by kind, for [`render_offered`].
#[derive(Debug, Default)]
pub struct Offered {
    pub tools: Vec<Bound>,
    pub prompts: Vec<Bound>,
    /// Resources by URI (templates by URI template).
    pub resources: Vec<Bound>,
}

/// The kinds in the order a state lists them.
const KINDS: [&str; 3] = ["tools", "prompts", "resources"];

/// Renders `machine` with the tools visible in each state; see [`render_offered`].
pub fn render(machine: &Machine, tools: &[Bound], format: DiagramFormat) -> String {
    let offered = Offered {
        tools: tools.to_vec(),
        ..Offered::default()
    };
    render_offered(machine, &offered, format)
}

/// Renders `machine`, listing on each state the tools, prompts and resources offered there.
/// Pure; the output is deterministic.
pub fn render_offered(machine: &Machine, offered: &Offered, format: DiagramFormat) -> String {
    let r = Renderer::new(&machine.tree, offered);
    match format {
        DiagramFormat::Mermaid => r.mermaid(),
        DiagramFormat::Dot => r.dot(),
        DiagramFormat::Svg => r.svg(&[]),
    }
}

/// `tools: a, b | prompts: c | resources: d`, each kind only when it has a name. (A state with
/// tools only reads `tools: a, b`, as before prompts and resources existed.)
fn offered_line(by_kind: &[Vec<&str>; 3]) -> String {
    let parts: Vec<String> = KINDS
        .iter()
        .zip(by_kind)
        .filter(|(_, names)| !names.is_empty())
        .map(|(kind, names)| format!("{kind}: {}", names.join(", ")))
        .collect();
    parts.join(" | ")
}

/// What every format draws from: the tree, what is offered where, and the notes.
struct Renderer<'a> {
    tree: &'a Tree,
    /// Per node, per kind (in [`KINDS`] order), the names offered there.
    visible: Vec<[Vec<&'a str>; 3]>,
    /// Lines drawn apart from the states: what is offered everywhere, and bindings to states
    /// that do not exist.
    notes: Vec<String>,
}

/// One transition as drawn: from `from` to `to` (a targetless transition loops on its source).
struct Edge {
    from: NodeId,
    to: NodeId,
    label: String,
}

impl<'a> Renderer<'a> {
    fn new(tree: &'a Tree, offered: &'a Offered) -> Self {
        let mut visible: Vec<[Vec<&str>; 3]> = vec![Default::default(); tree.nodes.len()];
        let mut always: [Vec<&str>; 3] = Default::default();
        let mut unknown = Vec::new();
        let kinds = [&offered.tools, &offered.prompts, &offered.resources];
        for (kind, bound) in kinds.into_iter().enumerate() {
            for (name, paths) in bound {
                if paths.is_empty() {
                    always[kind].push(name.as_str());
                }
                for path in paths {
                    match tree.lookup(path) {
                        Some(n) => {
                            for v in n..tree.node(n).subtree_end {
                                let here = &mut visible[usize::from(v)][kind];
                                if !here.contains(&name.as_str()) {
                                    here.push(name);
                                }
                            }
                        }
                        None => unknown.push(format!("{name} → {path} (unknown state)")),
                    }
                }
            }
        }
        let mut notes = Vec::new();
        if !always[0].is_empty() {
            notes.push(format!("Always visible: {}", always[0].join(", ")));
        }
        for (kind, names) in KINDS.iter().zip(&always).skip(1) {
            if !names.is_empty() {
                notes.push(format!("Always offered {kind}: {}", names.join(", ")));
            }
        }
        notes.extend(unknown);
        Renderer {
            tree,
            visible,
            notes,
        }
    }

    /// What is offered in `n` as one line (empty: nothing).
    fn offered(&self, n: NodeId) -> String {
        offered_line(&self.visible[usize::from(n)])
    }

    fn label(&self, n: NodeId) -> String {
        let node = self.tree.node(n);
        match node.kind {
            Kind::History { deep: true } => "H*".to_string(),
            Kind::History { deep: false } => "H".to_string(),
            _ => clean(&node.key),
        }
    }

    /// A transition's event (`always`, `after 500 ms`, `done`, or its descriptor), guard and
    /// whether it has no target, as every format writes it on the edge.
    fn edge_label(&self, t: &Transition) -> String {
        let mut label = if t.event.is_empty() {
            "always".to_string()
        } else if let Some(delay) = &t.delay {
            let ms = self
                .tree
                .timers
                .iter()
                .find(|d| d.event == t.event)
                .map_or(0, |d| d.delay_ms);
            if delay.bytes().all(|b| b.is_ascii_digit()) {
                format!("after {ms} ms")
            } else {
                format!("after {} ({ms} ms)", clean(delay))
            }
        } else if t.event.starts_with("xstate.done.state.") {
            "done".to_string()
        } else {
            clean(&t.event)
        };
        if let Some(g) = &t.guard {
            let _ = write!(label, " [{}]", clean(&describe_guard(g)));
        }
        if t.targets.is_none() {
            label.push_str(" (no target)");
        }
        label
    }

    /// Every edge in document order of its source, targetless ones drawn as self-loops.
    fn edges(&self) -> Vec<Edge> {
        let mut out = Vec::new();
        for n in 0..self.tree.nodes.len() as NodeId {
            let node = self.tree.node(n);
            let ids = node.on.iter().flat_map(|(_, ts)| ts).chain(&node.always);
            for &ti in ids {
                let t = self.tree.transition(ti);
                let label = self.edge_label(t);
                match &t.targets {
                    None => out.push(Edge {
                        from: n,
                        to: n,
                        label,
                    }),
                    Some(targets) => out.extend(targets.iter().map(|&to| Edge {
                        from: n,
                        to,
                        label: label.clone(),
                    })),
                }
            }
        }
        out
    }

    /// The composite whose block draws an edge: the deepest common proper ancestor.
    fn edge_scope(&self, a: NodeId, b: NodeId) -> NodeId {
        self.tree
            .proper_ancestors(a, None)
            .into_iter()
            .find(|&p| p == b || self.tree.is_descendant(b, Some(p)))
            .map(|p| {
                if p == b {
                    self.tree.node(b).parent.unwrap_or(ROOT)
                } else {
                    p
                }
            })
            .unwrap_or(ROOT)
    }
}

/// Label-safe text: no quotes, no line breaks, no Mermaid separators.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' => '\'',
            '\n' | '\r' | ';' => ' ',
            c => c,
        })
        .collect()
}

/// Longest JSON Logic rule shown whole on an edge.
const MAX_RULE_CHARS: usize = 60;

/// A guard as one line: its name, its rule, or its combinator over the inner guards.
fn describe_guard(g: &Guard) -> String {
    let join = |gs: &[Guard], op: &str| {
        let parts: Vec<String> = gs.iter().map(describe_guard).collect();
        format!("({})", parts.join(op))
    };
    match g {
        Guard::Named { name, .. } => name.clone(),
        Guard::JsonLogic { rule, .. } => {
            let text = rule.source.to_string();
            if text.chars().count() > MAX_RULE_CHARS {
                let cut: String = text.chars().take(MAX_RULE_CHARS).collect();
                format!("{cut}...")
            } else {
                text
            }
        }
        Guard::And(gs) => join(gs, " and "),
        Guard::Or(gs) => join(gs, " or "),
        Guard::Not(inner) => format!("not {}", describe_guard(inner)),
    }
}

/// Machines and bindings the format tests share.
#[cfg(test)]
mod fixtures {
    use serde_json::json;

    use super::*;

    /// A compound state with a final child, `onDone`, and a parallel state with two regions.
    pub(super) fn machine() -> Machine {
        Machine::from_json(&json!({"id":"invoice","initial":"draft","states":{
            "draft":{"on":{"SUBMIT":"review"}},
            "review":{"initial":"pending","on":{"REJECT":"draft"},"states":{
                "pending":{"on":{"OK":"approved"}},"approved":{"type":"final"}},
                "onDone":"paid"},
            "paid":{"type":"parallel","states":{"ledger":{},"mail":{}}}}}))
        .unwrap()
    }

    /// Bound to a leaf, to a compound state, to no state, and to a misspelt state.
    pub(super) fn tools() -> Vec<Bound> {
        vec![
            ("edit".into(), vec!["draft".into()]),
            ("comment".into(), vec!["review".into()]),
            ("help".into(), vec![]),
            ("oops".into(), vec!["revew".into()]),
        ]
    }

    /// Guards over JSON Logic combined with `and`/`not`, a numeric and a named delay.
    pub(super) fn guarded() -> Machine {
        Machine::from_json(&json!({"id":"g","initial":"a","delays":{"deadline":500},
            "states":{"a":{"after":{"100":"b","deadline":"c"},"on":{"GO":[
                {"target":"b","guard":{"type":"xstate.and","guards":[
                    {"type":"jsonLogic","params":{"rule":{">":[{"var":"context.n"},1]}}},
                    {"type":"xstate.not","guards":[
                        {"type":"jsonLogic","params":{"rule":{"var":"event.input.x"}}}]}]}}]}},
                "b":{},"c":{}}}))
        .unwrap()
    }
}
