//! The step algorithm: a line-by-line port of XState v5's `stateUtils` (`transitionNode`,
//! `selectTransitions`, `selectEventlessTransitions`, `microstep`, `macrostep`), without actions
//! or context. Exit and entry sets are in `entry_exit`.
//!
//! Function names and comments follow XState's so the two can be read side by side. Where XState
//! relies on object identity (`microstep` returning the *same* snapshot when nothing changed,
//! which stops the eventless loop), [`Engine::microstep`] returns `None`.

use std::collections::VecDeque;

use super::{
    config::{
        ActiveChildren, Config, HistoryValue, all_state_nodes, first_active_child,
        initial_state_nodes,
    },
    event::Event,
    guards::Guards,
    tree::{Kind, NodeId, ROOT, TransId, Transition, Tree},
};

/// Bound on microsteps in one macrostep. Load-time cycle refusal makes this unreachable; it
/// only guarantees a step always returns.
const MAX_MICROSTEPS: usize = 10_000;

/// The macrostep ran past [`MAX_MICROSTEPS`].
#[derive(Debug)]
pub(super) struct Runaway;

pub(super) struct Engine<'a> {
    pub(super) tree: &'a Tree,
    pub(super) guards: &'a dyn Guards,
}

impl Engine<'_> {
    /// XState's `getInitialSnapshot`: the initial microstep, then a macrostep on `xstate.init`.
    pub(super) fn initial(&self) -> Result<Config, Runaway> {
        let pre = Config {
            nodes: vec![ROOT],
            history: Vec::new(),
            done: false,
        };
        let init = Transition {
            source: ROOT,
            targets: Some(self.initial_state_nodes()),
            reenter: true,
            guard: None,
            event: String::new(),
        };
        let event = Event::new("xstate.init");
        let mut queue = VecDeque::new();
        let cfg = self
            .microstep_filtered(&[&init], &pre, &mut queue, true)
            .unwrap_or(pre);
        self.macrostep(cfg, &event, queue, true).map(|(c, _)| c)
    }

    fn initial_state_nodes(&self) -> Vec<NodeId> {
        initial_state_nodes(self.tree, ROOT)
    }

    /// XState's `macrostep`. Returns the new configuration and whether any transition was
    /// enabled (the `changed` flag).
    pub(super) fn macrostep(
        &self,
        mut cfg: Config,
        event: &Event,
        mut queue: VecDeque<Event>,
        is_init: bool,
    ) -> Result<(Config, bool), Runaway> {
        let mut taken = false;
        if !is_init {
            let ts = self.select_transitions(&cfg, event);
            taken |= !ts.is_empty();
            if let Some(next) = self.microstep(&ts, &cfg, &mut queue) {
                cfg = next;
            }
        }
        let mut should_select_eventless = true;
        let mut owned_event: Option<Event> = None;
        let mut iterations = 0;
        while !cfg.done {
            iterations += 1;
            if iterations > MAX_MICROSTEPS {
                return Err(Runaway);
            }
            let current = owned_event.as_ref().unwrap_or(event);
            let mut enabled = if should_select_eventless {
                self.select_eventless_transitions(&cfg, current)
            } else {
                Vec::new()
            };
            let from_eventless = !enabled.is_empty();
            if enabled.is_empty() {
                let Some(next_event) = queue.pop_front() else {
                    break;
                };
                enabled = self.select_transitions(&cfg, &next_event);
                owned_event = Some(next_event);
            }
            taken |= !enabled.is_empty();
            match self.microstep(&enabled, &cfg, &mut queue) {
                Some(next) => {
                    cfg = next;
                    should_select_eventless = true;
                }
                // XState: `shouldSelectEventlessTransitions = nextSnapshot !== previousState`,
                // where `previousState` is only set when eventless transitions were selected.
                None => should_select_eventless = !from_eventless,
            }
        }
        Ok((cfg, taken))
    }

    fn guard_passes(&self, t: &Transition, event: &Event) -> bool {
        match &t.guard {
            None => true,
            Some(g) => self.guards.eval(&g.name, g.params.as_ref(), event),
        }
    }

    /// `StateNode.next`: the first candidate whose guard passes.
    fn next(&self, node: NodeId, event: &Event) -> Option<TransId> {
        self.tree
            .candidates(node, event.event_type())
            .find(|&t| self.guard_passes(self.tree.transition(t), event))
    }

    /// XState's `selectTransitions` → `transitionNode(root, snapshot.value)`.
    pub(super) fn select_transitions(&self, cfg: &Config, event: &Event) -> Vec<TransId> {
        let mut out = Vec::new();
        let all = all_state_nodes(self.tree, &cfg.nodes);
        self.transition_node(ROOT, &all, event, &mut out);
        out
    }

    /// `transitionNode` walks the state *value*, which `getValueFromAdj` builds from the active
    /// children in `_nodes` order; a compound node whose first active child is atomic shows only
    /// that child.
    fn transition_node(&self, node: NodeId, all: &[NodeId], event: &Event, out: &mut Vec<TransId>) {
        let before = out.len();
        let first = first_active_child(self.tree, all, node);
        match first {
            Some(c)
                if self.tree.node(node).kind == Kind::Compound && self.tree.node(c).is_atomic() =>
            {
                out.extend(self.next(c, event));
            }
            _ => {
                for k in ActiveChildren::new(self.tree, all, node) {
                    self.transition_node(k, all, event, out);
                }
            }
        }
        if out.len() == before {
            out.extend(self.next(node, event));
        }
    }

    /// XState's `selectEventlessTransitions`.
    fn select_eventless_transitions(&self, cfg: &Config, event: &Event) -> Vec<TransId> {
        let mut enabled: Vec<TransId> = Vec::new();
        for &atomic in cfg.nodes.iter().filter(|&&n| self.tree.node(n).is_atomic()) {
            let mut s = Some(atomic);
            'chain: while let Some(n) = s {
                for &t in &self.tree.node(n).always {
                    if self.guard_passes(self.tree.transition(t), event) {
                        if !enabled.contains(&t) {
                            enabled.push(t);
                        }
                        break 'chain;
                    }
                }
                s = self.tree.node(n).parent;
            }
        }
        if enabled.len() > 1 {
            enabled = self.remove_conflicting_transitions(&enabled, cfg);
        }
        enabled
    }

    /// XState's `microstep` for candidate transitions: removes conflicts, then exits and enters.
    /// `None` means "the same snapshot" (nothing enabled, or nothing changed).
    fn microstep(
        &self,
        transitions: &[TransId],
        cur: &Config,
        queue: &mut VecDeque<Event>,
    ) -> Option<Config> {
        if transitions.is_empty() {
            return None;
        }
        let tree = self.tree;
        if let [only] = transitions {
            return self.microstep_filtered(&[tree.transition(*only)], cur, queue, false);
        }
        let filtered = self.remove_conflicting_transitions(transitions, cur);
        let refs: Vec<&Transition> = filtered.iter().map(|&t| tree.transition(t)).collect();
        self.microstep_filtered(&refs, cur, queue, false)
    }

    fn microstep_filtered(
        &self,
        filtered: &[&Transition],
        cur: &Config,
        queue: &mut VecDeque<Event>,
        is_initial: bool,
    ) -> Option<Config> {
        let mut set = cur.nodes.clone();
        let mut history: Option<HistoryValue> = None;
        if !is_initial {
            let mut exit = self.compute_exit_set(filtered, &set, &cur.history);
            exit.sort_unstable_by(|a, b| b.cmp(a));
            for &x in &exit {
                for &h in &self.tree.node(x).children {
                    let Kind::History { deep } = self.tree.node(h).kind else {
                        continue;
                    };
                    let remembered: Vec<NodeId> = set
                        .iter()
                        .copied()
                        .filter(|&s| {
                            if deep {
                                self.tree.node(s).is_atomic() && self.tree.is_descendant(s, Some(x))
                            } else {
                                self.tree.node(s).parent == Some(x)
                            }
                        })
                        .collect();
                    let hv = history.get_or_insert_with(|| cur.history.clone());
                    match hv.binary_search_by_key(&h, |(k, _)| *k) {
                        Ok(i) => hv[i].1 = remembered,
                        Err(i) => hv.insert(i, (h, remembered)),
                    }
                }
            }
            set.retain(|s| !exit.contains(s));
        }
        let history_changed = history.is_some();
        let hv = history.unwrap_or_else(|| cur.history.clone());
        let mut to_enter = self.compute_entry_set(filtered, &hv);
        to_enter.sort_unstable();
        let mut done = false;
        let mut completed: Vec<NodeId> = Vec::new();
        for s in to_enter {
            if !set.contains(&s) {
                set.push(s);
            }
            if self.tree.node(s).kind != Kind::Final {
                continue;
            }
            let parent = self.tree.node(s).parent;
            let parent_kind = parent.map(|p| self.tree.node(p).kind);
            let mut marker = if parent_kind == Some(Kind::Parallel) {
                parent
            } else {
                parent.and_then(|p| self.tree.node(p).parent)
            };
            if let (Some(p), Some(Kind::Compound)) = (parent, parent_kind) {
                queue.push_back(self.done_event(p));
            }
            while let Some(m) = marker {
                if self.tree.node(m).kind != Kind::Parallel
                    || completed.contains(&m)
                    || !self.is_in_final_state(&set, m)
                {
                    break;
                }
                completed.push(m);
                queue.push_back(self.done_event(m));
                marker = self.tree.node(m).parent;
            }
            if marker.is_none() {
                done = true;
            }
        }
        let same_nodes = set.len() == cur.nodes.len() && cur.nodes.iter().all(|n| set.contains(n));
        if !history_changed && same_nodes {
            // XState returns the current snapshot (keeping its `_nodes` order), cloned only if
            // the status became done.
            return done.then(|| Config {
                nodes: cur.nodes.clone(),
                history: cur.history.clone(),
                done: true,
            });
        }
        if done {
            // XState sorts `nextStateNodes` in place (descending document order) to run exit
            // actions when the machine is done, and that sorted array becomes `_nodes`.
            set.sort_unstable_by(|a, b| b.cmp(a));
        }
        Some(Config {
            nodes: set,
            history: hv,
            done,
        })
    }

    fn done_event(&self, node: NodeId) -> Event {
        Event::new(format!("xstate.done.state.{}", self.tree.node(node).id))
    }

    /// XState's `isInFinalState`.
    fn is_in_final_state(&self, set: &[NodeId], node: NodeId) -> bool {
        match self.tree.node(node).kind {
            Kind::Compound => self
                .tree
                .real_children(node)
                .any(|c| self.tree.node(c).kind == Kind::Final && set.contains(&c)),
            Kind::Parallel => self
                .tree
                .real_children(node)
                .all(|c| self.is_in_final_state(set, c)),
            k => k == Kind::Final,
        }
    }
}
