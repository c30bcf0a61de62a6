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
//! Run: `cargo build --release -p turnstile-plugin-invoice && cargo bench -p turnstile --bench
//! call_path`. The plugin comes from `target/release`.

use std::{path::PathBuf, sync::Arc};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use turnstile::{
    actors::{self, ActorOptions, CallOutcome, InstanceKey, Runtime},
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
    _data: Option<tempfile::TempDir>,
}

impl Bench {
    async fn start(store: &str) -> Bench {
        let plugin =
            plugin::load_private_copy(&invoice_library(), &plugin::PluginConfigs::default())
                .expect("the invoice plugin");
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
        let outcome = self
            .runtime
            .call(
                key.clone(),
                tool.clone(),
                arguments,
                String::new(),
                None,
                mint,
                None,
                None,
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

criterion_group!(benches, call_path);
criterion_main!(benches);
