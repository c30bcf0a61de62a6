//! Saves per second for each `StateStore`, at 1, 16 and 64 instances saving concurrently.
//!
//! Each instance saves v1, v2, v3, … one after the other (as an instance actor does: it waits
//! for one save before the next transition); instances run in parallel. This is the number
//! that bounds a server's transition rate, and the one group commit exists for.
//!
//! Run: `cargo bench --bench store_throughput` (all stores), or pick stores with
//! `TURNSTILE_BENCH_STORES=memory,embedded`. Redis and PostgreSQL come from
//! `TURNSTILE_TEST_REDIS_URL` / `TURNSTILE_TEST_POSTGRES_URL` (defaults as in the tests); a
//! server that is asked for and unreachable stops the bench with its URL, rather than being
//! skipped. Data goes to the `turnstile_bench` namespace and is deleted afterwards.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use turnstile::store::{EmbeddedStore, InstanceRecord, StateStore, StoreOptions, open};

const CONCURRENCY: [usize; 3] = [1, 16, 64];

fn stores() -> Vec<(&'static str, String)> {
    let wanted = std::env::var("TURNSTILE_BENCH_STORES")
        .unwrap_or_else(|_| "memory,embedded,redis,postgres".to_owned());
    let redis = std::env::var("TURNSTILE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let postgres = std::env::var("TURNSTILE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let embedded = format!("embedded:{}", bench_dir().join("state.redb").display());
    [
        ("memory", "memory:".to_owned()),
        ("embedded", embedded),
        ("redis", redis),
        ("postgres", postgres),
    ]
    .into_iter()
    .filter(|(name, _)| wanted.split(',').any(|w| w.trim() == *name))
    .collect()
}

/// Where the embedded store's file lives during the run; removed at the end.
fn bench_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("turnstile-bench-{}", std::process::id()))
}

/// `total` saves spread over `keys` fresh instances, each saving sequentially.
async fn run(store: &Arc<dyn StateStore>, run_id: u64, keys: usize, total: u64) -> Duration {
    let per_key = total.div_ceil(keys as u64).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..keys)
        .map(|k| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let key = format!("bench/{run_id}/{k}");
                let mut record = InstanceRecord::first("bench", json!({"value": "s0", "n": 0}));
                store.save(&key, &record, 0).await.expect("first save");
                for n in 1..per_key {
                    let next = record.next(json!({"value": format!("s{n}"), "n": n}));
                    store.save(&key, &next, record.version).await.expect("save");
                    record = next;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    // Scale to the number of saves criterion asked for.
    start
        .elapsed()
        .mul_f64(total as f64 / (per_key * keys as u64) as f64)
}

async fn cleanup(store: &Arc<dyn StateStore>) {
    loop {
        let keys = store.list_keys("bench/", None, 1000).await.expect("list");
        if keys.is_empty() {
            break;
        }
        for key in keys {
            store.delete(&key, None, None).await.expect("delete");
        }
    }
}

fn throughput(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let options = StoreOptions {
        namespace: "turnstile_bench".to_owned(),
        ..StoreOptions::default()
    };
    let run_ids = AtomicU64::new(0);
    for (name, url) in stores() {
        // The embedded store is opened by type, to read its group-commit counters.
        let (store, embedded): (Arc<dyn StateStore>, Option<Arc<EmbeddedStore>>) =
            match url.strip_prefix("embedded:") {
                Some(path) => {
                    let store = Arc::new(
                        rt.block_on(EmbeddedStore::open(path))
                            .unwrap_or_else(|e| panic!("embedded store at {path}: {e}")),
                    );
                    (store.clone(), Some(store))
                }
                None => (
                    rt.block_on(open(&url, &options))
                        .unwrap_or_else(|e| panic!("{name} store at {url} is unavailable: {e}")),
                    None,
                ),
            };
        rt.block_on(cleanup(&store));
        let mut group = c.benchmark_group(format!("store_save/{name}"));
        group.throughput(Throughput::Elements(1));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));
        let mut seen = (0, 0);
        for keys in CONCURRENCY {
            group.bench_function(format!("{keys}_keys"), |b| {
                b.to_async(&rt).iter_custom(|iters| {
                    let store = Arc::clone(&store);
                    let run_id = run_ids.fetch_add(1, Ordering::Relaxed);
                    async move { run(&store, run_id, keys, iters).await }
                });
            });
            if let Some(embedded) = &embedded {
                let stats = embedded.batch_stats();
                let now = (
                    stats.ops.load(Ordering::Relaxed),
                    stats.commits.load(Ordering::Relaxed),
                );
                let (ops, commits) = (now.0 - seen.0, (now.1 - seen.1).max(1));
                println!(
                    "embedded, {keys} keys: {ops} saves in {commits} commits, {:.1} saves per fsync",
                    ops as f64 / commits as f64
                );
                seen = now;
            }
        }
        group.finish();
        rt.block_on(cleanup(&store));
    }
    // The embedded store was dropped with its loop iteration; its file can go.
    let _ = std::fs::remove_dir_all(bench_dir());
}

criterion_group!(benches, throughput);
criterion_main!(benches);
