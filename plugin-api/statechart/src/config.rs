//! [`Config`]: the runtime part of a snapshot, and XState's helpers that complete or seed one.

use std::{
    borrow::Cow,
    sync::{Arc, OnceLock},
};

use serde_json::{Map, Value};

use super::tree::{Kind, NodeId, TimerId, Tree, array_index};

/// XState's `historyValue`: history node → the states it remembers, sorted by history node.
pub(super) type HistoryValue = Vec<(NodeId, Vec<NodeId>)>;

/// The runtime part of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Config {
    /// XState's `_nodes`: every active state (root included), in XState's insertion order,
    /// which decides the key order of parallel state values and so the order in which regions
    /// offer transitions.
    pub(super) nodes: Vec<NodeId>,
    pub(super) history: HistoryValue,
    pub(super) done: bool,
    pub(super) context: Context,
    /// Running `after` timers, in the order they were started (which breaks deadline ties).
    pub(super) timers: Vec<Pending>,
}

/// XState's `context`, shared until an assignment changes it. The empty context of a machine
/// without one (the common case) is no allocation and costs nothing to copy.
#[derive(Clone, Debug, Default)]
pub(super) struct Context(Option<Arc<Value>>);

impl Context {
    pub(super) fn new(value: Value) -> Context {
        if value.as_object().is_some_and(Map::is_empty) {
            Context(None)
        } else {
            Context(Some(Arc::new(value)))
        }
    }

    pub(super) fn get(&self) -> &Value {
        static EMPTY: OnceLock<Value> = OnceLock::new();
        match &self.0 {
            Some(v) => v,
            None => EMPTY.get_or_init(|| Value::Object(Map::new())),
        }
    }

    /// The context to change, copied first if it is shared.
    pub(super) fn make_mut(&mut self) -> &mut Value {
        Arc::make_mut(
            self.0
                .get_or_insert_with(|| Arc::new(Value::Object(Map::new()))),
        )
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// A running timer: which `after` entry, and when it falls due (unix ms, or whatever clock the
/// caller passes as `now`).
///
/// `detached` follows XState's scheduler, which keeps one handle per timer id: starting a timer
/// whose id is already running (a state entered again without being left, e.g. through a
/// history target) replaces the handle and leaves the older timer running, and a timer that
/// fires drops the handle. A detached timer still fires, but leaving the state no longer
/// cancels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pending {
    pub(super) timer: TimerId,
    pub(super) deadline: u64,
    pub(super) detached: bool,
}

impl Config {
    /// Drops the handle of `timer` (what firing does before its event is processed).
    pub(super) fn detach(&mut self, timer: TimerId) {
        detach(&mut self.timers, timer);
    }

    /// The index in `timers` of the timer that falls due first (ties: started first).
    pub(super) fn next_timer(&self) -> Option<usize> {
        (0..self.timers.len()).min_by_key(|&i| (self.timers[i].deadline, i))
    }
}

/// XState's `scheduler.schedule`: a new timer holds the handle; others with its id detach.
pub(super) fn start_timer(timers: &mut Vec<Pending>, timer: TimerId, deadline: u64) {
    detach(timers, timer);
    timers.push(Pending {
        timer,
        deadline,
        detached: false,
    });
}

/// XState's `scheduler.cancel`: stops the timer holding the handle, if any.
pub(super) fn cancel_timer(timers: &mut Vec<Pending>, timer: TimerId) {
    if let Some(i) = timers.iter().position(|p| p.timer == timer && !p.detached) {
        timers.remove(i);
    }
}

fn detach(timers: &mut [Pending], timer: TimerId) {
    for p in timers.iter_mut().filter(|p| p.timer == timer) {
        p.detached = true;
    }
}

pub(super) fn add(set: &mut Vec<NodeId>, n: NodeId) {
    if !set.contains(&n) {
        set.push(n);
    }
}

pub(super) fn history_of(hv: &HistoryValue, h: NodeId) -> Option<&[NodeId]> {
    hv.binary_search_by_key(&h, |(k, _)| *k)
        .ok()
        .map(|i| hv[i].1.as_slice())
}

/// XState's `getAllStateNodes`: `_nodes` completed with missing ancestors and default
/// descendants, in XState's iteration order. XState computes state values (and so transition
/// selection) from this completed set, while `_nodes` itself may lack ancestors after some
/// history transitions. Borrows when nothing is missing, which is the common case.
pub(super) fn all_state_nodes<'n>(tree: &Tree, nodes: &'n [NodeId]) -> Cow<'n, [NodeId]> {
    let has_child_in =
        |set: &[NodeId], s: NodeId| set.iter().any(|&c| tree.node(c).parent == Some(s));
    let complete = nodes.iter().all(|&s| {
        let node = tree.node(s);
        let parent_ok = node.parent.is_none_or(|p| nodes.contains(&p));
        let kids_ok = match node.kind {
            Kind::Compound => has_child_in(nodes, s),
            Kind::Parallel => tree.real_children(s).all(|c| nodes.contains(&c)),
            _ => true,
        };
        parent_ok && kids_ok
    });
    if complete {
        return Cow::Borrowed(nodes);
    }
    let with_ancestors = |from: NodeId| -> Vec<NodeId> {
        // getInitialStateNodesWithTheirAncestors(from)
        let mut set = initial_state_nodes(tree, from);
        for n in set.clone() {
            for a in tree.proper_ancestors(n, Some(from)) {
                add(&mut set, a);
            }
        }
        set
    };
    let mut set: Vec<NodeId> = nodes.to_vec();
    let mut i = 0;
    while i < set.len() {
        let s = set[i];
        match tree.node(s).kind {
            Kind::Compound if !has_child_in(nodes, s) => {
                for n in with_ancestors(s) {
                    add(&mut set, n);
                }
            }
            Kind::Parallel => {
                let kids: Vec<NodeId> = tree.real_children(s).collect();
                for c in kids {
                    if !set.contains(&c) {
                        for n in with_ancestors(c) {
                            add(&mut set, n);
                        }
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut i = 0;
    while i < set.len() {
        let mut m = tree.node(set[i]).parent;
        while let Some(p) = m {
            add(&mut set, p);
            m = tree.node(p).parent;
        }
        i += 1;
    }
    Cow::Owned(set)
}

/// XState's `getInitialStateNodes(from)`: `from` and its default descendants, pre-order.
pub(super) fn initial_state_nodes(tree: &Tree, from: NodeId) -> Vec<NodeId> {
    let mut set = Vec::new();
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        if set.contains(&n) {
            continue;
        }
        set.push(n);
        let node = tree.node(n);
        match node.kind {
            Kind::Compound => stack.extend(node.initial),
            Kind::Parallel => {
                let kids: Vec<NodeId> = tree.real_children(n).collect();
                stack.extend(kids.into_iter().rev());
            }
            _ => {}
        }
    }
    set
}

/// The active children of `node` among `all`, in the order JavaScript enumerates the keys of the
/// state value object XState builds from them (`Object.keys(stateValue)`): array-index keys
/// ascending, then the others in `_nodes` order. Allocates only for array-index keys.
pub(super) struct ActiveChildren<'a> {
    tree: &'a Tree,
    all: &'a [NodeId],
    node: NodeId,
    pos: usize,
    sorted: Option<std::vec::IntoIter<NodeId>>,
}

impl<'a> ActiveChildren<'a> {
    pub(super) fn new(tree: &'a Tree, all: &'a [NodeId], node: NodeId) -> Self {
        let mut it = ActiveChildren {
            tree,
            all,
            node,
            pos: 0,
            sorted: None,
        };
        if tree.node(node).index_children {
            let mut kids: Vec<NodeId> = it.by_ref().collect();
            kids.sort_by_key(|&c| array_index(&tree.node(c).key).map_or(u64::MAX, u64::from));
            it.sorted = Some(kids.into_iter());
        }
        it
    }
}

impl Iterator for ActiveChildren<'_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        if let Some(sorted) = &mut self.sorted {
            return sorted.next();
        }
        while let Some(&c) = self.all.get(self.pos) {
            self.pos += 1;
            if self.tree.node(c).parent == Some(self.node) {
                return Some(c);
            }
        }
        None
    }
}

/// The first active child of `node` in `_nodes` order (`getValueFromAdj`'s `childStateNodes[0]`).
pub(super) fn first_active_child(tree: &Tree, all: &[NodeId], node: NodeId) -> Option<NodeId> {
    all.iter()
        .copied()
        .find(|&c| tree.node(c).parent == Some(node))
}
