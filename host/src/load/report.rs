//! What a run reports: a table for people, `--json` for machines, and the exit code.
//!
//! The JSON document (schema `turnstile.load/v1`; a field is only ever added within a version):
//!
//! ```text
//! { "schema": "turnstile.load/v1",
//!   "exit_code": 0 | 1 | 2,
//!   "runs": [ {                      one per target; two with --compare
//!       "target", "protocol", "mode" ("walk" | "scenario" | "race"), "sessions",
//!       "rate" (calls/s asked for, or null), "measured_seconds",
//!       "calls", "calls_per_second", "lists",
//!       "iterations" (walks, scenario passes or races), "transitions" (each counted once),
//!       "call_latency_ms", "list_latency_ms", "setup_ms", "notification_delay_ms":
//!           {"count", "mean", "p50", "p90", "p99", "p999", "max"},
//!       "server_cpu_ms_per_call" (or null without --server-pid),
//!       "outcomes": {kind: count},   every answered call: "ok", "refused (FORBIDDEN)", ...
//!       "errors": {kind: count},     transport failures ("transport: ...") and JSON-RPC
//!                                    errors answered to valid arguments
//!       "violations": {kind: {"count", "samples": [text]}} } ],
//!   "ratios": null | {               second target over first, with --compare
//!       "calls_per_second", "p50", "p99", "server_cpu_per_call" (or null) } }
//! ```
//!
//! Latencies are from when a call was due to start: in open loop (`--rate`) that includes the
//! time it waited for a free client. The exit code is 1 when any violation was seen, else 2 when
//! a request failed in transport, else 0.

use std::{collections::BTreeMap, fmt::Write as _};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    LoadOptions, Protocol,
    contract::{Tally, Violations},
    stats::Stats,
};

pub const SCHEMA: &str = "turnstile.load/v1";

/// Every run, their ratios, and the exit code.
#[derive(Serialize)]
pub struct Summary {
    pub schema: &'static str,
    pub exit_code: u8,
    pub runs: Vec<Report>,
    pub ratios: Option<Ratios>,
}

/// One target's results.
#[derive(Serialize)]
pub struct Report {
    pub target: String,
    pub protocol: Protocol,
    pub mode: &'static str,
    pub sessions: usize,
    pub rate: Option<f64>,
    pub measured_seconds: f64,
    pub calls: u64,
    pub calls_per_second: f64,
    pub lists: u64,
    pub iterations: u64,
    pub transitions: u64,
    pub call_latency_ms: Percentiles,
    pub list_latency_ms: Percentiles,
    pub setup_ms: Percentiles,
    pub notification_delay_ms: Percentiles,
    pub server_cpu_ms_per_call: Option<f64>,
    pub outcomes: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub violations: BTreeMap<&'static str, Tally>,
}

/// A latency distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(histogram: &Histogram<u64>) -> Percentiles {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Percentiles {
            count: histogram.len(),
            mean: histogram.mean() / 1000.0,
            p50: ms(histogram.value_at_quantile(0.5)),
            p90: ms(histogram.value_at_quantile(0.9)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

/// The second target over the first.
#[derive(Serialize)]
pub struct Ratios {
    pub calls_per_second: f64,
    pub p50: f64,
    pub p99: f64,
    pub server_cpu_per_call: Option<f64>,
}

impl Report {
    pub(crate) fn new(
        target: &str,
        options: &LoadOptions,
        stats: &Stats,
        violations: &Violations,
        server_cpu: Option<std::time::Duration>,
    ) -> Report {
        let calls = stats.calls.load(std::sync::atomic::Ordering::SeqCst);
        let seconds = stats.measured().as_secs_f64();
        Report {
            target: target.to_string(),
            protocol: options.protocol,
            mode: options.mode.name(),
            sessions: options.settings.sessions,
            rate: options.rate,
            measured_seconds: seconds,
            calls,
            calls_per_second: if seconds > 0.0 {
                calls as f64 / seconds
            } else {
                0.0
            },
            lists: stats.lists.load(std::sync::atomic::Ordering::SeqCst),
            iterations: stats.iterations.load(std::sync::atomic::Ordering::SeqCst),
            transitions: stats.transitions.load(std::sync::atomic::Ordering::SeqCst),
            call_latency_ms: Percentiles::of(&stats.call_latency()),
            list_latency_ms: Percentiles::of(&stats.list_latency()),
            setup_ms: Percentiles::of(&stats.setup_time()),
            notification_delay_ms: Percentiles::of(&stats.notification_delays()),
            server_cpu_ms_per_call: server_cpu
                .filter(|_| calls > 0)
                .map(|cpu| cpu.as_secs_f64() * 1000.0 / calls as f64),
            outcomes: stats.outcomes(),
            errors: stats.errors(),
            violations: violations
                .snapshot()
                .into_iter()
                .map(|(kind, tally)| (kind.as_str(), tally))
                .collect(),
        }
    }

    fn violation_count(&self) -> u64 {
        self.violations.values().map(|tally| tally.count).sum()
    }

    fn transport_errors(&self) -> u64 {
        self.errors
            .iter()
            .filter(|(kind, _)| kind.starts_with("transport:"))
            .map(|(_, count)| count)
            .sum()
    }

    /// The table for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} — protocol {}, {}, {} session(s){}, {:.1} s measured",
            self.target,
            self.protocol.as_str(),
            self.mode,
            self.sessions,
            self.rate.map_or(String::new(), |rate| format!(
                ", open loop at {rate} calls/s"
            )),
            self.measured_seconds
        );
        let _ = writeln!(
            out,
            "  {} calls ({:.1}/s), {} tools/list, {} {}, {} transitions",
            self.calls,
            self.calls_per_second,
            self.lists,
            self.iterations,
            match self.mode {
                "walk" => "walks",
                "scenario" => "scenario passes",
                _ => "races",
            },
            self.transitions
        );
        let _ = writeln!(
            out,
            "  {:<20} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "ms", "count", "p50", "p90", "p99", "p99.9", "max"
        );
        for (name, p) in [
            ("tools/call", self.call_latency_ms),
            ("tools/list", self.list_latency_ms),
            ("session setup", self.setup_ms),
            ("notification delay", self.notification_delay_ms),
        ] {
            let _ = writeln!(
                out,
                "  {name:<20} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                p.count, p.p50, p.p90, p.p99, p.p999, p.max
            );
        }
        if let Some(cpu) = self.server_cpu_ms_per_call {
            let _ = writeln!(out, "  server CPU per call: {cpu:.3} ms");
        }
        let _ = writeln!(out, "  outcomes: {}", counts(&self.outcomes));
        let _ = writeln!(out, "  errors: {}", counts(&self.errors));
        if self.violations.is_empty() {
            let _ = writeln!(out, "  violations: none");
        } else {
            let _ = writeln!(out, "  violations: {}", self.violation_count());
            for (kind, tally) in &self.violations {
                let _ = writeln!(out, "    {kind}: {}", tally.count);
                for sample in &tally.samples {
                    let _ = writeln!(out, "      e.g. {sample}");
                }
            }
        }
        out
    }
}

fn counts(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Summary {
    pub(crate) fn new(runs: Vec<Report>) -> Summary {
        let ratios = match runs.as_slice() {
            [first, second] => Some(Ratios {
                calls_per_second: second.calls_per_second / first.calls_per_second,
                p50: second.call_latency_ms.p50 / first.call_latency_ms.p50,
                p99: second.call_latency_ms.p99 / first.call_latency_ms.p99,
                server_cpu_per_call: first
                    .server_cpu_ms_per_call
                    .zip(second.server_cpu_ms_per_call)
                    .map(|(a, b)| b / a),
            }),
            _ => None,
        };
        let exit_code = if runs.iter().any(|run| run.violation_count() > 0) {
            1
        } else if runs.iter().any(|run| run.transport_errors() > 0) {
            2
        } else {
            0
        };
        Summary {
            schema: SCHEMA,
            exit_code,
            runs,
            ratios,
        }
    }

    /// Every run's table, then the ratios.
    pub fn text(&self) -> String {
        let mut out: String = self
            .runs
            .iter()
            .map(Report::table)
            .collect::<Vec<_>>()
            .join("\n");
        if let (Some(ratios), [first, second]) = (&self.ratios, self.runs.as_slice()) {
            let _ = writeln!(out, "\n{} over {}:", second.target, first.target);
            let _ = writeln!(
                out,
                "  calls/s ×{:.2}   p50 ×{:.2}   p99 ×{:.2}{}",
                ratios.calls_per_second,
                ratios.p50,
                ratios.p99,
                ratios
                    .server_cpu_per_call
                    .map_or(String::new(), |cpu| format!(
                        "   server CPU per call ×{cpu:.2}"
                    ))
            );
        }
        out
    }
}
