//! `turnstile load URL` (or `--stdio -- COMMAND…`): load any MCP server and check the gating
//! contract while doing it (see `crate::load`). Exit code 0: no violation; 1: violations; 2: usage or
//! connection errors.

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use crate::load::{self, LoadError, LoadOptions, MintPlan, Mode, Protocol, Scenario, Settings};

/// The flags of `turnstile load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// The server's Streamable HTTP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
    #[arg(required_unless_present = "stdio", conflicts_with = "stdio")]
    pub url: Option<String>,
    /// Load a stdio server instead: every session starts the command given after `--` (one
    /// process per session), e.g. `--stdio -- turnstile serve --stdio --plugins DIR`.
    #[arg(long, requires = "command", conflicts_with = "compare")]
    pub stdio: bool,
    /// The stdio server's command and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Concurrent clients, each with its own session over shared keep-alive connections.
    #[arg(long, default_value_t = 16)]
    pub sessions: usize,
    /// Seconds to measure, after the warm-up (default 10, unless --iterations is given).
    #[arg(long, conflicts_with = "iterations")]
    pub duration: Option<f64>,
    /// Instead of a duration: walks (or scenario passes, or races) per client.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Seconds of load before measuring starts (the contract is checked throughout).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// The protocol revision the clients speak.
    #[arg(long, value_enum, default_value = "2025-11-25")]
    pub protocol: Protocol,
    /// Handle mode: instances are named by a handle passed as this argument (and in `_meta`),
    /// minted by the first call of a walk (for servers started with `--state-handle-key`).
    #[arg(long, value_name = "NAME")]
    pub handle_key: Option<String>,
    /// A new session for every walk (session mode always starts one per walk: a finished
    /// instance is the session's own).
    #[arg(long)]
    pub churn: bool,
    /// Open loop: start this many calls per second over all clients, whether or not the last
    /// ones returned; latency is measured from when each call was due.
    #[arg(long, value_name = "CALLS_PER_SECOND")]
    pub rate: Option<f64>,
    /// Report the server's CPU time per call, read from /proc/PID/stat.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Share of walk calls (0 to 1) sent with arguments that break the tool's input schema.
    #[arg(long, default_value_t = 0.0)]
    pub invalid_rate: f64,
    /// Chance (0 to 1), at each step of a walk, of calling a tool listed earlier in the walk but
    /// not now, which must be refused.
    #[arg(long, default_value_t = 0.1)]
    pub probe_rate: f64,
    /// Calls in one walk at most.
    #[arg(long, default_value_t = 32)]
    pub step_limit: usize,
    /// Run the steps of this JSON file instead of walking (its format is in
    /// docs/load-testing.md, and in the docs of `host/src/load/scenario.rs`).
    #[arg(long, value_name = "FILE", conflicts_with = "race")]
    pub scenario: Option<PathBuf>,
    /// All clients call the same listed tool on one instance at once: exactly one may win.
    /// Needs --handle-key.
    #[arg(long, conflicts_with_all = ["fanout", "mint"])]
    pub race: bool,
    /// Fan-out: --sessions sessions subscribe to one instance (the first mints it, the others
    /// list with its handle), then transitions are fired one at a time; each round reports the
    /// call's result time and the first, median, p99 and last list_changed delay, and every
    /// session must hear every transition exactly once. Needs --handle-key and a 2025 protocol;
    /// --iterations counts rounds. Each session holds an event stream: raise `ulimit -n` for
    /// thousands.
    #[arg(long, conflicts_with_all = ["scenario", "mint", "rate", "compare"])]
    pub fanout: bool,
    /// Mint this many instances (each the first call of a listed tool without a handle) with
    /// --sessions concurrent clients, and report mints/s; with --server-pid also the server's
    /// resident memory before, at peak and per instance. Needs --handle-key.
    #[arg(long, value_name = "COUNT", conflicts_with_all = ["scenario", "rate", "compare", "duration", "iterations"])]
    pub mint: Option<u64>,
    /// With --mint: end the sessions, wait up to SECS for the instances to go idle (less if the
    /// target serves Turnstile's /stats and it shows every instance passivated), read the
    /// server's memory again and check every 100th instance still lists its menu.
    #[arg(long, value_name = "SECS", requires = "mint")]
    pub after_mint_wait: Option<f64>,
    /// Print the report as JSON (schema `turnstile.load/v1`, see docs/load-testing.md) instead
    /// of a table.
    #[arg(long)]
    pub json: bool,
    /// Run the same load against this second endpoint too, taking turns, and print ratios.
    #[arg(long, value_name = "URL2")]
    pub compare: Option<String>,
    /// With --compare: the scenario the second endpoint's clients run instead of --scenario's
    /// (the same steps under the tool names that server gives them).
    #[arg(long, value_name = "FILE", requires_all = ["compare", "scenario"])]
    pub compare_scenario: Option<PathBuf>,
    /// The second server's process id, for its CPU time per call.
    #[arg(long, value_name = "PID", requires = "compare")]
    pub compare_pid: Option<u32>,
    /// With --compare: turns each endpoint takes (the duration is split between them).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Seconds a list_changed may take to arrive after its transition.
    #[arg(long, default_value_t = 2.0)]
    pub notify_timeout: f64,
    /// Seconds a request may take before it counts as a timeout.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// No live progress line (it is drawn only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs `turnstile load`.
pub fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    let options = match options(args) {
        Ok(options) => options,
        Err(problem) => return Ok(usage_error(&problem)),
    };
    let json = options.json;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(load::run(&options.load)) {
        Ok(summary) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", summary.text());
            }
            Ok(ExitCode::from(summary.exit_code))
        }
        Err(LoadError::Usage(problem)) => Ok(usage_error(&problem)),
        Err(error @ LoadError::Connect { .. }) => Ok(usage_error(&error.to_string())),
    }
}

fn usage_error(problem: &str) -> ExitCode {
    eprintln!("turnstile load: {problem}");
    ExitCode::from(2)
}

struct Parsed {
    load: LoadOptions,
    json: bool,
}

fn seconds(flag: &str, value: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("{flag} {value}: not a number of seconds"))
}

fn share(flag: &str, value: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{flag} {value}: must be between 0 and 1"))
    }
}

fn options(args: LoadArgs) -> Result<Parsed, String> {
    if !args.stdio && !args.command.is_empty() {
        return Err("a command after -- is for --stdio".into());
    }
    if args.sessions == 0 {
        return Err("--sessions 0: at least one client is needed".into());
    }
    if args.race && args.handle_key.is_none() {
        return Err(
            "--race needs --handle-key: sessions name a shared instance by its handle".into(),
        );
    }
    if (args.fanout || args.mint.is_some()) && args.handle_key.is_none() {
        return Err(
            "--fanout and --mint need --handle-key: instances are named by their handles".into(),
        );
    }
    if args.fanout && !args.protocol.has_sessions() {
        return Err(
            "--fanout needs a protocol with sessions (2025-06-18 or 2025-11-25): a list_changed \
             reaches a session on its event stream"
                .into(),
        );
    }
    if args.mint == Some(0) {
        return Err("--mint 0: nothing to mint".into());
    }
    if args
        .rate
        .is_some_and(|rate| !(rate > 0.0 && rate.is_finite()))
    {
        return Err("--rate must be a positive number of calls per second".into());
    }
    let mode = match (&args.scenario, args.race) {
        (Some(path), _) => {
            Mode::Scenario(Arc::new(Scenario::load(path).map_err(|e| e.to_string())?))
        }
        (None, true) => Mode::Race,
        (None, false) if args.fanout => Mode::Fanout,
        (None, false) => match args.mint {
            Some(count) => Mode::Mint(MintPlan {
                count,
                after_wait: args
                    .after_mint_wait
                    .map(|wait| seconds("--after-mint-wait", wait))
                    .transpose()?,
            }),
            None => Mode::Walk,
        },
    };
    // Minting is measured whole: it ends when COUNT instances were minted.
    let minting = matches!(mode, Mode::Mint(_));
    let duration = match (args.duration, args.iterations) {
        _ if minting => None,
        (_, Some(_)) => None,
        (Some(duration), None) => Some(seconds("--duration", duration)?),
        (None, None) => Some(Duration::from_secs(10)),
    };
    Ok(Parsed {
        json: args.json,
        load: LoadOptions {
            url: match &args.url {
                Some(url) => url.clone(),
                None => format!("stdio: {}", args.command.join(" ")),
            },
            stdio: args.stdio.then(|| args.command.clone()),
            compare: args.compare,
            compare_mode: match &args.compare_scenario {
                Some(path) => Some(Mode::Scenario(Arc::new(
                    Scenario::load(path).map_err(|e| e.to_string())?,
                ))),
                None => None,
            },
            protocol: args.protocol,
            mode,
            duration,
            warmup: if minting {
                Duration::ZERO
            } else {
                seconds("--warmup", args.warmup)?
            },
            rate: args.rate,
            server_pid: args.server_pid,
            compare_pid: args.compare_pid,
            rounds: args.rounds,
            request_timeout: seconds("--timeout", args.timeout)?,
            progress: !args.no_progress && !args.json,
            settings: Settings {
                sessions: args.sessions,
                handle_key: args.handle_key,
                churn: args.churn,
                invalid_rate: share("--invalid-rate", args.invalid_rate)?,
                probe_rate: share("--probe-rate", args.probe_rate)?,
                step_limit: args.step_limit,
                notify_timeout: seconds("--notify-timeout", args.notify_timeout)?,
                iterations: args.iterations,
            },
        },
    })
}
