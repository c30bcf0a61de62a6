//! Metrics for operators: what the server counts, under which names, and the Prometheus text
//! `GET /metrics` serves.
//!
//! Events are counted where they happen, through the `metrics` facade: a call answered (the MCP
//! handler), a transition saved and how long the save took (the instance actor), a `list_changed`
//! sent (the notifier, and the MCP handler for a sessionless caller). Until [`install`] runs,
//! recording is a no-op, so stdio, `check` and the unit tests pay nothing. Numbers that something
//! already holds for `/stats` (the actors' tables, the plugin pools, the HTTP sessions) are not
//! counted a second time: they are read when scraped ([`Gauges`]) and rendered beside the
//! recorded ones, into a recorder of their own made for that scrape, so a plugin that is gone
//! leaves no stale series behind.
//!
//! Every label value comes from a bounded set: tool, workflow and event names from the catalog
//! (a tool no plugin provides is counted as [`UNKNOWN_TOOL`]), outcomes and causes from the
//! host's own codes. A client can therefore not grow the number of series.
//!
//! It must not know where a number comes from (HTTP, rmcp, actix): callers hand it plain values.

use std::{
    future::Future,
    sync::OnceLock,
    time::{Duration, Instant},
};

use metrics::{Counter, Histogram, Unit, counter, describe_counter, describe_histogram, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::{fast_hash::ConcurrentMap, store::StoreError};

pub mod changes;
pub mod scrape;

/// `turnstile_calls_total{tool, outcome}`: `tools/call` requests answered.
pub const CALLS: &str = "turnstile_calls_total";
/// `turnstile_call_duration_seconds{tool}`: from the request reaching the handler to its answer.
pub const CALL_DURATION: &str = "turnstile_call_duration_seconds";
/// `turnstile_transitions_total{workflow, event}`: transitions saved.
pub const TRANSITIONS: &str = "turnstile_transitions_total";
/// `turnstile_store_save_duration_seconds{outcome}`: compare-and-set saves of an instance.
pub const STORE_SAVE_DURATION: &str = "turnstile_store_save_duration_seconds";
/// `turnstile_store_commits_total`: the embedded store's durable commits, one sync of its file
/// each.
pub const STORE_COMMITS: &str = "turnstile_store_commits_total";
/// `turnstile_store_committed_writes_total`: the writes those commits carried. Over
/// [`STORE_COMMITS`], how many writes share a sync: what group commit is doing under the load.
pub const STORE_COMMITTED_WRITES: &str = "turnstile_store_committed_writes_total";
/// `turnstile_list_changed_sent_total{cause}`: `notifications/tools/list_changed` sent.
pub const LIST_CHANGED_SENT: &str = "turnstile_list_changed_sent_total";
/// Counter: leases on instances granted to this server anew (not renewals), by `kind`: `free`
/// (none was held, or it was released) or `takeover` (one lapsed unreleased).
pub const LEASES_GRANTED: &str = "turnstile_leases_granted_total";
/// Counter: calls that found another server's lease and waited, by `outcome` (`waiting` when the
/// wait starts, `busy` when it ended in `BUSY`).
pub const LEASE_WAITS: &str = "turnstile_lease_waits_total";
/// Counter: writes the store refused because the lease they named was no longer alive.
pub const LEASE_FENCED: &str = "turnstile_lease_fenced_total";
/// Counter: changes announced by other servers sharing the store that reached this one (only
/// those of instances its sessions watch do).
pub const CHANGES_RELAYED: &str = "turnstile_changes_relayed_total";

/// The `tool` label of a call whose name no loaded plugin provides. Parentheses cannot occur in
/// an MCP tool name, so it never collides with a real tool.
pub const UNKNOWN_TOOL: &str = "(unknown)";

/// The `outcome` label of a call that succeeded; any other outcome is an error code.
pub const OK: &str = "ok";

/// Call latency buckets, in seconds: from a quick tool answered in-process to the default
/// `--tool-timeout`.
const CALL_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Store save buckets, in seconds: from the embedded store's fsync to a remote store under load.
const SAVE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// How often recorded latencies are folded into their histograms between scrapes: the exporter
/// keeps raw samples until then, so without it an unscraped server would grow.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why a `list_changed` was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// An instance the session watches moved (here or on another server sharing the store).
    Transition,
    /// The plugin catalog changed the session's menu.
    Catalog,
}

impl Cause {
    fn label(self) -> &'static str {
        match self {
            Cause::Transition => "transition",
            Cause::Catalog => "catalog",
        }
    }
}

/// Installs the process-wide recorder (once; later calls return the same handle), and starts
/// the thread that keeps its histograms small.
pub fn install() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(CALL_DURATION.into()), &CALL_BUCKETS)
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    Matcher::Full(STORE_SAVE_DURATION.into()),
                    &SAVE_BUCKETS,
                )
            })
            // The bucket lists above are constants, and not empty.
            .expect("non-empty bucket lists")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            // Only an embedding program that brought its own recorder gets here: its recorder
            // receives the events, and `/metrics` shows the scrape-time numbers only.
            tracing::debug!("a metrics recorder was installed already; /metrics shows gauges only");
        }
        describe_recorded();
        let upkeep = handle.clone();
        let started = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(error) = started {
            // Scrapes fold the samples too; only a server nobody scrapes keeps them longer.
            tracing::debug!(%error, "cannot start the metrics upkeep thread");
        }
        handle
    })
}

/// The `# HELP` lines of the metrics recorded as things happen.
fn describe_recorded() {
    describe_counter!(
        CALLS,
        "tools/call requests answered, by tool (a catalog name, or \"(unknown)\") and outcome \
         (\"ok\", or the error code of the result: FORBIDDEN, TOOL_ERROR, BUSY, ...)"
    );
    describe_histogram!(
        CALL_DURATION,
        Unit::Seconds,
        "Time from a tools/call reaching the handler to its answer, by tool"
    );
    describe_counter!(
        TRANSITIONS,
        "Transitions saved, by workflow and the event that fired them"
    );
    describe_histogram!(
        STORE_SAVE_DURATION,
        Unit::Seconds,
        "Time of one compare-and-set save of an instance, by outcome (ok, conflict, error)"
    );
    describe_counter!(
        STORE_COMMITS,
        "Durable commits of the embedded store, one sync of its file each"
    );
    describe_counter!(
        STORE_COMMITTED_WRITES,
        "Writes (saves, deletes, machine definitions) the embedded store's commits carried; \
         over turnstile_store_commits_total, how many share a sync"
    );
    describe_counter!(
        LEASES_GRANTED,
        "Leases on instances granted to this server anew (not renewals), by kind: free, or \
         takeover (the previous holder's lapsed unreleased: it paused, crashed or was cut off)"
    );
    describe_counter!(
        LEASE_WAITS,
        "Calls that found another server holding their instance's lease, by outcome: waiting \
         (counted when the wait starts), busy (the wait ran out: answered BUSY, nothing ran)"
    );
    describe_counter!(
        LEASE_FENCED,
        "Writes the store refused because the lease they were made under had lapsed or moved \
         (the handler ran, nothing was saved)"
    );
    describe_counter!(
        CHANGES_RELAYED,
        "Changes made by other servers sharing the store that reached this one (announced, or \
         found once its feed listened to the instance): only those of instances its sessions or \
         listen streams watch do"
    );
    describe_counter!(
        LIST_CHANGED_SENT,
        "notifications/tools/list_changed sent, by cause (transition, catalog)"
    );
}

/// The handles of the `tools/call` metrics, by tool and outcome, each registered once, with the
/// recorder current at its first call (the global one, in a server). Building a metric's key
/// (its labels as owned strings) and finding it in the recorder's registry cost more than the
/// count itself, and every call did both twice. The maps stay small: tools come from the
/// catalog and outcomes from the host's codes (see the module's docs).
#[derive(Default)]
pub struct CallMetrics {
    by_tool: ConcurrentMap<String, ToolCallMetrics>,
}

/// One tool's call metrics.
struct ToolCallMetrics {
    duration: Histogram,
    by_outcome: ConcurrentMap<String, Counter>,
}

impl CallMetrics {
    /// A `tools/call` was answered. `tool` is a catalog name or [`UNKNOWN_TOOL`]; `outcome` is
    /// [`OK`] or the result's error code.
    pub fn answered(&self, tool: &str, outcome: &str, took: Duration) {
        let metrics = match self.by_tool.get(tool) {
            Some(metrics) => metrics,
            None => self
                .by_tool
                .entry(tool.to_owned())
                .or_insert_with(|| ToolCallMetrics {
                    duration: histogram!(CALL_DURATION, "tool" => tool.to_owned()),
                    by_outcome: ConcurrentMap::default(),
                })
                .downgrade(),
        };
        metrics.duration.record(took);
        match metrics.by_outcome.get(outcome) {
            Some(calls) => calls.increment(1),
            None => metrics
                .by_outcome
                .entry(outcome.to_owned())
                .or_insert_with(
                    || counter!(CALLS, "tool" => tool.to_owned(), "outcome" => outcome.to_owned()),
                )
                .increment(1),
        }
    }
}

/// A transition of an instance of `workflow`, fired by `event`, was saved.
pub fn transition_saved(workflow: &str, event: &str) {
    counter!(TRANSITIONS, "workflow" => workflow.to_owned(), "event" => event.to_owned())
        .increment(1);
    changes::changes().tell();
}

/// `count` `list_changed` reached sessions' transports (a fan-out counts its sends once, not
/// one registry lookup per session).
pub fn list_changed_sent(cause: Cause, count: u64) {
    if count > 0 {
        counter!(LIST_CHANGED_SENT, "cause" => cause.label()).increment(count);
    }
}

/// This server was granted an instance's lease anew (`took_over`: over one that lapsed).
pub fn lease_granted(took_over: bool) {
    let kind = if took_over { "takeover" } else { "free" };
    counter!(LEASES_GRANTED, "kind" => kind).increment(1);
}

/// A call started waiting for another server's lease.
pub fn lease_waiting() {
    counter!(LEASE_WAITS, "outcome" => "waiting").increment(1);
}

/// A call's wait for another server's lease ran out: it is answered `BUSY`.
pub fn lease_wait_ran_out() {
    counter!(LEASE_WAITS, "outcome" => "busy").increment(1);
}

/// The store refused a write because its lease had lapsed or moved.
pub fn lease_fenced() {
    counter!(LEASE_FENCED).increment(1);
}

/// A change made by another server reached this one: announced, or found by the relay's check
/// once its feed listened to the instance (`actors/relay.rs`).
pub fn change_relayed() {
    counter!(CHANGES_RELAYED).increment(1);
    changes::changes().tell();
}

/// The embedded store made `writes` writes durable in one commit.
pub fn store_committed(writes: usize) {
    counter!(STORE_COMMITS).increment(1);
    counter!(STORE_COMMITTED_WRITES).increment(writes as u64);
}

/// Runs a store save, recording how long it took and how it ended.
pub async fn timed_save<T>(
    save: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let started = Instant::now();
    let saved = save.await;
    let outcome = match &saved {
        Ok(_) => "ok",
        Err(StoreError::Conflict { .. }) => "conflict",
        Err(StoreError::Fenced { .. }) => "fenced",
        Err(_) => "error",
    };
    histogram!(STORE_SAVE_DURATION, "outcome" => outcome).record(started.elapsed());
    saved
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders what `record` records into a recorder of its own (also for `scrape`'s tests).
    pub(super) fn rendered(record: impl FnOnce()) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&recorder, record);
        recorder.handle().render()
    }

    #[test]
    fn a_call_counts_once_under_its_tool_and_outcome() {
        let text = rendered(|| {
            let calls = CallMetrics::default();
            calls.answered("invoice.submit", OK, Duration::from_millis(3));
            calls.answered("invoice.submit", "FORBIDDEN", Duration::from_millis(1));
            calls.answered("invoice.submit", OK, Duration::from_millis(2));
            calls.answered("invoice.status", OK, Duration::from_millis(1));
        });
        assert!(
            text.contains(r#"turnstile_calls_total{tool="invoice.submit",outcome="ok"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"turnstile_calls_total{tool="invoice.submit",outcome="FORBIDDEN"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"turnstile_calls_total{tool="invoice.status",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"turnstile_call_duration_seconds_count{tool="invoice.submit"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn a_save_is_timed_under_its_outcome() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(STORE_SAVE_DURATION.into()), &SAVE_BUCKETS)
            .unwrap()
            .build_recorder();
        // `with_local_recorder` takes a closure, not a future: time saves that are ready.
        let save = |result: Result<(), StoreError>| {
            futures_util::FutureExt::now_or_never(timed_save(std::future::ready(result)))
                .expect("a ready future")
        };
        metrics::with_local_recorder(&recorder, || {
            save(Ok(())).expect("saved");
            save(Err(StoreError::Unavailable("down".into()))).expect_err("failed");
            save(Err(StoreError::Unavailable("down".into()))).expect_err("failed");
        });
        let text = recorder.handle().render();
        assert!(
            text.contains(r#"turnstile_store_save_duration_seconds_count{outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"turnstile_store_save_duration_seconds_count{outcome="error"} 2"#),
            "{text}"
        );
    }
}
