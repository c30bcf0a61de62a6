//! [`Snapshot`]: one machine's state at rest, with XState's state value shape, and its persisted
//! form.

use std::{fmt, sync::Arc};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{
    config::{
        ActiveChildren, Config, Context, HistoryValue, Pending, all_state_nodes, first_active_child,
    },
    error::MachineError,
    tree::{Kind, NodeId, ROOT, TimerId, Tree},
};

/// The version of [`Snapshot::to_persisted`]'s layout, written as `"format"`. Records without
/// it are format 1 (before context and timers) and still restore.
pub const PERSISTED_FORMAT: u64 = 2;

/// XState's snapshot `status`, limited to what a Turnstile machine can reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Running: events may change the state.
    Active,
    /// A top-level final state was reached; further events change nothing.
    Done,
}

/// An immutable machine state. Cheap to clone (one small vector and an `Arc`).
///
/// Equality compares the set of active states, the history memory, the status, the context and
/// the running timers (not the internal order XState keeps the active states in).
#[derive(Clone)]
pub struct Snapshot {
    pub(super) tree: Arc<Tree>,
    pub(super) cfg: Config,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.tree, &other.tree)
            && self.cfg.done == other.cfg.done
            && self.cfg.history == other.cfg.history
            && same_set(&self.cfg.nodes, &other.cfg.nodes)
            && self.cfg.context == other.cfg.context
            && self.cfg.timers == other.cfg.timers
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("value", &self.value())
            .field("status", &self.status())
            .field("context", self.cfg.context.get())
            .finish()
    }
}

impl Snapshot {
    /// XState's `snapshot.value`: `"draft"`, `{"review": "pending"}`, or an object with one key
    /// per region for parallel states (an atomic region shows as `{}`, as in XState).
    pub fn value(&self) -> Value {
        value_of(
            &self.tree,
            &all_state_nodes(&self.tree, &self.cfg.nodes),
            ROOT,
        )
    }

    /// `Done` once a top-level final state is reached.
    pub fn status(&self) -> Status {
        if self.cfg.done {
            Status::Done
        } else {
            Status::Active
        }
    }

    /// Like XState's `snapshot.matches("a.b")`: true when that state is active (and so, when it
    /// or a descendant is). Takes a dot path from the root, or `#id`. Unknown paths are false.
    pub fn matches(&self, path: &str) -> bool {
        self.tree
            .lookup(path)
            .is_some_and(|n| all_state_nodes(&self.tree, &self.cfg.nodes).contains(&n))
    }

    /// XState's `snapshot.context`: always an object (`{}` for a machine without context).
    pub fn context(&self) -> &Value {
        self.cfg.context.get()
    }

    /// When the first running timer falls due (in the clock the caller passed as `now`), if any
    /// state with `after` is active. The caller wakes the instance then and calls
    /// [`super::Machine::fire_due`].
    pub fn next_deadline(&self) -> Option<u64> {
        self.cfg.next_timer().map(|i| self.cfg.timers[i].deadline)
    }

    /// The running timers as (event type, deadline), in the order they will fire.
    pub fn timers(&self) -> Vec<(String, u64)> {
        let mut order: Vec<usize> = (0..self.cfg.timers.len()).collect();
        order.sort_by_key(|&i| (self.cfg.timers[i].deadline, i));
        order
            .into_iter()
            .map(|i| {
                let p = self.cfg.timers[i];
                (self.tree.timer(p.timer).event.clone(), p.deadline)
            })
            .collect()
    }

    /// Everything [`super::Machine::restore`] needs, as a JSON object:
    /// - `format`: [`PERSISTED_FORMAT`];
    /// - `value` and `status` as above;
    /// - `historyValue` in XState's shape (`{"<history id>": [{"id": "<state id>"}]}`);
    /// - `nodes`: the active state ids in the order XState keeps them (which decides region
    ///   order);
    /// - `context`;
    /// - `timers`: `[{"event": "xstate.after.<delay>.<state id>", "deadline": <ms>}]` in the
    ///   order they were started (which breaks deadline ties); `"detached": true` marks a timer
    ///   leaving its state no longer cancels (see XState's scheduler in `config`).
    pub fn to_persisted(&self) -> Value {
        let history: Map<String, Value> = self
            .cfg
            .history
            .iter()
            .map(|(h, states)| {
                let ids: Vec<Value> = states
                    .iter()
                    .map(|&s| json!({ "id": self.tree.node(s).id }))
                    .collect();
                (self.tree.node(*h).id.clone(), Value::Array(ids))
            })
            .collect();
        let nodes: Vec<&str> = self
            .cfg
            .nodes
            .iter()
            .map(|&n| self.tree.node(n).id.as_str())
            .collect();
        let timers: Vec<Value> = self
            .cfg
            .timers
            .iter()
            .map(|p| {
                let mut t =
                    json!({"event": self.tree.timer(p.timer).event, "deadline": p.deadline});
                if p.detached {
                    t["detached"] = json!(true);
                }
                t
            })
            .collect();
        json!({
            "format": PERSISTED_FORMAT,
            "value": self.value(),
            "status": self.status(),
            "historyValue": history,
            "nodes": nodes,
            "context": self.cfg.context.get(),
            "timers": timers,
        })
    }

    /// The active state ids, for callers that want more than `matches` (e.g. diagnostics).
    pub fn active_paths(&self) -> Vec<String> {
        let mut nodes: Vec<NodeId> = all_state_nodes(&self.tree, &self.cfg.nodes).into_owned();
        nodes.sort_unstable();
        nodes
            .into_iter()
            .filter(|&n| n != ROOT)
            .map(|n| self.tree.node(n).path.clone())
            .collect()
    }
}

/// XState's `getValueFromAdj` (the first child in `_nodes` order decides the string form), with
/// keys in JavaScript's enumeration order.
fn value_of(tree: &Tree, all: &[NodeId], node: NodeId) -> Value {
    if tree.node(node).kind == Kind::Compound {
        match first_active_child(tree, all, node) {
            None => return Value::Object(Map::new()),
            Some(c) if tree.node(c).is_atomic() => {
                return Value::String(tree.node(c).key.clone());
            }
            Some(_) => {}
        }
    }
    let mut map = Map::new();
    for c in ActiveChildren::new(tree, all, node) {
        map.insert(tree.node(c).key.clone(), value_of(tree, all, c));
    }
    Value::Object(map)
}

/// Rebuilds a configuration from [`Snapshot::to_persisted`] output, refusing states that do
/// not exist or a value that is not a complete configuration. A record without `context`
/// (format 1) gets `default_context`; one without `timers` gets the timers of its active states
/// started at `now`, so that a state left only by a timer still leaves.
pub(super) fn restore_config(
    tree: &Tree,
    persisted: &Value,
    default_context: &Context,
    now: u64,
) -> Result<Config, MachineError> {
    let obj = persisted
        .as_object()
        .ok_or_else(|| MachineError::new("", "a persisted snapshot is a JSON object"))?;
    match obj.get("format") {
        None => {}
        Some(f)
            if f.as_u64()
                .is_some_and(|f| (1..=PERSISTED_FORMAT).contains(&f)) => {}
        Some(f) => {
            return Err(MachineError::new(
                "format",
                format!("unknown snapshot format {f} (this Turnstile writes {PERSISTED_FORMAT})"),
            ));
        }
    }
    let done = match obj.get("status").and_then(Value::as_str) {
        Some("active") => false,
        Some("done") => true,
        _ => {
            return Err(MachineError::new(
                "status",
                "status must be \"active\" or \"done\"",
            ));
        }
    };
    let value = obj
        .get("value")
        .ok_or_else(|| MachineError::new("value", "missing state value"))?;
    let nodes = match obj.get("nodes") {
        // Our own persisted form: the exact active set and order, checked against the value.
        Some(order) => {
            let ids = order.as_array().ok_or_else(|| {
                MachineError::new("nodes", "`nodes` must be an array of state ids")
            })?;
            let mut nodes = Vec::with_capacity(ids.len());
            for id in ids {
                let n = id
                    .as_str()
                    .and_then(|s| tree.nodes.iter().position(|n| n.id == s && !n.is_history()))
                    .ok_or_else(|| MachineError::new("nodes", format!("unknown state id {id}")))?;
                nodes.push(n as NodeId);
            }
            nodes
        }
        // A bare value: states in document order.
        None => {
            let mut nodes = vec![ROOT];
            walk_value(tree, ROOT, value, "value", &mut nodes)?;
            nodes
        }
    };
    let mut history: HistoryValue = Vec::new();
    if let Some(hv) = obj.get("historyValue") {
        let hv = hv
            .as_object()
            .ok_or_else(|| MachineError::new("historyValue", "must be an object"))?;
        for (hid, states) in hv {
            let at = format!("historyValue.{hid}");
            let h = tree
                .nodes
                .iter()
                .position(|n| n.id == *hid && n.is_history())
                .ok_or_else(|| MachineError::new(&at, "unknown history state"))?;
            let mut remembered = Vec::new();
            for s in states.as_array().into_iter().flatten() {
                let id = s.get("id").and_then(Value::as_str).or_else(|| s.as_str());
                let n = id
                    .and_then(|id| tree.nodes.iter().position(|n| n.id == id))
                    .ok_or_else(|| MachineError::new(&at, format!("unknown state {s}")))?;
                remembered.push(n as NodeId);
            }
            history.push((h as NodeId, remembered));
        }
        history.sort_by_key(|(h, _)| *h);
    }
    let context = match obj.get("context") {
        None => default_context.clone(),
        Some(c @ Value::Object(_)) => Context::new(c.clone()),
        Some(_) => return Err(MachineError::new("context", "must be an object")),
    };
    let all = all_state_nodes(tree, &nodes).into_owned();
    let timers = match obj.get("timers") {
        Some(list) => restore_timers(tree, list, &all)?,
        None if done => Vec::new(),
        None => {
            let mut active = all.clone();
            active.sort_unstable();
            active
                .iter()
                .flat_map(|&n| tree.node(n).after.iter())
                .map(|&timer| Pending {
                    timer,
                    deadline: now.saturating_add(tree.timer(timer).delay_ms),
                    detached: false,
                })
                .collect()
        }
    };
    let cfg = Config {
        nodes,
        history,
        done,
        context,
        timers,
    };
    let rebuilt = value_of(tree, &all_state_nodes(tree, &cfg.nodes), ROOT);
    if rebuilt != *value {
        return Err(MachineError::new(
            "value",
            format!("the state value does not match the active states (expected {rebuilt})"),
        ));
    }
    Ok(cfg)
}

/// The persisted `timers`: each must be the timer of an active state.
fn restore_timers(
    tree: &Tree,
    list: &Value,
    active: &[NodeId],
) -> Result<Vec<Pending>, MachineError> {
    let items = list
        .as_array()
        .ok_or_else(|| MachineError::new("timers", "must be an array"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("timers[{i}]");
            let event = item.get("event").and_then(Value::as_str);
            let deadline = item.get("deadline").and_then(Value::as_u64);
            let (Some(event), Some(deadline)) = (event, deadline) else {
                return Err(MachineError::new(
                    at,
                    "a timer is {\"event\", \"deadline\"}",
                ));
            };
            let detached = item.get("detached").and_then(Value::as_bool) == Some(true);
            // A detached timer may outlive its state; one that is not belongs to an active one.
            let timer = tree
                .timers
                .iter()
                .position(|t| t.event == event && (detached || active.contains(&t.node)))
                .ok_or_else(|| {
                    MachineError::new(&at, format!("no active state has the timer \"{event}\""))
                })?;
            Ok(Pending {
                timer: timer as TimerId,
                deadline,
                detached,
            })
        })
        .collect()
}

/// Collects the states `value` names under `node`, checking it is a complete configuration.
fn walk_value(
    tree: &Tree,
    node: NodeId,
    value: &Value,
    at: &str,
    out: &mut Vec<NodeId>,
) -> Result<(), MachineError> {
    let kind = tree.node(node).kind;
    let child = |key: &str| {
        tree.child(node, key)
            .filter(|&c| !tree.node(c).is_history())
            .ok_or_else(|| MachineError::new(at, format!("unknown state \"{key}\"")))
    };
    match (kind, value) {
        (Kind::Compound, Value::String(key)) => {
            let c = child(key)?;
            if !tree.node(c).is_atomic() {
                return Err(MachineError::new(
                    at,
                    format!("\"{key}\" has child states; the value must name one"),
                ));
            }
            out.push(c);
            Ok(())
        }
        (Kind::Compound, Value::Object(m)) if m.len() == 1 => {
            let (key, sub) = m.iter().next().unwrap_or_else(|| unreachable!("len is 1"));
            let c = child(key)?;
            out.push(c);
            walk_value(tree, c, sub, &format!("{at}.{key}"), out)
        }
        (Kind::Parallel, Value::Object(m)) => {
            for (key, sub) in m {
                let c = child(key)?;
                out.push(c);
                walk_value(tree, c, sub, &format!("{at}.{key}"), out)?;
            }
            if tree.real_children(node).any(|c| !out.contains(&c)) {
                return Err(MachineError::new(at, "a parallel state needs every region"));
            }
            Ok(())
        }
        (Kind::Atomic | Kind::Final, Value::Object(m)) if m.is_empty() => Ok(()),
        _ => Err(MachineError::new(at, "not a complete state value")),
    }
}

/// Same elements, order ignored.
pub(super) fn same_set(a: &[NodeId], b: &[NodeId]) -> bool {
    a.len() == b.len() && a.iter().all(|n| b.contains(n))
}
