//! `turnstile serve`: load plugins, open the store, start the actors, watch the plugin
//! directory, serve MCP.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::Context;

use super::LoadReport;
use crate::{
    actors,
    actors::SESSION_PREFIX,
    catalog::LiveCatalog,
    hotplug,
    invoke::Limits,
    mcp::{self, HandleMode, HttpOptions, Shared},
    memory,
    plugin::{Isolation, LoadOptions, PluginConfigs, directory::Directory},
    shutdown::Shutdown,
    store::{self, StateStore, StoreOptions},
};

pub struct ServeOptions {
    pub plugins: PathBuf,
    /// The plugins' configuration tables from the config file (the environment joins them).
    pub plugin_configs: PluginConfigs,
    pub transport: Transport,
    pub store: String,
    pub store_namespace: String,
    /// The audit entries kept per instance (`--audit-keep`).
    pub audit_keep: u64,
    /// Replicas a Redis save waits for (`--redis-wait-replicas`).
    pub redis_wait_replicas: u32,
    /// The data directory the default (embedded) store lives in, when it is used: created
    /// `0700`, or tightened to it, before the store opens.
    pub data_dir: Option<PathBuf>,
    pub http: HttpOptions,
    pub actors: actors::ActorOptions,
    pub handles: Option<HandleMode>,
    /// How long a shutdown waits for the calls in flight (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
    /// How many calls of one plugin may run at once (`--plugin-pool`).
    pub plugin_pool: usize,
    /// Whether plugins whose manifest says `test_fixture` are served (`--allow-test-plugins`).
    pub allow_test_plugins: bool,
    /// Which plugins run in processes of their own (`--isolate`, and manifests that ask).
    pub isolation: Isolation,
    /// Delete instances this long after they reached a final state (`--retain-final`; `None`:
    /// keep them).
    pub retain_final: Option<Duration>,
    /// Delete any instance this long after its last transition (`--instance-ttl`; `None`: keep
    /// them).
    pub instance_ttl: Option<Duration>,
    /// How many days a deleted instance's tombstone is kept (`--tombstone-days`; 0: none).
    pub tombstone_days: u64,
    /// Where a workflow tool's result says what may come next (`--next-step`).
    pub next_step: mcp::NextStepMode,
    /// How long a client may keep a list that depends only on the catalog (`--list-ttl`).
    pub list_ttl: Duration,
    /// The most handles one request may name in `_meta` (`--max-handles-per-request`).
    pub max_handles_per_request: usize,
    /// What one principal (or client address) may hold and start (`--max-*-per-principal`,
    /// `--mint-rate`).
    pub quotas: mcp::QuotaLimits,
    /// The key file sealing 2026-07-28 `requestState`s (`--request-state-key-file`; `None`: a
    /// random key of this process).
    pub request_state_key_file: Option<PathBuf>,
    /// How long a sealed `requestState` is honoured (`--request-state-ttl`).
    pub request_state_ttl: Duration,
    /// Whether a confirmation the client cannot show counts as given (`--confirm-fallback
    /// allow`; dangerous).
    pub confirm_fallback: bool,
}

pub enum Transport {
    Stdio,
    Http(SocketAddr),
}

/// The data directory: `explicit` (`--data-dir`), else `$XDG_DATA_HOME/turnstile`, else
/// `~/.local/share/turnstile`.
pub fn data_dir(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(|| {
        std::env::var_os("XDG_DATA_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share"))
            })
            .unwrap_or_else(|| PathBuf::from("."))
            .join("turnstile")
    })
}

/// What seals 2026-07-28 `requestState`s: the key in `key_file` (its bytes, less a trailing
/// newline), or a random key of this process.
fn request_state_seal(key_file: Option<&Path>, ttl: Duration) -> anyhow::Result<mcp::StateSeal> {
    let Some(path) = key_file else {
        tracing::debug!(
            "request states are sealed with a key of this process; give every server the same \
             --request-state-key-file for any of them to take a retry"
        );
        return Ok(mcp::StateSeal::random(ttl));
    };
    let mut key = std::fs::read(path)
        .with_context(|| format!("cannot read --request-state-key-file {}", path.display()))?;
    while key.last().is_some_and(|byte| byte.is_ascii_whitespace()) {
        key.pop();
    }
    mcp::StateSeal::new(key, ttl).map_err(|problem| {
        anyhow::anyhow!("--request-state-key-file {}: {problem}", path.display())
    })
}

/// `embedded:<data dir>/state.redb`, the store used when none is named.
pub fn default_store(data_dir: &Path) -> String {
    format!("embedded:{}", data_dir.join("state.redb").display())
}

/// The runtime `serve` runs on, made before [`run`] so that the log's trace exporter
/// (`logs::init_serving`) can start its batch task on it.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(memory::IDLE_THREAD_LIFETIME)
        .build()
        .context("cannot start the async runtime")
}

/// Serves on `runtime`; once served, sends the traces still batched (`traces`, the exporter
/// `--otlp-endpoint` installed) while the runtime, which runs its batch task, is still up.
pub fn run(
    runtime: tokio::runtime::Runtime,
    options: ServeOptions,
    traces: Option<crate::logs::TraceExport>,
) -> anyhow::Result<ExitCode> {
    let served = runtime.block_on(serve(options));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    let drained_in_time = served?;
    // Exit 1 when a shutdown had to abandon calls, so an orchestrator's log shows it.
    Ok(if drained_in_time {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Serves until the client leaves (stdio) or a signal's shutdown has drained; returns whether
/// every call in flight finished in time.
async fn serve(mut options: ServeOptions) -> anyhow::Result<bool> {
    let shutdown = Shutdown::default();
    shutdown
        .on_signals()
        .context("cannot install the signal handlers")?;
    options.actors.abandon_calls = shutdown.deadline.clone();
    // Stamped before loading, so that a file changed during the load is loaded again.
    let mut plugin_dir = Directory::new(&options.plugins, hotplug::SETTLE);
    plugin_dir.assume_handled();
    let load_options = LoadOptions {
        pool_size: options.plugin_pool,
        isolation: Some(options.isolation.clone()),
        configs: options.plugin_configs.clone(),
        allow_test_fixtures: options.allow_test_plugins,
        relist: Default::default(),
    };
    let report = LoadReport::load_with(&options.plugins, &load_options)?;
    let refused = report.refused_files();
    // A test fixture beside the real plugins (a `cargo build --workspace` output directory) is
    // expected, not a fault: said once, at INFO.
    for skipped in report.fixtures_skipped() {
        tracing::info!("plugin not loaded: {skipped}");
    }
    // One bad plugin must not take the others down: say what is wrong and serve the rest.
    for problem in report.problems() {
        tracing::error!("plugin not loaded: {problem}");
    }
    for note in report.notes() {
        tracing::warn!("{note}");
    }
    for plugin in report.catalog.plugins() {
        tracing::info!(plugin = %plugin.manifest().name, path = %plugin.path().display(), isolated = plugin.is_isolated(), "plugin loaded");
    }
    for name in &options.isolation.names {
        if !report
            .catalog
            .plugins()
            .iter()
            .any(|plugin| plugin.manifest().name == *name)
        {
            tracing::warn!(
                "--isolate {name}: no plugin of that name is loaded (yet); it will be isolated if one is added"
            );
        }
    }
    let catalog = Arc::new(LiveCatalog::new(report.catalog));
    let store_options = StoreOptions {
        namespace: options.store_namespace.clone(),
        audit_keep: options.audit_keep,
        redis_wait_replicas: options.redis_wait_replicas,
        ..StoreOptions::default()
    };
    if let Some(dir) = &options.data_dir {
        // The store holds handles, which are credentials: no other user may list or read it.
        store::private_data_dir(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    }
    let store = store::open(&options.store, &store_options)
        .await
        .with_context(|| format!("cannot open the state store {}", options.store))?;
    tracing::info!(store = %store.describe(), "state store open");
    if !store.indexes_due_times() {
        tracing::info!(
            store = %store.describe(),
            "the state store keeps no index of due times: timers and retention find what is due \
             by reading every record, on every poll (fine for thousands of instances, not millions)"
        );
    }
    match store.durability().await {
        Some(store::Durability::Lost(what)) => {
            tracing::warn!("acknowledged transitions do not survive a restart of the store: {what}")
        }
        Some(store::Durability::Kept(what)) => tracing::info!("durability: {what}"),
        None => {}
    }
    let closing_store = store.clone();
    // In a store other servers share, `session/` records belong to their live sessions.
    if !store.is_shared() {
        forget_ended_sessions(&*store).await;
    }
    let retention = crate::retention::Retention {
        final_state: options.retain_final,
        idle: options.instance_ttl,
    };
    migrate_records(&*store, &catalog.current(), &retention).await;
    let node = options.actors.node.clone();
    options.actors.retention = retention;
    options.actors.tombstones = options.tombstone_days > 0;
    let alarm = options.actors.alarm.clone();
    let call_limits = Limits {
        timeout: options.actors.tool_timeout,
        abandon: shutdown.deadline.clone(),
        max_result_bytes: options.actors.max_result_bytes,
    };
    // With a store other servers share, the relay hears their changes of the instances watched
    // here, and the notifier tells it which those are.
    let (watch_events, watched) = tokio::sync::mpsc::unbounded_channel();
    if store.is_shared() {
        options.actors.watch_events = Some(watch_events);
        let leases = options.actors.leases;
        if leases.ttl >= leases.wait {
            tracing::warn!(
                lease_ttl_ms = leases.ttl.as_millis() as u64,
                lease_wait_ms = leases.wait.as_millis() as u64,
                "--lease-ttl is not below --lease-wait: calls on the instances of a server that \
                 crashed are answered BUSY until its leases lapse, instead of waiting them out"
            );
        }
    }
    let runtime = actors::start(catalog.clone(), store.clone(), options.actors)?;
    hotplug::start(
        plugin_dir,
        catalog.clone(),
        refused,
        load_options,
        runtime.clone(),
    )?;
    // Passivated instances, ended sessions and their subscriptions are freed on several
    // threads; every few seconds, hand what was freed back to the OS.
    memory::release_free_memory_every(Duration::from_secs(2))
        .context("cannot start the memory-trim thread")?;
    // Timers (and retention) that fell due while no server ran fire now, in due-time order.
    crate::timers::spawn(store.clone(), runtime.clone(), alarm);
    crate::tombstones::spawn_sweep(store.clone(), options.tombstone_days);
    tokio::spawn(actors::relay_changes_from_other_servers(
        store.clone(),
        runtime.clone(),
        node,
        watched,
    ));
    if let Some(mode) = &options.handles {
        tracing::info!(key = %mode.key, "handle mode: instances are named by the `{}` argument", mode.key);
    }
    let state_seal = request_state_seal(
        options.request_state_key_file.as_deref(),
        options.request_state_ttl,
    )?;
    if options.confirm_fallback {
        tracing::warn!(
            "--confirm-fallback allow: steps whose binding has a person confirm run without one for clients that cannot show a form"
        );
    }
    let shared = Arc::new(Shared {
        state_seal,
        confirm_fallback: options.confirm_fallback,
        catalog,
        runtime,
        handles: options.handles,
        call_limits,
        shutdown: shutdown.clone(),
        caller_of: match options.transport {
            Transport::Stdio => mcp::Caller::of_connection,
            Transport::Http(_) => mcp::http_caller,
        },
        traceparent_of: match options.transport {
            Transport::Stdio => mcp::no_traceparent,
            Transport::Http(_) => mcp::http_traceparent,
        },
        call_metrics: Default::default(),
        next_step: options.next_step,
        list_ttl: options.list_ttl,
        store,
        max_handles_per_request: options.max_handles_per_request,
        quotas: mcp::Quotas::new(options.quotas),
        tasks: Default::default(),
    });
    let drain = {
        let (shutdown, timeout) = (shutdown.clone(), options.shutdown_timeout);
        async move { shutdown.drain(timeout).await }
    };
    let served = match options.transport {
        Transport::Stdio => {
            tokio::select! {
                served = mcp::serve_stdio(shared) => served.map(|()| true),
                in_time = drain => Ok(in_time),
            }
        }
        Transport::Http(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address}"))?;
            // The drain runs beside the server, which ends only after it; a server that cannot
            // start returns at once, without waiting for a signal.
            let drain = tokio::spawn(drain);
            mcp::serve_http(shared, listener, options.http).await?;
            let in_time = drain.await.unwrap_or(false);
            tracing::info!(in_time, "shut down");
            Ok(in_time)
        }
    };
    // The calls are drained (or abandoned, saving nothing more): fold the embedded store's
    // journal into its file, so a clean stop leaves nothing to replay.
    if let Err(error) = closing_store.checkpoint().await {
        tracing::warn!(%error, "the store's journal stays; the next start replays it");
    }
    served
}

/// Rewrites the format-1 records the store holds in the current format, and records whose due
/// time is not the one this server works out (written by code that predates due times, or under
/// other `--retain-final` / `--instance-ttl` settings), see `store::migrate`; unless a walk under
/// the same plugins' machines and settings went through the store already
/// (`store::migrate_unless_done`). A store that fails meanwhile is not fatal: format-1 records
/// stay readable, a wrong due time is corrected when it comes, and the next start finishes the
/// job.
async fn migrate_records(
    store: &dyn StateStore,
    catalog: &crate::catalog::Catalog,
    retention: &crate::retention::Retention,
) {
    let machine_of = |id: &str| catalog.workflow(id).map(|w| w.version.clone());
    let due_of = |key: &str, record: &store::InstanceRecord| {
        crate::timers::record_due(catalog, retention, key, record)
    };
    let rule = crate::timers::due_rule(catalog, retention);
    if let Err(error) = store::migrate_unless_done(store, rule, machine_of, due_of).await {
        tracing::warn!(%error, "the record format migration stopped; it resumes on the next start");
    }
}

/// Session-keyed instances end with their session, and no session survives a restart: whatever a
/// crash left under `session/` is deleted, so it cannot pile up.
async fn forget_ended_sessions(store: &dyn StateStore) {
    let mut removed = 0u64;
    loop {
        let keys = match store.list_keys(SESSION_PREFIX, None, 1000).await {
            Ok(keys) if keys.is_empty() => break,
            Ok(keys) => keys,
            Err(error) => {
                tracing::warn!(%error, "could not list stale session instances");
                return;
            }
        };
        for key in keys {
            match store.delete(&key, None, None).await {
                Ok(_) => removed += 1,
                Err(error) => {
                    tracing::warn!(%error, "could not delete stale session instance {key}");
                    return;
                }
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "deleted instances of sessions that ended before this start"
        );
    }
}
