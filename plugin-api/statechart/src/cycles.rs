//! Eventless cycles that provably never settle, for a `turnstile check` warning.
//!
//! XState runs eventless (`always`) transitions and the handlers of its internal
//! `xstate.done.state.*` events inside one macrostep, until nothing more is enabled; Turnstile
//! stops a macrostep after [`super::MAX_MICROSTEPS`] microsteps (the event is refused, the
//! instance keeps its state). Machines are not refused for cycles XState would run: a guard or
//! an unchanged snapshot often breaks them. This module only finds cycles no guard can break.
//!
//! It builds a graph whose nodes are the automatic transitions without a guard that have
//! targets, and adds an edge t → u when taking t may make u enabled, i.e. u's source is entered
//! by t or is an ancestor of a state t enters (for `always`), or t may enter a final state whose
//! done event u handles. One pattern XState provably stops is left out: an `always` transition
//! from a state to its own descendants that re-enters no history or final state (the second
//! firing yields an identical snapshot). Entry is over-approximated (history may restore
//! anything), so a reported cycle is one that *may* run forever; an unguarded targetless
//! `always` with assignments always does, since every assignment makes a new snapshot.

use super::{
    config::initial_state_nodes,
    tree::{Kind, NodeId, TransId, Transition, Tree, matches_descriptor},
};

/// An unguarded eventless transition that may loop forever, by its index.
pub(super) fn unconditional_cycle(tree: &Tree) -> Option<TransId> {
    let assigning_loop = (0..tree.transitions.len()).find(|&i| {
        let t = &tree.transitions[i];
        t.event.is_empty() && t.guard.is_none() && t.targets.is_none() && !t.actions.is_empty()
    });
    if let Some(i) = assigning_loop {
        return TransId::try_from(i).ok();
    }
    let done_events: Vec<String> = tree
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            n.kind == Kind::Parallel
                || (n.kind == Kind::Compound
                    && tree
                        .real_children(*i as NodeId)
                        .any(|c| tree.node(c).kind == Kind::Final))
        })
        .map(|(_, n)| format!("xstate.done.state.{}", n.id))
        .collect();
    let is_done_handler =
        |t: &Transition| done_events.iter().any(|d| matches_descriptor(d, &t.event));
    let auto: Vec<usize> = (0..tree.transitions.len())
        .filter(|&i| {
            let t = &tree.transitions[i];
            t.targets.is_some() && t.guard.is_none() && (t.event.is_empty() || is_done_handler(t))
        })
        .collect();
    if auto.is_empty() {
        return None;
    }
    let edges: Vec<Vec<usize>> = auto
        .iter()
        .map(|&ti| {
            let t = &tree.transitions[ti];
            let (entered, raised) = entered_states(tree, t);
            let skip_self = stops_on_refire(tree, t);
            (0..auto.len())
                .filter(|&j| {
                    let u = &tree.transitions[auto[j]];
                    if auto[j] == ti && skip_self {
                        return false;
                    }
                    if !u.event.is_empty() {
                        return raised.iter().any(|d| matches_descriptor(d, &u.event));
                    }
                    entered
                        .iter()
                        .any(|&e| e == u.source || tree.is_descendant(e, Some(u.source)))
                })
                .collect()
        })
        .collect();
    // Iterative DFS with colours: 0 unvisited, 1 on stack, 2 done.
    let mut colour = vec![0u8; auto.len()];
    for start in 0..auto.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        colour[start] = 1;
        while let Some((v, next)) = stack.pop() {
            if let Some(&w) = edges[v].get(next) {
                stack.push((v, next + 1));
                match colour[w] {
                    0 => {
                        colour[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => return TransId::try_from(auto[w]).ok(),
                    _ => {}
                }
            } else {
                colour[v] = 2;
            }
        }
    }
    None
}

/// Over-approximates the states taking `t` may enter, and the done events it may raise.
pub(super) fn entered_states(tree: &Tree, t: &Transition) -> (Vec<NodeId>, Vec<String>) {
    let mut targets: Vec<NodeId> = Vec::new();
    let mut entered: Vec<NodeId> = Vec::new();
    for &x in t.targets.iter().flatten() {
        match tree.node(x).kind {
            // A history target may restore anything under its parent.
            Kind::History { .. } => {
                let p = tree.node(x).parent.unwrap_or(0);
                targets.push(p);
                entered.extend(p..tree.node(p).subtree_end);
            }
            _ => targets.push(x),
        }
    }
    let domain = static_domain(tree, t, &targets);
    // Default entry of `n`; where that reaches a history state, anything under its parent.
    let defaults = |n: NodeId, entered: &mut Vec<NodeId>| {
        for d in initial_state_nodes(tree, n) {
            entered.push(d);
            if tree.node(d).is_history() {
                let p = tree.node(d).parent.unwrap_or(0);
                entered.extend(p..tree.node(p).subtree_end);
            }
        }
    };
    if t.reenter && domain == Some(t.source) {
        defaults(t.source, &mut entered);
    }
    for &x in &targets {
        defaults(x, &mut entered);
        // States between the target and the domain are entered; a parallel one among them (or
        // the domain itself) re-enters its other regions. `None` is above the root: everything
        // up to and including the root is re-entered.
        let mut around = tree.proper_ancestors(x, domain);
        around.extend(domain);
        for a in around {
            if tree.is_descendant(a, domain) {
                entered.push(a);
            }
            if tree.node(a).kind == Kind::Parallel {
                for c in tree.real_children(a).collect::<Vec<_>>() {
                    defaults(c, &mut entered);
                }
            }
        }
    }
    entered.sort_unstable();
    entered.dedup();
    let mut done_events = Vec::new();
    for &f in entered
        .iter()
        .filter(|&&n| tree.node(n).kind == Kind::Final)
    {
        let parent = tree.node(f).parent;
        if let Some(p) = parent.filter(|&p| tree.node(p).kind == Kind::Compound) {
            done_events.push(format!("xstate.done.state.{}", tree.node(p).id));
        }
        for a in tree.proper_ancestors(f, None) {
            if tree.node(a).kind == Kind::Parallel {
                done_events.push(format!("xstate.done.state.{}", tree.node(a).id));
            }
        }
    }
    (entered, done_events)
}

/// XState's `getTransitionDomain` with history targets replaced by their parents.
fn static_domain(tree: &Tree, t: &Transition, targets: &[NodeId]) -> Option<NodeId> {
    if !t.reenter
        && targets
            .iter()
            .all(|&x| x == t.source || tree.is_descendant(x, Some(t.source)))
    {
        return Some(t.source);
    }
    let head = *targets.first()?;
    let lca = tree.proper_ancestors(head, None).into_iter().find(|&a| {
        targets[1..]
            .iter()
            .chain(std::iter::once(&t.source))
            .all(|&x| tree.is_descendant(x, Some(a)))
    });
    match lca {
        Some(a) => Some(a),
        None if t.reenter => None,
        None => Some(0),
    }
}

/// The one self-loop XState provably stops: see the module doc.
fn stops_on_refire(tree: &Tree, t: &Transition) -> bool {
    if !t.event.is_empty() || t.reenter {
        return false;
    }
    let below = t.source + 1..tree.node(t.source).subtree_end;
    t.targets
        .iter()
        .flatten()
        .all(|&x| tree.is_descendant(x, Some(t.source)))
        && below
            .into_iter()
            .all(|n| !matches!(tree.node(n).kind, Kind::Final | Kind::History { .. }))
}
