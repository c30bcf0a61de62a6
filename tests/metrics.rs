//! What an operator watching a running server sees: `GET /metrics`, read with a Prometheus text
//! parser, and the server's log at the default level and as JSON.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    Client, Labels, PluginDir, Scrape, Server, TokenFile, error_code, eventually, labels_of,
};
use serde_json::{Value, json};

/// `(labels, count)` pairs as `moved_since` reports them.
fn expect(rows: &[(&[(&str, &str)], f64)]) -> BTreeMap<Labels, f64> {
    rows.iter()
        .map(|(labels, count)| (labels_of(labels), *count))
        .collect()
}

/// Scrapes until `check` holds (at most 10 s), and returns that scrape.
async fn scrape_until(server: &Server, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    eventually(
        &format!("never: {what}"),
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let scrape = Scrape::of(server).await;
            check(&scrape).then_some(scrape)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_by_exactly_the_calls_made_by_tool_and_outcome() {
    let (_plugins, server) = common::start(&["invoice", "testkit"], &[]);
    let before = Scrape::of(&server).await;

    const CLIENTS: usize = 3;
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let client = Client::http(&server.url).await;
        let submitted = client.call("invoice.submit", json!({"amount": 5})).await;
        assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
        // Client i is refused i + 1 times: 1 + 2 + 3 refusals in all.
        for _ in 0..=i {
            let refused = client.call("invoice.discharge", json!({})).await;
            assert_eq!(error_code(&refused), "FORBIDDEN");
        }
        let invalid = client.call("invoice.submit", json!({"amount": -1})).await;
        assert_eq!(error_code(&invalid), "INVALID_ARGUMENTS");
        let approved = client.call("invoice.approve", json!({})).await;
        assert_ne!(approved.is_error, Some(true), "{approved:?}");
        let failed = client.call("testkit.go", json!({"fail": true})).await;
        assert_eq!(error_code(&failed), "TOOL_ERROR");
        let unknown = client.try_call("no.such.tool", json!({})).await;
        assert!(unknown.is_err(), "{unknown:?}");
        clients.push(client);
    }
    let n = CLIENTS as f64;

    // Each session hears its own two transitions; the count is taken as each one is sent.
    let after = scrape_until(&server, "two list_changed per session", |scrape| {
        scrape.value(
            "turnstile_list_changed_sent_total",
            &[("cause", "transition")],
        ) - before.value(
            "turnstile_list_changed_sent_total",
            &[("cause", "transition")],
        ) >= 2.0 * n
    })
    .await;
    assert_eq!(
        after.moved_since(&before, "turnstile_calls_total"),
        expect(&[
            (&[("tool", "invoice.submit"), ("outcome", "ok")], n),
            (
                &[("tool", "invoice.submit"), ("outcome", "INVALID_ARGUMENTS")],
                n
            ),
            (
                &[("tool", "invoice.discharge"), ("outcome", "FORBIDDEN")],
                6.0
            ),
            (&[("tool", "invoice.approve"), ("outcome", "ok")], n),
            (&[("tool", "testkit.go"), ("outcome", "TOOL_ERROR")], n),
            (&[("tool", "(unknown)"), ("outcome", "INVALID_PARAMS")], n),
        ])
    );
    assert_eq!(
        after.moved_since(&before, "turnstile_call_duration_seconds"),
        expect(&[
            (&[("tool", "invoice.submit")], 2.0 * n),
            (&[("tool", "invoice.discharge")], 6.0),
            (&[("tool", "invoice.approve")], n),
            (&[("tool", "testkit.go")], n),
            (&[("tool", "(unknown)")], n),
        ])
    );
    assert_eq!(
        after.moved_since(&before, "turnstile_transitions_total"),
        expect(&[
            (&[("workflow", "invoice"), ("event", "SUBMIT")], n),
            (&[("workflow", "invoice"), ("event", "APPROVE")], n),
        ])
    );
    assert_eq!(
        after.moved_since(&before, "turnstile_store_save_duration_seconds"),
        expect(&[(&[("outcome", "ok")], 2.0 * n)])
    );
    // The default store is the embedded one. Its commits carried those saves and the invoice
    // machine's definition (kept before the first record naming it), some sharing a sync.
    let writes = after.value("turnstile_store_committed_writes_total", &[])
        - before.value("turnstile_store_committed_writes_total", &[]);
    let commits = after.value("turnstile_store_commits_total", &[])
        - before.value("turnstile_store_commits_total", &[]);
    assert_eq!(writes, 2.0 * n + 1.0);
    assert!(
        (1.0..=writes).contains(&commits),
        "{commits} commits for {writes} writes"
    );
    assert_eq!(
        after.moved_since(&before, "turnstile_list_changed_sent_total"),
        expect(&[(&[("cause", "transition")], 2.0 * n)])
    );

    // What the server holds is read when scraped: three sessions, each watching its invoice
    // and its testkit instance.
    assert_eq!(after.value("turnstile_sessions", &[]), n);
    assert_eq!(after.value("turnstile_subscribers", &[]), n);
    assert_eq!(after.value("turnstile_subscriptions", &[]), 2.0 * n);
    assert_eq!(
        after.value("turnstile_instances_live", &[("owner", "session")]),
        2.0 * n
    );
    assert_eq!(
        after.value("turnstile_plugin_calls_running", &[("plugin", "invoice")]),
        0.0
    );
    assert!(after.value("turnstile_plugin_pool_size", &[("plugin", "invoice")]) > 0.0);
    assert_eq!(
        after.value(
            "turnstile_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );

    for client in clients {
        client.close().await;
    }
    let ended = scrape_until(&server, "the sessions and their instances gone", |scrape| {
        scrape.value("turnstile_sessions", &[]) == 0.0
            && scrape.value("turnstile_instances_live", &[("owner", "session")]) == 0.0
            && scrape.value("turnstile_subscriptions", &[]) == 0.0
    })
    .await;
    // Scraping and ending sessions call no tool.
    assert!(
        ended
            .moved_since(&after, "turnstile_calls_total")
            .is_empty()
    );
}

#[tokio::test]
async fn metrics_need_the_token_and_host_the_other_routes_need() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("prometheus s3cret-scraper\n");
    let server = Server::http(plugins.path(), &["--auth-token-file", file.arg()]);
    let url = format!("{}/metrics", server.base());
    let http = reqwest::Client::new();

    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = http.get(&url).bearer_auth("guess").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let foreign = http
        .get(&url)
        .bearer_auth("s3cret-scraper")
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);

    let scraped = http
        .get(&url)
        .bearer_auth("s3cret-scraper")
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    let scrape = Scrape::parse(scraped).await;
    assert_eq!(
        scrape.value(
            "turnstile_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
}

/// The level of a text log line (`<time>  INFO target: message`).
fn level(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or("")
}

/// What a server logs at the default level when it starts: a line per plugin, the data
/// directory's permissions made private (a test's temporary directory is not), the store, the
/// address.
const START_UP: [&str; 4] = [
    "plugin loaded",
    "tightened permissions",
    "state store open",
    "serving MCP over Streamable HTTP",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_sessionless_clients_at_the_default_level_log_nothing_past_start_up() {
    let plugins = PluginDir::with(&["invoice", "testkit"]);
    let mut server = Server::http_logging(plugins.path(), &[], None);

    // Session mode (2025-11-25): sessions that list, move their instances on, make mistakes
    // and end (DELETE), which ends their instances too.
    for _ in 0..40 {
        let client = Client::http(&server.url).await;
        client.tools().await;
        client.call("invoice.submit", json!({"amount": 5})).await;
        client.call("invoice.submit", json!({"amount": 5})).await;
        let _ = client.try_call("no.such.tool", json!({})).await;
        client.close().await;
    }
    // 2026-07-28: no sessions; a listen stream opened and closed by the client, a handle
    // minted and moved on, a refusal, an unknown tool.
    for _ in 0..5 {
        let client = Client::http_sessionless(&server.url).await;
        let _listening = client.listen().await;
        let started = client.call("invoice.submit", json!({"amount": 5})).await;
        let handle = started.structured_content.as_ref().unwrap()["handle"].clone();
        client
            .call("invoice.approve", json!({ "handle": handle }))
            .await;
        let refused = client
            .call("invoice.approve", json!({ "handle": handle }))
            .await;
        assert_eq!(error_code(&refused), "FORBIDDEN");
        let _ = client.try_call("no.such.tool", json!({})).await;
        client.close().await;
    }
    // What the last hang-ups cause is logged within moments, if at all.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let log = server.stderr();
    for line in log.lines() {
        assert_eq!(level(line), "INFO", "{log}");
        assert!(
            START_UP.iter().any(|needle| line.contains(needle)),
            "not a start-up line: {line}\n{log}"
        );
    }
    assert_eq!(log.matches("plugin loaded").count(), 2, "{log}");
    assert!(log.contains("serving MCP"), "{log}");

    // Shutting down is a server event: INFO too, and nothing else.
    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_code_within(Duration::from_secs(30)), Some(0));
    let log = server.stderr();
    for line in log.lines() {
        assert_eq!(level(line), "INFO", "{log}");
    }
    assert!(log.lines().last().unwrap().contains("shut down"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_parse_and_carry_each_calls_span() {
    let plugins = PluginDir::with(&["testkit"]);
    let server = Server::http_logging(
        plugins.path(),
        &["--log-format", "json"],
        Some("info,turnstile::call=debug,turnstile::invoke=debug"),
    );
    let client = Client::http(&server.url).await;
    let moved = client.call("testkit.go", json!({})).await;
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    // A tool that promised to be quick and was not: a debug line (a first overrun is forgiven),
    // logged during its call.
    let slow = client.call("testkit.quick_slow", json!({"ms": 30})).await;
    assert_ne!(slow.is_error, Some(true), "{slow:?}");
    client.close().await;
    server.wait_for_log("a quick tool overran its budget");

    let log = server.stderr();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| {
            let parsed: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
            for field in ["timestamp", "level", "target"] {
                assert!(parsed[field].is_string(), "no {field}: {line}");
            }
            assert!(parsed["fields"]["message"].is_string(), "{line}");
            parsed
        })
        .collect();
    let answered: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["message"] == "call answered")
        .collect();
    assert_eq!(answered.len(), 2, "{log}");
    let go = &answered[0]["span"];
    assert_eq!(go["name"], "call", "{log}");
    assert_eq!(go["tool"], "testkit.go", "{log}");
    assert_eq!(go["outcome"], "ok", "{log}");
    // The instance is named by a digest: the session id is a credential and stays out of logs.
    let instance = go["instance"].as_str().expect("the instance in the span");
    assert!(instance.starts_with("testkit#"), "{log}");
    assert!(!instance.contains("session"), "{log}");

    let warning = lines
        .iter()
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("overran its budget"))
        })
        .expect("the overrun's line");
    assert_eq!(warning["level"], "DEBUG", "{warning}");
    assert_eq!(warning["span"]["name"], "call", "{warning}");
    assert_eq!(warning["span"]["tool"], "testkit.quick_slow", "{warning}");
}

/// `turnstile_instances{workflow, state}` and `turnstile_workflow_instances{workflow}`, read
/// from the store's counts by state at each scrape: they follow transitions and a retention
/// delete, and a `turnstile instances repair` of a shared store (run while the server serves)
/// finds nothing to correct.
async fn instance_gauges_follow_transitions_and_deletes(store: Option<String>) {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let namespace = format!("gauges{}", uuid::Uuid::new_v4().simple());
    let server = Server::on_store(
        plugins.path(),
        data.path(),
        store.as_deref(),
        &namespace,
        &["--state-handle-key", "--retain-final", "1"],
        &[],
    );
    let client = Client::http(&server.url).await;
    let mut handles = Vec::new();
    for amount in [5, 6, 7] {
        handles.push(common::handle_of(
            &client
                .call("invoice.submit", json!({"amount": amount}))
                .await,
        ));
    }
    let approved = client
        .call("invoice.approve", json!({"handle": handles[0]}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    // Finished, so retention deletes it a second later.
    let done = common::discharged_invoice(&client).await;
    common::until_deleted(
        &client,
        &done,
        "retention never deleted the finished invoice",
    )
    .await;

    let gauges = |scrape: &Scrape| {
        let mut series = scrape.series("turnstile_instances");
        series.extend(scrape.series("turnstile_workflow_instances"));
        series
    };
    let wanted = expect(&[
        (&[("workflow", "invoice"), ("state", "review")], 2.0),
        (&[("workflow", "invoice"), ("state", "approved")], 1.0),
        (&[("workflow", "invoice")], 3.0),
    ]);
    let scrape = scrape_until(&server, "the gauges say what the store holds", |scrape| {
        gauges(scrape) == wanted
    })
    .await;
    assert_eq!(gauges(&scrape), wanted);

    if let Some(store) = &store {
        let output = std::process::Command::new(common::turnstile_bin())
            .args(["instances", "--json", "--store", store, "--store-namespace"])
            .arg(&namespace)
            .arg("repair")
            .output()
            .expect("run turnstile instances repair");
        assert!(output.status.success(), "{output:?}");
        let repaired: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(repaired, json!({"instances": 3, "corrected": []}));
        assert_eq!(gauges(&Scrape::of(&server).await), wanted);
    }
}

common::on_every_store!(instance_gauges_follow_transitions_and_deletes:
    instance_gauges_on_the_embedded_store, instance_gauges_on_redis, instance_gauges_on_postgres);
