//! Mermaid / Graphviz rendering of a machine and of the tools visible in each state.
//!
//! Owns presentation only: it reads the parsed tree and never steps the machine. Node names are
//! generated (`s<index>`) so that any state key renders; labels carry the keys. A tool is shown
//! on every state where it is visible (the states it is bound to and all their descendants);
//! tools bound to no state are always visible and are listed once, in a separate box. Bound
//! paths that name no state are listed in that box too, so a typo is visible in the picture.

use std::fmt::Write;

use super::{
    Machine,
    tree::{Guard, Kind, NodeId, ROOT, Transition, Tree},
};

/// Output format of [`render`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiagramFormat {
    /// Mermaid `stateDiagram-v2`.
    #[default]
    Mermaid,
    /// Graphviz DOT.
    Dot,
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
    let tree: &Tree = &machine.tree;
    // Per node, per kind, the names offered there.
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
    let visible = visible.iter().map(offered_line).collect();
    let r = Renderer { tree, visible };
    match format {
        DiagramFormat::Mermaid => r.mermaid(&notes),
        DiagramFormat::Dot => r.dot(&notes),
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

struct Renderer<'a> {
    tree: &'a Tree,
    /// Per node, what is offered there as one line (empty: nothing).
    visible: Vec<String>,
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

impl Renderer<'_> {
    fn label(&self, n: NodeId) -> String {
        let node = self.tree.node(n);
        match node.kind {
            Kind::History { deep: true } => "H*".to_string(),
            Kind::History { deep: false } => "H".to_string(),
            _ => clean(&node.key),
        }
    }

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

    /// Every (source, target, label) edge, targetless ones drawn as self-loops.
    fn edges(&self) -> Vec<(NodeId, NodeId, String)> {
        let mut out = Vec::new();
        for n in 0..self.tree.nodes.len() as NodeId {
            let node = self.tree.node(n);
            let ids = node.on.iter().flat_map(|(_, ts)| ts).chain(&node.always);
            for &ti in ids {
                let t = self.tree.transition(ti);
                let label = self.edge_label(t);
                match &t.targets {
                    None => out.push((n, n, label)),
                    Some(targets) => out.extend(targets.iter().map(|&x| (n, x, label.clone()))),
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

    fn mermaid(&self, notes: &[String]) -> String {
        let mut out = String::from("stateDiagram-v2\n");
        let edges = self.edges();
        self.mermaid_block(ROOT, 1, &edges, &mut out);
        for (i, note) in notes.iter().enumerate() {
            let _ = writeln!(out, "    state \"{}\" as note_{i}", clean(note));
        }
        out
    }

    fn mermaid_block(
        &self,
        n: NodeId,
        depth: usize,
        edges: &[(NodeId, NodeId, String)],
        out: &mut String,
    ) {
        let pad = "    ".repeat(depth);
        let node = self.tree.node(n);
        if let Some(init) = node.initial {
            let _ = writeln!(out, "{pad}[*] --> s{init}");
        }
        let kids = &node.children;
        for (i, &c) in kids.iter().enumerate() {
            if node.kind == Kind::Parallel && i > 0 {
                let _ = writeln!(out, "{pad}--");
            }
            let child = self.tree.node(c);
            let _ = writeln!(out, "{pad}state \"{}\" as s{c}", self.label(c));
            if child.children.is_empty() {
                if child.kind == Kind::Final {
                    let _ = writeln!(out, "{pad}s{c} --> [*]");
                }
            } else {
                let _ = writeln!(out, "{pad}state s{c} {{");
                self.mermaid_block(c, depth + 1, edges, out);
                let _ = writeln!(out, "{pad}}}");
            }
            let offered = &self.visible[usize::from(c)];
            if !offered.is_empty() {
                let _ = writeln!(out, "{pad}note right of s{c} : {}", clean(offered));
            }
        }
        for (a, b, label) in edges {
            if self.edge_scope(*a, *b) == n {
                let _ = writeln!(out, "{pad}s{a} --> s{b} : {label}");
            }
        }
    }

    fn dot(&self, notes: &[String]) -> String {
        let mut out = format!(
            "digraph \"{}\" {{\n    compound=true;\n    rankdir=LR;\n    node [shape=box, style=rounded];\n",
            clean(&self.tree.machine_id)
        );
        self.dot_block(ROOT, 1, &mut out);
        for (a, b, label) in self.edges() {
            let mut attrs = format!("label=\"{label}\"");
            if !self.tree.node(a).children.is_empty() {
                let _ = write!(attrs, ", ltail=cluster_s{a}");
            }
            if !self.tree.node(b).children.is_empty() && !self.tree.is_descendant(a, Some(b)) {
                let _ = write!(attrs, ", lhead=cluster_s{b}");
            }
            let _ = writeln!(out, "    s{a} -> s{b} [{attrs}];");
        }
        for (i, note) in notes.iter().enumerate() {
            let _ = writeln!(out, "    note_{i} [shape=note, label=\"{}\"];", clean(note));
        }
        out.push_str("}\n");
        out
    }

    fn dot_block(&self, n: NodeId, depth: usize, out: &mut String) {
        let pad = "    ".repeat(depth);
        let node = self.tree.node(n);
        if let Some(init) = node.initial {
            let _ = writeln!(out, "{pad}init_s{n} [shape=point, label=\"\"];");
            let lhead = if self.tree.node(init).children.is_empty() {
                String::new()
            } else {
                format!(" [lhead=cluster_s{init}]")
            };
            let _ = writeln!(out, "{pad}init_s{n} -> s{init}{lhead};");
        }
        for &c in &node.children {
            let child = self.tree.node(c);
            let offered = &self.visible[usize::from(c)];
            let tools_line = if offered.is_empty() {
                String::new()
            } else {
                format!("\\n{}", clean(offered))
            };
            if child.children.is_empty() {
                let shape = match child.kind {
                    Kind::Final => ", peripheries=2",
                    Kind::History { .. } => ", shape=circle",
                    _ => "",
                };
                let _ = writeln!(
                    out,
                    "{pad}s{c} [label=\"{}{tools_line}\"{shape}];",
                    self.label(c)
                );
            } else {
                let style = if child.kind == Kind::Parallel {
                    "dashed"
                } else {
                    "rounded"
                };
                let _ = writeln!(out, "{pad}subgraph cluster_s{c} {{");
                let _ = writeln!(out, "{pad}    label=\"{}{tools_line}\";", self.label(c));
                let _ = writeln!(out, "{pad}    style={style};");
                // Edges to and from a composite attach to this anchor and are clipped to the box.
                let _ = writeln!(out, "{pad}    s{c} [shape=point, style=invis];");
                self.dot_block(c, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine() -> Machine {
        Machine::from_json(&json!({"id":"invoice","initial":"draft","states":{
            "draft":{"on":{"SUBMIT":"review"}},
            "review":{"initial":"pending","on":{"REJECT":"draft"},"states":{
                "pending":{"on":{"OK":"approved"}},"approved":{"type":"final"}},
                "onDone":"paid"},
            "paid":{"type":"parallel","states":{"ledger":{},"mail":{}}}}}))
        .unwrap()
    }

    fn tools() -> Vec<(String, Vec<String>)> {
        vec![
            ("edit".into(), vec!["draft".into()]),
            ("comment".into(), vec!["review".into()]),
            ("help".into(), vec![]),
            ("oops".into(), vec!["revew".into()]),
        ]
    }

    #[test]
    fn mermaid_shows_nesting_regions_edges_and_tools() {
        let out = render(&machine(), &tools(), DiagramFormat::Mermaid);
        assert!(out.starts_with("stateDiagram-v2\n"));
        assert!(out.contains("    [*] --> s1\n"));
        assert!(out.contains("    state \"review\" as s2\n    state s2 {\n        [*] --> s3\n"));
        assert!(out.contains("        s3 --> s4 : OK\n"));
        assert!(out.contains("        s4 --> [*]\n"));
        assert!(out.contains("    s1 --> s2 : SUBMIT\n"));
        assert!(out.contains("    s2 --> s5 : done\n"));
        assert!(out.contains(
            "        state \"ledger\" as s6\n        --\n        state \"mail\" as s7\n"
        ));
        // A tool bound to a compound state is visible in its descendants.
        assert!(out.contains("note right of s2 : tools: comment\n"));
        assert!(out.contains("note right of s3 : tools: comment\n"));
        assert!(out.contains("note right of s1 : tools: edit\n"));
        assert!(out.contains("state \"Always visible: help\" as note_0\n"));
        assert!(out.contains("oops → revew (unknown state)"));
    }

    #[test]
    fn prompts_and_resources_are_listed_beside_the_tools() {
        let offered = Offered {
            tools: tools(),
            prompts: vec![("checklist".into(), vec!["review".into()])],
            resources: vec![
                ("doc://{handle}".into(), vec!["review".into()]),
                ("doc://manual".into(), vec![]),
            ],
        };
        let out = render_offered(&machine(), &offered, DiagramFormat::Mermaid);
        assert!(
            out.contains("tools: comment | prompts: checklist | resources: doc://{handle}\n"),
            "{out}"
        );
        assert!(
            out.contains("Always offered resources: doc://manual"),
            "{out}"
        );
    }

    #[test]
    fn dot_shows_clusters_and_tools() {
        let out = render(&machine(), &tools(), DiagramFormat::Dot);
        assert!(out.starts_with("digraph \"invoice\" {\n"));
        assert!(out.contains("subgraph cluster_s2 {"));
        assert!(out.contains("s1 [label=\"draft\\ntools: edit\"];"));
        assert!(out.contains("s4 [label=\"approved\\ntools: comment\", peripheries=2];"));
        assert!(out.contains("s1 -> s2 [label=\"SUBMIT\", lhead=cluster_s2];"));
        assert!(out.contains("style=dashed;"));
        assert!(out.contains("note_0 [shape=note, label=\"Always visible: help\"];"));
        assert!(out.trim_end().ends_with('}'));
    }

    #[test]
    fn edges_show_guards_and_delays() {
        let m = Machine::from_json(&json!({"id":"g","initial":"a","delays":{"deadline":500},
            "states":{"a":{"after":{"100":"b","deadline":"c"},"on":{"GO":[
                {"target":"b","guard":{"type":"xstate.and","guards":[
                    {"type":"jsonLogic","params":{"rule":{">":[{"var":"context.n"},1]}}},
                    {"type":"xstate.not","guards":[
                        {"type":"jsonLogic","params":{"rule":{"var":"event.input.x"}}}]}]}}]}},
                "b":{},"c":{}}}))
        .unwrap();
        let out = render(&m, &[], DiagramFormat::Mermaid);
        assert!(out.contains("after 100 ms"), "{out}");
        assert!(out.contains("after deadline (500 ms)"), "{out}");
        assert!(
            out.contains("GO [({'>':[{'var':'context.n'},1]} and not {'var':'event.input.x'})]"),
            "{out}"
        );
    }
}
