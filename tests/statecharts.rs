//! Gating on a statechart with nesting and parallel regions, through the real server: a tool
//! bound to a compound state is listed while any of its descendants is active, and with parallel
//! regions a tool is listed when any bound state is active.

mod common;

use common::{Client, PluginDir, Server, names};
use serde_json::json;

#[tokio::test]
async fn menus_follow_nested_and_parallel_states() {
    let plugins = PluginDir::with(&[]);
    plugins.add_c_fixture("order");
    let server = Server::http(plugins.path(), &[]);
    let client = Client::http(&server.url).await;

    let tools = client.tools().await;
    assert_eq!(tools.len(), 1);
    assert_eq!(
        tools[0].description.as_deref(),
        Some("Start the order."),
        "compact in the initial state"
    );

    let steps: &[(&str, &[&str])] = &[
        ("order.start", &["order.cancel", "order.pack", "order.pay"]),
        ("order.pack", &["order.cancel", "order.pay", "order.track"]),
        ("order.pay", &["order.cancel", "order.track"]),
        ("order.cancel", &[]),
    ];
    for (number, (tool, menu)) in steps.iter().enumerate() {
        let result = client.call(tool, json!({})).await;
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
        client.changes.wait_for(number + 1).await;
        assert_eq!(client.tool_names().await, names(menu), "menu after {tool}");
    }
    let refused = client.call("order.pay", json!({})).await;
    let error = &refused.structured_content.unwrap()["error"];
    assert_eq!(error["code"], "FORBIDDEN");
    assert_eq!(error["state"], "cancelled");
}

/// A guard over the workflow's context decides the menu: the invoice keeps the submitted amount
/// (an assignment from the call's input), and one over 10,000 needs a second approval, which its
/// menu says; one of 200 does not. Each step is a transition its session hears about.
#[tokio::test]
async fn a_guard_over_the_submitted_amount_decides_the_next_menu() {
    let (_plugins, server, large) = common::serve_and_connect(&["invoice"], &[]).await;
    let small = Client::http(&server.url).await;
    for (client, amount) in [(&large, 20_000), (&small, 200)] {
        let submitted = client
            .call("invoice.submit", json!({"amount": amount}))
            .await;
        assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
        let approved = client.call("invoice.approve", json!({})).await;
        assert_ne!(approved.is_error, Some(true), "{approved:?}");
    }
    assert_eq!(
        large.tool_names().await,
        names(&["invoice.reject", "invoice.second_approve", "invoice.status"]),
        "20,000 waits for a second approval"
    );
    let early = large.call("invoice.discharge", json!({})).await;
    assert_eq!(common::error_code(&early), "FORBIDDEN");
    assert_eq!(
        small.tool_names().await,
        names(&["invoice.discharge", "invoice.status"]),
        "200 is approved at once"
    );
    let second = large.call("invoice.second_approve", json!({})).await;
    assert_eq!(
        second.structured_content.as_ref().unwrap()["state"],
        "approved"
    );
    assert_eq!(
        large.tool_names().await,
        names(&["invoice.discharge", "invoice.status"])
    );
}

/// A tool's `on_error` moves the workflow when its handler fails: a capture the card issuer
/// declines (the payment plugin, configured with a card limit, sees the authorized amount in the
/// machine's context) takes the payment to `declined`, the session hears `list_changed`, and the
/// menu offers only what fits a declined payment. The caller still gets its error. Under the
/// limit the same capture succeeds.
#[tokio::test]
async fn a_declined_capture_rolls_the_payment_back_through_on_error() {
    let plugins = PluginDir::with(&["payment"]);
    let server = Server::http_with_env(
        plugins.path(),
        &[],
        &[("TURNSTILE_PLUGIN_PAYMENT_CARD_LIMIT", "100")],
    );
    let over = Client::http(&server.url).await;
    over.call(
        "payment.authorize",
        json!({"amount": 500, "currency": "EUR"}),
    )
    .await;
    over.changes.wait_for(1).await;
    let declined = over.call("payment.capture", json!({})).await;
    assert_eq!(common::error_code(&declined), "TOOL_ERROR");
    let error = &declined.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["state"], "declined", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("declined"),
        "{error}"
    );
    over.changes.wait_for(2).await;
    assert_eq!(
        over.tool_names().await,
        names(&["payment.status", "payment.void"])
    );
    let again = over.call("payment.capture", json!({})).await;
    assert_eq!(common::error_code(&again), "FORBIDDEN");

    let under = Client::http(&server.url).await;
    under
        .call(
            "payment.authorize",
            json!({"amount": 50, "currency": "EUR"}),
        )
        .await;
    let captured = under.call("payment.capture", json!({})).await;
    assert_ne!(captured.is_error, Some(true), "{captured:?}");
    let captured = captured.structured_content.unwrap();
    assert_eq!(
        (captured["state"].clone(), captured["amount"].clone()),
        (json!("captured"), json!(50.0))
    );
}

/// A guard a plugin implements (ABI 1.2's `guard` entry point) decides a transition with the
/// whole event: the testkit's `GO` is refused by its guard when the call's `word` is `stop`.
/// The host cannot know what a plugin's guard reads, so the tool stays listed and the plugin
/// runs; its result then says the state did not move, and no `list_changed` is sent.
#[tokio::test]
async fn a_plugin_guard_decides_a_transition_after_the_call() {
    let (_plugins, _server, client) = common::serve_and_connect(&["testkit"], &[]).await;
    assert!(client.offers("testkit.go").await);
    let stopped = client.call("testkit.go", json!({"word": "stop"})).await;
    assert_ne!(stopped.is_error, Some(true), "{stopped:?}");
    assert_eq!(stopped.structured_content.unwrap()["state"], "idle");
    client.changes.stays_at(0).await;
    let went = client.call("testkit.go", json!({"word": "go"})).await;
    assert_eq!(went.structured_content.unwrap()["state"], "done");
    client.changes.wait_for(1).await;
}

/// A plugin's guard is plugin code and runs as a tool call does, with the same deadline, in
/// process and isolated alike: one that outlives `--tool-timeout` counts as false (its
/// transition is not taken, the log says why), and the server goes on answering.
#[tokio::test]
async fn a_plugin_guard_past_the_deadline_counts_as_false() {
    for isolated in [false, true] {
        let mut flags = vec!["--tool-timeout", "1"];
        if isolated {
            flags.extend(["--isolate", "testkit"]);
        }
        let (_plugins, server, client) = common::serve_and_connect(&["testkit"], &flags).await;
        let stalled = client
            .call("testkit.go", json!({"word": "go", "guard_sleep_ms": 3_000}))
            .await;
        assert_ne!(
            stalled.is_error,
            Some(true),
            "isolated: {isolated}: {stalled:?}"
        );
        assert_eq!(
            stalled.structured_content.unwrap()["state"],
            "idle",
            "isolated: {isolated}: the late guard blocked the transition"
        );
        let line = server.wait_for_log("a guard gave no answer");
        assert!(line.contains("testkit.allows"), "{line}");
        client.changes.stays_at(0).await;
        let went = client.call("testkit.go", json!({"word": "go"})).await;
        assert_eq!(went.structured_content.unwrap()["state"], "done");
    }
}

/// An event that starts an eventless loop that never settles is stopped after 1,000
/// microsteps: the call's result is TRANSITION_LOOP with the plugin's output, the instance stays
/// where it was (its menu unchanged), and the session hears no `list_changed`.
#[tokio::test]
async fn an_endless_eventless_loop_is_refused_and_changes_nothing() {
    let plugins = PluginDir::with(&[]);
    plugins.add_c_fixture("looping");
    let server = Server::http(plugins.path(), &[]);
    let client = Client::http(&server.url).await;
    let looped = client.call("loop.spin", json!({})).await;
    assert_eq!(common::error_code(&looped), "TRANSITION_LOOP");
    let error = &looped.structured_content.as_ref().unwrap()["error"];
    assert_eq!(
        (&error["state"], &error["output"]),
        (&json!("idle"), &json!({}))
    );
    assert_eq!(client.tool_names().await, names(&["loop.spin"]));
    client.changes.stays_at(0).await;
}
