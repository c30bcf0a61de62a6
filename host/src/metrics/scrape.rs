//! What a scrape reads at its moment, beside what was recorded as it happened: the actors'
//! tables, the plugin pools, the HTTP sessions and the store's counts by state, handed in as
//! plain values ([`Gauges`]) and rendered with the recorded metrics. Apart from `metrics/mod.rs` so that the recording side,
//! which the store and the actors call, names nothing above it.

use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;

use super::install;
use crate::{
    actors::{NotifierStats, RegistryStats},
    store::StateCounts,
};

/// What the server holds at the moment of a scrape, read from where it is kept.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub registry: RegistryStats,
    pub notifier: NotifierStats,
    /// HTTP sessions held, live or passivated, handshakes included.
    pub http_sessions: usize,
    /// Of those, sessions that have not sent `notifications/initialized` yet.
    pub http_sessions_in_handshake: usize,
    /// Of those, sessions passivated (idle, only their record kept; `--session-passivate-after`).
    pub http_sessions_passivated: usize,
    pub plugins: Vec<PluginPool>,
    /// The store's counts by state (`StateStore::count_by_state`, an index: no record is read);
    /// `None` when the store did not answer, and the series are left out rather than shown
    /// as zero.
    pub instances: Option<StateCounts>,
}

/// One plugin's call pool (see `--plugin-pool`).
#[derive(Debug, Clone)]
pub struct PluginPool {
    pub plugin: String,
    pub size: usize,
    pub running: usize,
    pub past_deadline: u64,
    /// For an isolated plugin, how many times its process ended while serving; `None` for a
    /// plugin in the server's process.
    pub process_crashes: Option<u64>,
}

/// The body of `GET /metrics`: every recorded metric, then `gauges` and the build's identity.
/// An empty string before [`install`].
pub fn render(gauges: &Gauges) -> String {
    let scrape = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&scrape, || record_gauges(gauges));
    let mut text = install().render();
    text.push_str(&scrape.handle().render());
    text
}

/// Sets the scrape-time metrics on the current (local) recorder.
fn record_gauges(gauges: &Gauges) {
    describe_gauge!(
        "turnstile_build_info",
        "Always 1; the version label says which turnstile is running"
    );
    gauge!("turnstile_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);

    describe_gauge!(
        "turnstile_sessions",
        "HTTP sessions held (2025-06-18 and 2025-11-25 clients), handshakes included"
    );
    gauge!("turnstile_sessions").set(gauges.http_sessions as f64);
    describe_gauge!(
        "turnstile_sessions_in_handshake",
        "HTTP sessions that sent initialize but not notifications/initialized yet"
    );
    gauge!("turnstile_sessions_in_handshake").set(gauges.http_sessions_in_handshake as f64);
    describe_gauge!(
        "turnstile_sessions_passivated",
        "HTTP sessions passivated: idle, kept as a record, restored on their next request"
    );
    gauge!("turnstile_sessions_passivated").set(gauges.http_sessions_passivated as f64);
    describe_gauge!(
        "turnstile_subscribers",
        "Sessions and listen streams that hear list_changed"
    );
    gauge!("turnstile_subscribers").set(gauges.notifier.sessions as f64);
    describe_gauge!(
        "turnstile_subscriptions",
        "(subscriber, instance) pairs: who hears of which instance's transitions"
    );
    gauge!("turnstile_subscriptions").set(gauges.notifier.subscriptions as f64);
    describe_gauge!(
        "turnstile_watched_instances",
        "Instances with at least one subscriber"
    );
    gauge!("turnstile_watched_instances").set(gauges.notifier.watched_instances as f64);

    describe_gauge!(
        "turnstile_instances_live",
        "Instance actors in memory, by owner (session-keyed or handle-keyed)"
    );
    let registry = &gauges.registry;
    gauge!("turnstile_instances_live", "owner" => "session").set(registry.session_instances as f64);
    gauge!("turnstile_instances_live", "owner" => "handle").set(
        registry
            .instances
            .saturating_sub(registry.session_instances) as f64,
    );
    describe_counter!(
        "turnstile_instances_passivated_total",
        "Instances dropped from memory for idleness (--idle-after) since start"
    );
    counter!("turnstile_instances_passivated_total").absolute(registry.passivated);
    if let Some(instances) = &gauges.instances {
        record_instances(instances);
    }

    describe_gauge!(
        "turnstile_plugin_pool_size",
        "How many calls of the plugin may run at once (--plugin-pool)"
    );
    describe_gauge!(
        "turnstile_plugin_calls_running",
        "Calls of the plugin running now; at the pool size, further calls are answered BUSY"
    );
    describe_counter!(
        "turnstile_plugin_calls_past_deadline_total",
        "Calls of the plugin that outlived --tool-timeout since it was loaded"
    );
    describe_counter!(
        "turnstile_plugin_process_crashes_total",
        "Times an isolated plugin's process ended while serving (--isolate), since it was loaded"
    );
    for pool in &gauges.plugins {
        let plugin = pool.plugin.clone();
        if let Some(crashes) = pool.process_crashes {
            counter!("turnstile_plugin_process_crashes_total", "plugin" => plugin.clone())
                .absolute(crashes);
        }
        gauge!("turnstile_plugin_pool_size", "plugin" => plugin.clone()).set(pool.size as f64);
        gauge!("turnstile_plugin_calls_running", "plugin" => plugin.clone())
            .set(pool.running as f64);
        counter!("turnstile_plugin_calls_past_deadline_total", "plugin" => plugin)
            .absolute(pool.past_deadline);
    }
}

/// The instances stored, by workflow and state. A state with none has no series (the store
/// keeps no line for it).
fn record_instances(instances: &StateCounts) {
    describe_gauge!(
        "turnstile_instances",
        "Instances stored, by workflow and state, all machine versions together: an instance \
         counts under every state path active in it (a nested state's parents, each region of \
         a parallel state)"
    );
    describe_gauge!(
        "turnstile_workflow_instances",
        "Instances stored, by workflow"
    );
    for (workflow, count) in instances.by_workflow() {
        gauge!("turnstile_workflow_instances", "workflow" => workflow.clone())
            .set(count.total as f64);
        for (state, n) in count.states {
            gauge!("turnstile_instances", "workflow" => workflow.clone(), "state" => state)
                .set(n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        metrics::tests::rendered,
        store::{InstanceRecord, Tally},
    };

    #[test]
    fn gauges_render_what_they_are_given_and_nothing_of_a_plugin_not_named() {
        let gauges = Gauges {
            registry: RegistryStats {
                instances: 5,
                session_instances: 2,
                passivated: 7,
            },
            http_sessions: 3,
            plugins: vec![
                PluginPool {
                    plugin: "invoice".into(),
                    size: 64,
                    running: 1,
                    past_deadline: 0,
                    process_crashes: None,
                },
                PluginPool {
                    plugin: "testkit".into(),
                    size: 64,
                    running: 0,
                    past_deadline: 0,
                    process_crashes: Some(2),
                },
            ],
            instances: Some({
                let mut counts = StateCounts::default();
                for (machine, value) in [
                    ("v1", json!({"review": "checking"})),
                    ("v2", json!({"review": "signing"})),
                    ("v2", json!("draft")),
                ] {
                    let record = InstanceRecord {
                        machine: Some(machine.into()),
                        ..InstanceRecord::first("invoice", json!({"value": value}))
                    };
                    counts.add(&Tally::of(&record));
                }
                counts
            }),
            ..Gauges::default()
        };
        let text = rendered(|| record_gauges(&gauges));
        for line in [
            r#"turnstile_instances_live{owner="handle"} 3"#,
            r#"turnstile_instances_live{owner="session"} 2"#,
            "turnstile_instances_passivated_total 7",
            "turnstile_sessions 3",
            r#"turnstile_plugin_pool_size{plugin="invoice"} 64"#,
            r#"turnstile_plugin_process_crashes_total{plugin="testkit"} 2"#,
            r#"turnstile_instances{workflow="invoice",state="review"} 2"#,
            r#"turnstile_instances{workflow="invoice",state="review.checking"} 1"#,
            r#"turnstile_instances{workflow="invoice",state="draft"} 1"#,
            r#"turnstile_workflow_instances{workflow="invoice"} 3"#,
            concat!(
                r#"turnstile_build_info{version=""#,
                env!("CARGO_PKG_VERSION"),
                r#""} 1"#
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(!text.contains("payment"), "{text}");
        assert!(
            !text.contains(r#"turnstile_plugin_process_crashes_total{plugin="invoice"}"#),
            "a plugin in the server's process has no process of its own: {text}"
        );
    }
}
