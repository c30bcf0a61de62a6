//! Guards: the caller's named guards ([`Guards`]) and the evaluation of every guard a machine
//! may write: named ones, the built-in `jsonLogic`, and XState v5's `xstate.and`, `xstate.or`
//! and `xstate.not`.
//!
//! A named guard (`guard: "isLarge"` or `{type: "isLarge", params: {...}}`) is implemented by a
//! [`Guards`] given to [`super::Machine::from_json_with_guards`]; one with no implementation is
//! refused at load. Names starting with `xstate.` are reserved.
//!
//! The combinators are JavaScript functions in XState (`and([...])`); their JSON form here is
//! `{"type": "xstate.and" | "xstate.or", "guards": [...]}` and
//! `{"type": "xstate.not", "guards": [guard]}`, and the differential test builds XState's
//! functions from it.
//!
//! Besides deciding a guard (XState's semantics, the whole event known), this module decides
//! one when only part of the event is known ([`Known`]): a guard that needs more than is known is
//! *possibly true*, and the combinators combine in three-valued logic.

use serde_json::{Value, json};

use super::{
    event::Event,
    logic::{EventReads, js_truthy},
    tree::Guard,
};

/// The caller's guard implementations.
///
/// Contract: `eval` is only called with names for which `contains` returned true at load, must be
/// pure (same answer for the same name, params and event) and must not panic. The engine relies
/// on purity: it evaluates guards while computing a step and may evaluate one more than once.
pub trait Guards {
    /// Whether a guard with this name is implemented.
    fn contains(&self, name: &str) -> bool;
    /// Evaluates the guard `name` with the params written in the machine (if any) for `event`.
    fn eval(&self, name: &str, params: Option<&Value>, event: &Event) -> bool;
    /// Evaluates the guard with the instance's context too. The engine calls this one; the
    /// default ignores the context, for implementations written before machines had one.
    fn check(&self, name: &str, params: Option<&Value>, context: &Value, event: &Event) -> bool {
        let _ = context;
        self.eval(name, params, event)
    }
}

/// No guards at all: any machine naming a guard other than the built-in ones is refused.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGuards;

impl Guards for NoGuards {
    fn contains(&self, _name: &str) -> bool {
        false
    }

    fn eval(&self, _name: &str, _params: Option<&Value>, _event: &Event) -> bool {
        false
    }
}

/// What is known of an event whose type is known, for [`super::Machine::may_take`].
#[derive(Clone, Copy, Debug)]
pub enum Known<'a> {
    /// Only its type (e.g. when listing tools: the call has not been made).
    TypeOnly,
    /// Its type and `input` (the call's arguments, before the plugin runs).
    Input(&'a Value),
    /// The whole event (after the plugin ran).
    Everything(&'a Event),
}

/// Evaluates `guard` over `context` and `event`, as XState does.
pub(super) fn passes(guards: &dyn Guards, guard: &Guard, context: &Value, event: &Event) -> bool {
    match guard {
        Guard::Named { name, params } => guards.check(name, params.as_ref(), context, event),
        Guard::JsonLogic { rule, params } => {
            let data = json!({"context": context, "event": event.to_json(), "params": params});
            rule.eval(&data).is_some_and(|v| js_truthy(&v))
        }
        Guard::And(gs) => gs.iter().all(|g| passes(guards, g, context, event)),
        Guard::Or(gs) => gs.iter().any(|g| passes(guards, g, context, event)),
        Guard::Not(g) => !passes(guards, g, context, event),
    }
}

/// Evaluates `guard` with part of the event known: `None` is "possibly true or false", for a
/// guard that reads more than is known.
pub(super) fn decide(
    guards: &dyn Guards,
    guard: &Guard,
    context: &Value,
    event_type: &str,
    known: Known<'_>,
) -> Option<bool> {
    let (event, knows) = match known {
        Known::Everything(e) => {
            return Some(passes(guards, guard, context, e));
        }
        Known::TypeOnly => (Event::new(event_type), EventReads::Type),
        Known::Input(input) => (
            Event::with_call(event_type, Some(input.clone()), None),
            EventReads::Input,
        ),
    };
    decide_partial(guards, guard, context, &event, knows)
}

fn decide_partial(
    guards: &dyn Guards,
    guard: &Guard,
    context: &Value,
    event: &Event,
    knows: EventReads,
) -> Option<bool> {
    match guard {
        Guard::And(gs) => {
            let mut all = Some(true);
            for g in gs {
                match decide_partial(guards, g, context, event, knows) {
                    Some(false) => return Some(false),
                    None => all = None,
                    Some(true) => {}
                }
            }
            all
        }
        Guard::Or(gs) => {
            let mut any = Some(false);
            for g in gs {
                match decide_partial(guards, g, context, event, knows) {
                    Some(true) => return Some(true),
                    None => any = None,
                    Some(false) => {}
                }
            }
            any
        }
        Guard::Not(g) => decide_partial(guards, g, context, event, knows).map(|b| !b),
        leaf if leaf.reads() <= knows => Some(passes(guards, leaf, context, event)),
        _ => None,
    }
}
