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
