//! The contract every [`StateStore`] must honour, written once and run against each store: the
//! built-in ones in this crate's tests (`contract/builtin.rs`), and a user's own through the
//! published kit, [`check`] (cargo feature `testkit`), in their own `cargo test`.
//!
//! This module owns the cases and the table saying which promise each checks and what a store
//! must claim for it to apply ([`Needs`]). It must not skip a case a store's claims call for:
//! a store that says it is shared is checked for leases and its change feed too.

use std::{
    collections::HashSet,
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::json;

use self::state_counts::{
    counts_by_state_agree_with_the_records_under_concurrent_writes,
    counts_by_state_are_recounted_while_writes_go_on, counts_by_state_follow_fenced_writes,
    counts_by_state_follow_retention_and_migration, counts_by_state_follow_saves_moves_and_deletes,
};
use super::{
    AuditEntry, DeleteKind, Due, Fence, InstanceRecord, LeaseGrant, LeaseRenewal, MAX_DUE_MS,
    StateStore, StoreError, StoreOptions, Tombstone,
};

#[cfg(test)]
pub(crate) mod builtin;
mod state_counts;

#[cfg(test)]
pub(crate) use self::builtin::Older;

/// The audit entries every case's store keeps per instance (`StoreOptions::audit_keep`): few,
/// so a case can pass them.
pub const AUDIT_KEEP: u64 = 5;

/// How long one case may run before it counts as failed (a store that hangs fails; it does not
/// hang the suite).
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// What a store must claim for a case to apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Every store.
    Records,
    /// A store that keeps leases ([`StateStore::keeps_leases`]: every shared store).
    Leases,
    /// A store with a change feed ([`StateStore::watch_changes`] gives one).
    ChangeFeed,
    /// Every store the kit checks: what it acknowledged is there when opened again with the
    /// same options (a store that forgets on a restart is for tests only, and needs no kit).
    Reopening,
}

/// A case's body: on a store, or on a store and a way to open it again.
#[derive(Clone, Copy)]
enum Body {
    OnStore(fn(Arc<dyn StateStore>) -> CaseFuture),
    Reopening(fn(Arc<dyn StateStore>, Reopen) -> CaseFuture),
}

type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Opens the store a case runs on again, on the same options: the durability cases.
pub type Reopen = Box<
    dyn FnOnce() -> Pin<Box<dyn Future<Output = Result<Arc<dyn StateStore>, StoreError>> + Send>>
        + Send,
>;

/// One case of the contract: its name (the function in this module), the promise it checks, and
/// what a store must claim for it to apply.
#[derive(Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub promise: &'static str,
    pub needs: Needs,
    body: Body,
}

macro_rules! case {
    ($needs:ident, $name:ident, $promise:literal) => {
        Case {
            name: stringify!($name),
            promise: $promise,
            needs: Needs::$needs,
            body: Body::OnStore(|store| Box::pin($name(store))),
        }
    };
}

/// Every case of the contract, with the promise each checks.
pub fn cases() -> Vec<Case> {
    vec![
        case!(Records, load_absent, "a key never saved loads as none"),
        case!(
            Records,
            save_new_and_load_back,
            "a first save (expected 0) is loaded back field for field"
        ),
        case!(
            Records,
            save_with_right_version,
            "a save naming the stored version replaces the record"
        ),
        case!(
            Records,
            stale_writer_conflicts,
            "a save naming another version is refused with Conflict and the stored version, writing nothing"
        ),
        case!(
            Records,
            bad_version_is_rejected,
            "a record whose version is not expected + 1 is refused as Invalid"
        ),
        case!(
            Records,
            delete,
            "a delete removes the record, by version or whatever its version, and says whether one was removed"
        ),
        case!(
            Records,
            list_and_count,
            "list_keys pages through keys in byte order after a cursor; count counts by prefix"
        ),
        case!(
            Records,
            concurrent_writers_one_key,
            "of writers racing from one version, exactly one wins"
        ),
        case!(
            Records,
            many_keys_in_parallel,
            "saves of many keys at once all land"
        ),
        case!(
            Records,
            answers_a_ping,
            "ping answers while the store is up"
        ),
        case!(
            Records,
            keeps_machines_by_version,
            "machine definitions are kept by workflow and version"
        ),
        case!(
            Records,
            writes_only_the_current_format,
            "a record is stored and read in the current format"
        ),
        case!(
            Records,
            migrates_records_of_the_current_format_to_nothing,
            "the start-up migration rewrites no current record"
        ),
        case!(
            Records,
            due_times_are_listed_earliest_first,
            "due lists records due by a time, earliest first, never those without one"
        ),
        case!(
            Records,
            due_times_page_through_ties,
            "due pages through equal times in key order after a cursor"
        ),
        case!(
            Records,
            due_times_move_with_saves_and_go_with_deletes,
            "a save moves a record's due time and a delete removes it"
        ),
        case!(
            Records,
            a_conflicting_save_keeps_the_due_time,
            "a refused save leaves the due time as it was"
        ),
        case!(
            Records,
            due_times_past_the_largest_are_invalid,
            "a due time past MAX_DUE_MS is refused as Invalid"
        ),
        case!(
            Records,
            migration_corrects_due_times,
            "the start-up migration corrects due times older code left wrong"
        ),
        case!(
            Records,
            marks_are_kept_and_replaced,
            "a mark is kept, replaced, and not counted as an instance"
        ),
        case!(
            Records,
            a_finished_migration_is_not_walked_again_under_its_rule,
            "a migration marked done under a rule is not walked again under it"
        ),
        case!(
            Records,
            the_audit_trail_grows_with_saves_and_goes_with_the_record,
            "each save's audit entry is kept oldest first and goes with the record"
        ),
        case!(
            Records,
            the_audit_trail_keeps_its_last_entries,
            "the audit trail keeps the last audit_keep entries"
        ),
        case!(
            Records,
            owners_are_counted_as_their_records_come_and_go,
            "count_owned counts an owner's handle-keyed records as they come and go"
        ),
        case!(
            Records,
            an_owners_records_are_listed_a_page_at_a_time,
            "list_owned pages through one owner's records"
        ),
        case!(
            Records,
            places_are_counted_in_one_order_given_back_and_expire,
            "reserve_place counts a scope's live places with the new one, atomically; release_place and lapsing give them back"
        ),
        case!(
            Records,
            counts_by_state_follow_saves_moves_and_deletes,
            "count_by_state follows saves, moves and deletes"
        ),
        case!(
            Records,
            counts_by_state_follow_retention_and_migration,
            "count_by_state follows retention deletes and migrations"
        ),
        case!(
            Records,
            counts_by_state_agree_with_the_records_under_concurrent_writes,
            "count_by_state agrees with the records after racing writes"
        ),
        case!(
            Records,
            counts_by_state_are_recounted_while_writes_go_on,
            "recount_by_state counts writes made while it runs once"
        ),
        case!(
            Records,
            a_delete_leaves_a_tombstone,
            "delete_leaving removes the record and keeps its tombstone"
        ),
        case!(
            Records,
            a_live_record_shows_no_tombstone,
            "a record saved again hides its key's tombstone"
        ),
        case!(
            Records,
            a_recreated_handle_hides_its_tombstone_until_deleted_again,
            "a handle saved again and deleted again shows its latest tombstone"
        ),
        case!(
            Records,
            tombstones_are_pruned_by_age,
            "prune_tombstones removes those deleted by a time, oldest first, at most a limit"
        ),
        case!(
            Records,
            racing_deletes_leave_one_tombstone_each_and_one_winner_per_record,
            "of deletes racing for one record one wins, leaving one tombstone"
        ),
        case!(
            Leases,
            a_lease_has_one_holder_at_a_time,
            "a lease has one holder at a time; asked again by its holder it keeps its token"
        ),
        case!(
            Leases,
            writes_are_fenced_by_the_live_lease,
            "a write naming a lease applies only while that lease lives; one naming none only while none does"
        ),
        case!(
            Leases,
            a_lapsed_lease_is_taken_over_with_a_larger_token,
            "a lapsed lease is granted anew with a larger token, as a takeover"
        ),
        case!(
            Leases,
            a_delete_takes_the_lease_with_the_record,
            "a delete removes the record's lease"
        ),
        case!(
            Leases,
            racing_holders_get_one_lease,
            "of holders racing for a free lease exactly one gets it"
        ),
        case!(
            Leases,
            a_renewal_names_its_token_and_never_takes_the_lease_back,
            "a renewal extends only the live lease it names and never grants one"
        ),
        case!(
            Leases,
            counts_by_state_follow_fenced_writes,
            "count_by_state follows fenced writes and ignores refused ones"
        ),
        case!(
            ChangeFeed,
            a_change_reaches_only_the_feeds_watching_it,
            "an announced change reaches the feeds watching its key, and only those"
        ),
        case!(
            ChangeFeed,
            keys_watched_in_a_batch_are_heard_until_unwatched_in_a_batch,
            "watch_many and unwatch_many start and stop the changes of every key they name"
        ),
        Case {
            name: "what_is_acknowledged_outlasts_a_reopen",
            promise: "records, audit, machines, marks, due times and tombstones are there when the store is opened again",
            needs: Needs::Reopening,
            body: Body::Reopening(|store, reopen| {
                Box::pin(what_is_acknowledged_outlasts_a_reopen(store, reopen))
            }),
        },
    ]
}

/// Options with a namespace no other case (in this process or another) is using, keeping
/// [`AUDIT_KEEP`] audit entries. Their bounds are generous: the cases check what a store does,
/// not how fast.
pub fn case_options() -> StoreOptions {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = super::now_ms() % 1_000_000_000;
    StoreOptions {
        namespace: format!("tst_{}_{nanos}_{n}", std::process::id()),
        op_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
        audit_keep: AUDIT_KEEP,
        ..StoreOptions::default()
    }
}

/// Runs every case of the contract that applies to the store `open` opens, each on a store of
/// its own (`open` is called with [`case_options`]: a namespace no other case uses; called again
/// with the same options it must reach the same data), and panics naming each case that failed,
/// the promise it checks and what went wrong. Call it from a multi-threaded tokio test:
///
/// ```ignore
/// #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// async fn my_store_keeps_the_contract() {
///     turnstile::store::contract::check(|options| MyStore::open("my://…".into(), options)).await;
/// }
/// ```
///
/// Which cases apply follows what the store claims: the lease cases when it keeps leases
/// ([`StateStore::keeps_leases`]), the change-feed case when [`StateStore::watch_changes`]
/// gives a feed. The report (one line a case, on stderr) says which ran and which did not apply.
pub async fn check<O, F, S>(open: O)
where
    O: Fn(StoreOptions) -> F + Send + Sync + 'static,
    F: Future<Output = Result<S, StoreError>> + Send + 'static,
    S: StateStore + 'static,
{
    let open = Arc::new(open);
    let mut failed = Vec::new();
    let mut ran = 0;
    for case in cases() {
        let options = case_options();
        let store: Arc<dyn StateStore> = match open(options.clone()).await {
            Ok(store) => Arc::new(store),
            Err(error) => {
                failed.push(format!("{}: the store did not open: {error}", case.name));
                continue;
            }
        };
        let applies = match case.needs {
            Needs::Records | Needs::Reopening => true,
            Needs::Leases => store.keeps_leases(),
            Needs::ChangeFeed => store.watch_changes().await.is_some(),
        };
        if !applies {
            eprintln!(
                "contract: {} does not apply ({:?} not claimed)",
                case.name, case.needs
            );
            continue;
        }
        ran += 1;
        let run = match case.body {
            Body::OnStore(body) => body(store),
            Body::Reopening(body) => {
                let open = open.clone();
                let reopen: Reopen = Box::new(move || {
                    Box::pin(
                        async move { Ok(Arc::new(open(options).await?) as Arc<dyn StateStore>) },
                    )
                });
                body(store, reopen)
            }
        };
        // Spawned, so a panic is this case's failure and the others still run.
        let outcome = tokio::time::timeout(CASE_LIMIT, tokio::spawn(run)).await;
        let problem = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(joined)) => Some(match joined.try_into_panic() {
                Ok(payload) => panic_message(payload.as_ref()),
                Err(joined) => joined.to_string(),
            }),
            Err(_) => Some(format!("did not finish in {} s", CASE_LIMIT.as_secs())),
        };
        match problem {
            None => eprintln!("contract: {} ok", case.name),
            Some(problem) => {
                eprintln!("contract: {} FAILED", case.name);
                failed.push(format!(
                    "{} (promise: {}): {problem}",
                    case.name, case.promise
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {ran} contract cases failed:\n- {}",
        failed.len(),
        failed.join("\n- ")
    );
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// What every store promises across a restart, checked by closing the store and opening it
/// again on the same options: everything acknowledged is there.
async fn what_is_acknowledged_outlasts_a_reopen(store: Arc<dyn StateStore>, reopen: Reopen) {
    let kept = InstanceRecord {
        due_at_ms: Some(5_000),
        audit: Some(audit_entry(1, "a")),
        ..record("w", 1, "a")
    };
    store.save("handle/kept", &kept, 0).await.unwrap();
    let gone = record("w", 1, "b");
    store.save("handle/gone", &gone, 0).await.unwrap();
    let tombstone = tombstone_of("handle/gone", &gone, "ops", 1_000);
    assert!(
        store
            .delete_leaving("handle/gone", 1, None, &tombstone)
            .await
            .unwrap()
    );
    store
        .save_machine("w", "v1", &json!({"id": "w", "initial": "a"}))
        .await
        .unwrap();
    store.save_mark("walked", 42).await.unwrap();
    store.checkpoint().await.unwrap();
    // The only handle: the store is closed (a file unlocked) before it is opened again.
    drop(store);
    let store = reopen()
        .await
        .expect("the store opens again on the same options");
    // The audit entry is the trail's, not the record's: it is read back by `audit`.
    let kept = InstanceRecord {
        audit: None,
        ..kept
    };
    assert_eq!(store.load("handle/kept").await.unwrap(), Some(kept));
    assert_eq!(store.load("handle/gone").await.unwrap(), None);
    assert_eq!(
        store.audit("handle/kept").await.unwrap(),
        vec![audit_entry(1, "a")]
    );
    assert_eq!(
        store.due(10_000, None, 10).await.unwrap(),
        vec![due(5_000, "handle/kept")]
    );
    assert_eq!(
        store.load_machine("w", "v1").await.unwrap(),
        Some(json!({"id": "w", "initial": "a"}))
    );
    assert_eq!(store.load_mark("walked").await.unwrap(), Some(42));
    assert_eq!(
        store.tombstones("handle/", 10).await.unwrap(),
        vec![tombstone]
    );
}

fn record(workflow: &str, version: u64, step: &str) -> InstanceRecord {
    InstanceRecord {
        version,
        updated_at_ms: 1_700_000_000_000 + version,
        machine: Some(format!("machine-{step}")),
        idempotency: vec![super::IdempotencyEntry {
            key: format!("retry-{version}"),
            tool: "invoice.submit".into(),
            arguments: "digest".into(),
            at_ms: 1_700_000_000_000,
            output: json!({"ok": true, "note": "ünïcødé"}),
            moved: true,
            state: json!({"review": step}),
            output_dropped: false,
        }],
        tasks: vec![super::TaskEntry {
            id: format!("task-{version}"),
            tool: "migration.apply".into(),
            principal: Some("token:ops ünïcødé".into()),
            status: super::TaskEntryStatus::Completed,
            created_at_ms: 1_700_000_000_000,
            updated_at_ms: 1_700_000_000_000 + version,
            ttl_ms: 60_000,
            output: json!({"applied": true}),
            output_dropped: false,
            moved: true,
            state: json!({"review": step}),
            error: serde_json::Value::Null,
        }],
        ..InstanceRecord::first(
            workflow,
            json!({"value": {"review": step}, "context": {"n": version, "note": "ünïcødé ✓"}}),
        )
    }
}

fn fence(token: u64, holder: &str) -> Option<Fence> {
    Some(Fence {
        token,
        holder: holder.into(),
    })
}

async fn acquire(store: &dyn StateStore, key: &str, holder: &str, ttl_ms: u64) -> LeaseGrant {
    store
        .acquire_lease(key, holder, Duration::from_millis(ttl_ms))
        .await
        .unwrap()
}

async fn renew(
    store: &dyn StateStore,
    key: &str,
    token: u64,
    holder: &str,
    ttl_ms: u64,
) -> LeaseRenewal {
    store
        .renew_lease(
            key,
            &fence(token, holder).unwrap(),
            Duration::from_millis(ttl_ms),
        )
        .await
        .unwrap()
}

fn token_of(grant: LeaseGrant) -> u64 {
    match grant {
        LeaseGrant::Held { token, .. } => token,
        other => panic!("expected the lease, got {other:?}"),
    }
}

fn assert_fenced<T: std::fmt::Debug>(result: Result<T, StoreError>, live: bool) {
    match result {
        Err(StoreError::Fenced { remaining_ms, .. }) => {
            assert_eq!(remaining_ms.is_some(), live, "{remaining_ms:?}")
        }
        other => panic!("expected a refusal by the lease, got {other:?}"),
    }
}

async fn a_lease_has_one_holder_at_a_time(store: Arc<dyn StateStore>) {
    assert_eq!(acquire(&*store, "k", "a", 30_000).await, LeaseGrant::Absent);
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let first = acquire(&*store, "k", "a", 30_000).await;
    assert!(
        matches!(
            first,
            LeaseGrant::Held {
                took_over: false,
                ..
            }
        ),
        "{first:?}"
    );
    // Renewed by its holder: the same token.
    assert_eq!(
        token_of(acquire(&*store, "k", "a", 30_000).await),
        token_of(first)
    );
    match acquire(&*store, "k", "b", 30_000).await {
        LeaseGrant::Busy { remaining_ms } => {
            assert!((1..=30_000).contains(&remaining_ms), "{remaining_ms}")
        }
        other => panic!("b must wait, got {other:?}"),
    }
    // b asked: a's next renewal says the lease is wanted; a new grant starts unwanted.
    assert!(matches!(
        acquire(&*store, "k", "a", 30_000).await,
        LeaseGrant::Held { wanted: true, .. }
    ));
    let a = token_of(acquire(&*store, "k", "a", 30_000).await);
    store
        .release_lease("k", &fence(a, "a").unwrap())
        .await
        .unwrap();
    // Given up, it is kept for b, who asked: a (or anyone else) cannot take it straight back.
    for other in ["a", "c"] {
        assert!(matches!(
            acquire(&*store, "k", other, 30_000).await,
            LeaseGrant::Busy { .. }
        ));
    }
    assert!(matches!(
        acquire(&*store, "k", "b", 30_000).await,
        LeaseGrant::Held { wanted: false, .. }
    ));
}

async fn writes_are_fenced_by_the_live_lease(store: Arc<dyn StateStore>) {
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let a = token_of(acquire(&*store, "k", "a", 30_000).await);
    // No fence, another holder's, or a's token under another name: refused, nothing written.
    assert_fenced(store.save("k", &record("w", 2, "b"), 1).await, true);
    assert_fenced(
        store
            .save("k", &record("w", 2, "b").fenced(fence(a, "b")), 1)
            .await,
        true,
    );
    assert_fenced(
        store
            .save("k", &record("w", 2, "b").fenced(fence(a + 1, "a")), 1)
            .await,
        true,
    );
    assert_fenced(store.delete("k", None, None).await, true);
    assert_eq!(store.load("k").await.unwrap().unwrap().version, 1);
    // a's own fence writes, and still loses a version race as ever.
    store
        .save("k", &record("w", 2, "b").fenced(fence(a, "a")), 1)
        .await
        .unwrap();
    assert_conflict(
        store
            .save("k", &record("w", 2, "c").fenced(fence(a, "a")), 1)
            .await,
        Some(2),
    );
    // Released: b is granted it at once, with a larger token, not as a takeover; a's old
    // fence is refused from now on.
    store
        .release_lease("k", &fence(a, "a").unwrap())
        .await
        .unwrap();
    let b = acquire(&*store, "k", "b", 30_000).await;
    assert!(
        matches!(b, LeaseGrant::Held { token, took_over: false, version: 2, wanted: false } if token > a),
        "{b:?}"
    );
    assert_fenced(
        store
            .save("k", &record("w", 3, "c").fenced(fence(a, "a")), 2)
            .await,
        true,
    );
    // Releasing a lease that is not the live one changes nothing.
    store
        .release_lease("k", &fence(a, "a").unwrap())
        .await
        .unwrap();
    store
        .save("k", &record("w", 3, "c").fenced(fence(token_of(b), "b")), 2)
        .await
        .unwrap();
    // With no lease alive, an unfenced write goes through.
    store
        .release_lease("k", &fence(token_of(b), "b").unwrap())
        .await
        .unwrap();
    store.save("k", &record("w", 4, "d"), 3).await.unwrap();
}

async fn a_lapsed_lease_is_taken_over_with_a_larger_token(store: Arc<dyn StateStore>) {
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let a = token_of(acquire(&*store, "k", "a", 50).await);
    tokio::time::sleep(Duration::from_millis(120)).await;
    // a paused past its lease: its write is refused though nobody took the lease yet.
    assert_fenced(
        store
            .save("k", &record("w", 2, "a").fenced(fence(a, "a")), 1)
            .await,
        false,
    );
    let b = acquire(&*store, "k", "b", 30_000).await;
    assert!(
        matches!(b, LeaseGrant::Held { token, took_over: true, version: 1, wanted: false } if token > a),
        "{b:?}"
    );
    // a coming back finds it busy, and its old fence still refused.
    assert!(matches!(
        acquire(&*store, "k", "a", 30_000).await,
        LeaseGrant::Busy { .. }
    ));
    assert_fenced(
        store
            .save("k", &record("w", 2, "a").fenced(fence(a, "a")), 1)
            .await,
        true,
    );
    assert_eq!(store.load("k").await.unwrap().unwrap().version, 1);
}

async fn a_delete_takes_the_lease_with_the_record(store: Arc<dyn StateStore>) {
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let a = token_of(acquire(&*store, "k", "a", 30_000).await);
    assert!(
        store
            .delete("k", Some(1), fence(a, "a").as_ref())
            .await
            .unwrap()
    );
    assert_eq!(acquire(&*store, "k", "b", 30_000).await, LeaseGrant::Absent);
    // A new record under the key needs no lease for its first save, and is free to lease.
    store.save("k", &record("w", 1, "b"), 0).await.unwrap();
    assert!(matches!(
        acquire(&*store, "k", "b", 30_000).await,
        LeaseGrant::Held { .. }
    ));
}

async fn racing_holders_get_one_lease(store: Arc<dyn StateStore>) {
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let racers = (0..16).map(|n| {
        let store = store.clone();
        tokio::spawn(async move { acquire(&*store, "k", &format!("h{n}"), 30_000).await })
    });
    let mut held = 0;
    for racer in racers {
        if matches!(racer.await.unwrap(), LeaseGrant::Held { .. }) {
            held += 1;
        }
    }
    assert_eq!(held, 1);
}

/// A renewal names the lease it renews and is refused, changing nothing, unless that is the
/// lease alive now: a holder's renewal held back by a partition and delivered after its lease
/// passed on neither takes it back nor marks it wanted.
async fn a_renewal_names_its_token_and_never_takes_the_lease_back(store: Arc<dyn StateStore>) {
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let a = token_of(acquire(&*store, "k", "a", 100).await);
    assert_eq!(
        renew(&*store, "k", a, "a", 100).await,
        LeaseRenewal::Renewed { wanted: false }
    );
    // Not under another token, nor a's token under another name.
    assert_eq!(
        renew(&*store, "k", a + 1, "a", 30_000).await,
        LeaseRenewal::Lost
    );
    assert_eq!(
        renew(&*store, "k", a, "b", 30_000).await,
        LeaseRenewal::Lost
    );
    // a is cut off past its lease: its renewal is refused though nobody took the lease yet.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        renew(&*store, "k", a, "a", 30_000).await,
        LeaseRenewal::Lost
    );
    // b takes over. a's held-back renewal, delivered now, is refused and marks nothing: b's
    // own renewal does not hear the lease is wanted.
    let b = token_of(acquire(&*store, "k", "b", 30_000).await);
    assert!(b > a);
    assert_eq!(
        renew(&*store, "k", a, "a", 30_000).await,
        LeaseRenewal::Lost
    );
    assert_eq!(
        renew(&*store, "k", b, "b", 30_000).await,
        LeaseRenewal::Renewed { wanted: false }
    );
    store
        .save("k", &record("w", 2, "b").fenced(fence(b, "b")), 1)
        .await
        .unwrap();
    // b moved on and gave the lease up; a's renewal, delivered later still, grants nothing:
    // the next asker gets the lease at once, with the next token, not as a takeover.
    store
        .release_lease("k", &fence(b, "b").unwrap())
        .await
        .unwrap();
    assert_eq!(
        renew(&*store, "k", a, "a", 30_000).await,
        LeaseRenewal::Lost
    );
    assert_eq!(
        renew(&*store, "k", b, "b", 30_000).await,
        LeaseRenewal::Lost
    );
    let c = acquire(&*store, "k", "c", 30_000).await;
    assert_eq!(
        c,
        LeaseGrant::Held {
            token: b + 1,
            took_over: false,
            version: 2,
            wanted: false
        }
    );
    // a's save is fenced; the record is b's.
    assert_fenced(
        store
            .save("k", &record("w", 2, "a").fenced(fence(a, "a")), 1)
            .await,
        true,
    );
    assert_eq!(store.load("k").await.unwrap().unwrap().version, 2);
    // The live holder's renewal hears that another asked.
    assert!(matches!(
        acquire(&*store, "k", "d", 30_000).await,
        LeaseGrant::Busy { .. }
    ));
    assert_eq!(
        renew(&*store, "k", b + 1, "c", 30_000).await,
        LeaseRenewal::Renewed { wanted: true }
    );
    // Deleted with its record, the lease is renewed by nobody.
    assert!(
        store
            .delete("k", Some(2), fence(b + 1, "c").as_ref())
            .await
            .unwrap()
    );
    assert_eq!(
        renew(&*store, "k", b + 1, "c", 30_000).await,
        LeaseRenewal::Lost
    );
}

/// A change announced for a key reaches the feeds watching that key, with its origin, and no
/// other feed; once unwatched, it reaches none.
async fn a_change_reaches_only_the_feeds_watching_it(store: Arc<dyn StateStore>) {
    use futures_util::StreamExt;
    let quiet = Duration::from_millis(300);
    let mut watching = store.watch_changes().await.unwrap().unwrap();
    let mut elsewhere = store.watch_changes().await.unwrap().unwrap();
    // Keys on different shards of a cluster, and with characters channel names might mangle.
    let (key, other) = ("invoice-{1}:a b", "invoice-2");
    watching.subscriptions.watch(key).await.unwrap();
    elsewhere.subscriptions.watch(other).await.unwrap();
    store.announce_change("server-a", key).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), watching.changes.next()).await;
    assert_eq!(
        heard.expect("the watching feed hears the change"),
        Some(("server-a".to_owned(), key.to_owned()))
    );
    assert!(
        tokio::time::timeout(quiet, elsewhere.changes.next())
            .await
            .is_err(),
        "a feed watching another key heard the change"
    );
    watching.subscriptions.unwatch(key).await.unwrap();
    store.announce_change("server-a", key).await.unwrap();
    store.announce_change("server-b", other).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), elsewhere.changes.next()).await;
    assert_eq!(
        heard.expect("the other feed hears its own key"),
        Some(("server-b".to_owned(), other.to_owned()))
    );
    assert!(
        tokio::time::timeout(quiet, watching.changes.next())
            .await
            .is_err(),
        "an unwatched key's change was heard"
    );
}

/// A batch of watches (the relay's, after a burst of new watchers) listens to every key it
/// names, across a cluster's shards; a batch of unwatches stops exactly the keys it names.
async fn keys_watched_in_a_batch_are_heard_until_unwatched_in_a_batch(store: Arc<dyn StateStore>) {
    use futures_util::StreamExt;
    let mut feed = store.watch_changes().await.unwrap().unwrap();
    let keys: Vec<String> = (0..200).map(|n| format!("invoice-{n}")).collect();
    feed.subscriptions.watch_many(&keys).await.unwrap();
    let heard = async |feed: &mut super::ChangeFeed, announced: &[String]| {
        for key in announced {
            store.announce_change("server-a", key).await.unwrap();
        }
        let mut heard = std::collections::BTreeSet::new();
        // Until each announced key is heard, or a quiet moment says nothing more is coming.
        while heard.len() < announced.len() {
            match tokio::time::timeout(Duration::from_secs(2), feed.changes.next()).await {
                Ok(Some((_, key))) => {
                    heard.insert(key);
                }
                Ok(None) => panic!("the feed ended"),
                Err(_) => break,
            }
        }
        heard
    };
    let everything: std::collections::BTreeSet<String> = keys.iter().cloned().collect();
    assert_eq!(heard(&mut feed, &keys).await, everything);

    let (dropped, kept) = keys.split_at(150);
    feed.subscriptions.unwatch_many(dropped).await.unwrap();
    let still: std::collections::BTreeSet<String> = kept.iter().cloned().collect();
    assert_eq!(
        heard(&mut feed, &keys).await,
        still,
        "only the keys not unwatched are heard"
    );
    feed.subscriptions.watch_many(&[]).await.unwrap();
    feed.subscriptions.unwatch_many(&[]).await.unwrap();
}

fn assert_conflict(result: Result<(), StoreError>, want_current: Option<u64>) {
    match result {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, want_current),
        other => panic!("expected a conflict (current {want_current:?}), got {other:?}"),
    }
}

async fn load_absent(store: Arc<dyn StateStore>) {
    assert_eq!(store.load("nobody").await.unwrap(), None);
}

async fn save_new_and_load_back(store: Arc<dyn StateStore>) {
    let rec = record("invoice", 1, "draft");
    store.save("inv/1", &rec, 0).await.unwrap();
    assert_eq!(store.load("inv/1").await.unwrap(), Some(rec));
    assert_eq!(store.load("inv/2").await.unwrap(), None);
}

async fn save_with_right_version(store: Arc<dyn StateStore>) {
    let mut rec = InstanceRecord::first("invoice", json!({"value": "draft"}));
    store.save("k", &rec, 0).await.unwrap();
    for step in 0..5 {
        let next = rec.next(json!({"value": format!("step{step}")}));
        store.save("k", &next, rec.version).await.unwrap();
        rec = next;
    }
    let loaded = store.load("k").await.unwrap().unwrap();
    assert_eq!(loaded.version, 6);
    assert_eq!(loaded, rec);
}

async fn stale_writer_conflicts(store: Arc<dyn StateStore>) {
    let v1 = record("invoice", 1, "a");
    store.save("k", &v1, 0).await.unwrap();
    // A second creator loses.
    assert_conflict(store.save("k", &v1, 0).await, Some(1));
    let v2 = record("invoice", 2, "b");
    store.save("k", &v2, 1).await.unwrap();
    // A writer that read version 1 loses, and the winner's record stays.
    let stale = record("invoice", 2, "stale");
    assert_conflict(store.save("k", &stale, 1).await, Some(2));
    // A writer from the future loses too.
    assert_conflict(
        store.save("k", &record("invoice", 6, "x"), 5).await,
        Some(2),
    );
    // Updating a record that does not exist is a conflict with no current version.
    assert_conflict(
        store.save("absent", &record("invoice", 3, "x"), 2).await,
        None,
    );
    assert_eq!(store.load("k").await.unwrap(), Some(v2));
    assert_eq!(store.load("absent").await.unwrap(), None);
}

async fn bad_version_is_rejected(store: Arc<dyn StateStore>) {
    let wrong = record("invoice", 5, "x");
    assert!(matches!(
        store.save("k", &wrong, 0).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.save("", &record("w", 1, "x"), 0).await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(store.load("k").await.unwrap(), None);
}

async fn delete(store: Arc<dyn StateStore>) {
    assert!(!store.delete("k", None, None).await.unwrap());
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    store.save("k", &record("w", 2, "b"), 1).await.unwrap();
    match store.delete("k", Some(1), None).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(2)),
        other => panic!("stale delete must conflict, got {other:?}"),
    }
    assert!(store.delete("k", Some(2), None).await.unwrap());
    assert_eq!(store.load("k").await.unwrap(), None);
    match store.delete("k", Some(2), None).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, None),
        other => panic!("conditional delete of an absent key must conflict, got {other:?}"),
    }
    // A deleted key starts over at version 1.
    store.save("k", &record("w", 1, "again"), 0).await.unwrap();
    assert!(store.delete("k", None, None).await.unwrap());
    assert_eq!(store.count("").await.unwrap(), 0);
}

async fn list_and_count(store: Arc<dyn StateStore>) {
    for key in ["a/3", "a/1", "b/1", "a/2", "a/10", "ab"] {
        store.save(key, &record("w", 1, "x"), 0).await.unwrap();
    }
    assert_eq!(store.count("").await.unwrap(), 6);
    assert_eq!(store.count("a/").await.unwrap(), 4);
    assert_eq!(store.count("zzz").await.unwrap(), 0);
    let page1 = store.list_keys("a/", None, 3).await.unwrap();
    assert_eq!(page1, ["a/1", "a/10", "a/2"]);
    let page2 = store.list_keys("a/", Some("a/2"), 3).await.unwrap();
    assert_eq!(page2, ["a/3"]);
    assert!(
        store
            .list_keys("a/", Some("a/3"), 3)
            .await
            .unwrap()
            .is_empty()
    );
    let all = store.list_keys("", None, 100).await.unwrap();
    assert_eq!(all, ["a/1", "a/10", "a/2", "a/3", "ab", "b/1"]);
    assert_eq!(
        store.list_keys("", None, 0).await.unwrap(),
        Vec::<String>::new()
    );
    store.delete("a/10", None, None).await.unwrap();
    assert_eq!(store.count("a/").await.unwrap(), 3);
    assert_eq!(
        store.list_keys("a", Some("a/1"), 10).await.unwrap(),
        ["a/2", "a/3", "ab"]
    );
}

async fn an_owners_records_are_listed_a_page_at_a_time(store: Arc<dyn StateStore>) {
    for key in [
        "handle/a-1@t1",
        "handle/a-2@t1",
        "handle/a-3@t1",
        "handle/b-1@t2",
        "handle/c-1@t10",
        "handle/c-2",
        "session/s/a",
    ] {
        store.save(key, &record("w", 1, "x"), 0).await.unwrap();
    }
    assert!(store.delete("handle/a-2@t1", None, None).await.unwrap());
    let list = async |owner: &str, after: Option<&str>, limit: usize| {
        store.list_owned(owner, after, limit).await.unwrap()
    };
    assert_eq!(
        list("t1", None, 10).await,
        ["handle/a-1@t1", "handle/a-3@t1"]
    );
    // A page at a time, each from the last key of the one before.
    assert_eq!(list("t1", None, 1).await, ["handle/a-1@t1"]);
    assert_eq!(
        list("t1", Some("handle/a-1@t1"), 1).await,
        ["handle/a-3@t1"]
    );
    assert!(list("t1", Some("handle/a-3@t1"), 1).await.is_empty());
    // An owner is named whole: t1's records are not t10's, nor t's.
    assert_eq!(list("t10", None, 10).await, ["handle/c-1@t10"]);
    assert!(list("t", None, 10).await.is_empty());
    assert!(list("t1", None, 0).await.is_empty());
    // Saving again lists a record once; a record made again is listed again.
    store
        .save("handle/a-1@t1", &record("w", 2, "y"), 1)
        .await
        .unwrap();
    store
        .save("handle/a-2@t1", &record("w", 1, "x"), 0)
        .await
        .unwrap();
    assert_eq!(
        list("t1", None, 10).await,
        ["handle/a-1@t1", "handle/a-2@t1", "handle/a-3@t1"]
    );
}

async fn owners_are_counted_as_their_records_come_and_go(store: Arc<dyn StateStore>) {
    for key in [
        "handle/doc-1@alice",
        "handle/doc-2@alice",
        "handle/doc-3@bob",
    ] {
        store.save(key, &record("w", 1, "x"), 0).await.unwrap();
    }
    // Keys that name no owner are nobody's.
    for key in ["handle/doc-4", "session/abc/doc", "other@alice"] {
        store.save(key, &record("w", 1, "x"), 0).await.unwrap();
    }
    let counts = async |store: &Arc<dyn StateStore>| {
        (
            store.count_owned("alice").await.unwrap(),
            store.count_owned("bob").await.unwrap(),
            store.count_owned("ali").await.unwrap(),
        )
    };
    assert_eq!(counts(&store).await, (2, 1, 0));
    // Saving again, or failing to create what exists, counts nothing twice.
    store
        .save("handle/doc-1@alice", &record("w", 2, "y"), 1)
        .await
        .unwrap();
    assert!(matches!(
        store
            .save("handle/doc-2@alice", &record("w", 1, "z"), 0)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(counts(&store).await, (2, 1, 0));
    assert!(
        store
            .delete("handle/doc-1@alice", None, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete("handle/doc-1@alice", None, None)
            .await
            .unwrap()
    );
    assert_eq!(counts(&store).await, (1, 1, 0));
    store
        .save("handle/doc-1@alice", &record("w", 1, "again"), 0)
        .await
        .unwrap();
    assert_eq!(counts(&store).await, (2, 1, 0));
}

async fn concurrent_writers_one_key(store: Arc<dyn StateStore>) {
    const WRITERS: u64 = 16;
    const ROUNDS: u64 = 5;
    for round in 0..ROUNDS {
        let expected = round;
        let tasks: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let store = store.clone();
                tokio::spawn(async move {
                    let rec = record("race", expected + 1, &format!("w{writer}"));
                    (writer, store.save("race", &rec, expected).await)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (writer, result) = task.await.unwrap();
            match result {
                Ok(()) => winners.push(writer),
                Err(StoreError::Conflict { current, .. }) => {
                    assert_eq!(
                        current,
                        Some(expected + 1),
                        "loser sees the winner's version"
                    );
                }
                Err(e) => panic!("unexpected error in race: {e}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one winner, got {winners:?}"
        );
        let stored = store.load("race").await.unwrap().unwrap();
        assert_eq!(stored.version, expected + 1);
        assert_eq!(
            stored.snapshot["value"]["review"],
            format!("w{}", winners[0])
        );
    }
}

async fn many_keys_in_parallel(store: Arc<dyn StateStore>) {
    const KEYS: usize = 200;
    const VERSIONS: u64 = 3;
    let tasks: Vec<_> = (0..KEYS)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("many/{i:04}");
                for v in 1..=VERSIONS {
                    store
                        .save(&key, &record("many", v, &key), v - 1)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(store.count("many/").await.unwrap(), KEYS as u64);
    let mut seen = HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .list_keys("many/", after.as_deref(), 64)
            .await
            .unwrap();
        let Some(last) = page.last().cloned() else {
            break;
        };
        seen.extend(page);
        after = Some(last);
    }
    assert_eq!(seen.len(), KEYS);
    for i in (0..KEYS).step_by(37) {
        let rec = store.load(&format!("many/{i:04}")).await.unwrap().unwrap();
        assert_eq!(rec.version, VERSIONS);
    }
}

async fn answers_a_ping(store: Arc<dyn StateStore>) {
    store
        .ping()
        .await
        .expect("a reachable store answers a ping");
    assert_eq!(store.count("").await.unwrap(), 0, "a ping writes nothing");
}

async fn keeps_machines_by_version(store: Arc<dyn StateStore>) {
    let machine = json!({"id": "m", "initial": "a", "states": {"a": {}}});
    assert_eq!(store.load_machine("m", "v1").await.unwrap(), None);
    store.save_machine("m", "v1", &machine).await.unwrap();
    // A version names one definition: saving again keeps the first.
    store
        .save_machine("m", "v1", &json!({"something": "else"}))
        .await
        .unwrap();
    assert_eq!(store.load_machine("m", "v1").await.unwrap(), Some(machine));
    assert_eq!(store.load_machine("m", "v2").await.unwrap(), None);
    assert_eq!(store.load_machine("n", "v1").await.unwrap(), None);
    assert_eq!(
        store.count("").await.unwrap(),
        0,
        "machines are not instances"
    );
}

async fn places_are_counted_in_one_order_given_back_and_expire(store: Arc<dyn StateStore>) {
    const LONG: Duration = Duration::from_secs(60);
    let Some(first) = store.reserve_place("alice", "m1", LONG).await.unwrap() else {
        // A store that keeps no places: each server counts its own. It says so every time.
        assert_eq!(
            store.reserve_place("alice", "m2", LONG).await.unwrap(),
            None
        );
        store.release_place("alice", "m1").await.unwrap();
        return;
    };
    assert_eq!(first, 1);
    let reserve = async |scope: &str, id: &str, ttl: Duration| {
        store.reserve_place(scope, id, ttl).await.unwrap().unwrap()
    };
    assert_eq!(reserve("alice", "m2", LONG).await, 2);
    assert_eq!(
        reserve("bob", "b1", LONG).await,
        1,
        "each scope has its own"
    );
    assert_eq!(
        reserve("ali", "x1", LONG).await,
        1,
        "a scope is named whole"
    );
    // Taken again, a place is renewed, not counted twice.
    assert_eq!(reserve("bob", "b1", LONG).await, 1);
    store.release_place("alice", "m1").await.unwrap();
    store.release_place("alice", "never-held").await.unwrap();
    assert_eq!(reserve("alice", "m3", LONG).await, 2, "m2 and m3");
    // A place not renewed lapses (its server died).
    assert_eq!(reserve("alice", "m4", Duration::from_millis(300)).await, 3);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(reserve("alice", "m5", LONG).await, 3, "m2, m3 and m5");
    // Places are not records.
    assert_eq!(store.count_owned("alice").await.unwrap(), 0);
    assert_eq!(store.count("").await.unwrap(), 0);
    // Racing places are counted in one order: each sees those before it, none twice.
    let ids: Vec<String> = (0..20).map(|n| format!("c{n}")).collect();
    let racing =
        futures_util::future::join_all(ids.iter().map(|id| reserve("carol", id, LONG))).await;
    let mut seen = racing.clone();
    seen.sort_unstable();
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>(), "{racing:?}");
}

async fn marks_are_kept_and_replaced(store: Arc<dyn StateStore>) {
    assert_eq!(store.load_mark("walked").await.unwrap(), None);
    store.save_mark("walked", 5).await.unwrap();
    store.save_mark("largest", u64::MAX >> 1).await.unwrap();
    assert_eq!(store.load_mark("walked").await.unwrap(), Some(5));
    store.save_mark("walked", 7).await.unwrap();
    assert_eq!(store.load_mark("walked").await.unwrap(), Some(7));
    assert_eq!(
        store.load_mark("largest").await.unwrap(),
        Some(u64::MAX >> 1)
    );
    assert_eq!(store.count("").await.unwrap(), 0, "marks are not instances");
}

async fn a_finished_migration_is_not_walked_again_under_its_rule(store: Arc<dyn StateStore>) {
    let due_of = |_: &str, _: &InstanceRecord| Some(Some(5_000));
    store.save("k", &record("w", 1, "a"), 0).await.unwrap();
    let first = crate::store::migrate_unless_done(&*store, 1, |_| None, due_of)
        .await
        .unwrap()
        .expect("a store never walked is walked");
    assert_eq!(first.reindexed, 1);
    // A record whose due time is wrong again, as a server of older code would leave it.
    let moved = InstanceRecord {
        due_at_ms: None,
        ..record("w", 3, "b")
    };
    store.save("k", &moved, 2).await.unwrap();
    let again = crate::store::migrate_unless_done(&*store, 1, |_| None, due_of)
        .await
        .unwrap();
    assert_eq!(again, None, "the same rule does not walk again");
    assert_eq!(store.load("k").await.unwrap().unwrap().due_at_ms, None);
    let other = crate::store::migrate_unless_done(&*store, 2, |_| None, due_of)
        .await
        .unwrap()
        .expect("another rule walks");
    assert_eq!(other.reindexed, 1);
    assert_eq!(
        store.load("k").await.unwrap().unwrap().due_at_ms,
        Some(5_000)
    );
}

async fn writes_only_the_current_format(store: Arc<dyn StateStore>) {
    let old = InstanceRecord {
        format: 1,
        ..record("invoice", 1, "draft")
    };
    assert!(matches!(
        store.save("k", &old, 0).await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(store.load("k").await.unwrap(), None);
}

async fn migrates_records_of_the_current_format_to_nothing(store: Arc<dyn StateStore>) {
    let rec = record("invoice", 1, "draft");
    store.save("k", &rec, 0).await.unwrap();
    let report = super::migrate(&*store, |_| Some("unused".into()), |_, _| None)
        .await
        .unwrap();
    assert_eq!((report.migrated, report.current), (0, 1));
    assert_eq!(store.load("k").await.unwrap(), Some(rec));
}

/// `record` with due time `due`.
fn due_record(workflow: &str, version: u64, due: Option<u64>) -> InstanceRecord {
    InstanceRecord {
        due_at_ms: due,
        ..record(workflow, version, "x")
    }
}

fn due(at_ms: u64, key: &str) -> Due {
    Due {
        at_ms,
        key: key.to_owned(),
    }
}

async fn due_times_are_listed_earliest_first(store: Arc<dyn StateStore>) {
    // Timestamps of today's size, and one far out.
    const T: u64 = 1_700_000_000_000;
    for (key, at) in [
        ("c", Some(T + 30)),
        ("a", Some(T + 10)),
        ("none", None),
        ("b", Some(T + 20)),
        ("far", Some(MAX_DUE_MS)),
        ("zero", Some(0)),
    ] {
        store.save(key, &due_record("w", 1, at), 0).await.unwrap();
    }
    assert_eq!(
        store.due(T + 20, None, 10).await.unwrap(),
        [due(0, "zero"), due(T + 10, "a"), due(T + 20, "b")],
        "`until` is inclusive; a record without a due time is never listed"
    );
    assert_eq!(
        store.due(T + 19, None, 10).await.unwrap(),
        [due(0, "zero"), due(T + 10, "a")]
    );
    assert_eq!(
        store.due(u64::MAX, None, 2).await.unwrap(),
        [due(0, "zero"), due(T + 10, "a")],
        "`limit` keeps the earliest"
    );
    assert_eq!(
        store
            .due(u64::MAX, Some(&due(T + 20, "b")), 10)
            .await
            .unwrap(),
        [due(T + 30, "c"), due(MAX_DUE_MS, "far")]
    );
    assert!(store.due(u64::MAX, None, 0).await.unwrap().is_empty());
    assert_eq!(
        store.load("a").await.unwrap().unwrap().due_at_ms,
        Some(T + 10),
        "a record loads with its due time"
    );
    assert_eq!(store.load("none").await.unwrap().unwrap().due_at_ms, None);
}

async fn due_times_page_through_ties(store: Arc<dyn StateStore>) {
    // 25 keys due in the same millisecond, and some after: pages of 4 see each exactly once,
    // in (due, key) order.
    let mut want = Vec::new();
    for i in 0..25 {
        let key = format!("tie/{i:02}");
        store
            .save(&key, &due_record("w", 1, Some(500)), 0)
            .await
            .unwrap();
        want.push(due(500, &key));
    }
    for (i, at) in [(0, 501), (1, 499)] {
        let key = format!("other/{i}");
        store
            .save(&key, &due_record("w", 1, Some(at)), 0)
            .await
            .unwrap();
    }
    want.insert(0, due(499, "other/1"));
    want.push(due(501, "other/0"));
    let mut seen = Vec::new();
    let mut after: Option<Due> = None;
    loop {
        let page = store.due(1000, after.as_ref(), 4).await.unwrap();
        let Some(last) = page.last().cloned() else {
            break;
        };
        assert!(page.len() <= 4);
        seen.extend(page);
        after = Some(last);
    }
    assert_eq!(seen, want);
}

async fn due_times_move_with_saves_and_go_with_deletes(store: Arc<dyn StateStore>) {
    store
        .save("k", &due_record("w", 1, Some(100)), 0)
        .await
        .unwrap();
    store
        .save("j", &due_record("w", 1, Some(150)), 0)
        .await
        .unwrap();
    // A later due time replaces the earlier one: the key is listed once, at its new time.
    store
        .save("k", &due_record("w", 2, Some(200)), 1)
        .await
        .unwrap();
    assert_eq!(
        store.due(1000, None, 10).await.unwrap(),
        [due(150, "j"), due(200, "k")]
    );
    // An earlier one too.
    store
        .save("k", &due_record("w", 3, Some(50)), 2)
        .await
        .unwrap();
    assert_eq!(
        store.due(1000, None, 10).await.unwrap(),
        [due(50, "k"), due(150, "j")]
    );
    // No due time: not listed any more.
    store.save("k", &due_record("w", 4, None), 3).await.unwrap();
    assert_eq!(store.due(1000, None, 10).await.unwrap(), [due(150, "j")]);
    assert_eq!(store.load("k").await.unwrap().unwrap().due_at_ms, None);
    // A delete takes the due time with it, conditional or not.
    store
        .save("k", &due_record("w", 5, Some(60)), 4)
        .await
        .unwrap();
    assert!(store.delete("k", Some(5), None).await.unwrap());
    assert!(store.delete("j", None, None).await.unwrap());
    assert!(store.due(u64::MAX, None, 10).await.unwrap().is_empty());
    // A key saved again after its delete starts without the old entry.
    store
        .save("k", &due_record("w", 1, Some(70)), 0)
        .await
        .unwrap();
    assert_eq!(store.due(u64::MAX, None, 10).await.unwrap(), [due(70, "k")]);
}

async fn a_conflicting_save_keeps_the_due_time(store: Arc<dyn StateStore>) {
    store
        .save("k", &due_record("w", 1, Some(100)), 0)
        .await
        .unwrap();
    store
        .save("k", &due_record("w", 2, Some(200)), 1)
        .await
        .unwrap();
    // A writer that read version 1 loses, and its due time is not indexed.
    assert_conflict(
        store.save("k", &due_record("w", 2, Some(5)), 1).await,
        Some(2),
    );
    assert_conflict(store.delete("k", Some(1), None).await.map(|_| ()), Some(2));
    assert_eq!(
        store.due(u64::MAX, None, 10).await.unwrap(),
        [due(200, "k")]
    );
}

async fn due_times_past_the_largest_are_invalid(store: Arc<dyn StateStore>) {
    assert!(matches!(
        store
            .save("k", &due_record("w", 1, Some(MAX_DUE_MS + 1)), 0)
            .await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(store.load("k").await.unwrap(), None);
    assert!(store.due(u64::MAX, None, 10).await.unwrap().is_empty());
}

async fn migration_corrects_due_times(store: Arc<dyn StateStore>) {
    // "right" has the due time the caller works out, "wrong" and "missing" do not, and the
    // caller cannot tell for "unknown".
    for (key, at) in [
        ("right", Some(10)),
        ("wrong", Some(99)),
        ("missing", None),
        ("unknown", Some(7)),
    ] {
        store.save(key, &due_record("w", 1, at), 0).await.unwrap();
    }
    let due_of = |key: &str, record: &InstanceRecord| {
        assert_eq!(record.workflow, "w", "the record is handed over");
        match key {
            "right" => Some(Some(10)),
            "wrong" => Some(Some(20)),
            "missing" => Some(Some(30)),
            _ => None,
        }
    };
    let report = super::migrate(&*store, |_| None, due_of).await.unwrap();
    assert_eq!((report.reindexed, report.current), (2, 2));
    assert_eq!(
        store.due(u64::MAX, None, 10).await.unwrap(),
        [
            due(7, "unknown"),
            due(10, "right"),
            due(20, "wrong"),
            due(30, "missing")
        ]
    );
    let missing = store.load("missing").await.unwrap().unwrap();
    assert_eq!(
        (missing.version, missing.updated_at_ms),
        (2, record("w", 1, "x").updated_at_ms),
        "a compare-and-set save that keeps the record's time"
    );
    let again = super::migrate(&*store, |_| None, due_of).await.unwrap();
    assert_eq!((again.reindexed, again.current), (0, 4));
}

fn audit_entry(version: u64, to: &str) -> AuditEntry {
    AuditEntry {
        confirmation: None,
        at_ms: 1_700_000_000_000 + version,
        version,
        by: "tool:t.go".into(),
        event: Some("GO".into()),
        from: json!("before"),
        to: json!(to),
        principal: (version == 2).then(|| "alice".to_string()),
    }
}

/// Entries are appended by the saves that carry one, in order, only when the save wins its
/// compare-and-set, and are deleted with the record; another key's trail is its own.
/// A long-lived instance's trail keeps its last `audit_keep` transitions (5 in these fixtures):
/// older entries are dropped as new ones come, so the trail, and reading it, stay bounded.
async fn the_audit_trail_keeps_its_last_entries(store: Arc<dyn StateStore>) {
    for version in 1..=12 {
        let mut next = record("w", version, &format!("s{version}"));
        next.audit = Some(audit_entry(version, &format!("s{version}")));
        store.save("k", &next, version - 1).await.unwrap();
    }
    let kept: Vec<AuditEntry> = (8..=12)
        .map(|version| audit_entry(version, &format!("s{version}")))
        .collect();
    assert_eq!(store.audit("k").await.unwrap(), kept);
}

async fn the_audit_trail_grows_with_saves_and_goes_with_the_record(store: Arc<dyn StateStore>) {
    assert!(store.audit("k").await.unwrap().is_empty());
    let mut first = record("w", 1, "a");
    first.audit = Some(audit_entry(1, "a"));
    store.save("k", &first, 0).await.unwrap();
    // A save that moves nothing carries no entry.
    store.save("k", &record("w", 2, "a"), 1).await.unwrap();
    let mut third = record("w", 3, "b");
    third.audit = Some(audit_entry(3, "b"));
    store.save("k", &third, 2).await.unwrap();
    // A save that loses its compare-and-set appends nothing.
    let mut stale = record("w", 2, "c");
    stale.audit = Some(audit_entry(2, "c"));
    assert!(matches!(
        store.save("k", &stale, 1).await,
        Err(StoreError::Conflict { .. })
    ));
    let mut other = record("w", 1, "x");
    other.audit = Some(audit_entry(1, "x"));
    store.save("j", &other, 0).await.unwrap();
    assert_eq!(
        store.audit("k").await.unwrap(),
        vec![audit_entry(1, "a"), audit_entry(3, "b")]
    );
    assert!(store.delete("k", Some(3), None).await.unwrap());
    assert!(store.audit("k").await.unwrap().is_empty());
    assert_eq!(store.audit("j").await.unwrap(), vec![audit_entry(1, "x")]);
    // A new instance under the deleted key starts a new trail.
    store.save("k", &first, 0).await.unwrap();
    assert_eq!(store.audit("k").await.unwrap(), vec![audit_entry(1, "a")]);
}

/// The tombstone of `key`'s `record`, deleted by `by` at `at_ms`.
fn tombstone_of(key: &str, record: &InstanceRecord, by: &str, at_ms: u64) -> Tombstone {
    Tombstone::of(key, record, by, DeleteKind::Console, at_ms)
}

async fn a_delete_leaves_a_tombstone(store: Arc<dyn StateStore>) {
    let key = "handle/gone@t1";
    store.save(key, &record("w", 1, "a"), 0).await.unwrap();
    let last = record("w", 2, "b");
    store.save(key, &last, 1).await.unwrap();
    store
        .save("handle/other", &record("w", 1, "a"), 0)
        .await
        .unwrap();
    let tombstone = tombstone_of(key, &last, "token:ops", 1_800_000_000_000);
    // A stale delete deletes nothing and leaves nothing.
    match store.delete_leaving(key, 1, None, &tombstone).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(2)),
        other => panic!("a stale delete must conflict, got {other:?}"),
    }
    assert!(store.tombstones("", 10).await.unwrap().is_empty());
    assert!(
        store
            .delete_leaving(key, 2, None, &tombstone)
            .await
            .unwrap()
    );
    assert_eq!(store.load(key).await.unwrap(), None);
    let found = store.tombstones("handle/gone", 10).await.unwrap();
    assert_eq!(found, vec![tombstone.clone()]);
    assert_eq!(found[0].state, json!({"review": "b"}));
    assert_eq!((found[0].version, found[0].workflow.as_str()), (2, "w"));
    // The delete was a delete: the trail, the counts and the owner's count went with it.
    assert!(store.audit(key).await.unwrap().is_empty());
    assert_eq!(store.count_owned("t1").await.unwrap(), 0);
    assert_eq!(store.count("").await.unwrap(), 1);
    // Listed by prefix, only what starts with it.
    assert!(
        store
            .tombstones("handle/other", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.tombstones("", 10).await.unwrap().len(), 1);
    // Deleting it again finds nothing, and keeps the tombstone it has.
    match store.delete_leaving(key, 2, None, &tombstone).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, None),
        other => panic!("deleting an absent record must conflict, got {other:?}"),
    }
    assert_eq!(store.tombstones("", 10).await.unwrap(), vec![tombstone]);
}

async fn a_live_record_shows_no_tombstone(store: Arc<dyn StateStore>) {
    let key = "handle/live";
    store.save(key, &record("w", 1, "a"), 0).await.unwrap();
    assert!(store.tombstones("", 10).await.unwrap().is_empty());
    // A plain delete leaves none.
    assert!(store.delete(key, Some(1), None).await.unwrap());
    assert!(store.tombstones("", 10).await.unwrap().is_empty());
    // Nor does a delete that lost its race.
    store.save(key, &record("w", 1, "a"), 0).await.unwrap();
    let tombstone = tombstone_of(key, &record("w", 1, "a"), "cli", 5);
    assert!(
        store
            .delete_leaving(key, 7, None, &tombstone)
            .await
            .is_err()
    );
    assert!(store.load(key).await.unwrap().is_some());
    assert!(store.tombstones(key, 10).await.unwrap().is_empty());
}

async fn a_recreated_handle_hides_its_tombstone_until_deleted_again(store: Arc<dyn StateStore>) {
    let key = "handle/again@t1";
    let first = record("w", 1, "first");
    store.save(key, &first, 0).await.unwrap();
    let old = tombstone_of(key, &first, "token:a", 1_000);
    assert!(store.delete_leaving(key, 1, None, &old).await.unwrap());
    assert_eq!(store.tombstones(key, 10).await.unwrap(), vec![old]);
    // Saved again under the same key: alive, so no tombstone shows.
    let second = record("w", 1, "second");
    store.save(key, &second, 0).await.unwrap();
    assert!(store.tombstones(key, 10).await.unwrap().is_empty());
    assert!(store.tombstones("", 10).await.unwrap().is_empty());
    // Deleted again: the new tombstone replaces the old one.
    let new = tombstone_of(key, &second, "token:b", 2_000);
    assert!(store.delete_leaving(key, 1, None, &new).await.unwrap());
    assert_eq!(store.tombstones("", 10).await.unwrap(), vec![new.clone()]);
    // Pruning by the old time leaves the new one: its index entry moved with it.
    store.prune_tombstones(1_500, 100).await.unwrap();
    assert_eq!(store.tombstones("", 10).await.unwrap(), vec![new]);
}

/// Deletes sent at once (a retention burst; the embedded store takes them in one batch): each
/// record is deleted once, by one of the two racing for it, and leaves the winner's tombstone.
async fn racing_deletes_leave_one_tombstone_each_and_one_winner_per_record(
    store: Arc<dyn StateStore>,
) {
    const RECORDS: usize = 40;
    let saved = record("w", 1, "a");
    for n in 0..RECORDS {
        store
            .save(&format!("handle/r{n:02}"), &saved, 0)
            .await
            .unwrap();
    }
    let racers: Vec<_> = (0..RECORDS * 2)
        .map(|racer| {
            let store = store.clone();
            let saved = saved.clone();
            tokio::spawn(async move {
                let key = format!("handle/r{:02}", racer / 2);
                let by = format!("racer{racer}");
                let tombstone = tombstone_of(&key, &saved, &by, 1_000 + racer as u64);
                let deleted = store.delete_leaving(&key, 1, None, &tombstone).await;
                (key, tombstone, deleted)
            })
        })
        .collect();
    let mut winners = std::collections::BTreeMap::new();
    for racer in racers {
        let (key, tombstone, deleted) = racer.await.unwrap();
        match deleted {
            Ok(true) => assert!(
                winners.insert(key.clone(), tombstone).is_none(),
                "{key} was deleted twice"
            ),
            Err(StoreError::Conflict { current, .. }) => assert_eq!(current, None),
            other => panic!("a racing delete of {key} must win or conflict, got {other:?}"),
        }
    }
    assert_eq!(winners.len(), RECORDS, "every record is deleted once");
    assert_eq!(store.count("").await.unwrap(), 0);
    let left = store.tombstones("handle/", RECORDS * 2).await.unwrap();
    assert_eq!(left, winners.into_values().collect::<Vec<_>>());
}

async fn tombstones_are_pruned_by_age(store: Arc<dyn StateStore>) {
    let mut kept = Vec::new();
    for (n, at) in [3_000u64, 1_000, 2_000, 4_000].into_iter().enumerate() {
        let key = format!("handle/t{n}");
        let record = record("w", 1, "a");
        store.save(&key, &record, 0).await.unwrap();
        let tombstone = tombstone_of(&key, &record, "retention", at);
        assert!(
            store
                .delete_leaving(&key, 1, None, &tombstone)
                .await
                .unwrap()
        );
        kept.push(tombstone);
    }
    assert_eq!(store.prune_tombstones(999, 100).await.unwrap(), 0);
    assert_eq!(store.prune_tombstones(2_000, 100).await.unwrap(), 2);
    let left: Vec<u64> = store
        .tombstones("", 10)
        .await
        .unwrap()
        .iter()
        .map(|t| t.deleted_at_ms)
        .collect();
    assert_eq!(left, vec![3_000, 4_000]);
    assert_eq!(store.prune_tombstones(2_000, 100).await.unwrap(), 0);
    // A limit leaves the rest for the next call (one of each shard's oldest at most).
    let pruned = store.prune_tombstones(u64::MAX >> 12, 1).await.unwrap();
    assert!(pruned >= 1);
    store.prune_tombstones(u64::MAX >> 12, 100).await.unwrap();
    assert!(store.tombstones("", 10).await.unwrap().is_empty());
    drop(kept);
}
