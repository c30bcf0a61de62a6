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
    let plugins = PluginDir::with(&["invoice"]);
    let server = Server::http(plugins.path(), &[]);
    let large = Client::http(&server.url).await;
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
