//! Unit tests of the public API on small machines.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

fn invoice() -> Value {
    json!({"id":"invoice","initial":"draft","states":{
        "draft":{"on":{"SUBMIT":"review"}},
        "review":{"on":{"APPROVE":"approved","REJECT":"draft"}},
        "approved":{"on":{"DISCHARGE":"discharged"}},
        "discharged":{"type":"final"}}})
}

fn step(m: &Machine, s: &Snapshot, e: &str) -> Step {
    m.transition(s, &Event::new(e))
}

#[test]
fn invoice_flows_to_done() {
    let m = Machine::from_json(&invoice()).unwrap();
    assert_eq!(m.id(), "invoice");
    let s0 = m.initial_snapshot();
    assert_eq!(s0.value(), json!("draft"));
    assert!(m.is_initial(&s0));
    let ignored = step(&m, &s0, "APPROVE");
    assert!(!ignored.changed);
    assert_eq!(ignored.snapshot, s0);
    let s1 = step(&m, &s0, "SUBMIT");
    assert!(s1.changed);
    assert_eq!(s1.snapshot.value(), json!("review"));
    assert!(s1.snapshot.matches("review"));
    assert!(!s1.snapshot.matches("draft"));
    assert!(!m.is_initial(&s1.snapshot));
    let s2 = step(&m, &s1.snapshot, "APPROVE");
    let s3 = step(&m, &s2.snapshot, "DISCHARGE");
    assert_eq!(s3.snapshot.value(), json!("discharged"));
    assert_eq!(s3.snapshot.status(), Status::Done);
    let after = step(&m, &s3.snapshot, "SUBMIT");
    assert!(!after.changed);
    assert_eq!(after.snapshot.status(), Status::Done);
}

#[test]
fn queries() {
    let m = Machine::from_json(&invoice()).unwrap();
    assert!(m.has_state("review"));
    assert!(m.has_state("#invoice.review"));
    assert!(!m.has_state("nope"));
    assert!(!m.has_state(""));
    assert!(m.accepts_event("SUBMIT"));
    assert!(!m.accepts_event("PAY"));
    assert_eq!(
        m.state_paths(),
        vec!["draft", "review", "approved", "discharged"]
    );
}

#[test]
fn nested_values_and_matches() {
    let m = Machine::from_json(&json!({"id":"m","initial":"review","states":{
        "review":{"initial":"pending","states":{"pending":{"on":{"OK":"done"}},"done":{"type":"final"}},
                  "onDone":"closed"},
        "closed":{"type":"parallel","states":{"a":{},"b":{"initial":"x","states":{"x":{}}}}}}}))
    .unwrap();
    let s0 = m.initial_snapshot();
    assert_eq!(s0.value(), json!({"review":"pending"}));
    assert!(s0.matches("review"));
    assert!(s0.matches("review.pending"));
    assert!(s0.matches("#m.review.pending"));
    let s1 = step(&m, &s0, "OK").snapshot;
    assert_eq!(s1.value(), json!({"closed":{"a":{},"b":"x"}}));
    assert!(s1.matches("closed.b.x"));
}

#[test]
fn persisted_round_trip_and_rejection() {
    let m = Machine::from_json(&invoice()).unwrap();
    let s = step(&m, &m.initial_snapshot(), "SUBMIT").snapshot;
    let p = s.to_persisted();
    assert_eq!(p["value"], json!("review"));
    assert_eq!(p["status"], json!("active"));
    assert_eq!(m.restore(&p).unwrap(), s);
    let bad = json!({"value":"gone","status":"active"});
    assert_eq!(
        m.restore(&bad).unwrap_err().to_string(),
        "value: unknown state \"gone\""
    );
    // A snapshot of another Machine value with the same definition still steps.
    let m2 = Machine::from_json(&invoice()).unwrap();
    assert!(step(&m2, &s, "APPROVE").changed);
}

#[test]
fn guards_are_called_with_params_and_event() {
    struct Flag;
    impl Guards for Flag {
        fn contains(&self, name: &str) -> bool {
            name == "flag"
        }
        fn eval(&self, _: &str, params: Option<&Value>, event: &Event) -> bool {
            let want = params.and_then(|p| p.get("want")).cloned();
            event.field("flag").cloned() == want
        }
    }
    let def = json!({"initial":"a","states":{"a":{"on":{"GO":[
        {"target":"b","guard":{"type":"flag","params":{"want":true}}},
        {"target":"c"}]}},"b":{},"c":{}}});
    let m = Machine::from_json_with_guards(&def, Arc::new(Flag)).unwrap();
    let s0 = m.initial_snapshot();
    let yes = m.transition(&s0, &Event::with_payload("GO", json!({"flag": true})));
    assert_eq!(yes.snapshot.value(), json!("b"));
    let no = m.transition(&s0, &Event::new("GO"));
    assert_eq!(no.snapshot.value(), json!("c"));
}

#[test]
fn document_order_is_preserved() {
    // Fails when serde_json is built without its `preserve_order` feature, which the host must
    // enable: without it JSON objects arrive with sorted keys, and a machine's document order
    // (region order, state order) is lost before the engine sees it. See the module doc.
    let v: Value = serde_json::from_str(r#"{"b":1,"a":2}"#).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["b", "a"]);
}

#[test]
fn machine_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Machine>();
    assert_send_sync::<Snapshot>();
}

#[test]
fn history_survives_persistence() {
    let m = Machine::from_json(&json!({"id":"h","initial":"work","states":{
        "work":{"initial":"a","on":{"PAUSE":"paused"},"states":{
            "a":{"on":{"NEXT":"b"}},"b":{},"hist":{"type":"history"}}},
        "paused":{"on":{"RESUME":"work.hist"}}}}))
    .unwrap();
    let s = step(&m, &m.initial_snapshot(), "NEXT").snapshot;
    let paused = step(&m, &s, "PAUSE").snapshot;
    let p = paused.to_persisted();
    assert_eq!(
        p["historyValue"],
        json!({"h.work.hist": [{"id": "h.work.b"}]})
    );
    let restored = m.restore(&p).unwrap();
    assert_eq!(restored, paused);
    let resumed = step(&m, &restored, "RESUME").snapshot;
    assert_eq!(resumed.value(), json!({"work":"b"}));
    // A bare value restores too (no history, states in document order).
    let bare = m
        .restore(&json!({"value":{"work":"b"},"status":"active"}))
        .unwrap();
    assert!(bare.matches("work.b"));
}

#[test]
fn restore_rejects_what_does_not_fit() {
    let m = Machine::from_json(
        &json!({"initial":"p","states":{"p":{"type":"parallel","states":{
        "x":{"initial":"x1","states":{"x1":{},"x2":{}}},"y":{}}}}}),
    )
    .unwrap();
    let err = |v: Value| m.restore(&v).unwrap_err().to_string();
    assert_eq!(
        err(json!({"value":{"p":{"x":"x1"}},"status":"active"})),
        "value.p: a parallel state needs every region"
    );
    assert_eq!(
        err(json!({"value":{"p":{"x":"x9","y":{}}},"status":"active"})),
        "value.p.x: unknown state \"x9\""
    );
    assert_eq!(
        err(json!({"value":"p","status":"active"})),
        "value: \"p\" has child states; the value must name one"
    );
    assert_eq!(
        err(json!({"value":{"p":{"x":"x1","y":{}}},"status":"paused"})),
        "status: status must be \"active\" or \"done\""
    );
    assert_eq!(
        err(
            json!({"value":{"p":{"x":"x1","y":{}}},"status":"active","nodes":[
            "(machine)","(machine).p","(machine).p.x","(machine).p.x.x2","(machine).p.y"]})
        ),
        "value: the state value does not match the active states (expected \
         {\"p\":{\"x\":\"x2\",\"y\":{}}})"
    );
    let ok = m
        .restore(&json!({"value":{"p":{"x":"x2","y":{}}},"status":"active"}))
        .unwrap();
    assert_eq!(ok.value(), json!({"p":{"x":"x2","y":{}}}));
    assert!(ok.matches("p.x.x2") && ok.matches("p.y") && !ok.matches("p.x.x1"));
}

#[test]
fn changed_counts_taken_transitions() {
    let m = Machine::from_json(&json!({"initial":"a","states":{"a":{"on":{
        "STAY":{}, "SELF":"a", "AGAIN":{"target":"a","reenter":true}, "GO":"b"}},"b":{}}}))
    .unwrap();
    let s0 = m.initial_snapshot();
    for e in ["STAY", "SELF", "AGAIN"] {
        let st = step(&m, &s0, e);
        assert!(st.changed, "{e}");
        assert_eq!(st.snapshot.value(), json!("a"));
        assert!(m.is_initial(&st.snapshot));
    }
    assert!(!step(&m, &s0, "NOPE").changed);
    let moved = step(&m, &s0, "GO");
    assert!(moved.changed && !m.is_initial(&moved.snapshot));
}

#[test]
fn control_events_change_nothing() {
    let m =
        Machine::from_json(&json!({"initial":"a","states":{"a":{"on":{"*":"b"}},"b":{}}})).unwrap();
    let s0 = m.initial_snapshot();
    for e in ["xstate.init", "xstate.stop", "xstate.error.actor.x"] {
        assert!(!step(&m, &s0, e).changed, "{e}");
    }
    assert!(step(&m, &s0, "anything").changed);
    assert!(m.accepts_event("anything"));
}

#[test]
fn lookup_is_strict() {
    let m = Machine::from_json(&invoice()).unwrap();
    assert!(!m.has_state("review."));
    assert!(!m.has_state(".review"));
    assert!(!m.has_state("review..x"));
    assert!(!m.initial_snapshot().matches("draft."));
}

/// A checkout with a parallel state, `#id`s, a history state and wildcards: what the plugin
/// SDK's binding checks ask of a machine.
fn checkout() -> Machine {
    Machine::from_json(&json!({
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
fn bindable_states_are_named_by_path_or_by_id() {
    let machine = checkout();
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
fn an_event_counts_in_a_state_where_a_state_that_can_be_active_listens_to_it() {
    let machine = checkout();
    assert!(machine.accepts_event("PAY") && machine.accepts_event("card.number"));
    assert!(!machine.accepts_event("NOPE") && !machine.accepts_event("cardx"));
    assert!(machine.accepts_event_in("cart", "PAY"));
    assert!(!machine.accepts_event_in("done", "PAY"));
    assert!(!machine.accepts_event_in("nowhere", "PAY"));
    // The root listens in every state; a parallel state's other region does too.
    assert!(machine.accepts_event_in("done", "RESET"));
    assert!(machine.accepts_event_in("paying.card.entering", "ADDRESS"));
    assert!(machine.accepts_event_in("paying", "card.cvc"));
}
