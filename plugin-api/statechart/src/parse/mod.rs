//! From XState v5 JSON to a validated [`Tree`], refusing what Turnstile cannot run.
//!
//! Parsing runs in two passes, like XState's own `StateNode` construction: the first builds every
//! node (so ids and document order are known), the second resolves `initial`, history defaults
//! and transitions, whose targets may point anywhere in the machine. Every refusal carries the
//! JSON path of the offending key.

mod actions;
mod transition;

use serde_json::{Map, Value};

use self::transition::target_strings;
use super::{
    error::MachineError,
    guards::Guards,
    tree::{Kind, Node, NodeId, ROOT, Tree, array_index, is_wildcard},
};

pub(super) type Obj = Map<String, Value>;

/// Keys XState v4 used that v5 dropped or renamed, with what to write instead.
const V4_KEYS: &[(&str, &str)] = &[
    (
        "onEntry",
        "XState v4 key; v5 uses `entry`, and Turnstile runs no actions",
    ),
    (
        "onExit",
        "XState v4 key; v5 uses `exit`, and Turnstile runs no actions",
    ),
    ("activities", "XState v4 key; Turnstile runs no activities"),
    ("strict", "XState v4 key; remove it"),
    ("predictableActionArguments", "XState v4 key; remove it"),
    ("preserveActionOrder", "XState v4 key; remove it"),
    ("parallel", "XState v4 key; use `type: \"parallel\"`"),
    ("data", "XState v4 key; v5 uses `output`"),
    ("schema", "XState v4 key; remove it"),
];

/// Parses and validates `def` against the guard implementations in `guards`.
pub(super) fn parse(def: &Value, guards: &dyn Guards) -> Result<Tree, MachineError> {
    let root = def
        .as_object()
        .ok_or_else(|| MachineError::new("", "a machine definition is a JSON object"))?;
    let machine_id = match root.get("id") {
        None => "(machine)".to_string(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(MachineError::new("id", "`id` must be a non-empty string")),
    };
    let mut p = Parser {
        tree: Tree {
            machine_id,
            nodes: Vec::new(),
            transitions: Vec::new(),
            context: actions::context(root)?,
            timers: Vec::new(),
            transition_paths: Vec::new(),
            has_state_actions: false,
        },
        raw: Vec::new(),
        trans_paths: Vec::new(),
        guards,
        delays: actions::delays(root)?,
    };
    p.build_node(root, None, String::new(), String::new())?;
    for n in 0..p.tree.nodes.len() {
        let n = n as NodeId;
        p.resolve_node(n)?;
    }
    p.tree.transition_paths = p.trans_paths;
    Ok(p.tree)
}

pub(super) struct Parser<'a> {
    pub(super) tree: Tree,
    /// Per node: its JSON object and its JSON path.
    pub(super) raw: Vec<(&'a Obj, String)>,
    /// Per transition: its JSON path, for cycle errors.
    pub(super) trans_paths: Vec<String>,
    pub(super) guards: &'a dyn Guards,
    /// The machine-level `delays` map: name → milliseconds.
    pub(super) delays: Vec<(String, u64)>,
}

pub(super) fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

pub(super) fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

impl<'a> Parser<'a> {
    /// Pass one: creates the node for `cfg` and, recursively, its children (pre-order, so the
    /// index is XState's document order).
    fn build_node(
        &mut self,
        cfg: &'a Obj,
        parent: Option<NodeId>,
        key: String,
        jpath: String,
    ) -> Result<NodeId, MachineError> {
        let is_root = parent.is_none();
        self.check_keys(cfg, &jpath, is_root)?;
        let index = NodeId::try_from(self.tree.nodes.len())
            .map_err(|_| MachineError::new(&jpath, "too many states (at most 65535)"))?;
        let path = match parent {
            None => String::new(),
            Some(p) => join(&self.tree.node(p).path, &key),
        };
        let id = match cfg.get("id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) if !is_root => {
                return Err(MachineError::new(
                    join(&jpath, "id"),
                    "`id` must be a non-empty string",
                ));
            }
            _ if is_root => self.tree.machine_id.clone(),
            _ => format!("{}.{}", self.tree.machine_id, path),
        };
        if self.tree.nodes.iter().any(|n| n.id == id) {
            return Err(MachineError::new(
                &jpath,
                format!("duplicate state id \"{id}\""),
            ));
        }
        let states = match cfg.get("states") {
            None => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => {
                return Err(MachineError::new(
                    join(&jpath, "states"),
                    "`states` must be an object",
                ));
            }
        };
        let has_children = states.is_some_and(|m| !m.is_empty());
        let kind = self.kind_of(cfg, &jpath, has_children, is_root)?;
        self.tree.nodes.push(Node {
            key,
            id,
            path,
            parent,
            kind,
            children: Vec::new(),
            subtree_end: index + 1,
            initial: None,
            history_target: None,
            on: Vec::new(),
            index_children: false,
            wildcards: Vec::new(),
            always: Vec::new(),
            entry: Vec::new(),
            exit: Vec::new(),
            after: Vec::new(),
        });
        self.raw.push((cfg, jpath.clone()));
        if let Some(states) = states {
            let states_path = join(&jpath, "states");
            // XState creates children in JavaScript's key order: array-index keys first.
            let mut keys: Vec<(&String, &Value)> = states.iter().collect();
            keys.sort_by_key(|(k, _)| array_index(k).map_or(u64::MAX, u64::from));
            self.tree.nodes[usize::from(index)].index_children =
                keys.iter().any(|(k, _)| array_index(k).is_some());
            for (k, v) in keys {
                let child_path = join(&states_path, k);
                if k.is_empty() || k.contains('.') || k.starts_with('#') {
                    return Err(MachineError::new(
                        child_path,
                        "a state key must be non-empty and contain no '.' or leading '#'",
                    ));
                }
                let obj = v.as_object().ok_or_else(|| {
                    MachineError::new(&child_path, "a state must be a JSON object")
                })?;
                let c = self.build_node(obj, Some(index), k.clone(), child_path)?;
                self.tree.nodes[usize::from(index)].children.push(c);
            }
        }
        let end = NodeId::try_from(self.tree.nodes.len())
            .map_err(|_| MachineError::new(&jpath, "too many states (at most 65535)"))?;
        self.tree.nodes[usize::from(index)].subtree_end = end;
        if kind == Kind::Parallel && self.tree.real_children(index).next().is_none() {
            return Err(MachineError::new(
                &jpath,
                "a parallel state needs at least one region",
            ));
        }
        Ok(index)
    }

    /// Refuses keys that ask for something Turnstile cannot run, v4 leftovers and unknown keys.
    fn check_keys(&self, cfg: &Obj, jpath: &str, is_root: bool) -> Result<(), MachineError> {
        for k in cfg.keys() {
            let at = join(jpath, k);
            let refuse = |reason: &str| Err(MachineError::new(&at, reason));
            match k.as_str() {
                "id" | "type" | "states" | "on" | "always" | "onDone" | "description" | "meta"
                | "tags" | "initial" | "history" | "target" | "output" => {}
                "version" | "context" | "delays" if is_root => {}
                "context" | "delays" => {
                    return refuse(&format!("`{k}` belongs on the machine's root"));
                }
                "entry" | "exit" | "after" => {}
                "invoke" => return refuse("invoked actors are not supported"),
                other => {
                    if let Some((_, why)) = V4_KEYS.iter().find(|(key, _)| *key == other) {
                        return refuse(why);
                    }
                    return refuse(&format!("unsupported key \"{other}\""));
                }
            }
        }
        Ok(())
    }

    /// XState's type inference: explicit `type`, else compound when there are child states,
    /// else history when `history` is set, else atomic.
    fn kind_of(
        &self,
        cfg: &Obj,
        jpath: &str,
        has_children: bool,
        is_root: bool,
    ) -> Result<Kind, MachineError> {
        let deep = match cfg.get("history") {
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(false),
            Some(Value::String(s)) if s == "shallow" => Some(false),
            Some(Value::String(s)) if s == "deep" => Some(true),
            Some(_) => {
                return Err(MachineError::new(
                    join(jpath, "history"),
                    "`history` must be \"shallow\" or \"deep\"",
                ));
            }
        };
        let at_type = join(jpath, "type");
        let kind = match cfg.get("type") {
            None if has_children => Kind::Compound,
            None if deep.is_some() => Kind::History {
                deep: deep.unwrap_or(false),
            },
            None => Kind::Atomic,
            Some(Value::String(t)) => match t.as_str() {
                "atomic" => Kind::Atomic,
                "compound" => Kind::Compound,
                "parallel" => Kind::Parallel,
                "final" => Kind::Final,
                "history" => Kind::History {
                    deep: deep.unwrap_or(false),
                },
                other => {
                    return Err(MachineError::new(
                        at_type,
                        format!("unknown state type \"{other}\""),
                    ));
                }
            },
            Some(_) => return Err(MachineError::new(at_type, "`type` must be a string")),
        };
        match kind {
            Kind::Compound if !has_children => Err(MachineError::new(
                jpath,
                "a compound state needs child states",
            )),
            Kind::Atomic | Kind::Final | Kind::History { .. } if has_children => {
                Err(MachineError::new(
                    jpath,
                    "only compound and parallel states can have child states",
                ))
            }
            Kind::Final | Kind::History { .. } if is_root => Err(MachineError::new(
                at_type,
                "the machine root cannot be a final or history state",
            )),
            _ => Ok(kind),
        }
    }

    /// Pass two for one node: `initial`, history default, `on`, `onDone`, `always`.
    fn resolve_node(&mut self, n: NodeId) -> Result<(), MachineError> {
        let (cfg, jpath) = self.raw[usize::from(n)].clone();
        let kind = self.tree.node(n).kind;
        if let Kind::History { .. } = kind {
            for k in [
                "on", "always", "onDone", "initial", "after", "entry", "exit",
            ] {
                if cfg.contains_key(k) {
                    return Err(MachineError::new(
                        join(&jpath, k),
                        "a history state cannot have transitions, actions or an initial state",
                    ));
                }
            }
            return self.resolve_history_target(n, cfg, &jpath);
        }
        if cfg.contains_key("target") {
            return Err(MachineError::new(
                join(&jpath, "target"),
                "`target` belongs on transitions and history states",
            ));
        }
        match kind {
            Kind::Compound => self.resolve_initial(n, cfg, &jpath)?,
            // XState fails when it enters such a state; a parallel state ignores `initial`.
            Kind::Atomic | Kind::Final if cfg.contains_key("initial") => {
                return Err(MachineError::new(
                    join(&jpath, "initial"),
                    "`initial` on a state without child states",
                ));
            }
            _ => {}
        }
        if let Some(on) = cfg.get("on") {
            let at = join(&jpath, "on");
            let on = on
                .as_object()
                .ok_or_else(|| MachineError::new(&at, "`on` must be an object"))?;
            for (event, t) in on {
                if event.is_empty() {
                    return Err(MachineError::new(
                        at,
                        "the \"\" event key is XState v4; use `always` for eventless transitions",
                    ));
                }
                let ts = self.transitions(n, event, t, &join(&at, event))?;
                self.tree.nodes[usize::from(n)].on.push((event.clone(), ts));
            }
        }
        if let Some(t) = cfg.get("onDone") {
            let descriptor = format!("xstate.done.state.{}", self.tree.node(n).id);
            let ts = self.transitions(n, &descriptor, t, &join(&jpath, "onDone"))?;
            let on = &mut self.tree.nodes[usize::from(n)].on;
            // XState keeps `on` and `onDone` in one Map: a later `set` replaces in place.
            match on.iter_mut().find(|(d, _)| *d == descriptor) {
                Some(slot) => slot.1 = ts,
                None => on.push((descriptor, ts)),
            }
        }
        if let Some(t) = cfg.get("always") {
            let ts = self.transitions(n, "", t, &join(&jpath, "always"))?;
            self.tree.nodes[usize::from(n)].always = ts;
        }
        // After `on` and `onDone`, as XState's `formatTransitions` adds them.
        if let Some(after) = cfg.get("after") {
            self.resolve_after(n, after, &join(&jpath, "after"))?;
        }
        for key in ["entry", "exit"] {
            let Some(v) = cfg.get(key) else { continue };
            let list = self.actions(v, &join(&jpath, key))?;
            self.tree.has_state_actions |= !list.is_empty();
            let node = &mut self.tree.nodes[usize::from(n)];
            if key == "entry" {
                node.entry = list;
            } else {
                node.exit = list;
            }
        }
        let node = &mut self.tree.nodes[usize::from(n)];
        let mut wild: Vec<usize> = (0..node.on.len())
            .filter(|&i| is_wildcard(&node.on[i].0))
            .collect();
        // Stable, like JS `Array.prototype.sort`: equal lengths keep definition order.
        wild.sort_by_key(|&i| std::cmp::Reverse(node.on[i].0.len()));
        node.wildcards = wild;
        Ok(())
    }

    fn resolve_initial(&mut self, n: NodeId, cfg: &Obj, jpath: &str) -> Result<(), MachineError> {
        let at = join(jpath, "initial");
        let key = match cfg.get("initial") {
            None => {
                return Err(MachineError::new(
                    jpath,
                    "a compound state needs `initial` (XState v5 refuses it too)",
                ));
            }
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Object(o)) => {
                for k in o.keys() {
                    if !matches!(k.as_str(), "target" | "description" | "meta") {
                        return Err(MachineError::new(
                            join(&at, k),
                            "an initial transition only takes `target` (Turnstile runs no actions)",
                        ));
                    }
                }
                o.get("target").and_then(Value::as_str).ok_or_else(|| {
                    MachineError::new(&at, "`initial.target` must be a child state key")
                })?
            }
            Some(_) => {
                return Err(MachineError::new(at, "`initial` must be a child state key"));
            }
        };
        let child = self
            .tree
            .child(n, key)
            .ok_or_else(|| MachineError::new(&at, format!("unknown initial state \"{key}\"")))?;
        self.tree.nodes[usize::from(n)].initial = Some(child);
        Ok(())
    }

    fn resolve_history_target(
        &mut self,
        n: NodeId,
        cfg: &Obj,
        jpath: &str,
    ) -> Result<(), MachineError> {
        let Some(t) = cfg.get("target") else {
            return Ok(());
        };
        let at = join(jpath, "target");
        let parent = self.tree.node(n).parent.unwrap_or(ROOT);
        let names = target_strings(t, &at)?;
        if names.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        for name in names {
            let found = if name.starts_with('#') {
                self.tree.by_id_ref(name)
            } else {
                self.tree.by_relative_path(parent, name)
            };
            let found = found.ok_or_else(|| {
                MachineError::new(&at, format!("unknown history target \"{name}\""))
            })?;
            // XState would enter a target elsewhere along with its ancestors, which is not a
            // restored history; refuse rather than guess.
            if !self.tree.is_descendant(found, Some(parent)) || self.tree.node(found).is_history() {
                return Err(MachineError::new(
                    &at,
                    format!(
                        "history target \"{name}\" must be a state inside the history's parent"
                    ),
                ));
            }
            out.push(found);
        }
        self.tree.nodes[usize::from(n)].history_target = Some(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
