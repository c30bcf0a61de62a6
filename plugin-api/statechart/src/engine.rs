//! The step algorithm: a line-by-line port of XState v5's `stateUtils` (`transitionNode`,
//! `selectTransitions`, `selectEventlessTransitions`, `microstep`, `macrostep`), with the part of
//! its actions Turnstile runs: `xstate.assign` on transitions, `entry` and `exit`, and the timers
//! of `after` (XState's delayed `raise` on entry and `cancel` on exit). Exit and entry sets are in
//! `entry_exit`.
//!
//! Function names and comments follow XState's so the two can be read side by side. Where XState
//! relies on object identity (`microstep` returning the *same* snapshot when nothing changed,
//! which stops the eventless loop), [`Engine::microstep`] says whether its result is a new
//! snapshot: one is new when the active states or history changed, or an assignment ran.

use std::collections::VecDeque;

use serde_json::{Map, Value, json};

use super::{
    config::{
        ActiveChildren, Config, Context, HistoryValue, Pending, all_state_nodes, cancel_timer,
        first_active_child, initial_state_nodes, start_timer,
    },
    error::MAX_MICROSTEPS,
    event::Event,
    guards::{self, Guards},
    tree::{Assign, Kind, NodeId, ROOT, TransId, Transition, Tree},
};

/// The macrostep ran past [`MAX_MICROSTEPS`]: an eventless loop.
#[derive(Debug)]
pub(super) struct Runaway;

pub(super) struct Engine<'a> {
    pub(super) tree: &'a Tree,
    pub(super) guards: &'a dyn Guards,
    /// The time timers started by this step count from.
    pub(super) now: u64,
}

impl Engine<'_> {
    /// XState's `getInitialSnapshot`: the initial microstep, then a macrostep on `xstate.init`.
    pub(super) fn initial(&self, context: Context) -> Result<Config, Runaway> {
        let pre = Config {
            nodes: vec![ROOT],
            history: Vec::new(),
            done: false,
            context,
            timers: Vec::new(),
        };
        let init = Transition {
            source: ROOT,
            targets: Some(self.initial_state_nodes()),
            reenter: true,
            guard: None,
            actions: Vec::new(),
            delay: None,
            event: String::new(),
        };
        let event = Event::new("xstate.init");
        let mut queue = VecDeque::new();
        let (cfg, _) = self.microstep_filtered(&[&init], &pre, &mut queue, true, &event);
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
            if let Some((next, _)) = self.microstep(&ts, &cfg, &mut queue, event) {
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
            let mut enabled = if should_select_eventless {
                self.select_eventless_transitions(&cfg, owned_event.as_ref().unwrap_or(event))
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
            let current = owned_event.as_ref().unwrap_or(event);
            // XState: `shouldSelectEventlessTransitions = nextSnapshot !== previousState`,
            // where `previousState` is only set when eventless transitions were selected.
            should_select_eventless = match self.microstep(&enabled, &cfg, &mut queue, current) {
                Some((next, new)) => {
                    cfg = next;
                    new || !from_eventless
                }
                None => !from_eventless,
            };
        }
        Ok((cfg, taken))
    }

    fn guard_passes(&self, t: &Transition, context: &Value, event: &Event) -> bool {
        match &t.guard {
            None => true,
            Some(g) => guards::passes(self.guards, g, context, event),
        }
    }

    /// `StateNode.next`: the first candidate whose guard passes.
    fn next(&self, node: NodeId, context: &Value, event: &Event) -> Option<TransId> {
        self.tree
            .candidates(node, event.event_type())
            .find(|&t| self.guard_passes(self.tree.transition(t), context, event))
    }

    /// XState's `selectTransitions` → `transitionNode(root, snapshot.value)`.
    pub(super) fn select_transitions(&self, cfg: &Config, event: &Event) -> Vec<TransId> {
        let mut out = Vec::new();
        let all = all_state_nodes(self.tree, &cfg.nodes);
        self.transition_node(ROOT, &all, cfg.context.get(), event, &mut out);
        out
    }

    /// `transitionNode` walks the state *value*, which `getValueFromAdj` builds from the active
    /// children in `_nodes` order; a compound node whose first active child is atomic shows only
    /// that child.
    fn transition_node(
        &self,
        node: NodeId,
        all: &[NodeId],
        context: &Value,
        event: &Event,
        out: &mut Vec<TransId>,
    ) {
        let before = out.len();
        let first = first_active_child(self.tree, all, node);
        match first {
            Some(c)
                if self.tree.node(node).kind == Kind::Compound && self.tree.node(c).is_atomic() =>
            {
                out.extend(self.next(c, context, event));
            }
            _ => {
                for k in ActiveChildren::new(self.tree, all, node) {
                    self.transition_node(k, all, context, event, out);
                }
            }
        }
        if out.len() == before {
            out.extend(self.next(node, context, event));
        }
    }

    /// XState's `selectEventlessTransitions`.
    fn select_eventless_transitions(&self, cfg: &Config, event: &Event) -> Vec<TransId> {
        let mut enabled: Vec<TransId> = Vec::new();
        for &atomic in cfg.nodes.iter().filter(|&&n| self.tree.node(n).is_atomic()) {
            let mut s = Some(atomic);
            'chain: while let Some(n) = s {
                for &t in &self.tree.node(n).always {
                    if self.guard_passes(self.tree.transition(t), cfg.context.get(), event) {
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
    /// `None` when nothing is enabled; otherwise the next configuration and whether XState
    /// would see a new snapshot (see the module doc).
    fn microstep(
        &self,
        transitions: &[TransId],
        cur: &Config,
        queue: &mut VecDeque<Event>,
        event: &Event,
    ) -> Option<(Config, bool)> {
        if transitions.is_empty() {
            return None;
        }
        let tree = self.tree;
        if let [only] = transitions {
            return Some(self.microstep_filtered(
                &[tree.transition(*only)],
                cur,
                queue,
                false,
                event,
            ));
        }
        let filtered = self.remove_conflicting_transitions(transitions, cur);
        let refs: Vec<&Transition> = filtered.iter().map(|&t| tree.transition(t)).collect();
        Some(self.microstep_filtered(&refs, cur, queue, false, event))
    }

    fn microstep_filtered(
        &self,
        filtered: &[&Transition],
        cur: &Config,
        queue: &mut VecDeque<Event>,
        is_initial: bool,
        event: &Event,
    ) -> (Config, bool) {
        let mut set = cur.nodes.clone();
        let mut history: Option<HistoryValue> = None;
        let mut context = cur.context.clone();
        let mut timers = cur.timers.clone();
        // Machines without entry/exit assignments or timers (most) skip that work per state.
        let state_effects = self.tree.has_state_actions || !self.tree.timers.is_empty();
        let mut assigned = false;
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
            if state_effects {
                for &x in &exit {
                    assigned |= self.exit_state(x, &mut context, &mut timers, event);
                }
            }
            set.retain(|s| !exit.contains(s));
        }
        for t in filtered {
            assigned |= self.run_assigns(&t.actions, &mut context, event);
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
            let node = self.tree.node(s);
            if state_effects {
                assigned |= self.run_assigns(&node.entry, &mut context, event);
                for &timer in &node.after {
                    let delay = self.tree.timer(timer).delay_ms;
                    start_timer(&mut timers, timer, self.now.saturating_add(delay));
                }
            }
            if node.kind != Kind::Final {
                continue;
            }
            let parent = node.parent;
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
        if done {
            // XState sorts `nextStateNodes` in place (descending document order) to run every
            // exit action when the machine is done, and that sorted array becomes `_nodes`.
            set.sort_unstable_by(|a, b| b.cmp(a));
            if state_effects {
                for &x in &set {
                    assigned |= self.exit_state(x, &mut context, &mut timers, event);
                }
            }
        }
        let same_nodes = set.len() == cur.nodes.len() && cur.nodes.iter().all(|n| set.contains(n));
        if !history_changed && same_nodes {
            // XState returns the current snapshot (keeping its `_nodes` order); it is a new
            // snapshot only if an assignment ran or the status became done.
            let next = Config {
                nodes: cur.nodes.clone(),
                history: cur.history.clone(),
                done: cur.done || done,
                context,
                timers,
            };
            return (next, assigned || done);
        }
        let next = Config {
            nodes: set,
            history: hv,
            done,
            context,
            timers,
        };
        (next, true)
    }

    /// A state's exit: its `exit` assignments, then the cancellation of its timers.
    fn exit_state(
        &self,
        x: NodeId,
        context: &mut Context,
        timers: &mut Vec<Pending>,
        event: &Event,
    ) -> bool {
        let node = self.tree.node(x);
        let assigned = self.run_assigns(&node.exit, context, event);
        for &timer in &node.after {
            cancel_timer(timers, timer);
        }
        assigned
    }

    /// Runs `xstate.assign` actions in order, each seeing the context the previous one left.
    /// Returns whether any ran.
    fn run_assigns(&self, actions: &[Assign], context: &mut Context, event: &Event) -> bool {
        for action in actions {
            let data = json!({"context": context.get(), "event": event.to_json()});
            let updates: Vec<(String, Value)> = action
                .keys
                .iter()
                .map(|(key, rule)| (key.clone(), rule.eval(&data).unwrap_or(Value::Null)))
                .collect();
            let ctx = context.make_mut();
            if !ctx.is_object() {
                *ctx = Value::Object(Map::new());
            }
            if let Value::Object(map) = ctx {
                map.extend(updates);
            }
        }
        !actions.is_empty()
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
