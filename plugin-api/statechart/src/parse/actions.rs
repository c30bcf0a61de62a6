//! Pass two, what is not a target: guards, `xstate.assign` actions, `after` timers, and the
//! machine-level `context` and `delays`.

use serde_json::Value;

use super::super::{
    error::MachineError,
    logic::Rule,
    tree::{Assign, Guard, NodeId, TimerDef, TimerId, array_index},
};
use super::{Obj, Parser, is_empty_value, join};

/// The only action Turnstile runs.
const ASSIGN: &str = "xstate.assign";

/// The machine's `context`: an object (absent or `null` is `{}`, as XState makes it).
pub(super) fn context(root: &Obj) -> Result<Value, MachineError> {
    match root.get("context") {
        None | Some(Value::Null) => Ok(Value::Object(Default::default())),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(MachineError::new(
            "context",
            "`context` must be a JSON object (assignments set its keys)",
        )),
    }
}

/// The machine's `delays`: names for `after` keys, each a whole number of milliseconds.
pub(super) fn delays(root: &Obj) -> Result<Vec<(String, u64)>, MachineError> {
    let Some(v) = root.get("delays") else {
        return Ok(Vec::new());
    };
    let map = v
        .as_object()
        .ok_or_else(|| MachineError::new("delays", "`delays` must be an object"))?;
    map.iter()
        .map(|(name, ms)| {
            let at = join("delays", name);
            if numeric_delay(name).is_some() || !is_delay_name(name) {
                return Err(MachineError::new(
                    at,
                    "a delay name starts with a letter or `_` and has no `.`",
                ));
            }
            let ms = ms.as_u64().ok_or_else(|| {
                MachineError::new(&at, "a delay is a whole number of milliseconds")
            })?;
            Ok((name.clone(), ms))
        })
        .collect()
}

/// `"1000"` as a number of milliseconds (canonical digits only, as XState prints it back).
fn numeric_delay(key: &str) -> Option<u64> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.is_empty());
    (canonical && key.bytes().all(|b| b.is_ascii_digit()))
        .then(|| key.parse().ok())
        .flatten()
}

fn is_delay_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && !key.contains('.')
}

impl Parser<'_> {
    /// `entry`, `exit` or a transition's `actions`: one action or a list of them.
    pub(super) fn actions(&self, v: &Value, at: &str) -> Result<Vec<Assign>, MachineError> {
        if is_empty_value(v) {
            return Ok(Vec::new());
        }
        match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.action(item, &format!("{at}[{i}]")))
                .collect(),
            other => Ok(vec![self.action(other, at)?]),
        }
    }

    fn action(&self, v: &Value, at: &str) -> Result<Assign, MachineError> {
        let refuse_other = || {
            MachineError::new(
                at,
                "only {\"type\": \"xstate.assign\", \"params\": {...}} actions are supported \
                 (tools carry the effects)",
            )
        };
        let obj = v.as_object().ok_or_else(refuse_other)?;
        if obj.get("type").and_then(Value::as_str) != Some(ASSIGN) {
            return Err(refuse_other());
        }
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "params"))
        {
            return Err(MachineError::new(
                join(at, k),
                format!("unsupported action key \"{k}\""),
            ));
        }
        let params_at = join(at, "params");
        let params = obj
            .get("params")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                MachineError::new(
                    &params_at,
                    "`params` maps context keys to JSON Logic rules over {context, event}",
                )
            })?;
        let keys = params
            .iter()
            .map(|(key, rule)| {
                let rule = Rule::compile(rule).map_err(|e| {
                    MachineError::new(join(&params_at, key), format!("bad JSON Logic: {e}"))
                })?;
                Ok((key.clone(), rule))
            })
            .collect::<Result<_, MachineError>>()?;
        Ok(Assign { keys })
    }

    /// A transition's `guard`: a name, `{type, params}`, the built-in `jsonLogic`, or an
    /// `xstate.and` / `xstate.or` / `xstate.not` combinator.
    pub(super) fn guard(&self, v: &Value, at: &str) -> Result<Guard, MachineError> {
        let (name, obj) = match v {
            Value::String(s) => (s.as_str(), None),
            Value::Object(o) => {
                let name = o
                    .get("type")
                    .and_then(Value::as_str)
                    .ok_or_else(|| MachineError::new(at, "a guard object needs a string `type`"))?;
                (name, Some(o))
            }
            _ => {
                return Err(MachineError::new(
                    at,
                    "a guard is a name or {\"type\": name, \"params\": ...}",
                ));
            }
        };
        let allowed: &[&str] = match name {
            "xstate.and" | "xstate.or" | "xstate.not" => &["type", "guards"],
            _ => &["type", "params"],
        };
        if let Some(k) = obj
            .into_iter()
            .flat_map(|o| o.keys())
            .find(|k| !allowed.contains(&k.as_str()))
        {
            return Err(MachineError::new(
                join(at, k),
                format!("unsupported guard key \"{k}\""),
            ));
        }
        let field = |k: &str| obj.and_then(|o| o.get(k));
        match name {
            "jsonLogic" => {
                let params_at = join(at, "params");
                let params = field("params").filter(|p| p.get("rule").is_some());
                let params = params.ok_or_else(|| {
                    MachineError::new(
                        &params_at,
                        "the jsonLogic guard needs {\"params\": {\"rule\": <JSON Logic>}}",
                    )
                })?;
                let rule = Rule::compile(&params["rule"]).map_err(|e| {
                    MachineError::new(join(&params_at, "rule"), format!("bad JSON Logic: {e}"))
                })?;
                Ok(Guard::JsonLogic {
                    rule,
                    params: params.clone(),
                })
            }
            "xstate.and" | "xstate.or" | "xstate.not" => {
                let guards_at = join(at, "guards");
                let items = field("guards").and_then(Value::as_array).ok_or_else(|| {
                    MachineError::new(&guards_at, "a combinator needs a `guards` array")
                })?;
                let mut guards = items
                    .iter()
                    .enumerate()
                    .map(|(i, g)| self.guard(g, &format!("{guards_at}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(match name {
                    "xstate.and" => Guard::And(guards),
                    "xstate.or" => Guard::Or(guards),
                    _ if guards.len() == 1 => Guard::Not(Box::new(guards.remove(0))),
                    _ => {
                        return Err(MachineError::new(
                            guards_at,
                            "xstate.not takes exactly one guard",
                        ));
                    }
                })
            }
            reserved if reserved.starts_with("xstate.") => Err(MachineError::new(
                at,
                format!(
                    "\"{reserved}\" is reserved: the built-in guards are xstate.and, xstate.or \
                     and xstate.not"
                ),
            )),
            _ if !self.guards.contains(name) => Err(MachineError::new(
                at,
                format!("guard \"{name}\" has no implementation"),
            )),
            _ => Ok(Guard::Named {
                name: name.to_string(),
                params: field("params").cloned(),
            }),
        }
    }

    /// `after`: one timer per delay, whose transitions join `on` under XState's event type
    /// `xstate.after.<delay>.<state id>`. Keys in JavaScript's order (numbers first, ascending),
    /// which is the order XState starts the timers in.
    pub(super) fn resolve_after(
        &mut self,
        n: NodeId,
        after: &Value,
        at: &str,
    ) -> Result<(), MachineError> {
        let map = after
            .as_object()
            .ok_or_else(|| MachineError::new(at, "`after` must be an object"))?;
        let mut keys: Vec<(&String, &Value)> = map.iter().collect();
        keys.sort_by_key(|(k, _)| array_index(k).map_or(u64::MAX, u64::from));
        for (key, config) in keys {
            let key_at = join(at, key);
            let delay_ms = match numeric_delay(key) {
                Some(ms) => ms,
                None => self
                    .delays
                    .iter()
                    .find(|(name, _)| name == key)
                    .map(|(_, ms)| *ms)
                    .ok_or_else(|| {
                        MachineError::new(
                            &key_at,
                            format!(
                                "unknown delay \"{key}\": write whole milliseconds or a name \
                                 from the machine's `delays`"
                            ),
                        )
                    })?,
            };
            if let Some(i) = config
                .as_array()
                .and_then(|items| items.iter().position(Value::is_string))
            {
                // XState spreads each item of an `after` array into an object, so a bare
                // string there becomes a transition with no target: refuse rather than run it.
                return Err(MachineError::new(
                    format!("{key_at}[{i}]"),
                    "in an `after` array, write {\"target\": ...}: XState reads a bare string \
                     there as a transition with no target",
                ));
            }
            let event = format!("xstate.after.{key}.{}", self.tree.node(n).id);
            let ts = self.transitions(n, &event, config, &key_at)?;
            for &t in &ts {
                self.tree.transitions[t as usize].delay = Some(key.clone());
            }
            let timer = TimerId::try_from(self.tree.timers.len())
                .map_err(|_| MachineError::new(&key_at, "too many timers"))?;
            self.tree.timers.push(TimerDef {
                node: n,
                event: event.clone(),
                delay_ms,
            });
            let node = &mut self.tree.nodes[usize::from(n)];
            node.after.push(timer);
            match node.on.iter_mut().find(|(d, _)| *d == event) {
                Some(slot) => slot.1.extend(ts),
                None => node.on.push((event, ts)),
            }
        }
        Ok(())
    }
}
