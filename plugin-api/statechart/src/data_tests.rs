//! Unit tests of what machines gained with context: assignments, built-in guards, `may_take`,
//! timers, loops, and the persisted format's migration. (XState agreement is
//! `tests/xstate_differential.rs`; these pin the API.)

use serde_json::{Value, json};

use super::*;

fn assign(params: Value) -> Value {
    json!({"type": "xstate.assign", "params": params})
}

fn logic(rule: Value) -> Value {
    json!({"type": "jsonLogic", "params": {"rule": rule}})
}

/// The invoice of issue 13: a second approval above 10,000, a review deadline.
fn invoice() -> Machine {
    Machine::from_json(
        &json!({"id":"invoice","initial":"draft","context":{"amount":0},
        "delays":{"reviewDeadline":172_800_000},
        "states":{
            "draft":{"on":{"SUBMIT":{"target":"review",
                "actions":assign(json!({"amount":{"var":["event.input.amount",0]}}))}}},
            "review":{"after":{"reviewDeadline":"draft"},"on":{"APPROVE":[
                {"target":"second","guard":logic(json!({">":[{"var":"context.amount"},10000]}))},
                {"target":"approved"}]}},
            "second":{"on":{"APPROVE":"approved",
                "REJECT":{"target":"draft","guard":logic(json!({"var":"event.output.final"}))}}},
            "approved":{"type":"final"}}}),
    )
    .unwrap()
}

fn submit(amount: u64) -> Event {
    Event::with_call("SUBMIT", Some(json!({"amount": amount})), None)
}

#[test]
fn assignments_read_the_call_and_guards_the_context() {
    let m = invoice();
    let s0 = m.initial_snapshot_at(1_000);
    assert_eq!(s0.context(), &json!({"amount": 0}));
    let big = m.step(&s0, &submit(20_000), 1_000).unwrap().snapshot;
    assert_eq!(big.context(), &json!({"amount": 20_000}));
    let next = m
        .step(&big, &Event::new("APPROVE"), 2_000)
        .unwrap()
        .snapshot;
    assert_eq!(next.value(), json!("second"));
    let small = m.step(&s0, &submit(200), 1_000).unwrap().snapshot;
    let done = m
        .step(&small, &Event::new("APPROVE"), 2_000)
        .unwrap()
        .snapshot;
    assert_eq!(done.value(), json!("approved"));
    assert_eq!(done.status(), Status::Done);
    assert_eq!(done.next_deadline(), None, "a done machine runs no timer");
}

#[test]
fn may_take_decides_what_is_known_and_counts_the_rest_possible() {
    let m = invoice();
    let s0 = m.initial_snapshot();
    assert!(m.may_take(&s0, "SUBMIT", Known::TypeOnly));
    assert!(!m.may_take(&s0, "APPROVE", Known::TypeOnly));
    let second = m.step(&s0, &submit(20_000), 0).unwrap().snapshot;
    let second = m.step(&second, &Event::new("APPROVE"), 0).unwrap().snapshot;
    // REJECT's guard reads event.output: unknown until the plugin ran.
    assert!(m.may_take(&second, "REJECT", Known::TypeOnly));
    assert!(m.may_take(&second, "REJECT", Known::Input(&json!({}))));
    let no = Event::with_call("REJECT", Some(json!({})), Some(json!({"final": false})));
    let yes = Event::with_call("REJECT", Some(json!({})), Some(json!({"final": true})));
    assert!(!m.may_take(&second, "REJECT", Known::Everything(&no)));
    assert!(m.may_take(&second, "REJECT", Known::Everything(&yes)));
}

#[test]
fn may_take_follows_input_guards_and_combinators() {
    let m = Machine::from_json(&json!({"initial":"a","context":{"open":false},"states":{
        "a":{"on":{"PAY":{"target":"b","guard":{"type":"xstate.and","guards":[
            logic(json!({">":[{"var":["event.input.amount",0]},100]})),
            {"type":"xstate.not","guards":[logic(json!({"var":"context.open"}))]}]}}}},
        "b":{}}}))
    .unwrap();
    let s = m.initial_snapshot();
    assert!(
        m.may_take(&s, "PAY", Known::TypeOnly),
        "the amount is not known yet"
    );
    assert!(!m.may_take(&s, "PAY", Known::Input(&json!({"amount": 50}))));
    assert!(m.may_take(&s, "PAY", Known::Input(&json!({"amount": 500}))));
    let open = m.initial_snapshot_with(json!({"open": true}), 0).unwrap();
    assert!(
        !m.may_take(&open, "PAY", Known::TypeOnly),
        "the context alone rules it out"
    );
}

#[test]
fn timers_fire_once_in_deadline_order_and_restart_on_reentry() {
    let m = Machine::from_json(&json!({"id":"t","initial":"a","states":{
        "a":{"after":{"100":"b"},"on":{"POKE":{"target":"a","reenter":true}}},
        "b":{"after":{"50":"c"}},
        "c":{"on":{"BACK":"a"}}}}))
    .unwrap();
    let s = m.initial_snapshot_at(1_000);
    assert_eq!(s.next_deadline(), Some(1_100));
    let poked = m.step(&s, &Event::new("POKE"), 1_060).unwrap().snapshot;
    assert_eq!(poked.next_deadline(), Some(1_160), "re-entering restarts");
    let early = m.fire_due(&poked, 1_159);
    assert!(early.timers.is_empty());
    // Both timers fall due by 1_300: b's counts from a's deadline (1_160), not from 1_300.
    let fired = m.fire_due(&poked, 1_300);
    let order: Vec<(&str, u64)> = fired
        .timers
        .iter()
        .map(|t| (t.event.as_str(), t.deadline))
        .collect();
    assert_eq!(
        order,
        [
            ("xstate.after.100.t.a", 1_160),
            ("xstate.after.50.t.b", 1_210)
        ]
    );
    assert_eq!(fired.snapshot.value(), json!("c"));
    assert!(fired.changed());
    assert_eq!(fired.snapshot.next_deadline(), None, "leaving cancels");
    let again = m.fire_due(&fired.snapshot, 5_000);
    assert!(again.timers.is_empty(), "each fires once");
}

#[test]
fn a_zero_delay_self_loop_cannot_hang_fire_due() {
    let m = Machine::from_json(&json!({"initial":"a","states":{
        "a":{"after":{"0":{"target":"a","reenter":true}}}}}))
    .unwrap();
    let fired = m.fire_due(&m.initial_snapshot(), 10);
    assert_eq!(fired.timers.len(), MAX_TIMERS_PER_CALL);
    assert_eq!(fired.snapshot.next_deadline(), Some(0));
}

#[test]
fn an_eventless_loop_is_stopped_and_changes_nothing() {
    let m = Machine::from_json(&json!({"initial":"a","context":{"n":0},"states":{
        "a":{"on":{"GO":"spin"}},
        "spin":{"always":{"actions":assign(json!({"n":{"+":[{"var":"context.n"},1]}}))}}}}))
    .unwrap();
    let s = m.initial_snapshot();
    assert_eq!(m.step(&s, &Event::new("GO"), 0), Err(TransitionLoop));
    let kept = m.transition(&s, &Event::new("GO"));
    assert!(!kept.changed);
    assert_eq!(kept.snapshot, s);
}

#[test]
fn persisted_snapshots_carry_context_and_timers() {
    let m = invoice();
    let s = m
        .step(&m.initial_snapshot_at(5), &submit(7), 5)
        .unwrap()
        .snapshot;
    let p = s.to_persisted();
    assert_eq!(p["format"], json!(PERSISTED_FORMAT));
    assert_eq!(p["context"], json!({"amount": 7}));
    assert_eq!(
        p["timers"],
        json!([{"event": "xstate.after.reviewDeadline.invoice.review", "deadline": 172_800_005u64}])
    );
    assert_eq!(m.restore(&p).unwrap(), s);
    let mut future = p.clone();
    future["format"] = json!(99);
    assert!(m.restore(&future).is_err());
    let mut foreign = p;
    foreign["timers"] = json!([{"event": "xstate.after.1.nope", "deadline": 1}]);
    assert!(m.restore(&foreign).is_err());
}

#[test]
fn a_record_from_before_context_and_timers_still_restores() {
    // What today's stores hold: no format, no context, no timers.
    let m = invoice();
    let old = json!({"value": "review", "status": "active", "historyValue": {},
        "nodes": ["invoice", "invoice.review"]});
    let s = m.restore_at(&old, 1_000).unwrap();
    assert_eq!(s.value(), json!("review"));
    assert_eq!(s.context(), m.initial_snapshot().context());
    assert_eq!(
        s.next_deadline(),
        Some(1_000 + 172_800_000),
        "its timer starts at restore"
    );
    let bare = m
        .restore(&json!({"value": "draft", "status": "active"}))
        .unwrap();
    assert_eq!(bare.next_deadline(), None);
}

#[test]
fn a_given_context_must_be_an_object() {
    let m = invoice();
    assert!(m.initial_snapshot_with(json!([1]), 0).is_err());
    let s = m
        .initial_snapshot_with(json!({"amount": 3, "x": true}), 0)
        .unwrap();
    assert_eq!(s.context(), &json!({"amount": 3, "x": true}));
}
