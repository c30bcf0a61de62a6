//! Bad input gets a clear error and the server keeps serving: malformed JSON-RPC, a panicking
//! tool, broken plugin files.

mod common;

use common::{
    Client, PluginDir, RawStdio, SESSION_PROTOCOL, Server, initialize_message, names, text_of,
};
use serde_json::json;

#[tokio::test]
async fn a_panicking_tool_returns_a_tool_error_and_the_server_keeps_serving() {
    let (_plugins, mut server, client) =
        common::serve_and_connect(&["invoice", "testkit"], &[]).await;
    client.call("invoice.submit", json!({"amount": 5})).await;

    let result = client.call("testkit.panic", json!({})).await;
    assert_eq!(result.is_error, Some(true));
    let text = text_of(&result);
    assert!(text.contains("panicked"), "says what happened: {text}");
    assert_eq!(
        result.structured_content.unwrap()["error"]["code"],
        "PLUGIN_FAILED"
    );

    assert!(server.is_running());
    assert_eq!(client.invoice_state().await, json!("review"));
    let result = client.call("invoice.approve", json!({})).await;
    assert_ne!(result.is_error, Some(true), "still serving: {result:?}");
    assert_eq!(client.invoice_state().await, json!("approved"));
}

#[tokio::test]
async fn a_tool_that_runs_too_long_times_out_and_the_server_keeps_serving() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["invoice", "testkit"], &["--tool-timeout", "1"]).await;
    let result = client.call("testkit.slow", json!({"ms": 5000})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content.unwrap()["error"]["code"],
        "TOOL_TIMEOUT"
    );
    let result = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_ne!(result.is_error, Some(true), "still serving: {result:?}");
}

#[tokio::test]
async fn broken_plugin_files_are_reported_and_the_good_plugin_is_served() {
    let plugins = PluginDir::with(&["invoice"]);
    plugins.add_file("libnotes.so", b"these are my notes, not a library");
    plugins.add_c_fixture("wrong_abi");
    plugins.add_c_fixture("bad_manifest");
    let server = Server::http(plugins.path(), &[]);
    let client = Client::http(&server.url).await;
    assert_eq!(
        client.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );

    let log = server.stderr();
    let line_about = |file: &str| {
        log.lines()
            .find(|line| line.contains(file))
            .unwrap_or_else(|| panic!("no log line names {file}:\n{log}"))
            .to_string()
    };
    assert!(
        line_about("libnotes.so").contains("not a shared library"),
        "{}",
        line_about("libnotes.so")
    );
    assert!(
        line_about("libwrong_abi.so").contains("ABI version 2"),
        "{}",
        line_about("libwrong_abi.so")
    );
    assert!(
        line_about("libbad_manifest.so").contains("manifest"),
        "{}",
        line_about("libbad_manifest.so")
    );
}

#[tokio::test]
async fn malformed_json_rpc_over_http_gets_an_error_and_the_session_keeps_working() {
    let (_plugins, server, client) = common::serve_and_connect(&["invoice"], &[]).await;
    let http = reqwest::Client::new();
    for body in ["{not json", r#"{"jsonrpc":"2.0","id":1}"#, r#"[1,2,3]"#, ""] {
        let response = http
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(
            status.is_client_error(),
            "body {body:?}: expected a 4xx, got {status}: {text}"
        );
    }
    // Nothing was lost: the existing session and new sessions work.
    assert_eq!(
        client.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );
    let other = Client::http(&server.url).await;
    assert_eq!(
        other.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );
}

#[test]
fn malformed_json_rpc_over_stdio_gets_an_error_and_the_connection_keeps_working() {
    let plugins = PluginDir::with(&["invoice"]);
    let mut server = RawStdio::start(plugins.path());
    server.send(initialize_message(1, SESSION_PROTOCOL).to_string());
    assert!(server.reply_to(&json!(1))["result"].is_object());
    server.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string());

    server.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"invoice.teleport"}}"#,
    );
    assert_eq!(server.reply_to(&json!(2))["error"]["code"], -32602);

    server.send("{this is not json");
    server.send(r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method"}"#);
    assert_eq!(server.reply_to(&json!(3))["error"]["code"], -32601);

    server.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#);
    let listed = server.reply_to(&json!(4));
    let mut tools: Vec<String> = listed["result"]["tools"]
        .as_array()
        .expect("tools/list still answers")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    tools.sort();
    assert_eq!(tools, names(&["invoice.status", "invoice.submit"]));
}
