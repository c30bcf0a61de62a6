//! Fan-out: how long one transition takes to reach every session watching the instance.
//!
//! Starts `turnstile serve` in handle mode (or targets `--url`), mints one invoice, opens N
//! sessions with rmcp's Streamable HTTP client, has each touch the invoice with a `tools/list`
//! that names its handle in `_meta`, checks on `/stats` that all N are subscribed, then fires
//! transitions (reject and submit, alternately) and measures, from sending the call: its result,
//! and the first, median, p99 and last `notifications/tools/list_changed` the N sessions receive.
//! Exits non-zero unless every session hears every transition exactly once.
//!
//! ```text
//! cargo build --release --workspace          # the server binary and the invoice plugin
//! cargo run --release --example fanout -- --sessions 1000
//! ulimit -n 20000; cargo run --release --example fanout -- --sessions 10000
//! ```
//!
//! Each session holds two connections (its GET event stream, and its share of a pool for POSTs)
//! on both sides when the server is started here; raise `ulimit -n` for large N.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use clap::Parser;
use rmcp::{
    ClientHandler, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, ClientConfig, PaginatedRequestParams, ProtocolVersion,
        RequestMetaObject,
    },
    service::{NotificationContext, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::sync::Notify;

#[derive(Parser)]
#[command(about = "Measure list_changed fan-out from one transition to N sessions")]
struct Args {
    /// Sessions watching the one instance.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// Measured transitions (after one warm-up transition).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Target a running server in handle mode (`http://host:port/mcp`) instead of starting one.
    #[arg(long)]
    url: Option<String>,
    /// The server binary to start. Default: `turnstile` next to this example's directory.
    #[arg(long)]
    turnstile: Option<PathBuf>,
    /// Plugin directory for the started server. Default: a temporary directory holding the
    /// built invoice plugin.
    #[arg(long)]
    plugins: Option<PathBuf>,
    /// `--store` of the started server.
    #[arg(long, default_value = "memory:")]
    store: String,
    /// Sessions being opened at once.
    #[arg(long, default_value_t = 64)]
    connect_concurrency: usize,
    /// How long to wait for one transition's notifications, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// One session's client: records when each `list_changed` arrives.
#[derive(Clone)]
struct Watcher {
    heard: Arc<Mutex<Vec<Instant>>>,
    all: Arc<Heard>,
}

/// Every notification any session heard, to wait on without polling N sessions.
#[derive(Default)]
struct Heard {
    count: AtomicUsize,
    changed: Notify,
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let now = Instant::now();
        self.heard.lock().unwrap().push(now);
        self.all.count.fetch_add(1, Ordering::SeqCst);
        self.all.changed.notify_waiters();
    }
}

struct Session {
    service: RunningService<RoleClient, Watcher>,
    heard: Arc<Mutex<Vec<Instant>>>,
}

impl Session {
    async fn open(http: &reqwest::Client, url: &str, all: &Arc<Heard>) -> anyhow::Result<Self> {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let watcher = Watcher {
            heard: heard.clone(),
            all: all.clone(),
        };
        let transport = StreamableHttpClientTransport::with_client(
            http.clone(),
            StreamableHttpClientTransportConfig::with_uri(url.to_string()),
        );
        let service = watcher.serve(transport).await?;
        Ok(Session { service, heard })
    }

    fn heard(&self) -> Vec<Instant> {
        self.heard.lock().unwrap().clone()
    }

    /// `tools/list` naming `handle` in `_meta`: the session touches (and watches) the instance.
    async fn touch(&self, handle: &str) -> anyhow::Result<Vec<String>> {
        let mut params = PaginatedRequestParams::default();
        let Value::Object(meta) = json!({ "handle": handle }) else {
            unreachable!()
        };
        params.meta = Some(RequestMetaObject::from(meta));
        let listed = self.service.list_tools(Some(params)).await?;
        Ok(listed
            .tools
            .into_iter()
            .map(|t| t.name.to_string())
            .collect())
    }

    /// A tool call that must succeed; its `structuredContent`.
    async fn call(&self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        let Value::Object(arguments) = arguments else {
            anyhow::bail!("arguments must be an object")
        };
        let result = self
            .service
            .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(arguments))
            .await?;
        anyhow::ensure!(result.is_error != Some(true), "{name} failed: {result:?}");
        result
            .structured_content
            .ok_or_else(|| anyhow::anyhow!("{name}: no structuredContent"))
    }
}

/// The server this example started; killed on drop.
struct Started {
    child: Child,
    _plugins: Option<tempfile::TempDir>,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `target/<profile>/` when run by cargo (`target/<profile>/examples/fanout`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("examples live in target/<profile>/examples")
        .to_path_buf()
}

fn start_server(args: &Args) -> anyhow::Result<(Started, String)> {
    let binary = args
        .turnstile
        .clone()
        .unwrap_or_else(|| profile_dir().join("turnstile"));
    anyhow::ensure!(
        binary.exists(),
        "{} is missing: run `cargo build --release --workspace` first, or pass --turnstile",
        binary.display()
    );
    let (plugins, temp) = match &args.plugins {
        Some(dir) => (dir.clone(), None),
        None => {
            let plugin = profile_dir().join("libturnstile_plugin_invoice.so");
            anyhow::ensure!(
                plugin.exists(),
                "{} is missing: run `cargo build --release --workspace` first, or pass --plugins",
                plugin.display()
            );
            let dir = tempfile::tempdir()?;
            std::fs::copy(&plugin, dir.path().join(plugin.file_name().unwrap()))?;
            (dir.path().to_path_buf(), Some(dir))
        }
    };
    let mut child = Command::new(&binary)
        .args(["serve", "--http", "127.0.0.1:0", "--state-handle-key"])
        .arg("--plugins")
        .arg(&plugins)
        .args(["--store", &args.store])
        // No session may idle out while the benchmark waits between rounds.
        .args(["--session-idle-timeout", "3600"])
        .env("RUST_LOG", "warn,turnstile::mcp=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let reader = BufReader::new(child.stderr.take().expect("piped stderr"));
    // Keep draining stderr (and echo warnings) so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            if let Some(start) = line.find("http://")
                && line.contains("/mcp")
            {
                let url = line[start..].split_whitespace().next().unwrap().to_string();
                let _ = url_tx.send(url);
            } else {
                eprintln!("server: {line}");
            }
        }
    });
    let started = Started {
        child,
        _plugins: temp,
    };
    let url = url_rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| anyhow::anyhow!("the server did not start"))?;
    Ok((started, url))
}

async fn stats(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let base = url.trim_end_matches("/mcp");
    let body = http
        .get(format!("{base}/stats"))
        .send()
        .await?
        .text()
        .await?;
    Ok(serde_json::from_str(&body)?)
}

fn ms(duration: Duration) -> String {
    format!("{:.1}", duration.as_secs_f64() * 1000.0)
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile(values: &[Duration], q: f64) -> Duration {
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

struct Round {
    tool: &'static str,
    result: Duration,
    arrivals: Vec<Duration>,
    missing: usize,
    duplicates: usize,
}

/// Fires one transition from `driver` and waits for every session's notification.
async fn round(
    driver: &Session,
    sessions: &[Session],
    all: &Heard,
    handle: &str,
    tool: &'static str,
    timeout: Duration,
) -> anyhow::Result<Round> {
    let before: Vec<usize> = sessions.iter().map(|s| s.heard().len()).collect();
    let before_driver = driver.heard().len();
    let expected = all.count.load(Ordering::SeqCst) + sessions.len() + 1;
    let arguments = match tool {
        "invoice.reject" => json!({"handle": handle, "reason": "fan-out round"}),
        _ => json!({"handle": handle, "amount": 1}),
    };
    let sent = Instant::now();
    let output = driver.call(tool, arguments).await?;
    let result = sent.elapsed();
    let want = if tool == "invoice.reject" {
        "draft"
    } else {
        "review"
    };
    anyhow::ensure!(output["status"] == want, "{tool}: {output}");

    let deadline = sent + timeout;
    while all.count.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
        let _ = tokio::time::timeout(Duration::from_millis(50), all.changed.notified()).await;
    }
    // A quiet moment, to catch a second notification for the same transition.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut arrivals = Vec::with_capacity(sessions.len());
    let mut missing = 0;
    let mut duplicates = 0;
    for (session, before) in sessions.iter().zip(before) {
        let heard = session.heard();
        match heard.get(before) {
            Some(at) => arrivals.push(at.duration_since(sent)),
            None => missing += 1,
        }
        duplicates += heard.len().saturating_sub(before + 1);
    }
    let driver_heard = driver.heard().len() - before_driver;
    if driver_heard != 1 {
        eprintln!("the driving session heard {driver_heard} list_changed (expected 1)");
        if driver_heard == 0 {
            missing += 1;
        } else {
            duplicates += driver_heard - 1;
        }
    }
    arrivals.sort();
    Ok(Round {
        tool,
        result,
        arrivals,
        missing,
        duplicates,
    })
}

fn report(label: &str, round: &Round, sessions: usize) {
    let arrivals = &round.arrivals;
    let (first, median, p99, last) = if arrivals.is_empty() {
        ("-".into(), "-".into(), "-".into(), "-".into())
    } else {
        (
            ms(arrivals[0]),
            ms(quantile(arrivals, 0.5)),
            ms(quantile(arrivals, 0.99)),
            ms(*arrivals.last().unwrap()),
        )
    };
    println!(
        "| {label:>7} | {:<14} | {:>9} | {first:>8} | {median:>9} | {p99:>8} | {last:>8} | {:>11} | {:>4} |",
        round.tool,
        ms(round.result),
        format!("{}/{sessions}", round.arrivals.len()),
        round.duplicates,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    let (_server, url, own_server) = match &args.url {
        Some(url) => (None, url.clone(), false),
        None => {
            let (server, url) = start_server(&args)?;
            (Some(server), url, true)
        }
    };
    println!("server: {url} (handle mode, store {})", args.store);
    // One connection pool for every session: each session's GET stream holds one connection,
    // its POSTs share the rest.
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(300))
        .build()?;
    let all = Arc::new(Heard::default());

    let driver = Session::open(&http, &url, &all).await?;
    let minted = driver.call("invoice.submit", json!({"amount": 1})).await?;
    let handle = minted["handle"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no handle in {minted}"))?
        .to_string();
    println!("minted {handle}");

    let opening = Instant::now();
    let mut sessions: Vec<Session> = Vec::with_capacity(args.sessions);
    let mut pending = tokio::task::JoinSet::new();
    let mut next = 0;
    while sessions.len() < args.sessions {
        while next < args.sessions && pending.len() < args.connect_concurrency {
            let (http, url, all, handle) = (http.clone(), url.clone(), all.clone(), handle.clone());
            pending.spawn(async move {
                let session = Session::open(&http, &url, &all).await?;
                let menu = session.touch(&handle).await?;
                anyhow::ensure!(
                    menu.iter().any(|name| name == "invoice.approve"),
                    "the session does not see the invoice in review: {menu:?}"
                );
                Ok(session)
            });
            next += 1;
        }
        let opened = pending
            .join_next()
            .await
            .expect("a session is being opened")?
            .map_err(|error| {
                error.context(format!(
                    "opening session {} (too few file descriptors? raise `ulimit -n`)",
                    sessions.len() + 1
                ))
            })?;
        sessions.push(opened);
    }
    println!(
        "opened {} sessions, each touching the handle, in {:.2?}",
        sessions.len(),
        opening.elapsed()
    );

    let held = stats(&http, &url).await?;
    let subscriptions = held["notifier"]["subscriptions"].as_u64().unwrap_or(0);
    let watched = held["notifier"]["watched_instances"].as_u64().unwrap_or(0);
    let want = args.sessions as u64 + 1;
    let subscribed = if own_server {
        subscriptions == want && watched == 1
    } else {
        subscriptions >= want && watched >= 1
    };
    println!("/stats: {held}");
    anyhow::ensure!(
        subscribed,
        "expected {want} subscriptions to 1 instance (the {} sessions and the driver)",
        args.sessions
    );

    let timeout = Duration::from_secs(args.timeout);
    println!(
        "\n| round   | transition     | result ms | first ms | median ms |   p99 ms |  last ms |     arrived | dups |"
    );
    println!(
        "|---------|----------------|----------:|---------:|----------:|---------:|---------:|------------:|-----:|"
    );
    let mut failed = false;
    // The invoice is in review: reject sends it back to draft, submit to review again.
    for n in 0..=args.rounds {
        let tool = if n % 2 == 0 {
            "invoice.reject"
        } else {
            "invoice.submit"
        };
        let measured = round(&driver, &sessions, &all, &handle, tool, timeout).await?;
        let label = if n == 0 {
            "warm-up".to_string()
        } else {
            n.to_string()
        };
        report(&label, &measured, args.sessions);
        failed |= measured.missing > 0 || measured.duplicates > 0;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // End every session (DELETE) and check the server forgets them.
    let closing = Instant::now();
    let mut closes = tokio::task::JoinSet::new();
    for session in sessions {
        closes.spawn(async move {
            let _ = session.service.cancel().await;
        });
        while closes.len() >= args.connect_concurrency {
            closes.join_next().await;
        }
    }
    while closes.join_next().await.is_some() {}
    let _ = driver.service.cancel().await;
    if own_server {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let held = stats(&http, &url).await?;
            if held["notifier"]["subscriptions"] == 0 && held["notifier"]["sessions"] == 0 {
                println!(
                    "\nall sessions ended; subscriptions back to 0 after {:.2?}",
                    closing.elapsed()
                );
                break;
            }
            if Instant::now() > deadline {
                println!("\nsessions not forgotten 30 s after they ended: {held}");
                failed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if failed {
        println!("FAILED: some session missed a notification or heard one twice");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
