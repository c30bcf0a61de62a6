//! Exit and entry sets: XState's `computeExitSet`, `computeEntrySet` and their helpers
//! (`getTransitionDomain`, `getEffectiveTargetStates`, `addDescendantStatesToEnter`, ...),
//! plus `removeConflictingTransitions`, which is defined by them.

use std::borrow::Cow;

use super::{
    config::{Config, HistoryValue, add, history_of},
    engine::Engine,
    tree::{Kind, NodeId, ROOT, TransId, Transition},
};

impl Engine<'_> {
    /// XState's `removeConflictingTransitions`.
    pub(super) fn remove_conflicting_transitions(
        &self,
        enabled: &[TransId],
        cfg: &Config,
    ) -> Vec<TransId> {
        let mut filtered: Vec<TransId> = Vec::new();
        for &t1 in enabled {
            let tr1 = self.tree.transition(t1);
            let exit1 = self.compute_exit_set(&[tr1], &cfg.nodes, &cfg.history);
            let mut preempted = false;
            let mut to_remove: Vec<TransId> = Vec::new();
            for &t2 in &filtered {
                let tr2 = self.tree.transition(t2);
                let exit2 = self.compute_exit_set(&[tr2], &cfg.nodes, &cfg.history);
                if exit1.iter().any(|s| exit2.contains(s)) {
                    if self.tree.is_descendant(tr1.source, Some(tr2.source)) {
                        to_remove.push(t2);
                    } else {
                        preempted = true;
                        break;
                    }
                }
            }
            if !preempted {
                filtered.retain(|t| !to_remove.contains(t));
                filtered.push(t1);
            }
        }
        filtered
    }

    /// XState's `getEffectiveTargetStates`. Borrows the targets when none is a history state
    /// (the parser guarantees they are distinct), which is the hot path.
    fn effective_targets<'t>(&self, t: &'t Transition, hv: &HistoryValue) -> Cow<'t, [NodeId]> {
        let targets = t.targets.as_deref().unwrap_or(&[]);
        if !targets.iter().any(|&x| self.tree.node(x).is_history()) {
            return Cow::Borrowed(targets);
        }
        let mut out = Vec::new();
        self.push_effective_targets(targets, hv, &mut out);
        Cow::Owned(out)
    }

    fn push_effective_targets(&self, targets: &[NodeId], hv: &HistoryValue, out: &mut Vec<NodeId>) {
        for &target in targets {
            if self.tree.node(target).is_history() {
                match history_of(hv, target) {
                    Some(remembered) => {
                        for &n in remembered {
                            if !out.contains(&n) {
                                out.push(n);
                            }
                        }
                    }
                    None => {
                        let default = self.history_default(target);
                        self.push_effective_targets(&default, hv, out);
                    }
                }
            } else if !out.contains(&target) {
                out.push(target);
            }
        }
    }

    /// XState's `resolveHistoryDefaultTransition(...).target`.
    fn history_default(&self, h: NodeId) -> Vec<NodeId> {
        let node = self.tree.node(h);
        if let Some(t) = &node.history_target {
            return t.clone();
        }
        let parent = node.parent.unwrap_or(ROOT);
        if self.tree.node(parent).kind == Kind::Parallel {
            vec![parent]
        } else {
            self.tree.node(parent).initial.into_iter().collect()
        }
    }

    /// XState's `getTransitionDomain`; `None` is XState's `undefined` (above the root).
    fn transition_domain(&self, t: &Transition, hv: &HistoryValue) -> Option<NodeId> {
        let targets = self.effective_targets(t, hv);
        if !t.reenter
            && targets
                .iter()
                .all(|&x| x == t.source || self.tree.is_descendant(x, Some(t.source)))
        {
            return Some(t.source);
        }
        // findLeastCommonAncestor(targetStates.concat(source))
        let (head, tail) = match targets.split_first() {
            Some((&h, rest)) => (h, rest),
            None => (t.source, &[][..]),
        };
        let with_source = !targets.is_empty();
        let mut m = self.tree.node(head).parent;
        while let Some(a) = m {
            let tail_ok = tail.iter().all(|&x| self.tree.is_descendant(x, Some(a)));
            let source_ok = !with_source || self.tree.is_descendant(t.source, Some(a));
            if tail_ok && source_ok {
                return Some(a);
            }
            m = self.tree.node(a).parent;
        }
        if t.reenter { None } else { Some(ROOT) }
    }

    /// XState's `computeExitSet`.
    pub(super) fn compute_exit_set(
        &self,
        transitions: &[&Transition],
        set: &[NodeId],
        hv: &HistoryValue,
    ) -> Vec<NodeId> {
        let mut exit: Vec<NodeId> = Vec::new();
        for t in transitions {
            if t.targets.as_ref().is_none_or(|v| v.is_empty()) {
                continue;
            }
            let domain = self.transition_domain(t, hv);
            if t.reenter && domain == Some(t.source) && !exit.contains(&t.source) {
                exit.push(t.source);
            }
            for &s in set {
                if self.tree.is_descendant(s, domain) && !exit.contains(&s) {
                    exit.push(s);
                }
            }
        }
        exit
    }

    /// XState's `computeEntrySet` (without `statesForDefaultEntry`, which only schedules initial
    /// actions).
    pub(super) fn compute_entry_set(
        &self,
        transitions: &[&Transition],
        hv: &HistoryValue,
    ) -> Vec<NodeId> {
        let mut to_enter: Vec<NodeId> = Vec::new();
        for t in transitions {
            let domain = self.transition_domain(t, hv);
            for &s in t.targets.as_deref().unwrap_or(&[]) {
                if !self.tree.node(s).is_history()
                    && (t.source != s || domain != Some(t.source) || t.reenter)
                {
                    add(&mut to_enter, s);
                }
                self.add_descendant_states_to_enter(s, hv, &mut to_enter);
            }
            for &s in self.effective_targets(t, hv).iter() {
                let mut ancestors = self.tree.proper_ancestors(s, domain);
                if let Some(d) = domain.filter(|&d| self.tree.node(d).kind == Kind::Parallel) {
                    ancestors.push(d);
                }
                let reentrancy = if t.source == ROOT && t.reenter {
                    None
                } else {
                    domain
                };
                self.add_ancestor_states_to_enter(&mut to_enter, hv, &ancestors, reentrancy);
            }
        }
        to_enter
    }

    fn add_descendant_states_to_enter(
        &self,
        s: NodeId,
        hv: &HistoryValue,
        to_enter: &mut Vec<NodeId>,
    ) {
        let node = self.tree.node(s);
        match node.kind {
            Kind::History { .. } => {
                let parent = node.parent.unwrap_or(ROOT);
                let targets = match history_of(hv, s) {
                    Some(r) => r.to_vec(),
                    None => self.history_default(s),
                };
                for &n in &targets {
                    add(to_enter, n);
                    self.add_descendant_states_to_enter(n, hv, to_enter);
                }
                for &n in &targets {
                    self.add_proper_ancestor_states_to_enter(n, parent, to_enter, hv);
                }
            }
            Kind::Compound => {
                let Some(initial) = node.initial else { return };
                if !self.tree.node(initial).is_history() {
                    add(to_enter, initial);
                }
                self.add_descendant_states_to_enter(initial, hv, to_enter);
                self.add_proper_ancestor_states_to_enter(initial, s, to_enter, hv);
            }
            Kind::Parallel => {
                let kids: Vec<NodeId> = self.tree.real_children(s).collect();
                for child in kids {
                    if !to_enter
                        .iter()
                        .any(|&x| self.tree.is_descendant(x, Some(child)))
                    {
                        add(to_enter, child);
                        self.add_descendant_states_to_enter(child, hv, to_enter);
                    }
                }
            }
            _ => {}
        }
    }

    fn add_ancestor_states_to_enter(
        &self,
        to_enter: &mut Vec<NodeId>,
        hv: &HistoryValue,
        ancestors: &[NodeId],
        reentrancy_domain: Option<NodeId>,
    ) {
        for &anc in ancestors {
            if self.tree.is_descendant(anc, reentrancy_domain) {
                add(to_enter, anc);
            }
            if self.tree.node(anc).kind == Kind::Parallel {
                let kids: Vec<NodeId> = self.tree.real_children(anc).collect();
                for child in kids {
                    if !to_enter
                        .iter()
                        .any(|&x| self.tree.is_descendant(x, Some(child)))
                    {
                        add(to_enter, child);
                        self.add_descendant_states_to_enter(child, hv, to_enter);
                    }
                }
            }
        }
    }

    fn add_proper_ancestor_states_to_enter(
        &self,
        s: NodeId,
        to: NodeId,
        to_enter: &mut Vec<NodeId>,
        hv: &HistoryValue,
    ) {
        let ancestors = self.tree.proper_ancestors(s, Some(to));
        self.add_ancestor_states_to_enter(to_enter, hv, &ancestors, None);
    }
}
