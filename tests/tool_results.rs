//! What a client sees of a tool beyond gating: the metadata a manifest declares (title,
//! annotations, output schema), outputs checked against that schema before anything fires,
//! content blocks, and what a plugin logs and reports while it runs, delivered before the result.

mod common;

use common::{Client, PluginDir, Server, error_code};
use std::time::Duration;

use serde_json::{Value, json};

#[tokio::test]
async fn listed_tools_carry_their_title_annotations_and_output_schema() {
    let (plugins, _server, client) = common::serve_and_connect(&["invoice"], &[]).await;
    let tools = client.tools().await;
    let status = tools
        .iter()
        .find(|t| t.name == "invoice.status")
        .expect("listed");
    assert_eq!(status.title.as_deref(), Some("Invoice status"));
    let annotations = status.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.read_only_hint, Some(true));
    assert_eq!(annotations.idempotent_hint, Some(true));
    let output = status.output_schema.as_ref().expect("outputSchema");
    assert_eq!(output["required"], json!(["state", "next", "message"]));
    // And the result matches what it promised.
    let result = client.call("invoice.status", json!({})).await;
    assert_eq!(result.structured_content.unwrap()["state"], "draft");

    // In handle mode the result also carries the handle, so the published schema says so.
    let handles = Server::http(plugins.path(), &["--state-handle-key"]);
    let client = Client::http(&handles.url).await;
    let tools = client.tools().await;
    let status = tools
        .iter()
        .find(|t| t.name == "invoice.status")
        .expect("listed");
    let output = status.output_schema.as_ref().expect("outputSchema");
    assert_eq!(output["properties"]["handle"]["type"], "string");
}

/// A workflow tool reports what it did; where the call left its instance (`state`) is added by
/// the host, in `structuredContent` and in the text alike: the plugins never name the next state.
/// A failed call reports nothing of the kind, and a declared output schema lists the property.
#[tokio::test]
async fn a_workflow_result_names_the_state_the_call_left_the_instance_in() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["invoice", "payment", "testkit"], &[]).await;
    let steps = [
        ("invoice.submit", json!({"amount": 5}), json!("review")),
        (
            "invoice.reject",
            json!({"reason": "wrong amount"}),
            json!("draft"),
        ),
        ("invoice.submit", json!({"amount": 6}), json!("review")),
        ("invoice.approve", json!({}), json!("approved")),
        ("invoice.discharge", json!({}), json!("discharged")),
        ("invoice.status", json!({}), json!("discharged")),
        (
            "payment.authorize",
            json!({"amount": 9, "currency": "EUR"}),
            json!("authorized"),
        ),
        ("payment.void", json!({}), json!("voided")),
        ("testkit.go", json!({}), json!("done")),
    ];
    for (tool, arguments, state) in steps {
        let result = client.call(tool, arguments).await;
        assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
        let structured = result
            .structured_content
            .clone()
            .expect("structuredContent");
        assert_eq!(structured["state"], state, "{tool}: {structured}");
        let texts: Vec<&str> = result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
            .collect();
        let [json_text, next_step] = texts[..] else {
            panic!("{tool}: the result, then its next step: {texts:?}");
        };
        let text: Value = serde_json::from_str(json_text).expect("the text is the JSON");
        assert_eq!(text, structured, "{tool}: the text says the same");
        let workflow = tool.split('.').next().unwrap();
        assert!(
            next_step.to_lowercase().starts_with(workflow),
            "{tool}: the last block says where the {workflow} is: {next_step}"
        );
    }
    assert!(
        client
            .call("testkit.reset", json!({}))
            .await
            .structured_content
            .is_some_and(|structured| structured["state"] == "idle")
    );
    let failed = client.call("testkit.go", json!({"fail": true})).await;
    assert_eq!(error_code(&failed), "TOOL_ERROR");
    assert!(failed.structured_content.unwrap().get("state").is_none());

    let tools = client.tools().await;
    let go = tools
        .iter()
        .find(|t| t.name == "testkit.go")
        .expect("listed");
    let output = go.output_schema.as_ref().expect("outputSchema");
    assert!(output["properties"].get("state").is_some(), "{output:?}");
    // A tool of no workflow has no state to report.
    let content = client.call("testkit.content", json!({})).await;
    assert_eq!(content.structured_content, Some(json!({"width": 1})));
}

#[tokio::test]
async fn an_output_that_breaks_its_schema_is_an_error_and_fires_nothing() {
    let (_plugins, _server, client) = common::serve_and_connect(&["testkit"], &[]).await;
    let result = client.call("testkit.go", json!({"bad_output": true})).await;
    assert_eq!(error_code(&result), "BAD_OUTPUT");
    let message = result.structured_content.as_ref().unwrap()["error"]["message"].to_string();
    assert!(message.contains("event"), "the problem is named: {message}");
    // Still idle: the transition did not fire.
    let names: Vec<String> = client
        .tools()
        .await
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"testkit.go".to_string()), "{names:?}");
    assert!(!names.contains(&"testkit.reset".to_string()), "{names:?}");
    // A good output goes through.
    let result = client.call("testkit.go", json!({})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
}

#[tokio::test]
async fn content_blocks_from_a_plugin_reach_the_client() {
    let (_plugins, _server, client) = common::serve_and_connect(&["testkit"], &[]).await;
    let result = client.call("testkit.content", json!({})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // As the client reads it: the JSON of the first block.
    let first = serde_json::to_value(&result.content[0]).unwrap();
    assert_eq!(first["type"], "image", "{first}");
    assert_eq!(first["mimeType"], "image/png", "{first}");
    assert_eq!(result.structured_content, Some(json!({"width": 1})));
}

/// Over stdio (one stream), logs at or above the session's level and progress for a request with
/// a progress token arrive, in order, before the call's result: every one of them is there the
/// moment the result is, on every repetition.
#[tokio::test]
async fn logs_and_progress_arrive_before_the_result_at_the_sessions_level() {
    let plugins = PluginDir::with(&["testkit"]);
    let client = Client::stdio(plugins.path()).await;
    // The default level (info) lets info through and holds debug back.
    let result = client
        .call("testkit.report", json!({"count": 2, "level": "debug"}))
        .await;
    assert_eq!(result.structured_content.unwrap()["services"], true);
    let logs = |events: &[String]| events.iter().filter(|e| e.starts_with("log:")).count();
    assert_eq!(logs(&client.events()), 0, "{:?}", client.events());
    client.set_log_level("debug").await;
    for round in 0..20 {
        let before = client.events().len();
        client
            .call_with_meta(
                "testkit.report",
                json!({"count": 3, "level": "debug"}),
                json!({"progressToken": format!("round-{round}")}),
            )
            .await;
        let seen = client.events()[before..].to_vec();
        assert_eq!(
            seen,
            [
                r#"log:debug:{"step":1}"#,
                "progress:1/3",
                r#"log:debug:{"step":2}"#,
                "progress:2/3",
                r#"log:debug:{"step":3}"#,
                "progress:3/3",
            ],
            "round {round}"
        );
    }
    // A level above the messages': no logs.
    client.set_log_level("warning").await;
    let before = logs(&client.events());
    client
        .call("testkit.report", json!({"count": 2, "level": "info"}))
        .await;
    assert_eq!(logs(&client.events()), before);
}

/// One 2026-07-28 `tools/call` over raw HTTP (no session): every message of its response
/// stream, in order.
async fn sessionless_call(
    url: &str,
    id: u64,
    tool: &str,
    arguments: Value,
    meta: Value,
) -> Vec<Value> {
    sessionless_exchange(url, id, tool, arguments, meta).await.1
}

/// [`sessionless_call`], with the response's `Content-Type` (JSON or an SSE stream).
async fn sessionless_exchange(
    url: &str,
    id: u64,
    tool: &str,
    arguments: Value,
    meta: Value,
) -> (String, Vec<Value>) {
    let params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    let response = common::post_sessionless(url, id, "tools/call", params)
        .send()
        .await
        .expect("the server answers");
    assert!(response.status().is_success(), "{}", response.status());
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = response.text().await.expect("body");
    (content_type, common::messages(&text))
}

/// What a 2026-07-28 client puts in a request's `_meta` to declare Turnstile's gated-lists
/// extension (per-instance menus, `list_changed` for its own transitions).
fn gated_lists() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities":
        {"extensions": {"dev.turnstile/gated-lists": {}}}})
}

/// A sessionless answer that can carry nothing but its result is plain JSON; one that carries a
/// `list_changed` before its result (a moving call, with the gated-lists extension) is a stream.
/// On 2026-07-28 without the extension a transition is no list change: the answer is the result
/// alone.
#[tokio::test]
async fn a_sessionless_answer_is_plain_json_unless_something_precedes_the_result() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let submit = json!({"amount": 5});
    let (framing, plain) =
        sessionless_exchange(&server.url, 1, "invoice.submit", submit.clone(), json!({})).await;
    assert!(framing.starts_with("application/json"), "{framing}");
    assert_eq!(plain.len(), 1, "the result alone: {plain:?}");
    assert_eq!(plain[0]["result"]["structuredContent"]["state"], "review");
    let (framing, minted) =
        sessionless_exchange(&server.url, 2, "invoice.submit", submit, gated_lists()).await;
    assert!(framing.starts_with("text/event-stream"), "{framing}");
    assert_eq!(minted[0]["method"], "notifications/tools/list_changed");
    let result = &minted.last().expect("the result")["result"];
    let handle = result["structuredContent"]["handle"].clone();
    let (framing, status) = sessionless_exchange(
        &server.url,
        2,
        "invoice.status",
        json!({"handle": handle}),
        json!({}),
    )
    .await;
    assert!(framing.starts_with("application/json"), "{framing}");
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["result"]["structuredContent"]["state"], "review");
}

/// Protocol 2026-07-28 over HTTP has no session: logs are sent only when the request names a
/// level in its `_meta`, and they arrive on the call's own stream, before its result.
#[tokio::test]
async fn a_sessionless_request_gets_logs_only_when_it_names_a_level() {
    let (_plugins, server) = common::start(&["testkit"], &[]);
    let arguments = json!({"count": 2, "level": "error"});
    let messages = sessionless_call(&server.url, 1, "testkit.report", arguments, json!({})).await;
    assert_eq!(messages.len(), 1, "only the result: {messages:?}");
    for round in 0..10 {
        let meta = json!({"io.modelcontextprotocol/logLevel": "info", "progressToken": round});
        let arguments = json!({"count": 2, "level": "info"});
        let messages =
            sessionless_call(&server.url, 2 + round, "testkit.report", arguments, meta).await;
        let methods: Vec<&str> = messages
            .iter()
            .map(|message| message["method"].as_str().unwrap_or("result"))
            .collect();
        assert_eq!(
            methods,
            [
                "notifications/message",
                "notifications/progress",
                "notifications/message",
                "notifications/progress",
                "result"
            ],
            "round {round}: {messages:?}"
        );
    }
}

/// DESIGN behaviour 3 on 2026-07-28 with the gated-lists extension: a call that moves its
/// instance carries exactly one `tools/list_changed` on its own response stream, before its
/// result, every time, and the `prompts/list_changed` and `resources/list_changed` of the lists
/// the move changed (the invoice's review prompt and resources come and go with `review`), as a
/// 2025 session is told; one that moves nothing carries none.
#[tokio::test]
async fn a_sessionless_caller_hears_its_own_transition_before_the_result_every_time() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let methods = |messages: &[Value]| -> Vec<String> {
        messages
            .iter()
            .map(|message| message["method"].as_str().unwrap_or("result").to_string())
            .collect()
    };
    let minted = sessionless_call(
        &server.url,
        1,
        "invoice.submit",
        json!({"amount": 5}),
        gated_lists(),
    )
    .await;
    let moved = [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "result",
    ];
    assert_eq!(methods(&minted), moved);
    let result = &minted.last().unwrap()["result"];
    let handle = result["structuredContent"]["handle"]
        .as_str()
        .expect("a handle")
        .to_string();
    for round in 0..10 {
        let id = 10 + 2 * round;
        let rejected = sessionless_call(
            &server.url,
            id,
            "invoice.reject",
            json!({"handle": handle, "reason": "r"}),
            gated_lists(),
        )
        .await;
        assert_eq!(methods(&rejected), moved, "round {round}: {rejected:?}");
        let submitted = sessionless_call(
            &server.url,
            id + 1,
            "invoice.submit",
            json!({"handle": handle, "amount": 5}),
            gated_lists(),
        )
        .await;
        assert_eq!(methods(&submitted), moved, "round {round}: {submitted:?}");
    }
    let status = sessionless_call(
        &server.url,
        99,
        "invoice.status",
        json!({"handle": handle}),
        gated_lists(),
    )
    .await;
    assert_eq!(
        methods(&status),
        ["result"],
        "a call that moves nothing says nothing"
    );
}

/// A cancelled call: a plugin that notices (`is_cancelled`) stops and fires nothing; one that
/// completes anyway keeps its transition, since its effect happened.
#[tokio::test]
async fn a_cancelled_call_fires_only_if_its_plugin_completed_anyway() {
    let (_plugins, server, client) = common::serve_and_connect(&["testkit"], &[]).await;
    let menu = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        names
    };
    client.call("testkit.go", json!({})).await;
    // The plugin watches for cancellation: it stops, and the instance stays in `done`.
    client
        .call_then_cancel(
            "testkit.reset",
            json!({"watch_ms": 5000}),
            Duration::from_millis(300),
        )
        .await;
    let stopped = |stats: &Value| stats["plugins"]["testkit"]["calls_running"] == 0;
    let what = "the plugin did not stop on cancellation";
    server
        .stats_until(what, Duration::from_secs(2), stopped)
        .await;
    assert!(menu(client.tools().await).contains(&"testkit.reset".to_string()));

    // The plugin does not watch: it completes, and its transition stands.
    client
        .call_then_cancel(
            "testkit.reset",
            json!({"sleep_ms": 600}),
            Duration::from_millis(200),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    let names = menu(client.tools().await);
    assert!(names.contains(&"testkit.go".to_string()), "{names:?}");
    assert!(!names.contains(&"testkit.reset".to_string()), "{names:?}");
}
