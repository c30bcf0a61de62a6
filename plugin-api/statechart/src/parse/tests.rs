//! One test per refusal, checking the whole message (`"<json path>: <reason>"`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::{Event, Guards, Machine};

/// Implements only `isLarge`.
struct OneGuard;

impl Guards for OneGuard {
    fn contains(&self, name: &str) -> bool {
        name == "isLarge"
    }

    fn eval(&self, _: &str, _: Option<&Value>, _: &Event) -> bool {
        true
    }
}

fn refusal(def: Value) -> String {
    match Machine::from_json_with_guards(&def, Arc::new(OneGuard)) {
        Ok(_) => panic!("machine was accepted: {def}"),
        Err(e) => e.to_string(),
    }
}

/// `{"initial":"a","states":{"a": <a>, "b": {}}}`
fn with_a(a: Value) -> Value {
    json!({"initial": "a", "states": {"a": a, "b": {}}})
}

#[test]
fn unknown_target() {
    let def =
        json!({"initial":"draft","states":{"draft":{},"review":{"on":{"APPROVE":"aproved"}}}});
    assert_eq!(
        refusal(def),
        "states.review.on.APPROVE: unknown target \"aproved\""
    );
}

#[test]
fn unknown_target_in_candidate_array() {
    let def = with_a(json!({"on":{"GO":["b", {"target":"#nope"}]}}));
    assert_eq!(refusal(def), "states.a.on.GO[1]: unknown target \"#nope\"");
}

#[test]
fn bare_target_on_root() {
    let def = json!({"initial":"a","on":{"GO":"a"},"states":{"a":{}}});
    assert_eq!(
        refusal(def),
        "on.GO: \"a\" is not a valid target from the root node; did you mean \".a\"?"
    );
}

#[test]
fn compound_without_initial() {
    let def = json!({"initial":"a","states":{"a":{"states":{"x":{}}}}});
    assert_eq!(
        refusal(def),
        "states.a: a compound state needs `initial` (XState v5 refuses it too)"
    );
}

#[test]
fn unknown_initial() {
    let def = json!({"initial":"nope","states":{"a":{}}});
    assert_eq!(refusal(def), "initial: unknown initial state \"nope\"");
}

#[test]
fn initial_on_atomic_state() {
    let def = with_a(json!({"initial":"x"}));
    assert_eq!(
        refusal(def),
        "states.a.initial: `initial` on a state without child states"
    );
}

#[test]
fn v4_cond() {
    let def = with_a(json!({"on":{"GO":{"target":"b","cond":"isLarge"}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.cond: `cond` is XState v4; use `guard`"
    );
}

#[test]
fn v4_empty_event_key() {
    let def = with_a(json!({"on":{"":"b"}}));
    assert_eq!(
        refusal(def),
        "states.a.on: the \"\" event key is XState v4; use `always` for eventless transitions"
    );
}

#[test]
fn v4_null_transition() {
    let def = with_a(json!({"on":{"GO":null}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO: a null transition is XState v4; write {} (a targetless transition) to \
         forbid an event"
    );
}

#[test]
fn v4_internal_and_keys() {
    let def = with_a(json!({"on":{"GO":{"target":"b","internal":false}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.internal: `internal` is XState v4; use `reenter`"
    );
    let def = with_a(json!({"onEntry":"log"}));
    assert_eq!(
        refusal(def),
        "states.a.onEntry: XState v4 key; v5 uses `entry`, and Turnstile runs no actions"
    );
}

#[test]
fn guard_without_implementation() {
    let def = with_a(json!({"on":{"GO":{"target":"b","guard":"isSmall"}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard: guard \"isSmall\" has no implementation"
    );
    let def = with_a(json!({"always":{"target":"b","guard":{"type":"and","params":[]}}}));
    assert_eq!(
        refusal(def),
        "states.a.always.guard: guard \"and\" has no implementation"
    );
    let ok =
        with_a(json!({"on":{"GO":{"target":"b","guard":{"type":"isLarge","params":{"n":1}}}}}));
    assert!(Machine::from_json_with_guards(&ok, Arc::new(OneGuard)).is_ok());
    assert!(
        Machine::from_json(&ok).is_err(),
        "NoGuards implements nothing"
    );
}

#[test]
fn delayed_transitions() {
    let def = with_a(json!({"after":{"soon":"b"}}));
    assert_eq!(
        refusal(def),
        "states.a.after.soon: unknown delay \"soon\": write whole milliseconds or a name from \
         the machine's `delays`"
    );
    let def = json!({"delays":{"soon":"1s"},"initial":"a","states":{"a":{}}});
    assert_eq!(
        refusal(def),
        "delays.soon: a delay is a whole number of milliseconds"
    );
    let def = with_a(json!({"after":{"10":["b"]}}));
    assert_eq!(
        refusal(def),
        "states.a.after.10[0]: in an `after` array, write {\"target\": ...}: XState reads a bare \
         string there as a transition with no target"
    );
    let ok = json!({"delays":{"soon":5},"initial":"a","states":{"a":{"after":{"soon":"b","1000":"b"}},"b":{}}});
    assert!(Machine::from_json(&ok).is_ok());
}

#[test]
fn actions_entry_exit_invoke_context() {
    let def = with_a(json!({"entry":["notify"]}));
    assert_eq!(
        refusal(def),
        "states.a.entry[0]: only {\"type\": \"xstate.assign\", \"params\": {...}} actions are \
         supported (tools carry the effects)"
    );
    let def = with_a(json!({"on":{"GO":{"target":"b","actions":"notify"}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.actions: only {\"type\": \"xstate.assign\", \"params\": {...}} actions \
         are supported (tools carry the effects)"
    );
    let def = with_a(json!({"exit":{"type":"xstate.assign","params":{"n":{"plus":[1]}}}}));
    assert_eq!(
        refusal(def),
        "states.a.exit.params.n: bad JSON Logic: unknown operator \"plus\""
    );
    let def = with_a(json!({"invoke":{"src":"fetch"}}));
    assert_eq!(
        refusal(def),
        "states.a.invoke: invoked actors are not supported"
    );
    let def = json!({"context":[1],"initial":"a","states":{"a":{}}});
    assert_eq!(
        refusal(def),
        "context: `context` must be a JSON object (assignments set its keys)"
    );
    // Empty ones are harmless and common in exported machines.
    let ok = json!({"context":{"n":1},"initial":"a","states":{"a":{"entry":[],"exit":[],
        "on":{"GO":{"target":"a","actions":[{"type":"xstate.assign","params":{"n":1}}]}}}}});
    assert!(Machine::from_json(&ok).is_ok());
}

#[test]
fn guard_refusals() {
    let def = with_a(
        json!({"on":{"GO":{"target":"b","guard":{"type":"jsonLogic","params":{"rule":{"bogus":[]}}}}}}),
    );
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard.params.rule: bad JSON Logic: unknown operator \"bogus\""
    );
    let def = with_a(
        json!({"on":{"GO":{"target":"b","guard":{"type":"xstate.and","guards":["isLarge","isSmall"]}}}}),
    );
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard.guards[1]: guard \"isSmall\" has no implementation"
    );
    let def = with_a(
        json!({"on":{"GO":{"target":"b","guard":{"type":"xstate.not","guards":["isLarge","isLarge"]}}}}),
    );
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard.guards: xstate.not takes exactly one guard"
    );
    let def = with_a(json!({"on":{"GO":{"target":"b","guard":"xstate.every"}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard: \"xstate.every\" is reserved: the built-in guards are xstate.and, \
         xstate.or and xstate.not"
    );
    let def = with_a(json!({"on":{"GO":{"target":"b","guard":{"type":"jsonLogic"}}}}));
    assert_eq!(
        refusal(def),
        "states.a.on.GO.guard.params: the jsonLogic guard needs {\"params\": {\"rule\": <JSON \
         Logic>}}"
    );
}

#[test]
fn eventless_cycles_are_not_refused() {
    // XState runs these (the guard or an unchanged snapshot ends them); only a cycle in the
    // initial step, which XState's actor fails on at start, is refused.
    let def = json!({"initial":"a","states":{"a":{"on":{"GO":"b"}},
        "b":{"always":{"target":"c","guard":"isLarge"}},"c":{"always":"b"}}});
    assert!(Machine::from_json_with_guards(&def, Arc::new(OneGuard)).is_ok());
    let def = json!({"initial":"a","states":{"a":{"always":"b"},"b":{"always":"a"}}});
    assert_eq!(
        refusal(def),
        "(root): the initial state does not settle: more than 1000 eventless microsteps"
    );
}

#[test]
fn unknown_key_and_bad_type() {
    let def = with_a(json!({"intial":"x"}));
    assert_eq!(refusal(def), "states.a.intial: unsupported key \"intial\"");
    let def = with_a(json!({"type":"choice"}));
    assert_eq!(refusal(def), "states.a.type: unknown state type \"choice\"");
}

#[test]
fn bad_state_keys_and_duplicate_ids() {
    let def = json!({"initial":"a","states":{"a.b":{}}});
    assert_eq!(
        refusal(def),
        "states.a.b: a state key must be non-empty and contain no '.' or leading '#'"
    );
    let def = json!({"initial":"a","states":{"a":{"id":"x"},"b":{"id":"x"}}});
    assert_eq!(refusal(def), "states.b: duplicate state id \"x\"");
}

#[test]
fn structural_refusals() {
    let def = with_a(json!({"type":"parallel"}));
    assert_eq!(
        refusal(def),
        "states.a: a parallel state needs at least one region"
    );
    let def = with_a(json!({"type":"final","states":{"x":{}}}));
    assert_eq!(
        refusal(def),
        "states.a: only compound and parallel states can have child states"
    );
    let def = json!({"type":"final"});
    assert_eq!(
        refusal(def),
        "type: the machine root cannot be a final or history state"
    );
    assert_eq!(
        refusal(json!([])),
        "(root): a machine definition is a JSON object"
    );
}

#[test]
fn history_refusals() {
    let def = json!({"initial":"a","states":{"a":{},"h":{"type":"history","target":"zzz"}}});
    assert_eq!(
        refusal(def),
        "states.h.target: unknown history target \"zzz\""
    );
    let def = json!({"initial":"a","states":{"a":{},"h":{"type":"history","on":{"X":"a"}}}});
    assert_eq!(
        refusal(def),
        "states.h.on: a history state cannot have transitions, actions or an initial state"
    );
}

#[test]
fn targets_that_cannot_be_active_together() {
    let def =
        json!({"initial":"a","states":{"a":{"on":{"GO":{"target":["b","c"]}}},"b":{},"c":{}}});
    assert_eq!(
        refusal(def),
        "states.a.on.GO: targets \"b\" and \"c\" cannot be active together"
    );
}
