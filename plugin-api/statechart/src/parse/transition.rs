//! Pass two, transitions: `on`, `onDone` and `always` entries, their guards and targets.

use serde_json::Value;

use super::super::{
    error::MachineError,
    tree::{Kind, NodeId, TransId, Transition},
};
use super::{Parser, join};

impl Parser<'_> {
    /// XState's `toTransitionConfigArray` + `formatTransition` for one `on`/`onDone`/`always`
    /// entry. `at` is the JSON path of the entry.
    pub(super) fn transitions(
        &mut self,
        source: NodeId,
        event: &str,
        cfg: &Value,
        at: &str,
    ) -> Result<Vec<TransId>, MachineError> {
        let items: Vec<(&Value, String)> = match cfg {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (v, format!("{at}[{i}]")))
                .collect(),
            other => vec![(other, at.to_string())],
        };
        let mut out = Vec::with_capacity(items.len());
        for (item, item_at) in items {
            let t = self.transition(source, event, item, &item_at)?;
            let id = TransId::try_from(self.tree.transitions.len())
                .map_err(|_| MachineError::new(&item_at, "too many transitions"))?;
            self.tree.transitions.push(t);
            self.trans_paths.push(item_at);
            out.push(id);
        }
        Ok(out)
    }

    pub(super) fn transition(
        &self,
        source: NodeId,
        event: &str,
        cfg: &Value,
        at: &str,
    ) -> Result<Transition, MachineError> {
        let mut t = Transition {
            source,
            targets: None,
            reenter: false,
            guard: None,
            actions: Vec::new(),
            delay: None,
            event: event.to_string(),
        };
        let obj = match cfg {
            Value::String(s) => {
                t.targets = self.resolve_targets(source, &[s.as_str()], at)?;
                return Ok(t);
            }
            Value::Object(o) => o,
            Value::Null => {
                return Err(MachineError::new(
                    at,
                    "a null transition is XState v4; write {} (a targetless transition) to \
                     forbid an event",
                ));
            }
            _ => {
                return Err(MachineError::new(
                    at,
                    "a transition is a target string, an object or an array of them",
                ));
            }
        };
        for (k, v) in obj {
            let refuse = |reason: String| Err(MachineError::new(join(at, k), reason));
            match k.as_str() {
                "target" | "description" | "meta" => {}
                "reenter" => match v {
                    Value::Bool(b) => t.reenter = *b,
                    _ => return refuse("`reenter` must be a boolean".into()),
                },
                "guard" => t.guard = Some(self.guard(v, &join(at, k))?),
                "actions" => t.actions = self.actions(v, &join(at, k))?,
                "cond" => return refuse("`cond` is XState v4; use `guard`".into()),
                "internal" => return refuse("`internal` is XState v4; use `reenter`".into()),
                "in" => return refuse("`in` is XState v4 and is not supported".into()),
                other => return refuse(format!("unsupported key \"{other}\"")),
            }
        }
        if let Some(target) = obj.get("target") {
            let names = target_strings(target, &join(at, "target"))?;
            t.targets = self.resolve_targets(source, &names, at)?;
        }
        Ok(t)
    }

    /// XState's `resolveTarget`: `#id[.path]`, `.child.path` (relative to the source), or a
    /// sibling path (relative to the source's parent; refused on the root).
    fn resolve_targets(
        &self,
        source: NodeId,
        names: &[&str],
        at: &str,
    ) -> Result<Option<Vec<NodeId>>, MachineError> {
        if names.is_empty() || names == [""] {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(names.len());
        for &name in names {
            let parent = self.tree.node(source).parent;
            let found = if name.starts_with('#') {
                self.tree.by_id_ref(name)
            } else if let Some(rest) = name.strip_prefix('.') {
                self.tree.by_relative_path(source, rest)
            } else if let Some(p) = parent {
                self.tree.by_relative_path(p, name)
            } else {
                return Err(MachineError::new(
                    at,
                    format!(
                        "\"{name}\" is not a valid target from the root node; did you mean \
                         \".{name}\"?"
                    ),
                ));
            };
            out.push(
                found.ok_or_else(|| MachineError::new(at, format!("unknown target \"{name}\"")))?,
            );
        }
        self.check_multi_target(&out, names, at)?;
        Ok(Some(out))
    }

    /// Several targets must lie in distinct regions of a parallel state, or the resulting
    /// configuration would not be a valid state.
    fn check_multi_target(
        &self,
        targets: &[NodeId],
        names: &[&str],
        at: &str,
    ) -> Result<(), MachineError> {
        for i in 0..targets.len() {
            for j in i + 1..targets.len() {
                let (a, b) = (targets[i], targets[j]);
                let lca = self
                    .tree
                    .proper_ancestors(a, None)
                    .into_iter()
                    .find(|&anc| self.tree.is_descendant(b, Some(anc)));
                let ok = a != b
                    && !self.tree.is_descendant(a, Some(b))
                    && !self.tree.is_descendant(b, Some(a))
                    && lca.is_some_and(|l| self.tree.node(l).kind == Kind::Parallel);
                if !ok {
                    return Err(MachineError::new(
                        at,
                        format!(
                            "targets \"{}\" and \"{}\" cannot be active together",
                            names[i], names[j]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `target` as a list of strings (`"a"`, `["a", "b"]`).
pub(super) fn target_strings<'v>(v: &'v Value, at: &str) -> Result<Vec<&'v str>, MachineError> {
    match v {
        Value::String(s) => Ok(vec![s.as_str()]),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .ok_or_else(|| MachineError::new(at, "a target must be a string"))
            })
            .collect(),
        _ => Err(MachineError::new(
            at,
            "a target must be a string or an array of strings",
        )),
    }
}
