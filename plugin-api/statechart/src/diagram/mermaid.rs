//! Mermaid `stateDiagram-v2`. Node names are generated (`s<index>`) so that any state key
//! renders; labels carry the keys. What is offered in a state is a note beside it.

use std::fmt::Write;

use super::{Edge, Renderer, clean};
use crate::tree::{Kind, NodeId, ROOT};

impl Renderer<'_> {
    /// The diagram, titled with the machine id in Mermaid's front matter so that several
    /// workflows printed one after the other can be told apart.
    pub(super) fn mermaid(&self) -> String {
        let title = clean(&self.tree.machine_id).replace('\\', "\\\\");
        let mut out = format!("---\ntitle: \"{title}\"\n---\nstateDiagram-v2\n");
        let edges = self.edges();
        self.mermaid_block(ROOT, 1, &edges, &mut out);
        for (i, note) in self.notes.iter().enumerate() {
            let _ = writeln!(out, "    state \"{}\" as note_{i}", clean(note));
        }
        out
    }

    fn mermaid_block(&self, n: NodeId, depth: usize, edges: &[Edge], out: &mut String) {
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
            let offered = self.offered(c);
            if !offered.is_empty() {
                let _ = writeln!(out, "{pad}note right of s{c} : {}", clean(&offered));
            }
        }
        for Edge { from, to, label } in edges {
            if self.edge_scope(*from, *to) == n {
                let _ = writeln!(out, "{pad}s{from} --> s{to} : {label}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        DiagramFormat, Offered,
        fixtures::{guarded, machine, tools},
        render, render_offered,
    };

    #[test]
    fn mermaid_shows_nesting_regions_edges_and_tools() {
        let out = render(&machine(), &tools(), DiagramFormat::Mermaid);
        assert!(out.starts_with("---\ntitle: \"invoice\"\n---\nstateDiagram-v2\n"));
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
    fn edges_show_guards_and_delays() {
        let out = render(&guarded(), &[], DiagramFormat::Mermaid);
        assert!(out.contains("after 100 ms"), "{out}");
        assert!(out.contains("after deadline (500 ms)"), "{out}");
        assert!(
            out.contains("GO [({'>':[{'var':'context.n'},1]} and not {'var':'event.input.x'})]"),
            "{out}"
        );
    }
}
