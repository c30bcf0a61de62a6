//! Graph warnings for `turnstile check`: what a machine and its tool bindings allow that no
//! workflow wants (a state nobody can reach, an instance that can never finish or is stuck, a
//! tool never listed, an event nothing fires, an eventless cycle that never settles).
//!
//! The analysis ignores guards (any guarded transition may be taken) and over-approximates
//! entry (a history state may restore anything under its parent), so each warning holds
//! whatever the guards decide: a state reported unreachable is unreachable.

use std::fmt;

use super::{
    Machine,
    config::initial_state_nodes,
    cycles::{entered_states, unconditional_cycle},
    tree::{Kind, NodeId, ROOT, Tree, is_wildcard, matches_descriptor},
};

/// A tool as bound to a workflow: the states it is listed in (empty: always), the event a
/// successful call fires and the one a failed call fires (`on_error`).
#[derive(Clone, Debug)]
pub struct ToolBinding<'a> {
    pub name: &'a str,
    pub states: &'a [String],
    pub event: Option<&'a str>,
    pub on_error: Option<&'a str>,
    pub on_cancel: Option<&'a str>,
}

/// One problem found in a machine's graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// No sequence of transitions leads from the initial state to this state.
    Unreachable { state: String },
    /// A non-final state from which no final state can be reached.
    NoWayToFinish { state: String },
    /// An atomic state where no tool is listed and no timer or eventless transition leads on.
    Stuck { state: String },
    /// A tool whose states are all unreachable.
    ToolNeverListed { tool: String },
    /// An event the machine handles that no tool fires and no timer raises.
    EventNeverFired { event: String },
    /// An unguarded eventless transition that may loop until the step is stopped.
    EventlessCycle { path: String },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Unreachable { state } => {
                write!(f, "state \"{state}\" is unreachable from the initial state")
            }
            Warning::NoWayToFinish { state } => {
                write!(f, "no final state can be reached from state \"{state}\"")
            }
            Warning::Stuck { state } => write!(
                f,
                "state \"{state}\" lists no tool and no timer or eventless transition leaves it \
                 (an agent there is stuck)"
            ),
            Warning::ToolNeverListed { tool } => {
                write!(
                    f,
                    "tool \"{tool}\" is never listed (its states are unreachable)"
                )
            }
            Warning::EventNeverFired { event } => {
                write!(f, "event \"{event}\" is fired by no tool and no timer")
            }
            Warning::EventlessCycle { path } => write!(
                f,
                "{path}: eventless transitions may loop forever (a step is stopped after {} \
                 microsteps)",
                super::MAX_MICROSTEPS
            ),
        }
    }
}

/// Every warning for `machine` with the tools bound to it.
pub fn check(machine: &Machine, tools: &[ToolBinding<'_>]) -> Vec<Warning> {
    let tree = &*machine.tree;
    let mut out = Vec::new();
    let states: Vec<NodeId> = (1..tree.nodes.len() as NodeId)
        .filter(|&n| !tree.node(n).is_history())
        .collect();
    let initial = config_closure(tree, &machine.initial.nodes);
    let reachable = reach(tree, &initial);
    for &n in &states {
        if !reachable[usize::from(n)] {
            out.push(Warning::Unreachable {
                state: tree.node(n).path.clone(),
            });
        }
    }
    let has_final = states.iter().any(|&n| tree.node(n).kind == Kind::Final);
    for &n in states.iter().filter(|&&n| reachable[usize::from(n)]) {
        let node = tree.node(n);
        if has_final && node.kind != Kind::Final {
            let from = reach(tree, &with_other_regions(tree, &reachable, n));
            if !states
                .iter()
                .any(|&f| tree.node(f).kind == Kind::Final && from[usize::from(f)])
            {
                out.push(Warning::NoWayToFinish {
                    state: node.path.clone(),
                });
            }
        }
        if node.kind == Kind::Atomic && is_stuck(tree, n, tools) {
            out.push(Warning::Stuck {
                state: node.path.clone(),
            });
        }
    }
    for tool in tools.iter().filter(|t| !t.states.is_empty()) {
        let listed = tool.states.iter().any(|s| {
            tree.lookup(s)
                .is_some_and(|n| reach_under(tree, &reachable, n))
        });
        if !listed {
            out.push(Warning::ToolNeverListed {
                tool: tool.name.to_string(),
            });
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for node in &tree.nodes {
        for (descriptor, ts) in &node.on {
            let internal = descriptor.starts_with("xstate.");
            if ts.is_empty() || internal || is_wildcard(descriptor) || seen.contains(&&**descriptor)
            {
                continue;
            }
            seen.push(descriptor);
            let fired = tools
                .iter()
                .flat_map(|t| [t.event, t.on_error, t.on_cancel])
                .flatten()
                .any(|e| matches_descriptor(e, descriptor));
            if !fired {
                out.push(Warning::EventNeverFired {
                    event: descriptor.clone(),
                });
            }
        }
    }
    if let Some(t) = unconditional_cycle(tree) {
        out.push(Warning::EventlessCycle {
            path: tree.transition_paths[t as usize].clone(),
        });
    }
    out
}

/// `nodes` with their ancestors and default descendants: the states active with them.
fn config_closure(tree: &Tree, nodes: &[NodeId]) -> Vec<NodeId> {
    let mut out = Vec::new();
    for &n in nodes {
        out.extend(initial_state_nodes(tree, n));
        out.extend(tree.proper_ancestors(n, None));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The states that may be active with `n`: its closure, and in every parallel state above it,
/// any reachable state of the other regions (they move independently).
fn with_other_regions(tree: &Tree, reachable: &[bool], n: NodeId) -> Vec<NodeId> {
    let mut out = config_closure(tree, &[n]);
    for a in tree.proper_ancestors(n, None) {
        if tree.node(a).kind == Kind::Parallel {
            out.extend((a + 1..tree.node(a).subtree_end).filter(|&m| reachable[usize::from(m)]));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Every state that may become active from a configuration containing `start`, ignoring
/// guards: a transition whose source is active may enter what [`entered_states`] says.
fn reach(tree: &Tree, start: &[NodeId]) -> Vec<bool> {
    let mut active = vec![false; tree.nodes.len()];
    let mut work: Vec<NodeId> = start.to_vec();
    for &n in start {
        active[usize::from(n)] = true;
    }
    while let Some(n) = work.pop() {
        let sources = std::iter::once(n).chain(tree.proper_ancestors(n, None));
        let leaving: Vec<NodeId> = sources.collect();
        for t in tree
            .transitions
            .iter()
            .filter(|t| leaving.contains(&t.source))
        {
            let (entered, _) = entered_states(tree, t);
            for e in config_closure(tree, &entered) {
                if !active[usize::from(e)] {
                    active[usize::from(e)] = true;
                    work.push(e);
                }
            }
        }
    }
    active[usize::from(ROOT)] = true;
    active
}

/// Whether `n` or a state under it is reachable.
fn reach_under(tree: &Tree, reachable: &[bool], n: NodeId) -> bool {
    (n..tree.node(n).subtree_end).any(|m| reachable[usize::from(m)])
}

/// An atomic state with no tool listed and no timer or eventless transition on it or an
/// ancestor.
fn is_stuck(tree: &Tree, n: NodeId, tools: &[ToolBinding<'_>]) -> bool {
    let mut chain = vec![n];
    chain.extend(tree.proper_ancestors(n, None));
    let moves_by_itself = chain.iter().any(|&s| {
        let node = tree.node(s);
        !node.always.is_empty() || !node.after.is_empty()
    });
    let listed = tools.iter().any(|t| {
        t.states.is_empty()
            || t.states
                .iter()
                .any(|s| tree.lookup(s).is_some_and(|b| chain.contains(&b)))
    });
    !moves_by_itself && !listed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn warnings(def: serde_json::Value, tools: &[(&str, &[&str], Option<&str>)]) -> Vec<String> {
        let m = Machine::from_json(&def).unwrap();
        let states: Vec<Vec<String>> = tools
            .iter()
            .map(|(_, s, _)| s.iter().map(|x| x.to_string()).collect())
            .collect();
        let bindings: Vec<ToolBinding> = tools
            .iter()
            .zip(&states)
            .map(|((name, _, event), states)| ToolBinding {
                name,
                states,
                event: *event,
                on_error: None,
                on_cancel: None,
            })
            .collect();
        check(&m, &bindings)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_sound_workflow_has_no_warning() {
        let w = warnings(
            json!({"initial":"draft","states":{"draft":{"on":{"SUBMIT":"review"}},
                "review":{"on":{"APPROVE":"done"},"after":{"1000":"draft"}},
                "done":{"type":"final"}}}),
            &[
                ("submit", &["draft"], Some("SUBMIT")),
                ("approve", &["review"], Some("APPROVE")),
            ],
        );
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn a_region_finishes_through_its_sibling() {
        // "a2" has no transition of its own, but the other region ends the parallel state.
        let w = warnings(
            json!({"initial":"p","states":{
                "p":{"type":"parallel","onDone":"end","states":{
                    "a":{"initial":"a1","states":{"a1":{"on":{"A":"a2"}},"a2":{"type":"final"}}},
                    "b":{"initial":"b1","states":{"b1":{"on":{"B":"b2"}},"b2":{"type":"final"}}}}},
                "end":{"type":"final"}}}),
            &[("a", &["p.a.a1"], Some("A")), ("b", &["p.b.b1"], Some("B"))],
        );
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn each_kind_of_problem_is_reported() {
        let w = warnings(
            json!({"initial":"a","states":{
                "a":{"on":{"GO":"b","LOST":"a"}},
                "b":{"on":{"LOOP":"c"}},
                "c":{"on":{"LOOP":"b"}},
                "island":{"on":{"GO":"done"}},
                "idle":{"always":"idle2"},"idle2":{"always":"idle"},
                "done":{"type":"final"}}}),
            &[
                ("go", &["a"], Some("GO")),
                ("ghost", &["island"], Some("GO")),
                ("loop", &["b", "c"], Some("LOOP")),
            ],
        );
        let has = |s: &str| w.iter().any(|x| x.contains(s));
        assert!(has("state \"island\" is unreachable"), "{w:?}");
        assert!(
            has("no final state can be reached from state \"b\""),
            "{w:?}"
        );
        assert!(has("tool \"ghost\" is never listed"), "{w:?}");
        assert!(has("event \"LOST\" is fired by no tool"), "{w:?}");
        assert!(
            has("states.idle.always: eventless transitions may loop"),
            "{w:?}"
        );
        let stuck = warnings(
            json!({"initial":"a","states":{"a":{"on":{"GO":"b"}},"b":{"on":{"GO":"c"}},
                "c":{"type":"final"}}}),
            &[("go", &["a"], Some("GO"))],
        );
        assert!(
            stuck
                .iter()
                .any(|x| x.contains("state \"b\" lists no tool")),
            "{stuck:?}"
        );
    }
}
