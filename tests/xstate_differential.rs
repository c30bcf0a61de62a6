//! Differential test: Turnstile's statechart engine against real XState v5.
//!
//! Every case (hand-written ones for each construct, plus seeded random machines) runs through
//! `tests/xstate/harness.mjs` (the npm `xstate` pinned in `tests/xstate/package.json`) and
//! through `turnstile::statechart`; the initial value/status/context and, per event, value,
//! status, context and `changed` must agree exactly, including the key order of state values.
//! Time is simulated: `{"advance": MS}` events move both clocks and must fire the same timers;
//! an eventless loop must stop both at the same step (XState's `maxIterations` is Turnstile's
//! bound). Needs `node` and `npm`; runs `npm ci` when `tests/xstate/node_modules` is missing,
//! and fails (never skips) when it cannot.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
};

use serde_json::{Value, json};
use turnstile::statechart::{Event, Guards, Machine, MachineError, Snapshot, Status};

#[path = "xstate/cases.rs"]
mod cases;
#[path = "xstate/generate.rs"]
mod generate;

/// One machine, the context it starts with (if not its own) and the events sent to it
/// (`{"advance": MS}` moves the clock).
pub struct Case {
    pub name: String,
    pub machine: Value,
    pub context: Option<Value>,
    pub events: Vec<Value>,
}

/// The guard set `harness.mjs` implements identically.
struct TestGuards;

impl Guards for TestGuards {
    fn contains(&self, name: &str) -> bool {
        matches!(name, "isTrue" | "isFalse" | "payloadFlag" | "paramIs")
    }

    fn eval(&self, name: &str, params: Option<&Value>, event: &Event) -> bool {
        match name {
            "isTrue" => true,
            "payloadFlag" => event.field("flag") == Some(&Value::Bool(true)),
            // JS: event.kind === params?.kind (undefined === undefined is true).
            "paramIs" => event.field("kind") == params.and_then(|p| p.get("kind")),
            _ => false,
        }
    }
}

/// Seeds of the generated machines: fixed, so a failure reproduces. Set
/// `TURNSTILE_XSTATE_SEEDS=<n>` to run seeds `1..=n` instead (for longer fuzzing sessions).
fn generated_seeds() -> std::ops::RangeInclusive<u64> {
    let n = std::env::var("TURNSTILE_XSTATE_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    1..=n
}

fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("xstate")
}

fn ensure_node_modules(dir: &Path) {
    let modules = dir.join("node_modules");
    if modules.join("xstate").exists() && modules.join("json-logic-js").exists() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .status()
        .expect("npm must be installed to run the XState differential test");
    assert!(status.success(), "npm ci failed in {}", dir.display());
}

/// Runs a batch of cases through XState.
fn run_xstate(cases: &[&Case]) -> Vec<Value> {
    let dir = harness_dir();
    ensure_node_modules(&dir);
    let input: Vec<Value> = cases
        .iter()
        .map(|c| match &c.context {
            Some(ctx) => json!({"machine": c.machine, "context": ctx, "events": c.events}),
            None => json!({"machine": c.machine, "events": c.events}),
        })
        .collect();
    let mut child = Command::new("node")
        .arg("harness.mjs")
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node must be installed to run the XState differential test");
    let payload = serde_json::to_vec(&input).expect("cases serialise");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Written from a thread so a large batch cannot deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || stdin.write_all(&payload));
    let out = child.wait_with_output().expect("harness runs");
    writer
        .join()
        .expect("writer thread")
        .expect("write to harness");
    assert!(out.status.success(), "harness.mjs failed: {:?}", out.status);
    serde_json::from_slice(&out.stdout).expect("harness prints JSON")
}

/// A snapshot in the harness's output shape.
fn view(snap: &Snapshot) -> Value {
    let status = match snap.status() {
        Status::Active => "active",
        Status::Done => "done",
    };
    json!({"value": snap.value(), "status": status, "context": snap.context()})
}

/// Runs a case through Turnstile, in the harness's output shape.
fn run_turnstile(case: &Case) -> Result<Value, MachineError> {
    let machine = Machine::from_json_with_guards(&case.machine, Arc::new(TestGuards))?;
    let mut snap = match &case.context {
        Some(ctx) => machine.initial_snapshot_with(ctx.clone(), 0)?,
        None => machine.initial_snapshot(),
    };
    let mut now = 0u64;
    let initial = view(&snap);
    let mut steps = Vec::new();
    for e in &case.events {
        let step = if let Some(ms) = e.get("advance").and_then(Value::as_u64) {
            now += ms;
            let fired = machine.fire_due(&snap, now);
            if fired.timers.iter().any(|t| t.outcome.is_err()) {
                steps.push(json!({"loop": true}));
                break;
            }
            let events: Vec<&str> = fired.timers.iter().map(|t| t.event.as_str()).collect();
            let mut v = view(&fired.snapshot);
            v["changed"] = json!(fired.changed());
            v["fired"] = json!(events);
            snap = fired.snapshot;
            v
        } else {
            let event = Event::from_json(e).expect("test events are valid");
            let Ok(step) = machine.step(&snap, &event, now) else {
                steps.push(json!({"loop": true}));
                break;
            };
            snap = step.snapshot;
            let mut v = view(&snap);
            v["changed"] = json!(step.changed);
            v
        };
        steps.push(step);
        // Persistence must round-trip at every step, and the next event is applied to the
        // restored snapshot, so XState's agreement also covers what was persisted.
        let persisted: Value =
            serde_json::from_str(&snap.to_persisted().to_string()).expect("persisted is JSON");
        let restored = machine.restore(&persisted).expect("restores");
        assert_eq!(restored, snap, "{}: restore differs", case.name);
        snap = restored;
    }
    Ok(json!({"initial": initial, "steps": steps}))
}

/// What comparing a batch found.
struct Comparison {
    accepted: usize,
    refused: Vec<String>,
    disagreements: Vec<String>,
    /// Accepted cases that ended in an eventless loop (on both sides, when they agree).
    loops: usize,
}

/// Compares a batch.
fn compare(cases: &[Case]) -> Comparison {
    let results: Vec<(usize, Result<Value, MachineError>)> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| (i, run_turnstile(c)))
        .collect();
    let accepted: Vec<&(usize, Result<Value, MachineError>)> =
        results.iter().filter(|(_, r)| r.is_ok()).collect();
    let refused: Vec<String> = results
        .iter()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("{}: {e}", cases[*i].name)))
        .collect();
    let batch: Vec<&Case> = accepted.iter().map(|(i, _)| &cases[*i]).collect();
    let js = run_xstate(&batch);
    assert_eq!(js.len(), batch.len(), "harness answered every case");
    let mut disagreements = Vec::new();
    let mut loops = 0;
    for ((i, ours), theirs) in accepted.iter().zip(js) {
        let ours = ours.as_ref().expect("accepted");
        // String comparison also checks key order (region order) of state values.
        let (a, b) = (ours.to_string(), theirs.to_string());
        loops += usize::from(a.contains("{\"loop\":true}"));
        if a != b {
            let c = &cases[*i];
            disagreements.push(format!(
                "{}\n  machine: {}\n  events:  {}\n  xstate:  {b}\n  ours:    {a}",
                c.name,
                c.machine,
                Value::Array(c.events.clone()),
            ));
        }
    }
    Comparison {
        accepted: accepted.len(),
        refused,
        disagreements,
        loops,
    }
}

fn report(disagreements: &[String]) -> String {
    let mut s = format!("{} disagreement(s); first ones:\n", disagreements.len());
    for d in disagreements.iter().take(5) {
        s.push_str(d);
        s.push('\n');
    }
    s
}

#[test]
fn hand_written_cases_agree_with_xstate() {
    let cases = cases::all();
    let Comparison {
        accepted,
        refused,
        disagreements,
        ..
    } = compare(&cases);
    assert!(
        refused.is_empty(),
        "refused hand-written cases: {refused:#?}"
    );
    assert_eq!(accepted, cases.len());
    assert!(disagreements.is_empty(), "{}", report(&disagreements));
}

#[test]
fn generated_machines_agree_with_xstate() {
    let accept = |m: &Value| Machine::from_json_with_guards(m, Arc::new(TestGuards)).is_ok();
    let cases: Vec<Case> = generated_seeds()
        .map(|s| generate::case(s, accept))
        .collect();
    let Comparison {
        accepted,
        refused,
        disagreements,
        loops,
    } = compare(&cases);
    let steps: usize = cases.iter().map(|c| c.events.len()).sum();
    eprintln!(
        "generated: {} machines, {accepted} accepted, {} refused, {steps} events",
        cases.len(),
        refused.len()
    );
    assert!(disagreements.is_empty(), "{}", report(&disagreements));
    // Every construct must actually be exercised.
    for needle in [
        "\"always\"",
        "\"history\"",
        "\"deep\"",
        "\"*\"",
        "\"x.*\"",
        "\"reenter\"",
        "\"onDone\"",
        "\"parallel\"",
        "\"final\"",
        "\"guard\"",
        "\"#",
        "\".s",
        "\"target\":[\"#",
        "\"jsonLogic\"",
        "\"xstate.and\"",
        "\"xstate.or\"",
        "\"xstate.not\"",
        "\"xstate.assign\"",
        "\"entry\"",
        "\"after\"",
        "\"short\"",
        "\"context\"",
    ] {
        let n = cases
            .iter()
            .filter(|c| c.machine.to_string().contains(needle))
            .count();
        eprintln!("  {needle}: {n} machines");
        assert!(
            n >= cases.len() / 20,
            "too few generated machines with {needle}"
        );
    }
    let advances = cases
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| e.get("advance").is_some())
        .count();
    eprintln!("  advance events: {advances}");
    assert!(advances >= steps / 20, "too few advance events");
    eprintln!("  cases ending in an eventless loop: {loops}");
    // The generator retries until Turnstile accepts a machine; refusals must stay rare.
    assert!(
        refused.len() * 100 <= cases.len(),
        "too many generated machines refused: {:#?}",
        &refused[..refused.len().min(10)]
    );
}
