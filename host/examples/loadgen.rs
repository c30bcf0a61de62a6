//! Benchmarks of Turnstile across stores: acknowledged transitions per second and call latency
//! per store and concurrency (measured by `turnstile load`), and memory per instance.
//!
//! Build the server and plugins first, in the same profile:
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release --example loadgen -- throughput \
//!     --stores memory:,embedded,redis://127.0.0.1:6379,postgres://postgres@127.0.0.1:5432/test \
//!     --concurrency 1,16,64 --duration 10 --rounds 2
//! cargo run --release --example loadgen -- instances --count 100000 --store memory:
//! ```
//!
//! `throughput` starts one server per store and runs `turnstile load` against each, with the
//! scenario `invoice_cycle.json` beside this file: every client has its own session and its own
//! invoice instance (handle mode) and drives it through reject/submit cycles, one call at a
//! time, so every acknowledged call is one saved transition. The (store, concurrency) points are
//! measured round-robin, `--rounds` times, so that the machine's noise hits every store alike;
//! each point reports its best round. Ratios are against the first store at the same
//! concurrency. For one server already running, use `turnstile load` directly:
//! `turnstile load URL --scenario host/examples/invoice_cycle.json --handle-key handle`.
//!
//! `instances`: mints `--count` instances (each one `invoice.submit` without a handle: a create
//! and a transition) and reports the server's resident memory before and after, per instance;
//! with `--idle-after S` it then ends its sessions, waits until every instance is passivated
//! and unsubscribed, reports memory again, and asks every 100th instance for its state (exit 1 if
//! one did not come back as it was left).
//!
//! Servers it starts are `target/<profile>/turnstile` with the invoice plugin from the same
//! directory, in handle mode, with a private data directory; they are killed at the end.
//! Redis/PostgreSQL data goes to the default namespace (`turnstile:` keys, table
//! `turnstile_instances`) and is left there: one record per client, one per minted instance.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion},
    service::RunningService,
    transport::StreamableHttpClientTransport,
};
use serde_json::{Value, json};

type Session = RunningService<RoleClient, ClientConfig>;

fn usage() -> ! {
    eprintln!(
        "usage:\n  loadgen throughput [--stores S1,S2,..] [--concurrency 1,16,64] [--duration SECS] \
         [--warmup SECS] [--rounds N]\n  loadgen instances [--count K] [--store S] \
         [--concurrency C] [--idle-after SECS] [--url URL --pid PID]\n\
         stores: memory:, embedded (a private data dir), redis://…, postgres://…"
    );
    std::process::exit(2)
}

struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str) -> Option<String> {
        let at = self.0.iter().position(|a| a == name)?;
        Some(self.0.get(at + 1).cloned().unwrap_or_else(|| usage()))
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        self.value(name)
            .map(|v| v.parse().unwrap_or_else(|_| usage()))
            .unwrap_or(default)
    }

    fn list(&self, name: &str, default: &str) -> Vec<String> {
        self.value(name)
            .unwrap_or_else(|| default.to_string())
            .split(',')
            .map(str::to_string)
            .collect()
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = args.first().cloned() else {
        usage()
    };
    let args = Args(args[1..].to_vec());
    match mode.as_str() {
        "throughput" => throughput(&args).await,
        "instances" => instances(&args).await,
        _ => usage(),
    }
}

/// A `turnstile serve --http` this program started; killed on drop.
struct Server {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `target/<profile>/`, where this example's own directory is `target/<profile>/examples/`.
    fn profile_dir() -> PathBuf {
        let exe = std::env::current_exe().expect("current exe");
        exe.parent()
            .and_then(|examples| examples.parent())
            .expect("target/<profile>/examples")
            .to_path_buf()
    }

    /// The `turnstile` binary of the same profile.
    fn binary() -> PathBuf {
        Self::profile_dir().join("turnstile")
    }

    fn start(store: &str, extra: &[&str]) -> Server {
        let profile_dir = Self::profile_dir();
        let binary = Self::binary();
        let plugin = profile_dir.join("libturnstile_plugin_invoice.so");
        for path in [&binary, &plugin] {
            assert!(
                path.exists(),
                "{} is missing: run `cargo build --release --workspace` first",
                path.display()
            );
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::copy(&plugin, plugins.join(plugin.file_name().unwrap())).unwrap();
        let mut command = Command::new(&binary);
        command
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--state-handle-key",
                "--plugins",
            ])
            .arg(&plugins)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(extra);
        if store != "embedded" {
            command.args(["--store", store]);
        }
        let mut child = command
            .env("RUST_LOG", "warn,turnstile=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start turnstile");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(start) = line.find("http://")
                    && line.contains("/mcp")
                {
                    let _ = tx.send(line[start..].split_whitespace().next().unwrap().to_string());
                } else if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("server: {line}");
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("turnstile on {store} did not start"));
        Server {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(url: &str) -> Session {
    let config =
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    config
        .serve(StreamableHttpClientTransport::from_uri(url.to_string()))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

async fn call(session: &Session, tool: &str, arguments: Value) -> Result<CallToolResult, String> {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    session
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(arguments))
        .await
        .map_err(|e| e.to_string())
}

/// Mints an invoice (in review) and returns its handle.
async fn mint(session: &Session) -> Result<String, String> {
    let result = call(session, "invoice.submit", json!({"amount": 10})).await?;
    if result.is_error == Some(true) {
        return Err(format!("{result:?}"));
    }
    result
        .structured_content
        .as_ref()
        .and_then(|s| s["handle"].as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("no handle in {result:?}"))
}

/// One (store, concurrency) point: what `turnstile load --json` reported for it.
struct Point {
    calls_per_second: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    errors: u64,
    violations: u64,
}

/// Runs `turnstile load` (the binary beside the server's) for one point.
fn measure(
    binary: &Path,
    url: &str,
    pid: u32,
    workers: usize,
    warmup: f64,
    duration: f64,
) -> Point {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/invoice_cycle.json");
    let output = Command::new(binary)
        .arg("load")
        .arg(url)
        .arg("--scenario")
        .arg(&scenario)
        .args(["--handle-key", "handle", "--json", "--sessions"])
        .arg(workers.to_string())
        .arg("--duration")
        .arg(duration.to_string())
        .arg("--warmup")
        .arg(warmup.to_string())
        .arg("--server-pid")
        .arg(pid.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run turnstile load");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "turnstile load printed no report ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    let run = &report["runs"][0];
    let latency = &run["call_latency_ms"];
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    let sum = |map: &Value| -> u64 {
        map.as_object()
            .into_iter()
            .flatten()
            .map(|(_, count)| {
                count
                    .as_u64()
                    .or_else(|| count["count"].as_u64())
                    .unwrap_or(0)
            })
            .sum()
    };
    Point {
        calls_per_second: number(&run["calls_per_second"]),
        p50: number(&latency["p50"]),
        p90: number(&latency["p90"]),
        p99: number(&latency["p99"]),
        max: number(&latency["max"]),
        errors: sum(&run["errors"]),
        violations: sum(&run["violations"]),
    }
}

async fn throughput(args: &Args) {
    let concurrency: Vec<usize> = args
        .list("--concurrency", "1,16,64")
        .iter()
        .map(|c| c.parse().unwrap_or_else(|_| usage()))
        .collect();
    let duration: f64 = args.number("--duration", 10.0);
    let warmup: f64 = args.number("--warmup", 1.0);
    let rounds: usize = args.number("--rounds", 1);
    let mut servers = Vec::new();
    for store in args.list("--stores", "memory:,embedded") {
        // Never passivate: every instance stays live for the whole run.
        servers.push((store.clone(), Server::start(&store, &["--idle-after", "0"])));
    }
    let binary = Server::binary();
    println!(
        "throughput: {duration} s per point after {warmup} s warm-up, {rounds} round(s), best round \
         reported"
    );
    let mut best: Vec<Vec<Option<Point>>> = servers
        .iter()
        .map(|_| concurrency.iter().map(|_| None).collect())
        .collect();
    for round in 0..rounds {
        for (ci, &workers) in concurrency.iter().enumerate() {
            for (ti, (name, server)) in servers.iter().enumerate() {
                let pid = server.child.id();
                let point = measure(&binary, &server.url, pid, workers, warmup, duration);
                println!(
                    "round {round} {name:<45} c={workers:<3} {:>9.0} acked/s  p50 {:>7.2} ms  \
                     p99 {:>7.2} ms  errors {}  violations {}",
                    point.calls_per_second, point.p50, point.p99, point.errors, point.violations
                );
                let slot = &mut best[ti][ci];
                if slot
                    .as_ref()
                    .is_none_or(|b| b.calls_per_second < point.calls_per_second)
                {
                    *slot = Some(point);
                }
            }
        }
    }
    println!();
    println!(
        "| store | concurrency | acked transitions/s | vs {} | p50 ms | p90 ms | p99 ms | max ms | errors |",
        servers[0].0
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (ci, &workers) in concurrency.iter().enumerate() {
        let reference = best[0][ci].as_ref().unwrap().calls_per_second;
        for (ti, (name, _)) in servers.iter().enumerate() {
            let point = best[ti][ci].as_ref().unwrap();
            println!(
                "| {name} | {workers} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                point.calls_per_second,
                point.calls_per_second / reference,
                point.p50,
                point.p90,
                point.p99,
                point.max,
                point.errors
            );
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read /proc/<pid>/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS")
}

async fn stats(url: &str) -> Value {
    let base = url.trim_end_matches("/mcp");
    let text = reqwest::get(format!("{base}/stats"))
        .await
        .expect("GET /stats")
        .text()
        .await
        .expect("/stats body");
    serde_json::from_str(&text).expect("/stats JSON")
}

async fn instances(args: &Args) {
    let count: usize = args.number("--count", 100_000);
    let workers: usize = args.number("--concurrency", 64);
    let store = args
        .value("--store")
        .unwrap_or_else(|| "memory:".to_string());
    let idle_after: u64 = args.number("--idle-after", 0);
    let idle = idle_after.to_string();
    let (url, pid, _server) = match args.value("--url") {
        Some(url) => {
            let pid = args.number("--pid", 0u32);
            assert!(pid != 0, "--url needs --pid (to read the server's memory)");
            (url, pid, None)
        }
        None => {
            let server = Server::start(&store, &["--idle-after", &idle]);
            (server.url.clone(), server.child.id(), Some(server))
        }
    };
    let sessions: Vec<Arc<Session>> = {
        let mut sessions = Vec::new();
        for _ in 0..workers.min(16) {
            sessions.push(Arc::new(connect(&url).await));
        }
        sessions
    };
    for session in &sessions {
        mint(session).await.expect("warm-up mint");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(pid);
    let stats_before = stats(&url).await;
    println!("store {store}: before: RSS {before} KiB, {stats_before}");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let session = sessions[w % sessions.len()].clone();
        let next = next.clone();
        // Every 100th handle is kept, to be asked for its state once it has been passivated.
        tasks.push(tokio::spawn(async move {
            let mut kept = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    break kept;
                }
                let handle = mint(&session).await.expect("mint");
                if n.is_multiple_of(100) {
                    kept.push(handle);
                }
            }
        }));
    }
    let mut peak = before;
    while !tasks.iter().all(|t| t.is_finished()) {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut kept = Vec::new();
    for task in tasks {
        kept.extend(task.await.expect("minting worker"));
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    peak = peak.max(after);
    let stats_after = stats(&url).await;
    println!(
        "minted {count} instances in {:.1} s ({:.0}/s) with {workers} concurrent calls",
        took.as_secs_f64(),
        count as f64 / took.as_secs_f64()
    );
    println!(
        "after: RSS {after} KiB (peak {peak} KiB): +{} KiB, {:.2} KiB per instance; {stats_after}",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / count as f64
    );
    if idle_after > 0 {
        // Sessions stay subscribed to every instance they touched while they live: end them, so
        // that only passivation is left between the instances and the memory.
        for session in sessions {
            if let Some(session) = Arc::into_inner(session) {
                let _ = session.cancel().await;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(idle_after * 4 + 60);
        loop {
            let stats = stats(&url).await;
            if stats["registry"]["instances"].as_u64() == Some(0)
                && stats["notifier"]["subscriptions"].as_u64() == Some(0)
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let idle = rss_kib(pid);
                println!(
                    "passivated: RSS {idle} KiB: gave back {} of {} KiB grown ({:.0}%); {stats}",
                    peak.saturating_sub(idle),
                    peak.saturating_sub(before),
                    100.0 * peak.saturating_sub(idle) as f64
                        / peak.saturating_sub(before).max(1) as f64
                );
                check_after_passivation(&url, &kept).await;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "instances never passivated: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Asks every kept handle for its state on a new session: each must have come back from the store
/// in `review`, where `invoice.submit` left it. Exits 1 otherwise.
async fn check_after_passivation(url: &str, handles: &[String]) {
    let session = connect(url).await;
    let mut wrong = Vec::new();
    for handle in handles {
        let result = call(&session, "invoice.status", json!({ "handle": handle })).await;
        let state = result.as_ref().ok().and_then(|r| {
            r.structured_content
                .as_ref()
                .and_then(|s| s["state"].as_str())
                .map(str::to_string)
        });
        if state.as_deref() != Some("review") {
            wrong.push(format!("{handle}: {result:?}"));
        }
    }
    println!(
        "after passivation: {} of {} sampled handles answered `review`",
        handles.len() - wrong.len(),
        handles.len()
    );
    if !wrong.is_empty() {
        eprintln!("wrong after passivation:\n{}", wrong.join("\n"));
        std::process::exit(1);
    }
}
