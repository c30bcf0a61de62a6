//! One load run against one target (warm-up, measurement, the clients' last judgements), and
//! `--compare`: the same load against two targets, taking turns round by round so that the
//! machine's noise hits both alike.

use std::{
    sync::{Arc, Mutex, atomic::AtomicBool},
    time::Duration,
};

use tokio::{task::JoinSet, time::Instant};

use super::{
    LoadOptions, Mode, Shared,
    client::{Endpoint, Session},
    contract::Violations,
    fanout, mint,
    pacing::Pacer,
    progress::Progress,
    race,
    report::{Findings, Report, Summary},
    scenario, server_cpu,
    stats::Stats,
    tools, walker,
    wire::ClientError,
};

/// Why a run could not be made at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{url}: {error}")]
    Connect { url: String, error: String },
    #[error("{0}")]
    Usage(String),
}

/// One target's accumulated results over every round.
struct Target {
    url: String,
    /// Over stdio, the server command (then `url` is only a label).
    stdio: Option<Vec<String>>,
    /// What its clients do, when not the run's `mode` (`--compare-scenario`).
    mode: Option<Mode>,
    pid: Option<u32>,
    stats: Arc<Stats>,
    violations: Arc<Violations>,
    findings: Arc<Mutex<Findings>>,
    server_cpu: Duration,
}

/// Runs the load and returns what it measured.
pub async fn run(options: &LoadOptions) -> Result<Summary, LoadError> {
    let mut targets = vec![Target::new(&options.url, options.server_pid)];
    targets[0].stdio = options.stdio.clone();
    if let Some(url) = &options.compare {
        let mut second = Target::new(url, options.compare_pid);
        second.mode = options.compare_mode.clone();
        targets.push(second);
    }
    for target in &targets {
        preflight(target, options).await?;
    }
    let rounds = if targets.len() > 1 {
        options.rounds.max(1)
    } else {
        1
    };
    let progress = Progress::new(options.progress);
    for round in 0..rounds {
        for target in &mut targets {
            let duration = options.duration.map(|d| d.div_f64(rounds as f64));
            progress.set_target(&target.url, round, rounds);
            run_round(target, options, duration, &progress).await?;
        }
    }
    progress.finish();
    let reports = targets
        .iter()
        .map(|target| {
            Report::new(
                &target.url,
                options,
                &target.stats,
                &target.violations,
                target.pid.map(|_| target.server_cpu),
                &target.findings.lock().unwrap_or_else(|p| p.into_inner()),
            )
        })
        .collect();
    Ok(Summary::new(reports))
}

impl Target {
    fn new(url: &str, pid: Option<u32>) -> Target {
        Target {
            url: url.to_string(),
            stdio: None,
            mode: None,
            pid,
            stats: Arc::default(),
            violations: Arc::default(),
            findings: Arc::default(),
            server_cpu: Duration::ZERO,
        }
    }

    fn endpoint(&self, options: &LoadOptions) -> Result<Endpoint, LoadError> {
        let endpoint = match &self.stdio {
            Some(command) => {
                Endpoint::stdio(command.clone(), options.protocol, options.request_timeout)
            }
            None => Endpoint::new(&self.url, options.protocol, options.request_timeout),
        };
        endpoint.map_err(|error| LoadError::Connect {
            url: self.url.clone(),
            error: error.to_string(),
        })
    }
}

/// One session and one `tools/list` before anything else: a target that cannot do that much
/// is a usage or connection problem, not a load result.
async fn preflight(target: &Target, options: &LoadOptions) -> Result<(), LoadError> {
    let url = &target.url;
    let failed = |error: String| LoadError::Connect {
        url: url.to_string(),
        error,
    };
    if target.stdio.is_none() && !url.starts_with("http://") {
        return Err(LoadError::Usage(format!(
            "{url}: only http:// endpoints are supported (put a TLS-terminating proxy in front)"
        )));
    }
    let endpoint = Arc::new(target.endpoint(options)?);
    let mut session = Session::open(endpoint)
        .await
        .map_err(|e: ClientError| failed(e.to_string()))?;
    let listed = tools::list(&mut session, None).await;
    session.close().await;
    listed.map_err(|e| failed(e.to_string()))?;
    if let Some(pid) = target.pid {
        server_cpu::cpu_time(pid)
            .map_err(|e| LoadError::Usage(format!("--server-pid {pid}: {e}")))?;
    }
    Ok(())
}

async fn run_round(
    target: &mut Target,
    options: &LoadOptions,
    duration: Option<Duration>,
    progress: &Progress,
) -> Result<(), LoadError> {
    let endpoint = target.endpoint(options)?;
    let shared = Arc::new(Shared {
        endpoint: Arc::new(endpoint),
        stats: target.stats.clone(),
        violations: target.violations.clone(),
        pacer: match options.rate {
            Some(rate) => Pacer::open_loop(rate),
            None => Pacer::closed_loop(),
        },
        settings: options.settings.clone(),
        stopped: AtomicBool::new(false),
        last_done: Mutex::new(None),
        findings: target.findings.clone(),
    });
    // With no warm-up every call counts, the clients' first ones too: measuring starts before
    // any client does (a client spawned first could set up and call before it, uncounted).
    let started = Instant::now();
    let mut phase = Phase::WarmingUp;
    if options.warmup.is_zero() {
        phase = Phase::Measuring {
            since: started,
            cpu: cpu_of(target.pid),
        };
        shared.stats.set_measuring(true);
    }
    let mut clients = JoinSet::new();
    match target.mode.as_ref().unwrap_or(&options.mode) {
        Mode::Walk => {
            for _ in 0..options.settings.sessions {
                clients.spawn(walker::run_client(shared.clone()));
            }
        }
        Mode::Scenario(scenario) => {
            for _ in 0..options.settings.sessions {
                clients.spawn(scenario::run_client(shared.clone(), scenario.clone()));
            }
        }
        Mode::Race => {
            clients.spawn(race::run(shared.clone()));
        }
        Mode::Fanout => {
            clients.spawn(fanout::run(shared.clone()));
        }
        Mode::Mint(plan) => {
            clients.spawn(mint::run(
                shared.clone(),
                plan.clone(),
                target.url.clone(),
                target.pid,
            ));
        }
    }
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            joined = clients.join_next() => {
                if joined.is_none() {
                    break;
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        if phase == Phase::WarmingUp && now - started >= options.warmup {
            phase = Phase::Measuring {
                since: now,
                cpu: cpu_of(target.pid),
            };
            shared.stats.set_measuring(true);
        }
        if let Phase::Measuring { since, cpu } = phase
            && duration.is_some_and(|duration| now - since >= duration)
        {
            // The clients stop; calls still in flight are not counted.
            shared
                .stopped
                .store(true, std::sync::atomic::Ordering::SeqCst);
            close_measurement(target, &shared, since, cpu, now);
            phase = Phase::Closed;
        }
        let since = match phase {
            Phase::Measuring { since, .. } => Some(since),
            _ => None,
        };
        progress.update(&shared.stats, &shared.violations, since);
    }
    // Every client did its iterations: measured up to the last one's end.
    if let Phase::Measuring { since, cpu } = phase {
        let until = shared
            .last_done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or_else(Instant::now);
        close_measurement(target, &shared, since, cpu, until.max(since));
    }
    Ok(())
}

/// Where a round is.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    WarmingUp,
    Measuring {
        since: Instant,
        cpu: Option<Duration>,
    },
    Closed,
}

fn close_measurement(
    target: &mut Target,
    shared: &Shared,
    since: Instant,
    cpu_before: Option<Duration>,
    until: Instant,
) {
    shared.stats.set_measuring(false);
    shared.stats.add_measured(until - since);
    if let (Some(before), Some(after)) = (cpu_before, cpu_of(target.pid)) {
        target.server_cpu += after.saturating_sub(before);
    }
}

fn cpu_of(pid: Option<u32>) -> Option<Duration> {
    pid.and_then(|pid| server_cpu::cpu_time(pid).ok())
}
