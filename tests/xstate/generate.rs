//! Seeded random machines and event sequences for the differential test.
//!
//! Machines mix atomic, compound, parallel, final and history states up to four levels deep,
//! with `on` (strings, objects, candidate arrays, targetless, `reenter`, guards), wildcards,
//! `always`, `onDone`, explicit ids and every target form. Events come from a small alphabet so
//! that transitions actually fire, some carrying the payloads the test guards read.
//!
//! Some machines also use what statecharts gained with context: a `context`, `xstate.assign`
//! actions on transitions, `entry` and `exit`, `jsonLogic` guards and the `xstate.and/or/not`
//! combinators, `after` timers (numeric and named delays) with `{"advance": MS}` events, and
//! eventless transitions that assign (some settle, some loop until the bound). Rules stay within
//! what json-logic-js and datalogic agree on by construction: numbers are integers, event fields
//! are read with a default, and arithmetic only meets numbers.

use serde_json::{Map, Value, json};

use super::Case;

/// xorshift64*: tiny, deterministic, no crate needed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const EVENTS: &[&str] = &["A", "B", "C", "D", "x.a", "x.b", "x"];
const DESCRIPTORS: &[&str] = &["A", "B", "C", "D", "x.a", "x.b", "x", "x.*", "*"];

/// Which of the newer constructs a machine uses.
#[derive(Clone, Copy)]
struct Features {
    context: bool,
    logic: bool,
    timers: bool,
}

/// A generated node before transitions are attached.
struct Info {
    path: Vec<String>,
    id: String,
    kind: &'static str,
    parent: Option<usize>,
}

/// The case for `seed`: the first of up to 50 candidate machines that `accept` takes (Turnstile
/// refuses machines whose eventless transitions may cycle, and random ones often do), so that
/// every seed yields a machine that runs.
pub fn case(seed: u64, accept: impl Fn(&Value) -> bool) -> Case {
    let mut last = None;
    for attempt in 0..50 {
        let c = candidate_case(seed, attempt);
        if accept(&c.machine) {
            return c;
        }
        last = Some(c);
    }
    last.unwrap_or_else(|| unreachable!("50 attempts ran"))
}

fn candidate_case(seed: u64, attempt: u64) -> Case {
    let mut rng = Rng::new(seed * 1000 + attempt);
    let mut infos: Vec<Info> = Vec::new();
    let machine_id = format!("g{seed}");
    infos.push(Info {
        path: Vec::new(),
        id: machine_id.clone(),
        kind: if rng.chance(20) {
            "parallel"
        } else {
            "compound"
        },
        parent: None,
    });
    let features = Features {
        context: rng.chance(40),
        logic: rng.chance(40),
        timers: rng.chance(35),
    };
    let mut counter = 0;
    let mut root = build(&mut rng, &mut infos, 0, 0, &mut counter, &machine_id);
    root.insert("id".into(), json!(machine_id));
    // Rules read `context.n` and `context.b`: they exist whenever a rule may run (datalogic
    // and json-logic-js differ on `null` in `==` and arithmetic; see the statechart crate's
    // logic.rs).
    if features.context || features.logic {
        root.insert(
            "context".into(),
            json!({"n": rng.below(4), "b": rng.chance(50)}),
        );
    }
    if features.timers {
        root.insert("delays".into(), json!({"short": 15}));
    }
    add_transitions(&mut rng, &infos, &mut root, 0, features);
    let machine = Value::Object(root);
    let len = 6 + rng.below(14);
    let events = (0..len).map(|_| event(&mut rng, features)).collect();
    Case {
        name: format!("generated seed {seed} (attempt {attempt})"),
        machine,
        context: None,
        events,
    }
}

fn event(rng: &mut Rng, features: Features) -> Value {
    if features.timers && rng.chance(30) {
        return json!({"advance": *rng.pick(&[0, 1, 5, 9, 10, 15, 20, 40])});
    }
    let ty = *rng.pick(EVENTS);
    if (features.logic || features.context) && rng.chance(40) {
        let mut e = json!({"type": ty, "input": {"v": rng.below(5)}});
        if rng.chance(50) {
            e["output"] = json!({"ok": rng.chance(50)});
        }
        return e;
    }
    match rng.below(4) {
        0 => json!({"type": ty, "flag": true}),
        1 => json!({"type": ty, "kind": "k1"}),
        _ => json!(ty),
    }
}

/// A number-valued rule: context and event numbers (read with a default), literals, sums.
fn num_rule(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 1 { 3 } else { 6 }) {
        0 => json!({"var": "context.n"}),
        1 => json!({"var": ["event.input.v", 0]}),
        2 => json!(rng.below(5)),
        3 => json!({"+": [num_rule(rng, depth + 1), num_rule(rng, depth + 1)]}),
        4 => json!({"-": [num_rule(rng, depth + 1), num_rule(rng, depth + 1)]}),
        _ => {
            json!({"if": [bool_rule(rng, depth + 1), num_rule(rng, depth + 1), num_rule(rng, depth + 1)]})
        }
    }
}

/// A rule used for its truthiness: comparisons of numbers, context and output flags, logic.
fn bool_rule(rng: &mut Rng, depth: usize) -> Value {
    const OPS: &[&str] = &["<", ">", "<=", ">=", "==", "===", "!=", "!=="];
    match rng.below(if depth > 1 { 3 } else { 7 }) {
        0 | 1 => {
            let op = *rng.pick(OPS);
            json!({op: [num_rule(rng, depth + 1), num_rule(rng, depth + 1)]})
        }
        2 => json!({"var": *rng.pick(&["context.b", "event.output.ok"])}),
        3 => json!({"!": [bool_rule(rng, depth + 1)]}),
        4 => json!({"and": [bool_rule(rng, depth + 1), bool_rule(rng, depth + 1)]}),
        5 => json!({"or": [bool_rule(rng, depth + 1), bool_rule(rng, depth + 1)]}),
        _ => json!({"!!": [num_rule(rng, depth + 1)]}),
    }
}

/// A `jsonLogic` guard, sometimes inside a combinator with a test guard.
fn logic_guard(rng: &mut Rng, depth: usize) -> Value {
    let leaf = |rng: &mut Rng| json!({"type": "jsonLogic", "params": {"rule": bool_rule(rng, 0)}});
    if depth > 0 || rng.chance(60) {
        return leaf(rng);
    }
    let other = if rng.chance(50) {
        json!(*rng.pick(&["isTrue", "isFalse", "payloadFlag"]))
    } else {
        logic_guard(rng, depth + 1)
    };
    match rng.below(3) {
        0 => json!({"type": "xstate.and", "guards": [leaf(rng), other]}),
        1 => json!({"type": "xstate.or", "guards": [other, leaf(rng)]}),
        _ => json!({"type": "xstate.not", "guards": [leaf(rng)]}),
    }
}

/// An `xstate.assign` action setting `n` and/or `b`.
fn assign_action(rng: &mut Rng) -> Value {
    let mut params = Map::new();
    if rng.chance(70) {
        params.insert("n".into(), num_rule(rng, 0));
    }
    if params.is_empty() || rng.chance(40) {
        params.insert("b".into(), bool_rule(rng, 1));
    }
    json!({"type": "xstate.assign", "params": params})
}

/// Builds the children of `infos[me]` (whose kind is already chosen) and returns its object.
fn build(
    rng: &mut Rng,
    infos: &mut Vec<Info>,
    me: usize,
    depth: usize,
    counter: &mut usize,
    machine_id: &str,
) -> Map<String, Value> {
    let mut obj = Map::new();
    let kind = infos[me].kind;
    match kind {
        "compound" | "parallel" => {
            let n = if kind == "parallel" {
                2 + rng.below(2)
            } else {
                1 + rng.below(3)
            };
            let mut states = Map::new();
            let mut first = None;
            for _ in 0..n {
                *counter += 1;
                // Some keys look like array indices, which JavaScript objects order first.
                let key = if rng.chance(8) {
                    format!("{counter}")
                } else {
                    format!("s{counter}")
                };
                let ckind = if depth >= 3 {
                    if rng.chance(25) { "final" } else { "atomic" }
                } else {
                    *rng.pick(&[
                        "atomic", "atomic", "compound", "compound", "parallel", "final",
                    ])
                };
                let mut path = infos[me].path.clone();
                path.push(key.clone());
                let explicit = rng.chance(15);
                let id = if explicit {
                    format!("id_{key}")
                } else {
                    format!("{machine_id}.{}", path.join("."))
                };
                infos.push(Info {
                    path,
                    id: id.clone(),
                    kind: ckind,
                    parent: Some(me),
                });
                let child = infos.len() - 1;
                let mut cobj = build(rng, infos, child, depth + 1, counter, machine_id);
                if explicit {
                    cobj.insert("id".into(), json!(id));
                }
                first.get_or_insert(key.clone());
                states.insert(key, Value::Object(cobj));
            }
            if rng.chance(25) {
                *counter += 1;
                let key = format!("h{counter}");
                let mut path = infos[me].path.clone();
                path.push(key.clone());
                infos.push(Info {
                    id: format!("{machine_id}.{}", path.join(".")),
                    path,
                    kind: "history",
                    parent: Some(me),
                });
                let deep = rng.chance(50);
                let mut h =
                    json!({"type": "history", "history": if deep { "deep" } else { "shallow" }});
                if rng.chance(30) {
                    let keys: Vec<&String> = states.keys().collect();
                    h["target"] = json!(*rng.pick(&keys));
                }
                states.insert(key, h);
            }
            if kind == "parallel" {
                obj.insert("type".into(), json!("parallel"));
            } else {
                let keys: Vec<&String> = states.keys().filter(|k| !k.starts_with('h')).collect();
                let initial = (*rng.pick(&keys)).clone();
                obj.insert("initial".into(), json!(initial));
            }
            obj.insert("states".into(), Value::Object(states));
        }
        "final" => {
            obj.insert("type".into(), json!("final"));
        }
        _ => {}
    }
    obj
}

/// Attaches `on`, `always`, `onDone`, `after`, `entry` and `exit` to `obj` (node `me`) and,
/// recursively, its children.
fn add_transitions(
    rng: &mut Rng,
    infos: &[Info],
    obj: &mut Map<String, Value>,
    me: usize,
    f: Features,
) {
    let kind = infos[me].kind;
    if kind == "history" {
        return;
    }
    if rng.chance(if me == 0 { 30 } else { 65 }) {
        let mut on = Map::new();
        for _ in 0..1 + rng.below(3) {
            let d = *rng.pick(DESCRIPTORS);
            on.insert(d.to_string(), transition_config(rng, infos, me, false, f));
        }
        obj.insert("on".into(), Value::Object(on));
    }
    if rng.chance(10) {
        obj.insert("always".into(), transition_config(rng, infos, me, true, f));
    }
    if (kind == "compound" || kind == "parallel") && me != 0 && rng.chance(35) {
        obj.insert("onDone".into(), transition_config(rng, infos, me, false, f));
    }
    if f.timers && me != 0 && rng.chance(30) {
        let mut after = Map::new();
        for _ in 0..1 + rng.below(2) {
            // No 0: a state that re-enters itself after 0 ms never lets time pass.
            let delay = *rng.pick(&["5", "10", "20", "short"]);
            let mut config = transition_config(rng, infos, me, false, f);
            // XState reads a bare string inside an `after` array as a targetless transition;
            // Turnstile refuses it, so write the object form there.
            if let Value::Array(items) = &mut config {
                for item in items.iter_mut().filter(|i| i.is_string()) {
                    *item = json!({"target": item.take()});
                }
            }
            after.insert(delay.into(), config);
        }
        obj.insert("after".into(), Value::Object(after));
    }
    if f.context {
        for key in ["entry", "exit"] {
            if rng.chance(15) {
                obj.insert(key.into(), assign_action(rng));
            }
        }
    }
    let children: Vec<usize> = (0..infos.len())
        .filter(|&i| infos[i].parent == Some(me))
        .collect();
    if let Some(Value::Object(states)) = obj.get_mut("states") {
        for c in children {
            let key = infos[c].path.last().cloned().unwrap_or_default();
            if let Some(Value::Object(cobj)) = states.get_mut(&key) {
                add_transitions(rng, infos, cobj, c, f);
            }
        }
    }
}

fn transition_config(
    rng: &mut Rng,
    infos: &[Info],
    me: usize,
    eventless: bool,
    f: Features,
) -> Value {
    let n = if rng.chance(30) { 2 + rng.below(2) } else { 1 };
    let mut items: Vec<Value> = (0..n)
        .map(|_| candidate(rng, infos, me, eventless, f))
        .collect();
    if n == 1 && !rng.chance(30) {
        items.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(items)
    }
}

fn candidate(rng: &mut Rng, infos: &[Info], me: usize, eventless: bool, f: Features) -> Value {
    let targetless = rng.chance(if eventless { 10 } else { 15 });
    let target = if targetless {
        None
    } else if rng.chance(8)
        && let Some(pair) = parallel_targets(rng, infos)
    {
        Some(pair)
    } else {
        Some(json!(target_string(rng, infos, me)))
    };
    let guard = match rng.below(if eventless { 4 } else { 8 }) {
        _ if f.logic && rng.chance(40) => Some(logic_guard(rng, 0)),
        0 => Some(json!("payloadFlag")),
        1 => Some(json!("isFalse")),
        2 => Some(json!({"type": "paramIs", "params": {"kind": "k1"}})),
        3 if !eventless => Some(json!("isTrue")),
        _ => None,
    };
    let reenter = rng.chance(20);
    let actions = (f.context && rng.chance(30)).then(|| assign_action(rng));
    if let (Some(t @ Value::String(_)), None, false, None) = (&target, &guard, reenter, &actions)
        && rng.chance(50)
    {
        return t.clone();
    }
    let mut o = Map::new();
    if let Some(a) = actions {
        o.insert("actions".into(), a);
    }
    if let Some(t) = target {
        o.insert("target".into(), t);
    }
    if let Some(g) = guard {
        o.insert("guard".into(), g);
    }
    if reenter {
        o.insert("reenter".into(), json!(true));
    }
    Value::Object(o)
}

/// A target for a transition from `me`, in one of XState's forms.
fn target_string(rng: &mut Rng, infos: &[Info], me: usize) -> String {
    if rng.chance(3) {
        return format!("#{}", infos[0].id);
    }
    let t = 1 + rng.below(infos.len() - 1);
    let target = &infos[t];
    let source = &infos[me];
    let is_desc = target.path.len() > source.path.len() && target.path.starts_with(&source.path);
    if is_desc && rng.chance(60) {
        return format!(".{}", target.path[source.path.len()..].join("."));
    }
    if let Some(p) = source.parent {
        let base = &infos[p].path;
        if target.path.len() > base.len() && target.path.starts_with(base) && rng.chance(60) {
            return target.path[base.len()..].join(".");
        }
    }
    format!("#{}", target.id)
}

/// Two `#id` targets in different regions of one parallel state, if the machine has one.
fn parallel_targets(rng: &mut Rng, infos: &[Info]) -> Option<Value> {
    let parallels: Vec<usize> = (0..infos.len())
        .filter(|&i| infos[i].kind == "parallel")
        .collect();
    if parallels.is_empty() {
        return None;
    }
    let p = *rng.pick(&parallels);
    let regions: Vec<usize> = (0..infos.len())
        .filter(|&i| infos[i].parent == Some(p) && infos[i].kind != "history")
        .collect();
    let a = rng.below(regions.len());
    let b = (a + 1 + rng.below(regions.len() - 1)) % regions.len();
    let mut pick_under = |region: usize| {
        let under: Vec<usize> = (0..infos.len())
            .filter(|&i| {
                infos[i].kind != "history" && infos[i].path.starts_with(&infos[region].path)
            })
            .collect();
        format!("#{}", infos[*rng.pick(&under)].id)
    };
    let (x, y) = (pick_under(regions[a]), pick_under(regions[b]));
    Some(json!([x, y]))
}
