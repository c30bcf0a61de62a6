//! `turnstile load`: a load tester for any MCP server over Streamable HTTP, which checks the
//! gating contract while it loads.
//!
//! Layout:
//! - `client.rs`: one MCP client on the wire (handshake per protocol revision, SSE, the
//!   session's event stream), over one shared keep-alive connection pool; `sse.rs` its framing;
//!   `stdio.rs` the same over a server process's stdin and stdout (`--stdio`).
//! - `tools.rs`: `tools/list` and `tools/call`, and what an answer means (refused or not).
//! - `schema_args.rs`: arguments made from a tool's input schema, valid or not.
//! - `contract.rs`: the contract's judgements and the tally of violations.
//! - `conversation.rs`: one client's session, instance and subscriptions; every request of a
//!   driver is timed, counted and judged there.
//! - The drivers: `walker.rs` (the default: walk like an agent), `scenario.rs` (`--scenario`),
//!   `race.rs` (`--race`), `fanout.rs` (`--fanout`: one transition, N watching sessions) and
//!   `mint.rs` (`--mint`: mass minting).
//! - `pacing.rs` (closed or open loop), `stats.rs` (histograms and counts), `server_cpu.rs` and
//!   `server_memory.rs` (the server's CPU time and resident memory, from `/proc`),
//!   `server_stats.rs` (Turnstile's `/stats`, used only if the target serves it),
//!   `progress.rs` (the live line), `report.rs` (the final table and `--json`).
//! - `run.rs`: one run against one target, and `--compare`'s interleaving.
//!
//! It must not import anything of the server: it talks to Turnstile as to any other server.

mod client;
mod contract;
mod conversation;
mod fanout;
mod mint;
mod pacing;
mod progress;
mod race;
pub mod report;
mod run;
mod scenario;
mod schema_args;
mod server_cpu;
mod server_memory;
mod server_stats;
mod sse;
mod stats;
mod stdio;
mod tools;
mod walker;
mod wire;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

pub use client::Protocol;
pub use mint::MintPlan;
pub use run::{LoadError, run};
pub use scenario::Scenario;
use tokio::time::Instant;

/// What a load run does.
pub struct LoadOptions {
    /// The endpoint, e.g. `http://127.0.0.1:8080/mcp`; a label with `stdio`.
    pub url: String,
    /// Over stdio: the server command each session starts (`--stdio -- COMMAND…`).
    pub stdio: Option<Vec<String>>,
    /// A second endpoint to run the same load against, interleaved (`--compare`).
    pub compare: Option<String>,
    /// What the second endpoint's clients do instead of `mode` (`--compare-scenario`: the same
    /// steps under the names that server gives its tools, e.g. an upstream alone against the
    /// same server behind Turnstile).
    pub compare_mode: Option<Mode>,
    pub protocol: Protocol,
    pub mode: Mode,
    /// Measure for this long (after the warm-up); `None` with `iterations`.
    pub duration: Option<Duration>,
    pub warmup: Duration,
    /// Open loop: this many calls per second over all clients (`--rate`).
    pub rate: Option<f64>,
    /// The servers' process ids, for their CPU time per call (`--server-pid`, `--compare-pid`).
    pub server_pid: Option<u32>,
    pub compare_pid: Option<u32>,
    /// With `compare`: how many times each target takes its turn.
    pub rounds: usize,
    /// How long a request may take before it counts as a timeout.
    pub request_timeout: Duration,
    pub progress: bool,
    pub settings: Settings,
}

/// What each client does.
#[derive(Clone)]
pub enum Mode {
    Walk,
    Scenario(Arc<Scenario>),
    Race,
    /// One instance, `--sessions` sessions subscribed to it, transitions fired one at a time.
    Fanout,
    /// Mint this many instances, then maybe wait for them to go idle.
    Mint(MintPlan),
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Walk => "walk",
            Mode::Scenario(_) => "scenario",
            Mode::Race => "race",
            Mode::Fanout => "fanout",
            Mode::Mint(_) => "mint",
        }
    }
}

/// How the clients behave, the same for every target.
#[derive(Clone, Debug)]
pub struct Settings {
    pub sessions: usize,
    /// Handle mode: the argument (and `_meta`) name that carries an instance's handle.
    pub handle_key: Option<String>,
    /// A new session for every walk (or scenario pass).
    pub churn: bool,
    /// Share of walk calls made with arguments that break the tool's schema.
    pub invalid_rate: f64,
    /// Chance, at each step of a walk, of probing a tool listed earlier but not now.
    pub probe_rate: f64,
    /// Calls in one walk at most.
    pub step_limit: usize,
    /// How long a `list_changed` may take to arrive after its transition's call.
    pub notify_timeout: Duration,
    /// Walks, scenario passes or races per client, instead of a duration.
    pub iterations: Option<u64>,
}

/// What every client of one run shares.
pub(crate) struct Shared {
    endpoint: Arc<client::Endpoint>,
    stats: Arc<stats::Stats>,
    violations: Arc<contract::Violations>,
    pacer: pacing::Pacer,
    settings: Settings,
    stopped: AtomicBool,
    /// When the last client finished its iterations (calls/s is measured up to there).
    last_done: Mutex<Option<Instant>>,
    /// What a mode measures beyond the common statistics.
    findings: Arc<Mutex<report::Findings>>,
}

impl Shared {
    /// Whether a client that has done `done` iterations stops.
    fn should_stop(&self, done: u64) -> bool {
        self.is_stopped() || self.settings.iterations.is_some_and(|n| done >= n)
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// A client that could not connect waits a little before it tries again.
    async fn back_off(&self) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// A fan-out round, kept for the report (marked as warm-up unless measuring).
    fn record_fanout_round(&self, mut round: report::FanoutRound) {
        round.measured = self.stats.is_measuring();
        let mut findings = self.findings.lock().unwrap_or_else(|p| p.into_inner());
        findings.fanout_rounds.push(round);
    }

    fn record_mint(&self, mint: report::MintReport) {
        let mut findings = self.findings.lock().unwrap_or_else(|p| p.into_inner());
        findings.mint = Some(mint);
    }

    fn client_done(&self) {
        let mut last = self.last_done.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some(Instant::now());
    }
}
