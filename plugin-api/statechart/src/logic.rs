//! JSON Logic, the expression language of `jsonLogic` guards and `xstate.assign` actions.
//!
//! Rules are compiled once, at load, with `datalogic-rs` (a refused rule is a load error with its
//! JSON path) and evaluated over a JSON object (`{context, event}` for assignments,
//! `{context, event, params}` for guards). The machine runs in XState on the reference side,
//! where `json-logic-js` evaluates the same rules, so two JavaScript details are kept here:
//! a guard's result is read with JavaScript truthiness (`[]` and `{}` are true, as XState's
//! `if (guard(...))` sees them), and a number with no fractional part is stored as an integer
//! (JavaScript has one number type, and `JSON.stringify(3.0)` is `3`).
//!
//! Known differences from json-logic-js (pinned by a test below, so an upgrade that changes them
//! is noticed): datalogic coerces `null` to `0` in `==`/`!=` (`{"==": [0, null]}` is true; in
//! JavaScript `0 == null` is false) and in arithmetic (`{"+": [null, 1]}` is 1; JavaScript's is
//! `NaN`, printed `null`). Rules that read a field which may be missing should give it a default
//! (`{"var": ["event.input.amount", 0]}`); the differential test generates only such rules.
//!
//! This module also answers which parts of the event a rule reads (see [`EventReads`]), which is
//! what lets the server decide a guard before the whole event is known.

use std::{fmt, sync::Arc, sync::OnceLock};

use datalogic_rs::{Engine, Logic};
use serde_json::{Number, Value};

/// The one engine every rule is compiled and evaluated with (it holds only configuration).
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(Engine::new)
}

/// A compiled rule, with the JSON it came from (for diagrams) and what it reads of the event.
#[derive(Clone)]
pub(super) struct Rule {
    compiled: Arc<Logic>,
    pub(super) source: Value,
    pub(super) reads: EventReads,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rule({})", self.source)
    }
}

/// How much of the event a rule (or a guard) needs, ordered: a rule that needs less can be
/// decided earlier. `event.type` is always known, so reading it counts as [`EventReads::Type`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventReads {
    /// Only `context`, `params` and `event.type`.
    Type,
    /// Also `event.input` (the tool call's arguments).
    Input,
    /// Also `event.output`, or the event as a whole, or a path computed at run time.
    Everything,
}

/// A JSON Logic condition of the host's own, outside any machine (a tool's `confirm.when`):
/// compiled once, true when its result is JavaScript-truthy, as a guard's is.
#[derive(Clone, Debug)]
pub struct Condition(Rule);

impl Condition {
    /// Compiles `source`; the error names the problem.
    pub fn compile(source: &Value) -> Result<Condition, String> {
        Rule::compile(source).map(Condition)
    }

    /// Whether the condition holds over `data` (an evaluation error: it does not).
    pub fn holds(&self, data: &Value) -> bool {
        self.0.eval(data).is_some_and(|value| js_truthy(&value))
    }
}

impl Rule {
    /// Compiles `source`; the error names the problem (datalogic's message, or an operator
    /// json-logic-js does not have).
    pub(super) fn compile(source: &Value) -> Result<Rule, String> {
        check_operators(source)?;
        let compiled = engine().compile(source).map_err(|e| e.to_string())?;
        Ok(Rule {
            compiled: Arc::new(compiled),
            source: source.clone(),
            reads: reads_of(source),
        })
    }

    /// Evaluates the rule over `data`. An evaluation error (e.g. arithmetic on an object) is
    /// `None`; callers treat it as a false guard or a `null` assignment.
    pub(super) fn eval(&self, data: &Value) -> Option<Value> {
        let mut session = engine().session();
        session
            .eval_into::<Value, _>(&self.compiled, data)
            .ok()
            .map(normalize_numbers)
    }
}

/// The operators of json-logic-js (the reference implementation, which the XState side of the
/// differential test runs), less `log` and `method` (side effects, JavaScript methods). datalogic
/// has more; accepting only these keeps a rule meaning the same on both sides.
const OPERATORS: &[&str] = &[
    "var",
    "missing",
    "missing_some",
    "if",
    "?:",
    "==",
    "===",
    "!=",
    "!==",
    "!",
    "!!",
    "or",
    "and",
    ">",
    ">=",
    "<",
    "<=",
    "%",
    "+",
    "-",
    "*",
    "/",
    "min",
    "max",
    "in",
    "cat",
    "substr",
    "merge",
    "map",
    "filter",
    "reduce",
    "all",
    "none",
    "some",
];

/// Refuses an operator json-logic-js does not know (datalogic would accept some as its own
/// extensions, and evaluate others to an error only at run time). As in json-logic-js, an
/// object with exactly one key is an operation; anything else is data.
fn check_operators(rule: &Value) -> Result<(), String> {
    match rule {
        Value::Array(items) => items.iter().try_for_each(check_operators),
        Value::Object(map) if map.len() == 1 => {
            let (op, args) = map
                .iter()
                .next()
                .unwrap_or_else(|| unreachable!("len is 1"));
            if !OPERATORS.contains(&op.as_str()) {
                return Err(format!("unknown operator \"{op}\""));
            }
            check_operators(args)
        }
        Value::Object(_) => Err(
            "an object in a rule is an operation with exactly one key (write data as a \
             string, number, boolean or array)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// JavaScript's truthiness of a JSON value (`if (value)`).
pub(super) fn js_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Integral floats become integers (and `-0` becomes `0`), recursively, as JavaScript prints them.
fn normalize_numbers(v: Value) -> Value {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER => {
                // The bounds check above makes the cast exact.
                Value::Number(Number::from(f as i64))
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(normalize_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, normalize_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Operators whose operands name data paths, like `var` does.
const PATH_OPERATORS: &[&str] = &["var", "missing", "missing_some", "val", "exists"];

/// What a rule reads of `event`: the largest need of every data path it names. A path that is
/// not a literal string (computed at run time) or the whole data (`""`) needs everything.
fn reads_of(rule: &Value) -> EventReads {
    match rule {
        Value::Array(items) => items.iter().map(reads_of).max().unwrap_or(EventReads::Type),
        Value::Object(map) => map
            .iter()
            .map(|(op, args)| {
                if PATH_OPERATORS.contains(&op.as_str()) {
                    paths_read(args)
                } else {
                    reads_of(args)
                }
            })
            .max()
            .unwrap_or(EventReads::Type),
        _ => EventReads::Type,
    }
}

/// The operands of a path operator: a path, `[path, default]`, `[min, [paths]]` for
/// `missing_some`, or a list of paths.
fn paths_read(args: &Value) -> EventReads {
    match args {
        Value::String(path) => path_reads(path),
        Value::Number(_) | Value::Null => EventReads::Everything,
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(path) => path_reads(path),
                Value::Array(_) => paths_read(item),
                // A default value or a `missing_some` count reads nothing by itself, but a rule
                // in that place is computed at run time.
                Value::Number(_) | Value::Bool(_) | Value::Null => EventReads::Type,
                _ => EventReads::Everything,
            })
            .max()
            .unwrap_or(EventReads::Everything),
        _ => EventReads::Everything,
    }
}

/// The need of one literal data path (`"event.input.amount"`).
fn path_reads(path: &str) -> EventReads {
    let mut segments = path.split('.');
    match segments.next() {
        Some("event") => match segments.next() {
            Some("type") => EventReads::Type,
            Some("input") => EventReads::Input,
            _ => EventReads::Everything,
        },
        Some("") => EventReads::Everything,
        _ => EventReads::Type,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn evaluates_over_context_and_event() {
        let r = Rule::compile(&json!({">": [{"var": "event.input.amount"}, 10000]})).unwrap();
        let data = json!({"context": {}, "event": {"type": "SUBMIT", "input": {"amount": 20000}}});
        assert_eq!(r.eval(&data), Some(json!(true)));
        assert_eq!(
            Rule::compile(&json!({"no_such_operator": [1]})).unwrap_err(),
            "unknown operator \"no_such_operator\""
        );
        assert!(Rule::compile(&json!({"if": [{"a": 1, "b": 2}, 1, 2]})).is_err());
    }

    #[test]
    fn integral_results_are_integers() {
        let r = Rule::compile(&json!({"*": [{"var": "x"}, 1.5]})).unwrap();
        assert_eq!(r.eval(&json!({"x": 2})), Some(json!(3)));
        assert_eq!(r.eval(&json!({"x": 1})), Some(json!(1.5)));
    }

    #[test]
    fn javascript_truthiness() {
        for v in [json!(null), json!(false), json!(0), json!(""), json!(0.0)] {
            assert!(!js_truthy(&v), "{v}");
        }
        for v in [json!([]), json!({}), json!("0"), json!(-1), json!(true)] {
            assert!(js_truthy(&v), "{v}");
        }
    }

    #[test]
    fn null_coercion_differs_from_json_logic_js() {
        let eval = |r: Value| Rule::compile(&r).unwrap().eval(&json!({}));
        // json-logic-js: false and null; see the module doc.
        assert_eq!(eval(json!({"==": [0, null]})), Some(json!(true)));
        assert_eq!(eval(json!({"+": [null, 1]})), Some(json!(1)));
        // Where both agree.
        assert_eq!(eval(json!({"==": [null, null]})), Some(json!(true)));
        assert_eq!(eval(json!({"<": [null, 1]})), Some(json!(true)));
    }

    #[test]
    fn event_reads() {
        let reads = |r: Value| Rule::compile(&r).unwrap().reads;
        assert_eq!(
            reads(json!({"<": [{"var": "context.n"}, 3]})),
            EventReads::Type
        );
        assert_eq!(
            reads(json!({"==": [{"var": "event.type"}, "A"]})),
            EventReads::Type
        );
        assert_eq!(
            reads(json!({"and": [{"var": "event.input.a"}, {"var": "context.b"}]})),
            EventReads::Input
        );
        assert_eq!(
            reads(json!({"var": "event.output.ok"})),
            EventReads::Everything
        );
        assert_eq!(reads(json!({"var": "event"})), EventReads::Everything);
        assert_eq!(reads(json!({"var": ""})), EventReads::Everything);
        assert_eq!(
            reads(json!({"var": {"cat": ["event.", "input"]}})),
            EventReads::Everything
        );
        assert_eq!(
            reads(json!({"missing": ["event.input.a"]})),
            EventReads::Input
        );
        assert_eq!(reads(json!(true)), EventReads::Type);
    }
}
