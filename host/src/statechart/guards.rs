//! Guard implementations supplied by the caller.
//!
//! A machine names its guards (`guard: "isLarge"` or `{type: "isLarge", params: {...}}`); the
//! code behind the names comes from a [`Guards`] implementation given to
//! [`super::Machine::from_json_with_guards`]. A named guard with no implementation is refused at
//! load. Turnstile machines have no context, so a guard sees only its params and the event.
//!
//! XState's `and`/`or`/`not` combinators are JavaScript functions with no JSON form in XState
//! itself (a JSON `{type: "and"}` is looked up as a guard *named* `and`), so they get no special
//! treatment here either: to use them, implement guards with those names.

use serde_json::Value;

use super::event::Event;

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
}

/// No guards at all: any machine naming a guard is refused.
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
