//! Load generator for Turnstile: acknowledged transitions per second and call latency per store
//! and concurrency, and memory per instance.
//!
//! Build the server and plugins first, in the same profile:
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release --example loadgen -- throughput \
//!     --stores memory:,embedded,redis://127.0.0.1:6379,postgres://postgres@127.0.0.1:5432/test \
//!     --concurrency 1,16,64 --duration 10 --rounds 2
//! cargo run --release --example loadgen -- instances --count 100000 --store memory:
//! cargo run --release --example loadgen -- throughput --url http://127.0.0.1:8080/mcp
//! ```
//!
//! `throughput`: every worker has its own MCP session and its own invoice instance (handle mode),
//! and drives it through reject/submit cycles for the duration, one call at a time; a call counts
//! when it is acknowledged (a successful result: the transition is saved). One server per store
//! runs for the whole measurement, and the (store, concurrency) points are measured round-robin,
//! `--rounds` times, so that the machine's noise hits every store alike; each point reports its
//! best round. Ratios are against the first store at the same concurrency.
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
//! `turnstile_instances`) and is left there: one record per worker, one per minted instance.

use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
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
         [--warmup SECS] [--rounds N] [--url URL]\n  loadgen instances [--count K] [--store S] \
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
    fn start(store: &str, extra: &[&str]) -> Server {
        let exe = std::env::current_exe().expect("current exe");
        // target/<profile>/examples/loadgen → target/<profile>/
        let profile_dir = exe
            .parent()
            .and_then(|examples| examples.parent())
            .expect("target/<profile>/examples")
            .to_path_buf();
        let binary = profile_dir.join("turnstile");
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

struct Point {
    acked: u64,
    errors: u64,
    seconds: f64,
    /// Latencies of acknowledged calls, microseconds, sorted.
    latencies: Vec<u64>,
}

impl Point {
    fn rate(&self) -> f64 {
        self.acked as f64 / self.seconds
    }

    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let at = ((self.latencies.len() as f64 * p).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[at - 1] as f64 / 1000.0
    }
}

/// `workers` sessions, each driving its own instance through reject/submit cycles.
async fn measure(url: &str, workers: usize, warmup: Duration, duration: Duration) -> Point {
    let mut sessions = Vec::new();
    for _ in 0..workers {
        let session = connect(url).await;
        let handle = mint(&session).await.expect("mint");
        sessions.push((session, handle));
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (session, handle) in sessions {
        let measuring = measuring.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut in_review = true;
            let (mut acked, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let (tool, arguments) = if in_review {
                    (
                        "invoice.reject",
                        json!({"handle": handle, "reason": "load"}),
                    )
                } else {
                    ("invoice.submit", json!({"handle": handle, "amount": 10}))
                };
                let started = Instant::now();
                let result = call(&session, tool, arguments).await;
                let took = started.elapsed().as_micros() as u64;
                let counted = measuring.load(Ordering::Relaxed);
                match result {
                    Ok(result) if result.is_error != Some(true) => {
                        in_review = !in_review;
                        if counted {
                            acked += 1;
                            latencies.push(took);
                        }
                    }
                    Ok(result) => {
                        errors += 1;
                        eprintln!("{tool}: {result:?}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error) => {
                        errors += 1;
                        eprintln!("{tool}: {error}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            let _ = session.cancel().await;
            (acked, errors, latencies)
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::SeqCst);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::SeqCst);
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let mut point = Point {
        acked: 0,
        errors: 0,
        seconds,
        latencies: Vec::new(),
    };
    for task in tasks {
        let (acked, errors, latencies) = task.await.expect("worker");
        point.acked += acked;
        point.errors += errors;
        point.latencies.extend(latencies);
    }
    point.latencies.sort_unstable();
    point
}

async fn throughput(args: &Args) {
    let concurrency: Vec<usize> = args
        .list("--concurrency", "1,16,64")
        .iter()
        .map(|c| c.parse().unwrap_or_else(|_| usage()))
        .collect();
    let duration = Duration::from_secs_f64(args.number("--duration", 10.0));
    let warmup = Duration::from_secs_f64(args.number("--warmup", 1.0));
    let rounds: usize = args.number("--rounds", 1);
    let (targets, _servers): (Vec<(String, String)>, Vec<Server>) = match args.value("--url") {
        Some(url) => (vec![(url.clone(), url)], Vec::new()),
        None => {
            let mut targets = Vec::new();
            let mut servers = Vec::new();
            for store in args.list("--stores", "memory:,embedded") {
                // Never passivate: every instance stays live for the whole run.
                let server = Server::start(&store, &["--idle-after", "0"]);
                targets.push((store, server.url.clone()));
                servers.push(server);
            }
            (targets, servers)
        }
    };
    println!(
        "throughput: {} s per point after {} s warm-up, {rounds} round(s), best round reported",
        duration.as_secs_f64(),
        warmup.as_secs_f64()
    );
    let mut best: Vec<Vec<Option<Point>>> = targets
        .iter()
        .map(|_| concurrency.iter().map(|_| None).collect())
        .collect();
    for round in 0..rounds {
        for (ci, &workers) in concurrency.iter().enumerate() {
            for (ti, (name, url)) in targets.iter().enumerate() {
                let point = measure(url, workers, warmup, duration).await;
                println!(
                    "round {round} {name:<45} c={workers:<3} {:>9.0} acked/s  p50 {:>7.2} ms  \
                     p99 {:>7.2} ms  errors {}",
                    point.rate(),
                    point.percentile_ms(0.5),
                    point.percentile_ms(0.99),
                    point.errors
                );
                let slot = &mut best[ti][ci];
                if slot.as_ref().is_none_or(|b| b.rate() < point.rate()) {
                    *slot = Some(point);
                }
            }
        }
    }
    println!();
    println!(
        "| store | concurrency | acked transitions/s | vs {} | p50 ms | p90 ms | p99 ms | max ms | errors |",
        targets[0].0
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (ci, &workers) in concurrency.iter().enumerate() {
        let reference = best[0][ci].as_ref().unwrap().rate();
        for (ti, (name, _)) in targets.iter().enumerate() {
            let point = best[ti][ci].as_ref().unwrap();
            println!(
                "| {name} | {workers} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                point.rate(),
                point.rate() / reference,
                point.percentile_ms(0.5),
                point.percentile_ms(0.9),
                point.percentile_ms(0.99),
                point.percentile_ms(1.0),
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
