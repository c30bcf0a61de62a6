//! The contract cases on the built-in stores, one `#[tokio::test]` per case per store so a
//! failure names both, with the per-store fixtures (a temp dir, a unique Redis namespace, a
//! unique PostgreSQL table), the cases that need a store's insides (what older code left in
//! it), and the published kit run on two of them ([`super::check`]). It must not skip: a Redis or
//! PostgreSQL server that cannot be reached fails the test, naming the URL and the variable that
//! overrides it.

use std::sync::Arc;

use super::state_counts::counts_by_state_are_built_once_for_records_older_than_the_index;
#[allow(clippy::wildcard_imports)] // The cases, each named by the macros below.
use super::*;
use crate::store::{EmbeddedStore, PostgresStore, RedisStore};

pub(crate) const REDIS_URL_VAR: &str = "TURNSTILE_TEST_REDIS_URL";
pub(crate) const POSTGRES_URL_VAR: &str = "TURNSTILE_TEST_POSTGRES_URL";
pub(crate) const REDIS_CLUSTER_URL_VAR: &str = "TURNSTILE_TEST_REDIS_CLUSTER_URL";

pub(crate) fn redis_url() -> String {
    std::env::var(REDIS_URL_VAR).unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The Redis Cluster the tests share: `TURNSTILE_TEST_REDIS_CLUSTER_URL`, or a local one of three
/// masters that `tests/redis-cluster.sh` starts unless it is running already.
pub(crate) fn redis_cluster_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var(REDIS_CLUSTER_URL_VAR) {
            return url;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/redis-cluster.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        assert!(
            out.status.success(),
            "{script} could not start a Redis Cluster (or set {REDIS_CLUSTER_URL_VAR}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    })
    .clone()
}

pub(crate) fn postgres_url() -> String {
    std::env::var(POSTGRES_URL_VAR)
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Options with a namespace no other test is using (the kit's [`case_options`]).
pub(crate) fn unique_options() -> StoreOptions {
    case_options()
}

/// A store under test, what to clean up when the case is done, and how to open it again.
pub(crate) enum Fixture {
    Memory(Arc<crate::store::MemoryStore>),
    Embedded(Arc<EmbeddedStore>, tempfile::TempDir),
    /// The store, its URL and options.
    Redis(Arc<RedisStore>, String, StoreOptions),
    Postgres(Arc<PostgresStore>, StoreOptions),
}

impl Fixture {
    pub(crate) async fn memory() -> Self {
        Fixture::Memory(Arc::new(
            crate::store::MemoryStore::new().keeping_audit(AUDIT_KEEP),
        ))
    }

    pub(crate) async fn embedded() -> Self {
        let dir = tempfile::tempdir().expect("temp dir for the embedded store");
        let store = Self::open_embedded(&dir).await;
        Fixture::Embedded(Arc::new(store), dir)
    }

    async fn open_embedded(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open_keeping(dir.path().join("nested/dir/state.redb"), AUDIT_KEEP)
            .await
            .expect("open embedded store in a temp dir")
    }

    pub(crate) async fn redis() -> Self {
        let url = redis_url();
        let options = unique_options();
        let store = RedisStore::connect(&url, &options)
            .await
            .unwrap_or_else(|e| {
                panic!("Redis at {url} is needed by this test (set {REDIS_URL_VAR}): {e}")
            });
        Fixture::Redis(Arc::new(store), url, options)
    }

    pub(crate) async fn redis_cluster() -> Self {
        let url = redis_cluster_url();
        let options = unique_options();
        let store = RedisStore::connect(&url, &options)
            .await
            .unwrap_or_else(|e| panic!("the Redis Cluster at {url} is needed by this test: {e}"));
        Fixture::Redis(Arc::new(store), url, options)
    }

    pub(crate) async fn postgres() -> Self {
        let url = postgres_url();
        let options = unique_options();
        let store = PostgresStore::connect(&url, &options)
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL at {url} is needed by this test (set {POSTGRES_URL_VAR}): {e}")
            });
        Fixture::Postgres(Arc::new(store), options)
    }

    pub(crate) fn store(&self) -> Arc<dyn StateStore> {
        match self {
            Fixture::Memory(s) => s.clone(),
            Fixture::Embedded(s, _) => s.clone(),
            Fixture::Redis(s, ..) => s.clone(),
            Fixture::Postgres(s, _) => s.clone(),
        }
    }

    /// The same store after a restart, once `older` did to it what code of an older version
    /// would have (see [`Older`]). Every handle from [`Fixture::store`] must be dropped first:
    /// the embedded store's file is closed and opened again.
    pub(crate) async fn reopened(self, older: Older) -> Self {
        self.reopened_after(Some(older)).await
    }

    /// The same store, closed and opened again, holding what it held.
    async fn reopened_as_it_was(self) -> Self {
        self.reopened_after(None).await
    }

    async fn reopened_after(self, older: Option<Older>) -> Self {
        match self {
            Fixture::Memory(_) => panic!("the memory store keeps nothing across a restart"),
            Fixture::Embedded(store, dir) => {
                drop(Arc::into_inner(store).expect("no other handle on the embedded store"));
                if let Some(older) = older {
                    EmbeddedStore::as_older_code_left_it(
                        &dir.path().join("nested/dir/state.redb"),
                        older,
                    );
                }
                let store = Self::open_embedded(&dir).await;
                Fixture::Embedded(Arc::new(store), dir)
            }
            Fixture::Redis(store, url, options) => {
                if let Some(older) = older {
                    store.as_older_code_left_it(older).await;
                }
                let store = RedisStore::connect(&url, &options).await.unwrap();
                Fixture::Redis(Arc::new(store), url, options)
            }
            Fixture::Postgres(store, options) => {
                if let Some(older) = older {
                    store.as_older_code_left_it(older).await;
                }
                let store = PostgresStore::connect(&postgres_url(), &options)
                    .await
                    .unwrap();
                Fixture::Postgres(Arc::new(store), options)
            }
        }
    }

    /// Removes everything the fixture created (keys, table, file).
    pub(crate) async fn cleanup(self) {
        match self {
            Fixture::Memory(_) => {}
            Fixture::Embedded(store, dir) => {
                // Close the file before removing its directory.
                drop(store);
                dir.close().expect("remove the embedded store's temp dir");
            }
            Fixture::Redis(s, ..) => s.destroy_namespace().await.expect("clean up redis keys"),
            Fixture::Postgres(s, _) => s.destroy_namespace().await.expect("drop test table"),
        }
    }
}

/// One `#[tokio::test]` per case per store, so a failure names both.
macro_rules! contract_tests {
    ($store:ident: $($case:ident),* $(,)?) => {
        contract_tests!($store = $store: $($case),*);
    };
    ($module:ident = $store:ident: $($case:ident),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = super::Fixture::$store().await;
                    super::$case(fixture.store()).await;
                    fixture.cleanup().await;
                }
            )*
        }
    };
}

/// What code of an older version may have left in a store, for the cases that open it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Older {
    /// Records and no counts by state: no index, no mark that it was built, no tally beside
    /// any record (what every server before the index wrote).
    WithoutTheIndex,
    /// The counts by state lost, and the mark that they were built kept (an index that
    /// drifted as far as it can).
    CountsLost,
}

/// One `#[tokio::test]` per case per store for the cases that open the store again: each takes
/// the fixture and gives it back for the cleanup.
macro_rules! reopening_tests {
    ($module:ident = $store:ident: $($case:ident),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = super::Fixture::$store().await;
                    super::$case(fixture).await.cleanup().await;
                }
            )*
        }
    };
}

/// The stores that keep their records across a restart.
macro_rules! lasting_stores {
    ($($case:ident),* $(,)?) => {
        reopening_tests!(embedded_reopened = embedded: $($case),*);
        reopening_tests!(redis_reopened = redis: $($case),*);
        reopening_tests!(redis_cluster_reopened = redis_cluster: $($case),*);
        reopening_tests!(postgres_reopened = postgres: $($case),*);
    };
}

lasting_stores!(
    counts_by_state_are_built_once_for_records_older_than_the_index,
    marks_outlast_a_restart
);

macro_rules! all_stores {
    ($($case:ident),* $(,)?) => {
        contract_tests!(memory: $($case),*);
        contract_tests!(embedded: $($case),*);
        contract_tests!(redis: $($case),*);
        contract_tests!(redis_cluster: $($case),*);
        contract_tests!(postgres: $($case),*);
    };
}

all_stores!(
    load_absent,
    save_new_and_load_back,
    save_with_right_version,
    stale_writer_conflicts,
    bad_version_is_rejected,
    delete,
    list_and_count,
    concurrent_writers_one_key,
    many_keys_in_parallel,
    answers_a_ping,
    keeps_machines_by_version,
    writes_only_the_current_format,
    migrates_records_of_the_current_format_to_nothing,
    due_times_are_listed_earliest_first,
    due_times_page_through_ties,
    due_times_move_with_saves_and_go_with_deletes,
    a_conflicting_save_keeps_the_due_time,
    due_times_past_the_largest_are_invalid,
    migration_corrects_due_times,
    marks_are_kept_and_replaced,
    a_finished_migration_is_not_walked_again_under_its_rule,
    the_audit_trail_grows_with_saves_and_goes_with_the_record,
    the_audit_trail_keeps_its_last_entries,
    owners_are_counted_as_their_records_come_and_go,
    an_owners_records_are_listed_a_page_at_a_time,
    places_are_counted_in_one_order_given_back_and_expire,
    counts_by_state_follow_saves_moves_and_deletes,
    counts_by_state_follow_retention_and_migration,
    counts_by_state_agree_with_the_records_under_concurrent_writes,
    counts_by_state_are_recounted_while_writes_go_on,
    a_delete_leaves_a_tombstone,
    a_live_record_shows_no_tombstone,
    a_recreated_handle_hides_its_tombstone_until_deleted_again,
    tombstones_are_pruned_by_age,
    racing_deletes_leave_one_tombstone_each_and_one_winner_per_record,
);

/// The lease cases: every store other processes share, and the memory store (which keeps
/// leases for tests that run several servers' actors on it). The embedded store has one
/// process, so no leases.
macro_rules! leasing_stores {
    ($($case:ident),* $(,)?) => {
        contract_tests!(memory_leases = memory: $($case),*);
        contract_tests!(redis_leases = redis: $($case),*);
        contract_tests!(redis_cluster_leases = redis_cluster: $($case),*);
        contract_tests!(postgres_leases = postgres: $($case),*);
    };
}

leasing_stores!(
    a_lease_has_one_holder_at_a_time,
    writes_are_fenced_by_the_live_lease,
    a_lapsed_lease_is_taken_over_with_a_larger_token,
    a_delete_takes_the_lease_with_the_record,
    racing_holders_get_one_lease,
    a_renewal_names_its_token_and_never_takes_the_lease_back,
    counts_by_state_follow_fenced_writes,
);

/// The change-feed cases: every store other processes share.
macro_rules! shared_stores {
    ($($case:ident),* $(,)?) => {
        contract_tests!(redis_feeds = redis: $($case),*);
        contract_tests!(redis_cluster_feeds = redis_cluster: $($case),*);
        contract_tests!(postgres_feeds = postgres: $($case),*);
    };
}

shared_stores!(
    a_change_reaches_only_the_feeds_watching_it,
    keys_watched_in_a_batch_are_heard_until_unwatched_in_a_batch,
    keeps_places
);

/// Every built-in shared store keeps places, so that the contract case on them
/// (`places_are_counted_in_one_order_given_back_and_expire`) checks them rather than a store
/// keeping none, and the per-principal limits hold across servers.
async fn keeps_places(store: Arc<dyn StateStore>) {
    let held = store
        .reserve_place("dora", "d1", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(held, Some(1));
}

async fn marks_outlast_a_restart(fixture: Fixture) -> Fixture {
    fixture.store().save_mark("walked", 42).await.unwrap();
    let fixture = fixture.reopened_as_it_was().await;
    assert_eq!(fixture.store().load_mark("walked").await.unwrap(), Some(42));
    fixture
}

/// The published kit finds the cases each store's claims call for: every case on the embedded
/// store (which keeps no leases and no feed), and the lease and feed cases too on PostgreSQL,
/// each store opened again on the same options for the durability case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_kit_passes_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    super::check(move |options: StoreOptions| {
        let path = root.join(format!("{}.redb", options.namespace));
        async move { EmbeddedStore::open_keeping(path, options.audit_keep).await }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_kit_passes_on_postgres() {
    let url = postgres_url();
    let namespaces = Arc::new(std::sync::Mutex::new(Vec::new()));
    let opened = namespaces.clone();
    super::check(move |options: StoreOptions| {
        opened.lock().unwrap().push(options.clone());
        let url = url.clone();
        async move { PostgresStore::connect(&url, &options).await }
    })
    .await;
    let used: Vec<StoreOptions> = namespaces.lock().unwrap().drain(..).collect();
    for options in used {
        if let Ok(store) = PostgresStore::connect(&postgres_url(), &options).await {
            let _ = store.destroy_namespace().await;
        }
    }
}
