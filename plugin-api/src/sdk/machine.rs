//! The outline of an XState v5 JSON machine: its states and the events each one listens to,
//! enough to check a tool's binding when the plugin's manifest is built.
//!
//! The host checks every manifest again when it loads the plugin, with its full statechart
//! engine; this outline exists so that a typo in a state or event name fails the plugin's own
//! unit tests instead of a deployment. It follows the host's rules for naming a state (a dot path
//! from the root, `"review"` or `"payment.card"`, or `"#id.rest"`) and for matching an event
//! (exact, `"*"`, or a `"prefix.*"` wildcard), and does not interpret anything else: no guards,
//! no targets, no timers.

use serde_json::{Map, Value};

/// One state of the machine (index 0 is the root).
#[derive(Debug)]
struct Node {
    /// Dot path from the root (`""` for the root itself).
    path: String,
    /// `#`-addressable id: the `id` the JSON gives, else XState's default `machine.path`.
    id: String,
    parent: Option<usize>,
    parallel: bool,
    history: bool,
    /// The `on` keys with at least one transition.
    listens: Vec<String>,
}

/// The states of one machine and what they listen to.
#[derive(Debug)]
pub(crate) struct Outline {
    id: String,
    nodes: Vec<Node>,
}

impl Outline {
    /// Reads the machine's JSON; `Err` says what is missing for it to be a machine at all.
    pub(crate) fn parse(machine: &Value) -> Result<Outline, String> {
        let Some(config) = machine.as_object() else {
            return Err("a workflow machine must be a JSON object".to_owned());
        };
        let Some(id) = config.get("id").and_then(Value::as_str) else {
            return Err("a workflow machine needs a string \"id\"".to_owned());
        };
        let mut outline = Outline {
            id: id.to_owned(),
            nodes: Vec::new(),
        };
        outline.add(config, String::new(), None)?;
        Ok(outline)
    }

    /// The machine's `id`, which tools name as their workflow.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    fn add(
        &mut self,
        config: &Map<String, Value>,
        path: String,
        parent: Option<usize>,
    ) -> Result<(), String> {
        let default_id = if path.is_empty() {
            self.id.clone()
        } else {
            format!("{}.{path}", self.id)
        };
        let kind = config.get("type").and_then(Value::as_str);
        let index = self.nodes.len();
        self.nodes.push(Node {
            id: config
                .get("id")
                .and_then(Value::as_str)
                .map_or(default_id, str::to_owned),
            path: path.clone(),
            parent,
            parallel: kind == Some("parallel"),
            history: kind == Some("history"),
            listens: listens(config.get("on")),
        });
        match config.get("states") {
            None => Ok(()),
            Some(Value::Object(states)) => {
                for (name, child) in states {
                    let Value::Object(child) = child else {
                        return Err(format!("state \"{name}\" must be a JSON object"));
                    };
                    let child_path = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    self.add(child, child_path, Some(index))?;
                }
                Ok(())
            }
            Some(_) => Err(format!(
                "\"states\" of {} must be a JSON object",
                if path.is_empty() {
                    "the machine"
                } else {
                    &path
                }
            )),
        }
    }

    /// The state a binding names: a dot path from the root, or `#id` with an optional path.
    fn lookup(&self, name: &str) -> Option<usize> {
        let (start, rest) = match name.strip_prefix('#') {
            Some(reference) => {
                let (id, rest) = reference.split_once('.').unwrap_or((reference, ""));
                (self.nodes.iter().position(|node| node.id == id)?, rest)
            }
            None if name.is_empty() => return None,
            None => (0, name),
        };
        let path = match (self.nodes[start].path.as_str(), rest) {
            (base, "") => base.to_owned(),
            ("", rest) => rest.to_owned(),
            (base, rest) => format!("{base}.{rest}"),
        };
        let found = self.nodes.iter().position(|node| node.path == path)?;
        (found != 0 || name.starts_with('#')).then_some(found)
    }

    /// Whether `name` names a state a tool can be bound to (not the root, not a history state).
    pub(crate) fn has_state(&self, name: &str) -> bool {
        self.lookup(name)
            .is_some_and(|node| node != 0 && !self.nodes[node].history)
    }

    /// Whether some state of the machine listens to `event`.
    pub(crate) fn accepts_event(&self, event: &str) -> bool {
        self.nodes.iter().any(|node| node.listens_to(event))
    }

    /// Whether `event` can do anything while `state` is active: some state that may be active
    /// at the same time listens to it. Those are `state`'s ancestors and descendants, and, inside
    /// a parallel state, everything under the outermost parallel ancestor (its other regions).
    pub(crate) fn accepts_event_in(&self, state: &str, event: &str) -> bool {
        let Some(node) = self.lookup(state) else {
            return false;
        };
        let ancestors: Vec<usize> =
            std::iter::successors(Some(node), |&n| self.nodes[n].parent).collect();
        let scope = ancestors
            .iter()
            .rev()
            .find(|&&n| self.nodes[n].parallel)
            .copied()
            .unwrap_or(node);
        ancestors
            .iter()
            .chain(self.subtree(scope).iter())
            .any(|&n| self.nodes[n].listens_to(event))
    }

    /// `root` and every state under it.
    fn subtree(&self, root: usize) -> Vec<usize> {
        let mut found = vec![root];
        let mut next = 0;
        while next < found.len() {
            let parent = found[next];
            found.extend((0..self.nodes.len()).filter(|&n| self.nodes[n].parent == Some(parent)));
            next += 1;
        }
        found
    }
}

impl Node {
    fn listens_to(&self, event: &str) -> bool {
        self.listens
            .iter()
            .any(|descriptor| matches_descriptor(event, descriptor))
    }
}

/// The `on` keys that lead somewhere: a key mapped to `[]` or `null` forbids the event instead.
fn listens(on: Option<&Value>) -> Vec<String> {
    let Some(Value::Object(on)) = on else {
        return Vec::new();
    };
    on.iter()
        .filter(|(_, transitions)| match transitions {
            Value::Null => false,
            Value::Array(transitions) => !transitions.is_empty(),
            _ => true,
        })
        .map(|(descriptor, _)| descriptor.clone())
        .collect()
}

/// XState's event descriptors: the exact type, `"*"` for any, or `"a.b.*"` for `a.b` and any
/// event type below it (`a.b.c`).
fn matches_descriptor(event: &str, descriptor: &str) -> bool {
    if descriptor == event || descriptor == "*" {
        return true;
    }
    let Some(prefix) = descriptor.strip_suffix(".*") else {
        return false;
    };
    event == prefix
        || event
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checkout() -> Outline {
        Outline::parse(&json!({
            "id": "checkout",
            "initial": "cart",
            "on": {"RESET": ".cart"},
            "states": {
                "cart": {"on": {"PAY": "paying"}},
                "paying": {
                    "type": "parallel",
                    "states": {
                        "card": {"id": "card", "initial": "entering", "states": {
                            "entering": {"on": {"card.*": "entering"}},
                            "hist": {"type": "history"}
                        }},
                        "address": {"on": {"ADDRESS": {"target": "address"}, "NOPE": []}}
                    }
                },
                "done": {"type": "final"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn states_are_named_by_path_or_by_id() {
        let machine = checkout();
        assert_eq!(machine.id(), "checkout");
        for name in [
            "cart",
            "paying.card.entering",
            "#card",
            "#card.entering",
            "#checkout.cart",
        ] {
            assert!(machine.has_state(name), "{name}");
        }
        for name in [
            "",
            "#checkout",
            "carts",
            "paying.card.hist",
            "entering",
            "cart.",
        ] {
            assert!(!machine.has_state(name), "{name}");
        }
    }

    #[test]
    fn an_event_counts_where_a_state_that_can_be_active_listens_to_it() {
        let machine = checkout();
        assert!(machine.accepts_event("PAY") && machine.accepts_event("card.number"));
        assert!(!machine.accepts_event("NOPE") && !machine.accepts_event("cardx"));
        assert!(machine.accepts_event_in("cart", "PAY"));
        assert!(!machine.accepts_event_in("done", "PAY"));
        // The root listens in every state; a parallel state's other region does too.
        assert!(machine.accepts_event_in("done", "RESET"));
        assert!(machine.accepts_event_in("paying.card.entering", "ADDRESS"));
        assert!(machine.accepts_event_in("paying", "card.cvc"));
    }

    #[test]
    fn what_is_not_a_machine_is_named() {
        assert!(
            Outline::parse(&json!({"states": {}}))
                .unwrap_err()
                .contains("\"id\"")
        );
        assert!(
            Outline::parse(&json!({"id": "m", "states": {"a": 1}}))
                .unwrap_err()
                .contains("\"a\"")
        );
    }
}
