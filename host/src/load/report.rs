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
//!       "errors": {kind: count},     transport failures ("transport: ..."), a mode that could
//!                                    not set up ("setup: ...") and JSON-RPC errors answered to
//!                                    valid arguments
//!       "violations": {kind: {"count", "samples": [text]}},
//!       "fanout": null | {           with --fanout
//!           "rounds": [ {"round", "tool", "measured" (false during the warm-up),
//!               "result_ms" (from sending the call to its result),
//!               "first_ms", "median_ms", "p99_ms", "last_ms" (from sending the call to the
//!                   sessions' list_changed; null if none arrived),
//!               "sessions", "heard_once", "missing", "extra"} ] },
//!       "mint": null | {             with --mint
//!           "requested", "minted", "seconds", "mints_per_second",
//!           "memory": null | {       with --server-pid: the server's VmRSS, KiB
//!               "before_kib", "peak_kib", "after_mint_kib", "per_instance_kib",
//!               "after_wait_kib" (with --after-mint-wait, else null),
//!               "given_back_share" (of what the peak grew, given back after the wait)},
//!           "waited_seconds" (with --after-mint-wait, else null),
//!           "passivated" (true or false when the target serves Turnstile's /stats, else null),
//!           "sampled", "sampled_unchanged" (every 100th instance listed after the wait) } } ],
//!   "ratios": null | {               second target over first, with --compare
//!       "calls_per_second", "p50", "p99", "server_cpu_per_call" (or null) } }
//! ```
//!
//! `mode` is also "fanout" or "mint"; in fan-out mode `iterations` counts rounds (transitions
//! fanned out), in mint mode instances minted.
//!
//! Latencies are from when a call was due to start: in open loop (`--rate`) that includes the
//! time it waited for a free client (but not the pacer's timer lateness, see `pacing.rs`). The exit code is 1 when any violation was seen, else 2 when
//! a request failed in transport or a mode could not set up, else 0.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    LoadOptions, Mode, Protocol,
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
    pub fanout: Option<FanoutReport>,
    pub mint: Option<MintReport>,
}

/// What a mode measured beyond the common statistics, gathered while it runs.
#[derive(Default)]
pub struct Findings {
    pub fanout_rounds: Vec<FanoutRound>,
    pub mint: Option<MintReport>,
}

/// `--fanout`: every round.
#[derive(Clone, Debug, Serialize)]
pub struct FanoutReport {
    pub rounds: Vec<FanoutRound>,
}

/// One transition fanned out to every session, timed from sending its call.
#[derive(Clone, Debug, Serialize)]
pub struct FanoutRound {
    pub round: u64,
    pub tool: String,
    pub measured: bool,
    pub result_ms: f64,
    pub first_ms: Option<f64>,
    pub median_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub last_ms: Option<f64>,
    pub sessions: usize,
    pub heard_once: usize,
    pub missing: usize,
    pub extra: usize,
}

impl FanoutRound {
    /// A round whose call answered after `result` and whose `list_changed` arrived after
    /// `delays` (sorted); every one of `sessions` counts as having heard it once until told
    /// otherwise (`missing`, `extra`).
    pub fn new(
        round: u64,
        tool: &str,
        result: Duration,
        delays: &[Duration],
        sessions: usize,
    ) -> FanoutRound {
        let at = |quantile: f64| nearest_rank(delays, quantile).map(millis);
        FanoutRound {
            round,
            tool: tool.to_string(),
            measured: true,
            result_ms: millis(result),
            first_ms: delays.first().copied().map(millis),
            median_ms: at(0.5),
            p99_ms: at(0.99),
            last_ms: delays.last().copied().map(millis),
            sessions,
            heard_once: sessions,
            missing: 0,
            extra: 0,
        }
    }

    fn settle(mut self) -> FanoutRound {
        self.heard_once = self.sessions - self.missing - self.extra;
        self
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The value at `quantile` of sorted `values`, by nearest rank (exact, for one round's few
/// thousand arrivals).
fn nearest_rank(values: &[Duration], quantile: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let rank = ((quantile * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// `--mint`: how fast, and what it cost the server.
#[derive(Clone, Debug, Serialize)]
pub struct MintReport {
    pub requested: u64,
    pub minted: u64,
    pub seconds: f64,
    pub mints_per_second: f64,
    pub memory: Option<MintMemory>,
    pub waited_seconds: Option<f64>,
    pub passivated: Option<bool>,
    pub sampled: u64,
    pub sampled_unchanged: u64,
}

/// The server's resident memory around a minting run, in KiB.
#[derive(Clone, Debug, Serialize)]
pub struct MintMemory {
    pub before_kib: u64,
    pub peak_kib: u64,
    pub after_mint_kib: u64,
    pub per_instance_kib: Option<f64>,
    pub after_wait_kib: Option<u64>,
    pub given_back_share: Option<f64>,
}

impl MintMemory {
    pub fn new(before: u64, peak: u64, after: u64, minted: u64) -> MintMemory {
        MintMemory {
            before_kib: before,
            peak_kib: peak,
            after_mint_kib: after,
            per_instance_kib: (minted > 0)
                .then(|| after.saturating_sub(before) as f64 / minted as f64),
            after_wait_kib: None,
            given_back_share: None,
        }
    }

    /// Memory read again after the wait: what share of the growth up to the peak came back.
    pub fn after_wait(&mut self, idle: u64) {
        self.after_wait_kib = Some(idle);
        let grown = self.peak_kib.saturating_sub(self.before_kib);
        self.given_back_share =
            (grown > 0).then(|| self.peak_kib.saturating_sub(idle) as f64 / grown as f64);
    }
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
        findings: &Findings,
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
            fanout: matches!(options.mode, Mode::Fanout).then(|| FanoutReport {
                rounds: findings
                    .fanout_rounds
                    .iter()
                    .cloned()
                    .map(FanoutRound::settle)
                    .collect(),
            }),
            mint: findings.mint.clone(),
        }
    }

    fn violation_count(&self) -> u64 {
        self.violations.values().map(|tally| tally.count).sum()
    }

    /// Errors that make the run's figures unusable: transport failures, and a mode that could
    /// not set itself up (`setup: …`, e.g. fan-out sessions that could not share an instance).
    fn failed_run_errors(&self) -> u64 {
        self.errors
            .iter()
            .filter(|(kind, _)| kind.starts_with("transport:") || kind.starts_with("setup:"))
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
                "fanout" => "rounds",
                "mint" => "instances minted",
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
        if let Some(fanout) = &self.fanout {
            fanout.table(&mut out);
        }
        if let Some(mint) = &self.mint {
            mint.table(&mut out);
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

impl FanoutReport {
    fn table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  fan-out, ms from sending the call:\n  {:>7} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>7} {:>5}",
            "round",
            "tool",
            "result",
            "first",
            "median",
            "p99",
            "last",
            "heard once",
            "missing",
            "extra"
        );
        let ms = |value: Option<f64>| value.map_or("-".to_string(), |ms| format!("{ms:.2}"));
        for round in &self.rounds {
            let label = if round.measured {
                round.round.to_string()
            } else {
                format!("{} (w)", round.round)
            };
            let _ = writeln!(
                out,
                "  {label:>7} {:<24} {:>9.2} {:>9} {:>9} {:>9} {:>9} {:>11} {:>7} {:>5}",
                round.tool,
                round.result_ms,
                ms(round.first_ms),
                ms(round.median_ms),
                ms(round.p99_ms),
                ms(round.last_ms),
                format!("{}/{}", round.heard_once, round.sessions),
                round.missing,
                round.extra
            );
        }
    }
}

impl MintReport {
    fn table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  minted {} of {} instances in {:.2} s ({:.1}/s)",
            self.minted, self.requested, self.seconds, self.mints_per_second
        );
        if let Some(memory) = &self.memory {
            let _ = writeln!(
                out,
                "  server memory (VmRSS): {} KiB before, {} KiB at peak, {} KiB after minting{}",
                memory.before_kib,
                memory.peak_kib,
                memory.after_mint_kib,
                memory
                    .per_instance_kib
                    .map_or(String::new(), |kib| format!(" ({kib:.2} KiB per instance)"))
            );
            if let Some(idle) = memory.after_wait_kib {
                let _ = writeln!(
                    out,
                    "  after the wait: {idle} KiB{}",
                    memory
                        .given_back_share
                        .map_or(String::new(), |share| format!(
                            ", {:.0} % of the growth given back",
                            share * 100.0
                        ))
                );
            }
        }
        if let Some(waited) = self.waited_seconds {
            let _ = writeln!(
                out,
                "  waited {waited:.1} s after the sessions ended ({}); {} of {} sampled instances \
                 listed the menu they were minted with",
                match self.passivated {
                    Some(true) => "/stats: every instance passivated",
                    Some(false) => "/stats: instances still live",
                    None => "no /stats",
                },
                self.sampled_unchanged,
                self.sampled
            );
        }
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
        } else if runs.iter().any(|run| run.failed_run_errors() > 0) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&ms| Duration::from_millis(ms)).collect()
    }

    #[test]
    fn a_fan_out_round_reads_its_sorted_arrivals_by_nearest_rank() {
        let delays = ms(&(1..=200).collect::<Vec<_>>());
        let mut round = FanoutRound::new(3, "t", Duration::from_millis(7), &delays, 203);
        assert_eq!(round.first_ms, Some(1.0));
        assert_eq!(round.median_ms, Some(100.0));
        assert_eq!(round.p99_ms, Some(198.0));
        assert_eq!(round.last_ms, Some(200.0));
        assert_eq!(round.result_ms, 7.0);
        round.missing = 3;
        assert_eq!(round.settle().heard_once, 200);
        let silent = FanoutRound::new(1, "t", Duration::ZERO, &[], 4);
        assert_eq!((silent.first_ms, silent.median_ms), (None, None));
    }

    #[test]
    fn mint_memory_is_per_instance_and_what_came_back_of_the_growth() {
        let mut memory = MintMemory::new(1000, 3000, 2600, 800);
        assert_eq!(memory.per_instance_kib, Some(2.0));
        memory.after_wait(1500);
        assert_eq!(memory.after_wait_kib, Some(1500));
        assert_eq!(memory.given_back_share, Some(0.75));
        assert_eq!(MintMemory::new(1000, 1000, 1000, 0).per_instance_kib, None);
    }
}
