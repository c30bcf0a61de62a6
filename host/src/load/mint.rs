//! `--mint COUNT`: mass minting. `--sessions` clients mint COUNT instances as fast as they can,
//! each mint being the first call of a listed tool without a handle (handle mode), so every
//! instance stays alive and named by its handle. Reports mints per second and their latency
//! (the run's `tools/call` figures) and, with `--server-pid`, the server's resident memory before,
//! at its peak and after minting, per instance.
//!
//! With `--after-mint-wait SECS` the sessions then end (a session keeps every instance it touched
//! subscribed), the server is given up to SECS to let its instances go idle, memory is read again,
//! and every 100th instance is listed on a new session: its menu must be the one it had right
//! after it was minted (on Turnstile the instance then comes back from its store). The wait ends
//! early when the target serves Turnstile's `/stats` and it shows no live instance and no
//! subscription (`server_stats.rs`); that part is optional, any other server is waited for SECS.
//!
//! The contract is checked on the calls as everywhere (a listed tool is never refused); the
//! `list_changed` each mint brings its own session are not followed.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures_util::{StreamExt, future::join_all, stream};
use rand::{SeedableRng, rngs::StdRng, seq::IndexedRandom};
use tokio::time::Instant;

use super::{
    Shared,
    contract::{CallIntent, Violation},
    conversation::Conversation,
    report::{MintMemory, MintReport},
    schema_args, server_memory,
    server_stats::{self, Passivation},
    tools::{Menu, Outcome, menus_differ},
};

/// Every this many mints, the instance's menu is kept, to be compared after the wait.
const SAMPLE_EVERY: u64 = 100;

/// Sessions being opened at once.
const CONNECT_CONCURRENCY: usize = 64;

/// How often the server's memory is read while minting, for its peak.
const MEMORY_SAMPLING: Duration = Duration::from_millis(100);

/// After the last mint, how long before memory is read (what the last calls left behind).
const SETTLE: Duration = Duration::from_millis(500);

/// What to mint and what to do after.
#[derive(Clone, Debug)]
pub struct MintPlan {
    pub count: u64,
    /// `--after-mint-wait`: how long the server may take to let the instances go idle.
    pub after_wait: Option<Duration>,
}

/// What the minting clients share.
struct Progress {
    plan: MintPlan,
    claimed: AtomicU64,
    minted: AtomicU64,
    /// (handle, menu right after minting) of every `SAMPLE_EVERY`th instance.
    samples: Mutex<Vec<(String, Menu)>>,
}

/// Mints, measures and reports (once: minting is not a loop that runs for a duration).
pub async fn run(shared: Arc<Shared>, plan: MintPlan, target: String, pid: Option<u32>) {
    let clients = shared.settings.sessions.min(plan.count.max(1) as usize);
    let sessions: Vec<Conversation> = stream::iter(0..clients)
        .map(|_| Conversation::open(&shared))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .filter_map(|opened| async {
            opened
                .map_err(|error| shared.stats.error(error.kind()))
                .ok()
        })
        .collect()
        .await;
    let memory_before = pid.and_then(|pid| resident(&shared, pid));
    let progress = Arc::new(Progress {
        plan: plan.clone(),
        claimed: AtomicU64::new(0),
        minted: AtomicU64::new(0),
        samples: Mutex::default(),
    });
    let minting = Arc::new(AtomicBool::new(true));
    let peak = pid.map(|pid| tokio::spawn(sample_peak(pid, minting.clone())));
    let started = Instant::now();
    let sessions = join_all(
        sessions
            .into_iter()
            .map(|session| mint_with(session, &shared, &progress)),
    )
    .await;
    let took = started.elapsed();
    shared.client_done();
    minting.store(false, Ordering::SeqCst);
    let minted = progress.minted.load(Ordering::SeqCst);
    let mut report = MintReport {
        requested: plan.count,
        minted,
        seconds: took.as_secs_f64(),
        mints_per_second: if took.is_zero() {
            0.0
        } else {
            minted as f64 / took.as_secs_f64()
        },
        memory: None,
        waited_seconds: None,
        passivated: None,
        sampled: 0,
        sampled_unchanged: 0,
    };
    let peak = match peak {
        Some(task) => task.await.ok().flatten(),
        None => None,
    };
    let mut memory = None;
    if let (Some(pid), Some(before)) = (pid, memory_before) {
        tokio::time::sleep(SETTLE).await;
        if let Some(after) = resident(&shared, pid) {
            let peak = peak.unwrap_or(after).max(after);
            memory = Some(MintMemory::new(before, peak, after, minted));
        }
    }
    close_all(sessions).await;
    if let Some(wait) = plan.after_wait {
        let waited = Instant::now();
        let passivation = server_stats::wait_for_passivation(&target, wait).await;
        report.waited_seconds = Some(waited.elapsed().as_secs_f64());
        report.passivated = match passivation {
            Passivation::Seen => Some(true),
            Passivation::NotSeen => Some(false),
            Passivation::Unknown => None,
        };
        if let (Some(memory), Some(pid)) = (memory.as_mut(), pid)
            && let Some(idle) = resident(&shared, pid)
        {
            memory.after_wait(idle);
        }
        let samples = std::mem::take(
            &mut *progress
                .samples
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
        );
        (report.sampled, report.sampled_unchanged) = check_samples(&shared, samples).await;
    }
    report.memory = memory;
    shared.record_mint(report);
}

/// One client: mints until COUNT mints were claimed (or the run stops); gives its session back.
async fn mint_with(
    mut session: Conversation,
    shared: &Arc<Shared>,
    progress: &Progress,
) -> Conversation {
    let mut rng = StdRng::from_rng(&mut rand::rng());
    let handle_key = shared.settings.handle_key.as_deref();
    let Some(menu) = session.list().await else {
        return session;
    };
    let movers: Vec<_> = menu.iter().filter(|tool| !tool.read_only).collect();
    if movers.is_empty() {
        shared
            .stats
            .error("setup: mint: no tool but read-only ones is listed without a handle".into());
        return session;
    }
    loop {
        let claim = progress.claimed.fetch_add(1, Ordering::SeqCst);
        if claim >= progress.plan.count || shared.is_stopped() {
            return session;
        }
        session.handle = None;
        let tool = movers.choose(&mut rng).expect("not empty");
        let arguments = schema_args::valid(&tool.input_schema, handle_key, &mut rng);
        let Some((outcome, _)) = session
            .call(&tool.name, arguments, CallIntent::Listed, true)
            .await
        else {
            continue;
        };
        match (&outcome, &session.handle) {
            (Outcome::Ok { .. }, Some(handle)) => {
                let handle = handle.clone();
                let n = progress.minted.fetch_add(1, Ordering::SeqCst);
                shared.stats.iteration();
                if n.is_multiple_of(SAMPLE_EVERY)
                    && let Some(menu) = session.list().await
                {
                    let mut samples = progress
                        .samples
                        .lock()
                        .unwrap_or_else(|poison| poison.into_inner());
                    samples.push((handle, menu));
                }
            }
            (Outcome::Ok { .. }, None) => shared.stats.error(format!(
                "setup: mint: {} answered without a handle",
                tool.name
            )),
            // Refusals are judged by the conversation; other errors are counted as outcomes.
            _ => {}
        }
    }
}

/// The server's highest resident memory while `minting` is on.
async fn sample_peak(pid: u32, minting: Arc<AtomicBool>) -> Option<u64> {
    let mut peak = None;
    while minting.load(Ordering::SeqCst) {
        if let Ok(kib) = server_memory::resident_kib(pid) {
            peak = Some(peak.map_or(kib, |peak: u64| peak.max(kib)));
        }
        tokio::time::sleep(MEMORY_SAMPLING).await;
    }
    peak
}

fn resident(shared: &Shared, pid: u32) -> Option<u64> {
    server_memory::resident_kib(pid)
        .map_err(|error| shared.stats.error(format!("server memory: {error}")))
        .ok()
}

async fn close_all(sessions: Vec<Conversation>) {
    stream::iter(sessions.into_iter().map(Conversation::close))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Lists every sampled instance on a new session; returns how many were listed and how many
/// listed the menu they had right after minting. A different menu is a violation.
async fn check_samples(shared: &Arc<Shared>, samples: Vec<(String, Menu)>) -> (u64, u64) {
    if samples.is_empty() {
        return (0, 0);
    }
    let mut session = match Conversation::open(shared).await {
        Ok(session) => session,
        Err(error) => {
            shared.stats.error(error.kind());
            return (0, 0);
        }
    };
    let (mut listed, mut unchanged) = (0, 0);
    for (handle, minted_menu) in samples {
        session.handle = Some(handle.clone());
        let Some(menu) = session.list().await else {
            continue;
        };
        listed += 1;
        if menus_differ(&minted_menu, &menu) {
            let names = |menu: &Menu| {
                menu.iter()
                    .map(|tool| tool.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            shared.violations.record(Violation::InstanceChanged, || {
                format!(
                    "{handle}: listed [{}] after the wait, [{}] right after it was minted",
                    names(&menu),
                    names(&minted_menu)
                )
            });
        } else {
            unchanged += 1;
        }
    }
    session.close().await;
    (listed, unchanged)
}
