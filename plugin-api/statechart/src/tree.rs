//! The parsed state-node tree: every state node and transition of a machine, stored in flat
//! vectors and addressed by index.
//!
//! Nodes are numbered in XState's document order (a pre-order walk: parent before children,
//! children in definition order), which is exactly XState's `StateNode.order`. That makes "sort by
//! document order" a sort by index and "is a descendant of" two integer comparisons, because a
//! node's descendants are the contiguous range `index + 1 .. subtree_end`.
//!
//! This module only describes the machine; it holds no runtime state and never changes after
//! parsing.

use serde_json::Value;

use super::logic::{EventReads, Rule};

/// Index of a state node in [`Tree::nodes`]. `u16` keeps configurations compact; the parser
/// refuses machines with more nodes than fit.
pub(super) type NodeId = u16;

/// Index of a transition in [`Tree::transitions`].
pub(super) type TransId = u32;

/// The root is always node 0.
pub(super) const ROOT: NodeId = 0;

/// XState's state node types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Atomic,
    Compound,
    Parallel,
    Final,
    /// A history pseudo-state; `deep` is XState's `history: "deep"`.
    History {
        deep: bool,
    },
}

/// Index of a delayed transition's timer in [`Tree::timers`].
pub(super) type TimerId = u32;

/// A guard as written in the machine, resolved at load.
#[derive(Clone, Debug)]
pub(super) enum Guard {
    /// A guard implemented by the caller's [`super::Guards`] (`"isLarge"` or
    /// `{type: "isLarge", params}`).
    Named { name: String, params: Option<Value> },
    /// The built-in `{"type": "jsonLogic", "params": {"rule": ...}}`; `params` is the whole
    /// params object, which the rule sees as `params`.
    JsonLogic { rule: Rule, params: Value },
    /// `xstate.and`: every guard passes.
    And(Vec<Guard>),
    /// `xstate.or`: some guard passes.
    Or(Vec<Guard>),
    /// `xstate.not`: the guard fails.
    Not(Box<Guard>),
}

impl Guard {
    /// How much of the event deciding this guard needs. A named guard sees the whole event.
    pub(super) fn reads(&self) -> EventReads {
        match self {
            Guard::Named { .. } => EventReads::Everything,
            Guard::JsonLogic { rule, .. } => rule.reads,
            Guard::And(gs) | Guard::Or(gs) => gs
                .iter()
                .map(Guard::reads)
                .max()
                .unwrap_or(EventReads::Type),
            Guard::Not(g) => g.reads(),
        }
    }
}

/// `{"type": "xstate.assign", "params": {"<key>": <rule>, ...}}`: every rule is evaluated over
/// `{context, event}` as they were before the action, then the keys are set (XState's
/// `assign({key: fn, ...})`).
#[derive(Clone, Debug)]
pub(super) struct Assign {
    pub(super) keys: Vec<(String, Rule)>,
}

/// One `after` entry: the timer a state starts when entered and cancels when left. Its
/// transitions are ordinary `on` candidates for [`TimerDef::event`].
#[derive(Clone, Debug)]
pub(super) struct TimerDef {
    pub(super) node: NodeId,
    /// XState's `xstate.after.<delay>.<state id>`.
    pub(super) event: String,
    pub(super) delay_ms: u64,
}

/// One transition candidate, as XState's `formatTransition` builds it.
#[derive(Clone, Debug)]
pub(super) struct Transition {
    pub(super) source: NodeId,
    /// `None` is a targetless transition (XState's `target: undefined`).
    pub(super) targets: Option<Vec<NodeId>>,
    pub(super) reenter: bool,
    pub(super) guard: Option<Guard>,
    /// `xstate.assign` actions, run in order when the transition is taken.
    pub(super) actions: Vec<Assign>,
    /// For an `after` transition, the delay as written (`"1000"` or a `delays` name).
    pub(super) delay: Option<String>,
    /// The event descriptor (`"SUBMIT"`, `"*"`, `"a.*"`, `"xstate.done.state.<id>"`), or `""`
    /// for `always`.
    pub(super) event: String,
}

/// One state node.
#[derive(Clone, Debug)]
pub(super) struct Node {
    /// Key under the parent's `states` (empty for the root).
    pub(super) key: String,
    /// XState id: the explicit `id`, or the machine id and the path joined by dots.
    pub(super) id: String,
    /// Dot path from the root (empty for the root).
    pub(super) path: String,
    pub(super) parent: Option<NodeId>,
    pub(super) kind: Kind,
    /// All child nodes (history nodes included) in document order.
    pub(super) children: Vec<NodeId>,
    /// End (exclusive) of this node's descendant range.
    pub(super) subtree_end: NodeId,
    /// The `initial` child of a compound node.
    pub(super) initial: Option<NodeId>,
    /// Explicit default targets of a history node (`target`); `None` uses XState's default.
    pub(super) history_target: Option<Vec<NodeId>>,
    /// `on` (and `onDone`) in XState's `transitions` map order: descriptor and its candidates.
    pub(super) on: Vec<(String, Vec<TransId>)>,
    /// Whether some child key is an array index (`"0"`, `"7"`), which JavaScript objects order
    /// first: see [`super::config::ActiveChildren`].
    pub(super) index_children: bool,
    /// Indexes into `on` of the wildcard descriptors, longest first (XState's candidate order).
    pub(super) wildcards: Vec<usize>,
    pub(super) always: Vec<TransId>,
    /// `entry` and `exit` assignments, in order.
    pub(super) entry: Vec<Assign>,
    pub(super) exit: Vec<Assign>,
    /// The timers of this state's `after`, in XState's scheduling order.
    pub(super) after: Vec<TimerId>,
}

impl Node {
    /// XState's `isAtomicStateNode`: atomic or final.
    pub(super) fn is_atomic(&self) -> bool {
        matches!(self.kind, Kind::Atomic | Kind::Final)
    }

    pub(super) fn is_history(&self) -> bool {
        matches!(self.kind, Kind::History { .. })
    }
}

/// The whole machine definition after parsing and validation.
#[derive(Debug)]
pub(super) struct Tree {
    pub(super) machine_id: String,
    pub(super) nodes: Vec<Node>,
    pub(super) transitions: Vec<Transition>,
    /// The machine's initial `context` (an object; `{}` when none is given, as in XState).
    pub(super) context: Value,
    pub(super) timers: Vec<TimerDef>,
    /// Per transition: its JSON path in the definition, for warnings.
    pub(super) transition_paths: Vec<String>,
    /// Whether any state has `entry`/`exit` assignments (transitions carry their own).
    pub(super) has_state_actions: bool,
}

impl Tree {
    pub(super) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[usize::from(id)]
    }

    pub(super) fn transition(&self, id: TransId) -> &Transition {
        &self.transitions[id as usize]
    }

    pub(super) fn timer(&self, id: TimerId) -> &TimerDef {
        &self.timers[id as usize]
    }

    /// XState's `isDescendant(child, parent)`: strict. `None` stands for "above the root" (a
    /// transition domain XState leaves undefined), which every node descends from.
    pub(super) fn is_descendant(&self, child: NodeId, parent: Option<NodeId>) -> bool {
        match parent {
            None => true,
            Some(p) => child > p && child < self.node(p).subtree_end,
        }
    }

    /// XState's `getProperAncestors(node, to)`: parent first, stopping before `to` (nothing when
    /// `to` is `node` itself; up to the root when `to` is not an ancestor).
    pub(super) fn proper_ancestors(&self, node: NodeId, to: Option<NodeId>) -> Vec<NodeId> {
        let mut out = Vec::new();
        if to == Some(node) {
            return out;
        }
        let mut m = self.node(node).parent;
        while let Some(a) = m {
            if Some(a) == to {
                break;
            }
            out.push(a);
            m = self.node(a).parent;
        }
        out
    }

    /// XState's `getChildren`: children that are not history nodes.
    pub(super) fn real_children(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.node(node)
            .children
            .iter()
            .copied()
            .filter(|&c| !self.node(c).is_history())
    }

    /// The child of `node` whose key is `key`.
    pub(super) fn child(&self, node: NodeId, key: &str) -> Option<NodeId> {
        self.node(node)
            .children
            .iter()
            .copied()
            .find(|&c| self.node(c).key == key)
    }

    /// XState's `getStateNodeByPath` for a relative dot path (`"a.b"`); an empty segment ends the
    /// walk, as in XState.
    pub(super) fn by_relative_path(&self, from: NodeId, path: &str) -> Option<NodeId> {
        let mut cur = from;
        for seg in path.split('.') {
            if seg.is_empty() {
                break;
            }
            cur = self.child(cur, seg)?;
        }
        Some(cur)
    }

    /// XState's `getStateNodeById` for `"#id"` or `"#id.child.path"`.
    pub(super) fn by_id_ref(&self, reference: &str) -> Option<NodeId> {
        let rest = reference.strip_prefix('#')?;
        let (id, path) = match rest.split_once('.') {
            Some((id, path)) => (id, Some(path)),
            None => (rest, None),
        };
        let node = self.nodes.iter().position(|n| n.id == id)?;
        let node = NodeId::try_from(node).ok()?;
        match path {
            Some(p) => self.by_relative_path(node, p),
            None => Some(node),
        }
    }

    /// A state named by the public API: a dot path from the root or an `#id` reference. Unlike
    /// target resolution (which mirrors XState's leniency), empty path segments find nothing.
    pub(super) fn lookup(&self, path: &str) -> Option<NodeId> {
        let (start, rest) = match path.strip_prefix('#') {
            Some(r) => {
                let (id, rest) = r.split_once('.').unwrap_or((r, ""));
                let n = self.nodes.iter().position(|n| n.id == id)?;
                (NodeId::try_from(n).ok()?, rest)
            }
            None => (ROOT, path),
        };
        if rest.is_empty() {
            return (start != ROOT || path.starts_with('#')).then_some(start);
        }
        let mut cur = start;
        for seg in rest.split('.') {
            if seg.is_empty() {
                return None;
            }
            cur = self.child(cur, seg)?;
        }
        Some(cur)
    }

    /// Candidate transitions of `node` for `event_type`, in XState's `getCandidates` order:
    /// the exact descriptor's candidates, then matching wildcard descriptors, longest first.
    pub(super) fn candidates<'a>(
        &'a self,
        node: NodeId,
        event_type: &'a str,
    ) -> impl Iterator<Item = TransId> + 'a {
        let n = self.node(node);
        let exact =
            n.on.iter()
                .find(|(d, _)| d == event_type)
                .map(|(_, ts)| ts.as_slice())
                .unwrap_or(&[]);
        let wild = n
            .wildcards
            .iter()
            .map(move |&i| &n.on[i])
            .filter(move |(d, _)| d != event_type && matches_descriptor(event_type, d))
            .flat_map(|(_, ts)| ts.iter().copied());
        exact.iter().copied().chain(wild)
    }
}

/// The value of `key` if JavaScript treats it as an array index (a canonical integer below
/// 2^32 - 1); such keys come first, ascending, when an object's keys are enumerated.
pub(super) fn array_index(key: &str) -> Option<u32> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.is_empty());
    if !canonical || !key.bytes().all(|b| b.is_ascii_digit()) || key.len() > 10 {
        return None;
    }
    key.parse::<u64>()
        .ok()
        .filter(|&v| v < u64::from(u32::MAX))
        .and_then(|v| u32::try_from(v).ok())
}

/// Whether `descriptor` is a wildcard descriptor XState could match other event types with.
pub(super) fn is_wildcard(descriptor: &str) -> bool {
    descriptor == "*" || descriptor.ends_with(".*")
}

/// XState's `matchesEventDescriptor`. Note `"a.*"` also matches `"a"` itself, as in XState.
pub(super) fn matches_descriptor(event_type: &str, descriptor: &str) -> bool {
    if descriptor == event_type || descriptor == "*" {
        return true;
    }
    if !descriptor.ends_with(".*") {
        return false;
    }
    let mut partial = descriptor.split('.').peekable();
    let mut tokens = event_type.split('.');
    while let Some(p) = partial.next() {
        let t = tokens.next();
        if p == "*" {
            return partial.peek().is_none();
        }
        if Some(p) != t {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_index_keys() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("42"), Some(42));
        assert_eq!(array_index("042"), None);
        assert_eq!(array_index("4294967295"), None);
        assert_eq!(array_index("4294967294"), Some(4_294_967_294));
        assert_eq!(array_index("a1"), None);
        assert_eq!(array_index(""), None);
    }

    #[test]
    fn wildcard_matching_follows_xstate() {
        assert!(matches_descriptor("a.b", "a.*"));
        assert!(matches_descriptor("a", "a.*"));
        assert!(matches_descriptor("a.b.c", "a.*"));
        assert!(!matches_descriptor("ab.c", "a.*"));
        assert!(matches_descriptor("anything", "*"));
        assert!(!matches_descriptor("a.b", "a.*.c"));
        assert!(!matches_descriptor("a.x.c", "a.*.*"));
        assert!(matches_descriptor("a.b.c", "a.b.*"));
        assert!(!matches_descriptor("a.c", "a.b.*"));
    }
}
