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

/// Renders `machine`; `tools` are (tool name, bound state paths as in tool bindings: dot paths
/// from the root or `#id`). Pure; the output is deterministic.
pub fn render(machine: &Machine, tools: &[(String, Vec<String>)], format: DiagramFormat) -> String {
    let tree: &Tree = &machine.tree;
    let mut visible: Vec<Vec<&str>> = vec![Vec::new(); tree.nodes.len()];
    let mut always = Vec::new();
    let mut unknown = Vec::new();
    for (tool, paths) in tools {
        if paths.is_empty() {
            always.push(tool.as_str());
        }
        for path in paths {
            match tree.lookup(path) {
                Some(n) => {
                    for v in n..tree.node(n).subtree_end {
                        if !visible[usize::from(v)].contains(&tool.as_str()) {
                            visible[usize::from(v)].push(tool);
                        }
                    }
                }
                None => unknown.push(format!("{tool} → {path} (unknown state)")),
            }
        }
    }
    let mut notes = Vec::new();
    if !always.is_empty() {
        notes.push(format!("Always visible: {}", always.join(", ")));
    }
    notes.extend(unknown);
    let r = Renderer { tree, visible };
    match format {
        DiagramFormat::Mermaid => r.mermaid(&notes),
        DiagramFormat::Dot => r.dot(&notes),
    }
}

struct Renderer<'a> {
    tree: &'a Tree,
    visible: Vec<Vec<&'a str>>,
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
            if !self.visible[usize::from(c)].is_empty() {
                let tools = self.visible[usize::from(c)].join(", ");
                let _ = writeln!(out, "{pad}note right of s{c} : tools: {}", clean(&tools));
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
            let tools = &self.visible[usize::from(c)];
            let tools_line = if tools.is_empty() {
                String::new()
            } else {
                format!("\\ntools: {}", clean(&tools.join(", ")))
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
