//! `turnstile machine run FILE`: step a machine by hand, for people debugging their machines,
//! their guards and their timers.
//!
//! Prints the initial snapshot as one JSON line, then exactly one line per input line. An input
//! line is an event (`"SUBMIT"`, or `{"type": "SUBMIT", "input": {...}, "output": {...}}`) or
//! `{"advance": MS}`, which moves a simulated clock (starting at 0) and fires the timers that fall
//! due. Every line shows `value`, `status` and `context` (and `timers`, the running ones, when
//! there are any); an event line adds `event` and `changed`, an advance line `now` and `fired`.
//! An event whose eventless transitions loop is refused with `"error"` and changes nothing. A
//! line that is neither gets `{"line", "error"}`, the run goes on, and the exit status is 1.

use std::{
    io::{BufRead, Write},
    path::Path,
    process::ExitCode,
};

use anyhow::Context;
use serde_json::{Map, Value, json};

use crate::statechart::{Event, Machine, Snapshot, Status};

pub fn run(
    file: &Path,
    context: Option<&str>,
    input: impl BufRead,
    mut output: impl Write,
) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let definition: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let machine = Machine::from_json(&definition)
        .with_context(|| format!("{}: bad machine", file.display()))?;
    let mut snapshot = match context {
        None => machine.initial_snapshot(),
        Some(text) => {
            let context: Value = serde_json::from_str(text).context("--context is not JSON")?;
            machine
                .initial_snapshot_with(context, 0)
                .context("--context does not fit the machine")?
        }
    };
    let mut now = 0u64;
    let mut bad_lines = false;
    writeln!(output, "{}", Value::Object(view(&snapshot)))?;
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let out = match parse_line(&line) {
            Err(error) => {
                bad_lines = true;
                json!({"line": number + 1, "error": error})
            }
            Ok(Line::Advance(ms)) => {
                now = now.saturating_add(ms);
                let fired = machine.fire_due(&snapshot, now);
                let events: Vec<Value> = fired
                    .timers
                    .iter()
                    .map(|t| match &t.outcome {
                        Ok(_) => json!(t.event),
                        Err(e) => json!({"event": t.event, "error": e.to_string()}),
                    })
                    .collect();
                let changed = fired.changed();
                snapshot = fired.snapshot;
                let mut line = Map::new();
                line.insert("advance".into(), json!(ms));
                line.insert("now".into(), json!(now));
                line.insert("fired".into(), Value::Array(events));
                line.extend(view(&snapshot));
                line.insert("changed".into(), json!(changed));
                Value::Object(line)
            }
            Ok(Line::Event(event)) => {
                let mut line = Map::new();
                line.insert("event".into(), json!(event.event_type()));
                match machine.step(&snapshot, &event, now) {
                    Ok(step) => {
                        snapshot = step.snapshot;
                        line.extend(view(&snapshot));
                        line.insert("changed".into(), json!(step.changed));
                    }
                    Err(error) => {
                        line.insert("error".into(), json!(error.to_string()));
                        line.extend(view(&snapshot));
                        line.insert("changed".into(), json!(false));
                    }
                }
                Value::Object(line)
            }
        };
        writeln!(output, "{out}")?;
        output.flush()?;
    }
    Ok(if bad_lines {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One input line.
enum Line {
    Event(Event),
    Advance(u64),
}

fn parse_line(line: &str) -> Result<Line, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(ms) = value.get("advance") {
        return ms
            .as_u64()
            .map(Line::Advance)
            .ok_or_else(|| "\"advance\" takes a whole number of milliseconds".to_string());
    }
    Event::from_json(&value)
        .map(Line::Event)
        .map_err(|e| format!("not an event: {e}"))
}

/// `value`, `status`, `context`, and `timers` when some are running.
fn view(snapshot: &Snapshot) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("value".into(), snapshot.value());
    m.insert("status".into(), json!(status(&snapshot.status())));
    m.insert("context".into(), snapshot.context().clone());
    let timers = snapshot.timers();
    if !timers.is_empty() {
        let timers: Vec<Value> = timers
            .into_iter()
            .map(|(event, deadline)| json!({"event": event, "deadline": deadline}))
            .collect();
        m.insert("timers".into(), Value::Array(timers));
    }
    m
}

fn status(status: &Status) -> &'static str {
    match status {
        Status::Active => "active",
        Status::Done => "done",
    }
}
