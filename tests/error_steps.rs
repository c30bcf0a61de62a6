//! Issue 50, item 6: every result of a workflow tool, errors included, ends with its next step,
//! as a model reads it (the last text block) and as a client acts on it (`_meta`
//! `dev.turnstile/next-step`): the state as far as it is known, and the tools that may follow.
//! A call that started nothing names the tools that start one. Each error code is provoked the
//! way a client would meet it, and the closing sentence is checked word for word against the
//! `_meta` it must agree with.

mod common;

use common::{Client, PluginDir, PrivateRedis, Server, handle_of};
use serde_json::{Value, json};

/// What the closing sentence of `invoice` calls that started nothing says.
const NO_INVOICE: &str = "No invoice was started. To start one, call invoice.submit.";

/// A tool result as JSON (`content`, `structuredContent`, `isError`, `_meta`), however it came.
fn as_json(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::to_value(result).expect("a result serializes")
}

/// The names in a JSON array of strings.
fn names(list: &Value) -> Vec<String> {
    let list = list.as_array().unwrap_or_else(|| panic!("a list: {list}"));
    list.iter()
        .map(|name| name.as_str().expect("a name").to_owned())
        .collect()
}

/// The sentence a model must read last, as the `_meta` next step `next` says it: checked word
/// for word so that neither may go missing or disagree with the other.
fn sentence_for(next: &Value) -> String {
    let workflow = next["workflow"].as_str().expect("workflow");
    let mut named = workflow[..1].to_uppercase() + &workflow[1..];
    if let Some(handle) = next["handle"].as_str() {
        named = format!("{named} {handle}");
    }
    let state = next["state"].as_str().map(str::to_owned);
    let available = names(&next["available"]).join(", ");
    match (next["status"].as_str().expect("status"), state) {
        ("not-started", None) => format!(
            "No {workflow} was started. To start one, call {}.",
            names(&next["available"]).join(" or ")
        ),
        ("active", Some(state)) => {
            let is = if next["moved"] == true {
                "is now in"
            } else {
                "is in"
            };
            format!("{named} {is} {state}. Next: {available}.")
        }
        ("unknown", Some(state)) => format!(
            "{named} may have moved: before this call it was in {state}. To learn where it is, \
             call {}, or retry with the same idempotency key.",
            names(&next["readers"]).join(" or ")
        ),
        ("unknown", None) => format!(
            "{named}: where it stands could not be read just now; call again once the store \
             answers."
        ),
        other => panic!("no sentence for {other:?}: {next}"),
    }
}

/// Checks that `result` is the error `code` and closes with its next step: `_meta` names the
/// workflow, says nothing moved (or that it may have), and the last text block is the sentence
/// that next step makes. Returns the next step.
fn closes_with_next_step(result: &Value, code: &str) -> Value {
    assert_eq!(result["isError"], true, "{code}: an error: {result}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], code, "{result}");
    let next = result["_meta"]["dev.turnstile/next-step"].clone();
    assert!(
        next.is_object(),
        "{code}: the result carries its next step: {result}"
    );
    assert_ne!(
        next["moved"], true,
        "{code}: an error moved nothing: {next}"
    );
    let texts: Vec<&str> = result["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    let [.., _error, last] = texts[..] else {
        panic!("{code}: the error, then its next step: {texts:?}");
    };
    assert_eq!(
        last,
        sentence_for(&next),
        "{code}: the last sentence: {result}"
    );
    next
}

/// `result` is `code` from a call that started nothing: the next step names `invoice.submit`.
fn started_nothing(result: &Value, code: &str) {
    let next = closes_with_next_step(result, code);
    assert_eq!(next["status"], "not-started", "{code}: {next}");
    assert_eq!(next["state"], Value::Null, "{code}: {next}");
    assert_eq!(
        next["available"],
        json!(["invoice.submit"]),
        "{code}: {next}"
    );
    assert!(
        next.get("handle").is_none(),
        "{code}: no instance, no handle: {next}"
    );
    assert_eq!(next_step_text(result), NO_INVOICE, "{code}");
    let structured = &result["structuredContent"];
    assert!(structured.get("handle").is_none(), "{code}: {structured}");
}

/// `result` is `code` from a call on `handle`, which stays in `state` with `tools` among the
/// tools that may follow.
fn stayed_in(result: &Value, code: &str, handle: &str, state: &str, tools: &[&str]) {
    let next = closes_with_next_step(result, code);
    assert_eq!(next["workflow"], "invoice", "{code}: {next}");
    assert_eq!(next["handle"], handle, "{code}: {next}");
    assert_eq!(next["status"], "active", "{code}: {next}");
    assert_eq!(next["state"], state, "{code}: {next}");
    assert_eq!(next["moved"], false, "{code}: {next}");
    let available = names(&next["available"]);
    for tool in tools {
        assert!(
            available.iter().any(|t| t == tool),
            "{code}: {tool} in {next}"
        );
    }
    let text = next_step_text(result);
    assert!(
        text.starts_with(&format!("Invoice {handle} is in {state}. Next: ")),
        "{code}: {text}"
    );
}

/// The last text block of a JSON result.
fn next_step_text(result: &Value) -> String {
    let content = result["content"].as_array().expect("content");
    let last = content
        .iter()
        .rev()
        .find_map(|block| block["text"].as_str());
    last.expect("a text block").to_owned()
}

/// An invoice of `amount` submitted (in review) by `client` in handle mode: its handle.
async fn in_review(client: &Client, amount: u64) -> String {
    handle_of(
        &client
            .call("invoice.submit", json!({"amount": amount}))
            .await,
    )
}

#[tokio::test]
async fn invalid_arguments_close_with_the_next_step() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["invoice"], &["--state-handle-key"]).await;
    // A mint whose arguments break the schema starts nothing.
    let refused = client.call("invoice.submit", json!({"amount": -5})).await;
    started_nothing(&as_json(&refused), "INVALID_ARGUMENTS");
    // On an instance: it stays where it was.
    let handle = in_review(&client, 5).await;
    let refused = client
        .call("invoice.reject", json!({"handle": handle, "reason": 7}))
        .await;
    let tools = ["invoice.approve", "invoice.reject"];
    stayed_in(
        &as_json(&refused),
        "INVALID_ARGUMENTS",
        &handle,
        "review",
        &tools,
    );
}

#[tokio::test]
async fn input_unavailable_closes_with_the_next_step() {
    let (_plugins, server) = common::start(&["invoice"], &["--state-handle-key"]);
    // The test client declares no elicitation: a payout over 5,000 cannot be confirmed.
    let client = Client::http(&server.url).await;
    let handle = in_review(&client, 8000).await;
    let approved = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    let refused = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    let refused = as_json(&refused);
    stayed_in(
        &refused,
        "INPUT_UNAVAILABLE",
        &handle,
        "approved",
        &["invoice.discharge"],
    );
}

/// The result of a 2026-07-28 `tools/call` ([`common::call_2026`]).
async fn call_2026(url: &str, tool: &str, arguments: Value, params: Value) -> Value {
    let (response, _) = common::call_2026(url, tool, arguments, params).await;
    response["result"].clone()
}

#[tokio::test]
async fn declined_closes_with_the_next_step() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let url = &server.url;
    let shows_forms =
        json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}});
    let submitted = call_2026(url, "invoice.submit", json!({"amount": 8000}), json!({})).await;
    let handle = submitted["structuredContent"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("a handle: {submitted}"))
        .to_owned();
    let arguments = json!({"handle": handle});
    let approved = call_2026(url, "invoice.approve", arguments.clone(), json!({})).await;
    assert_ne!(approved["isError"], true, "{approved}");
    // The payout asks the person to confirm; the person declines.
    let asks = json!({"_meta": shows_forms});
    let asked = call_2026(url, "invoice.discharge", arguments.clone(), asks).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let state = asked["requestState"].as_str().expect("a requestState");
    let answer = json!({
        "_meta": shows_forms,
        "inputResponses": {"turnstile.confirm": {"action": "decline"}},
        "requestState": state,
    });
    let declined = call_2026(url, "invoice.discharge", arguments, answer).await;
    stayed_in(
        &declined,
        "DECLINED",
        &handle,
        "approved",
        &["invoice.discharge"],
    );
}

#[tokio::test]
async fn busy_closes_with_the_next_step() {
    let (_plugins, server, client) =
        common::serve_and_connect(&["testkit"], &["--plugin-pool", "1"]).await;
    let done = client.call("testkit.go", json!({})).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    // The plugin's one slot is held; a workflow call waits for it (1 s) and is turned away.
    let holder = Client::http(&server.url).await;
    let slow = tokio::spawn(async move { holder.call("testkit.slow", json!({"ms": 2500})).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let busy = as_json(&client.call("testkit.reset", json!({})).await);
    let next = closes_with_next_step(&busy, "BUSY");
    assert_eq!(next["workflow"], "testkit", "{next}");
    assert_eq!(next["status"], "active", "{next}");
    assert_eq!(next["state"], "done", "{next}");
    assert!(
        names(&next["available"]).contains(&"testkit.reset".to_owned()),
        "{next}"
    );
    let text = next_step_text(&busy);
    assert!(text.starts_with("Testkit is in done. Next: "), "{text}");
    assert_ne!(slow.await.unwrap().is_error, Some(true));
}

#[tokio::test]
async fn quota_exceeded_closes_with_the_next_step() {
    let flags = [
        "--state-handle-key",
        "--mint-rate",
        "0.1",
        "--mint-burst",
        "1",
    ];
    let (_plugins, _server, client) = common::serve_and_connect(&["invoice"], &flags).await;
    let handle = in_review(&client, 1).await;
    let refused = client.call("invoice.submit", json!({"amount": 2})).await;
    started_nothing(&as_json(&refused), "QUOTA_EXCEEDED");
    // The instance the client has still moves.
    let approved = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
}

#[tokio::test]
async fn record_too_large_closes_with_the_next_step() {
    let flags = ["--state-handle-key", "--max-record-bytes", "2000"];
    let (_plugins, _server, client) = common::serve_and_connect(&["invoice"], &flags).await;
    let huge = "x".repeat(2500);
    let refused = client
        .call("invoice.submit", json!({"amount": 1, "customer": huge}))
        .await;
    started_nothing(&as_json(&refused), "RECORD_TOO_LARGE");
    // On an instance: a reason that would not fit leaves it in review.
    let handle = in_review(&client, 5).await;
    let refused = client
        .call("invoice.reject", json!({"handle": handle, "reason": huge}))
        .await;
    let tools = ["invoice.approve", "invoice.reject"];
    stayed_in(
        &as_json(&refused),
        "RECORD_TOO_LARGE",
        &handle,
        "review",
        &tools,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_unavailable_closes_with_the_next_step() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let mut redis = PrivateRedis::start();
    let server = Server::http_in(
        plugins.path(),
        data.path(),
        &["--state-handle-key", "--store", &redis.url()],
    );
    let client = Client::http(&server.url).await;
    let handle = in_review(&client, 5).await;
    redis.stop();
    // A mint whose save cannot be sent starts nothing...
    let refused = as_json(&client.call("invoice.submit", json!({"amount": 6})).await);
    let next = closes_with_next_step(&refused, "STORE_UNAVAILABLE");
    assert_eq!(next["workflow"], "invoice", "{next}");
    if next["status"] == "not-started" {
        started_nothing(&refused, "STORE_UNAVAILABLE");
    } else {
        // ... or, if the store cannot tell whether the save was applied, says so.
        assert_eq!(next["moved"], "unknown", "{refused}");
    }
    // A call on an instance says where it stood, as far as that is known.
    let refused = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    let refused = as_json(&refused);
    let next = closes_with_next_step(&refused, "STORE_UNAVAILABLE");
    assert_eq!(next["workflow"], "invoice", "{next}");
    assert_eq!(next["handle"], handle.as_str(), "{next}");
    match next["status"].as_str() {
        Some("active" | "unknown") if next["state"] != Value::Null => {
            assert_eq!(next["state"], "review", "{refused}");
        }
        Some("unknown") => {}
        other => panic!("{other:?}: {refused}"),
    }
}
