//! One `tools/call` through the actors, without HTTP or MCP: the limit of the design.
//!
//! What a served call does after rmcp has parsed it: route to the instance actor (the registry's
//! table), gate, run the invoice plugin's tool (a real plugin library, loaded as `serve` loads
//! it), step the statechart, save to the store, notify the notifier. Measured on the memory store
//! (the design's own cost) and on the embedded store (the default, with its disk syncs grouped).
//!
//! - `transition`: one instance alternates `invoice.reject` and `invoice.submit`, each a gated
//!   transition and a save.
//! - `no_transition`: `invoice.status`, gated by nothing, moves nothing, saves nothing.
//! - `transition_x64`: 64 instances, one call each in flight at once (time per batch of 64).
//!
//! `isolation/…` compares the invoice plugin in this process with the same plugin isolated
//! (`--isolate invoice`: its calls cross pipes to a `turnstile plugin-host` process), on the
//! memory store, each call with host services as the server gives them.
//!
//! Run: `cargo build --release -p turnstile-plugin-invoice && cargo bench -p turnstile --bench
//! call_path`. The plugin comes from `target/release`.

use std::{path::PathBuf, sync::Arc};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use turnstile::{
    actors::{self, ActorOptions, Call, CallOutcome, InstanceKey, Runtime},
    catalog::{Catalog, LiveCatalog, ToolEntry},
    plugin::{self, PluginOutput},
    store::{self, StoreOptions},
};

fn invoice_library() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/release/libturnstile_plugin_invoice.so");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --release -p turnstile-plugin-invoice` first",
        path.display()
    );
    path
}

struct Bench {
    runtime: Runtime,
    catalog: Arc<LiveCatalog>,
    /// Whether calls get host services (a `HostCall`), as the server's calls do.
    services: bool,
    _data: Option<tempfile::TempDir>,
}

/// Where the invoice plugin runs.
#[derive(Clone, Copy, PartialEq)]
enum Placement {
    InProcess,
    Isolated,
}

impl Bench {
    async fn start(store: &str) -> Bench {
        Bench::start_placed(store, Placement::InProcess, false).await
    }

    async fn start_placed(store: &str, placement: Placement, services: bool) -> Bench {
        let isolation = (placement == Placement::Isolated).then(|| plugin::Isolation {
            names: ["invoice".to_string()].into(),
            program: env!("CARGO_BIN_EXE_turnstile").into(),
            args: Vec::new(),
        });
        let options = plugin::LoadOptions {
            isolation,
            ..plugin::LoadOptions::default()
        };
        let plugin = plugin::load_with(&invoice_library(), &options).expect("the invoice plugin");
        let (catalog, errors) = Catalog::build(vec![plugin]);
        assert!(errors.is_empty(), "{errors:?}");
        let catalog = Arc::new(LiveCatalog::new(catalog));
        let data = (store == "embedded").then(|| tempfile::tempdir().expect("a temporary dir"));
        let url = match &data {
            Some(dir) => format!("embedded:{}", dir.path().join("state.redb").display()),
            None => "memory:".to_owned(),
        };
        let store = store::open(&url, &StoreOptions::default())
            .await
            .expect("the store opens");
        let runtime =
            actors::start(catalog.clone(), store, ActorOptions::default()).expect("actors start");
        Bench {
            runtime,
            catalog,
            services,
            _data: data,
        }
    }

    fn tool(&self, name: &str) -> Arc<ToolEntry> {
        self.catalog
            .current()
            .tool(name)
            .expect("an invoice tool")
            .clone()
    }

    async fn call(&self, key: &InstanceKey, tool: &Arc<ToolEntry>, arguments: Value, mint: bool) {
        // The receiver is dropped: the invoice plugin reports nothing.
        let host = self
            .services
            .then(|| plugin::HostCall::new(tokio_util::sync::CancellationToken::new()).0);
        let outcome = self
            .runtime
            .call(
                key.clone(),
                Call {
                    tool: tool.name().to_owned(),
                    arguments,
                    call_id: String::new(),
                    host,
                    mint,
                    idempotency_key: None,
                    principal: None,
                    sent_at: std::time::Instant::now(),
                    told_in_reply: None,
                    asking: serde_json::Value::Null,
                    made_for: None,
                    watcher: None,
                    span: tracing::Span::none(),
                    task: None,
                },
            )
            .await
            .expect("the call runs");
        match outcome {
            CallOutcome::Ran {
                output: PluginOutput::Success(_),
                ..
            } => {}
            other => panic!("{} did not succeed: {other:?}", tool.name()),
        }
    }

    /// A new instance, minted by its first `invoice.submit`: it is in `review`.
    async fn mint(&self) -> InstanceKey {
        let key = InstanceKey::mint("invoice");
        self.call(
            &key,
            &self.tool("invoice.submit"),
            json!({"amount": 5}),
            true,
        )
        .await;
        key
    }
}

fn call_path(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    for store in ["memory", "embedded"] {
        let bench = tokio.block_on(Bench::start(store));
        let submit = bench.tool("invoice.submit");
        let reject = bench.tool("invoice.reject");
        let status = bench.tool("invoice.status");
        let mut group = c.benchmark_group(format!("call_path/{store}"));
        let key = tokio.block_on(bench.mint());
        group.bench_function("transition", |b| {
            b.to_async(&tokio).iter(|| async {
                bench
                    .call(&key, &reject, json!({"reason": "r"}), false)
                    .await;
                bench.call(&key, &submit, json!({"amount": 5}), false).await;
            })
        });
        group.bench_function("no_transition", |b| {
            b.to_async(&tokio)
                .iter(|| async { bench.call(&key, &status, json!({}), false).await })
        });
        let keys: Vec<InstanceKey> = tokio.block_on(async {
            futures_util::future::join_all((0..64).map(|_| bench.mint())).await
        });
        group.bench_function("transition_x64", |b| {
            b.to_async(&tokio).iter(|| async {
                futures_util::future::join_all(keys.iter().map(|key| async {
                    bench
                        .call(key, &reject, json!({"reason": "r"}), false)
                        .await;
                    bench.call(key, &submit, json!({"amount": 5}), false).await;
                }))
                .await
            })
        });
        group.finish();
    }
}

/// The same calls with the invoice plugin in this process and isolated in its own.
fn isolation(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("isolation/memory");
    for (placement, name) in [
        (Placement::InProcess, "in_process"),
        (Placement::Isolated, "isolated"),
    ] {
        let bench = tokio.block_on(Bench::start_placed("memory", placement, true));
        let submit = bench.tool("invoice.submit");
        let reject = bench.tool("invoice.reject");
        let status = bench.tool("invoice.status");
        let key = tokio.block_on(bench.mint());
        group.bench_function(format!("{name}/transition"), |b| {
            b.to_async(&tokio).iter(|| async {
                bench
                    .call(&key, &reject, json!({"reason": "r"}), false)
                    .await;
                bench.call(&key, &submit, json!({"amount": 5}), false).await;
            })
        });
        group.bench_function(format!("{name}/no_transition"), |b| {
            b.to_async(&tokio)
                .iter(|| async { bench.call(&key, &status, json!({}), false).await })
        });
        let keys: Vec<InstanceKey> = tokio.block_on(async {
            futures_util::future::join_all((0..64).map(|_| bench.mint())).await
        });
        group.bench_function(format!("{name}/transition_x64"), |b| {
            b.to_async(&tokio).iter(|| async {
                futures_util::future::join_all(keys.iter().map(|key| async {
                    bench
                        .call(key, &reject, json!({"reason": "r"}), false)
                        .await;
                    bench.call(key, &submit, json!({"amount": 5}), false).await;
                }))
                .await
            })
        });
    }
    group.finish();
}

criterion_group!(benches, call_path, isolation);
criterion_main!(benches);
