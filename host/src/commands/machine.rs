//! `turnstile machine run FILE`: step a machine by hand, for people debugging their machines.
//!
//! Prints the initial snapshot as one JSON line, then one line per event read from the input.

use std::{
    io::{BufRead, Write},
    path::Path,
    process::ExitCode,
};

use anyhow::Context;
use serde_json::{Value, json};

use crate::statechart::{Event, Machine, Status};

pub fn run(file: &Path, input: impl BufRead, mut output: impl Write) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let definition: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let machine = Machine::from_json(&definition)
        .with_context(|| format!("{}: bad machine", file.display()))?;
    let mut snapshot = machine.initial_snapshot();
    writeln!(
        output,
        "{}",
        json!({ "value": snapshot.value(), "status": status(&snapshot.status()) })
    )?;
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str::<Value>(&line)
            .map_err(|error| error.to_string())
            .and_then(|value| Event::from_json(&value).map_err(|error| error.to_string()))
            .map_err(|error| anyhow::anyhow!("line {}: not an event: {error}", number + 1))?;
        let step = machine.transition(&snapshot, &event);
        snapshot = step.snapshot;
        writeln!(
            output,
            "{}",
            json!({
                "event": event.event_type(),
                "value": snapshot.value(),
                "status": status(&snapshot.status()),
                "changed": step.changed,
            })
        )?;
        output.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

fn status(status: &Status) -> &'static str {
    match status {
        Status::Active => "active",
        Status::Done => "done",
    }
}
