//! Graphviz DOT: compound and parallel states are clusters (parallel ones dashed), what is
//! offered in a state is part of its label.

use std::fmt::Write;

use super::{Edge, Renderer, clean};
use crate::tree::{Kind, NodeId, ROOT};

impl Renderer<'_> {
    /// The graph, named after the machine id so that several workflows printed one after the
    /// other can be told apart.
    pub(super) fn dot(&self) -> String {
        let mut out = format!(
            "digraph \"{}\" {{\n    compound=true;\n    rankdir=LR;\n    node [shape=box, style=rounded];\n",
            clean(&self.tree.machine_id)
        );
        self.dot_block(ROOT, 1, &mut out);
        for Edge { from, to, label } in self.edges() {
            let mut attrs = format!("label=\"{label}\"");
            if !self.tree.node(from).children.is_empty() {
                let _ = write!(attrs, ", ltail=cluster_s{from}");
            }
            if !self.tree.node(to).children.is_empty() && !self.tree.is_descendant(from, Some(to)) {
                let _ = write!(attrs, ", lhead=cluster_s{to}");
            }
            let _ = writeln!(out, "    s{from} -> s{to} [{attrs}];");
        }
        for (i, note) in self.notes.iter().enumerate() {
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
            let offered = self.offered(c);
            let tools_line = if offered.is_empty() {
                String::new()
            } else {
                format!("\\n{}", clean(&offered))
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
    use super::super::{
        DiagramFormat,
        fixtures::{machine, tools},
        render,
    };

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
}
