//! Asking the person (issue 40), as clients without a person see it: a client that cannot show
//! a form is refused a confirmed step (INPUT_UNAVAILABLE; on 2026-07-28, -32021 naming the
//! capability, with HTTP 400) and nothing moves; an operator who
//! chose `--confirm-fallback allow` lets the step run, and the audit trail says nobody
//! confirmed; a request-state key too short refuses the start. Then, over raw 2026-07-28
//! requests (issue 50): a confirmation keeps only the fields its form asked for, bounded, and
//! they reach the result; a sealed `requestState` is good for its step alone, and for no tool
//! that asks nothing. The Python SDKs' runs, with a person answering, are in
//! `python_clients.rs`; the conformance suite's in `.ci/run`.

mod common;

use common::{Client, PluginDir, error_code, handle_of, state_of};
use serde_json::{Value, json};

/// An invoice over the confirmation threshold, approved: the next step is a confirmed payout.
async fn approved_invoice(client: &Client) -> String {
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 8000})).await);
    let approved = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    handle
}

#[tokio::test]
async fn a_client_that_cannot_show_a_form_is_refused_a_confirmed_step() {
    let (_plugins, server) = common::start(&["invoice"], &["--state-handle-key"]);
    // The test client declares no elicitation.
    let client = Client::http(&server.url).await;
    let handle = approved_invoice(&client).await;
    let refused = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_eq!(error_code(&refused), "INPUT_UNAVAILABLE");
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    assert!(
        error["needed"].as_str().unwrap().contains("form"),
        "{error}"
    );
    assert_eq!(state_of(&client, &handle).await, "approved");
    // Below the threshold nothing is asked.
    let small = handle_of(&client.call("invoice.submit", json!({"amount": 80})).await);
    client
        .call("invoice.approve", json!({"handle": small}))
        .await;
    let paid = client
        .call("invoice.discharge", json!({"handle": small}))
        .await;
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
}

#[tokio::test]
async fn confirm_fallback_allow_runs_the_step_and_the_trail_says_nobody_confirmed() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--state-handle-key", "--confirm-fallback", "allow"],
    );
    assert!(
        server
            .wait_for_log("--confirm-fallback allow")
            .contains("WARN")
    );
    let client = Client::http(&server.url).await;
    let handle = approved_invoice(&client).await;
    let paid = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
    assert_eq!(state_of(&client, &handle).await, "discharged");
    let uri = format!("turnstile://invoice/{handle}");
    let read = client
        .read_resource(&uri)
        .await
        .expect("the instance resource");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("a text resource: {read:?}");
    };
    let document: Value = serde_json::from_str(text).unwrap();
    let payout = document["audit"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(payout["event"], "DISCHARGE");
    assert!(
        payout["confirmation"]["fallback"]
            .as_str()
            .is_some_and(|why| why.contains("no person")),
        "{payout}"
    );
}

#[test]
fn a_request_state_key_too_short_refuses_the_start() {
    let plugins = PluginDir::with(&["invoice"]);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "short").unwrap();
    let output = std::process::Command::new(common::turnstile_bin())
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--store",
            "memory:",
            "--plugins",
        ])
        .arg(plugins.path())
        .arg("--request-state-key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--request-state-key-file") && stderr.contains("at least 32"),
        "{stderr}"
    );
}

// --- 2026-07-28, by hand (issue 50) ------------------------------------------------------------

/// What a 2026-07-28 client that can show a form declares in each request's `_meta`.
fn shows_forms() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}})
}

/// The result of a 2026-07-28 call that must succeed.
async fn ok_2026(url: &str, tool: &str, arguments: Value) -> Value {
    let (response, _) = common::call_2026(url, tool, arguments, json!({})).await;
    let result = &response["result"];
    assert_ne!(result["isError"], true, "{tool}: {response}");
    result.clone()
}

/// An invoice over the confirmation threshold, approved, on 2026-07-28: its handle.
async fn approved_2026(url: &str) -> String {
    let submitted = ok_2026(url, "invoice.submit", json!({"amount": 8000})).await;
    let handle = submitted["structuredContent"]["handle"]
        .as_str()
        .expect("a handle")
        .to_owned();
    ok_2026(url, "invoice.approve", json!({"handle": handle})).await;
    handle
}

/// `invoice.discharge` of `handle` by a client that can show a form: the input-required
/// result's confirmation request and its `requestState`.
async fn ask_to_discharge(url: &str, handle: &str) -> (Value, String) {
    let arguments = json!({"handle": handle});
    let (response, _) = common::call_2026(
        url,
        "invoice.discharge",
        arguments,
        json!({"_meta": shows_forms()}),
    )
    .await;
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    let request = result["inputRequests"]["turnstile.confirm"].clone();
    assert_eq!(request["method"], "elicitation/create", "{response}");
    let state = result["requestState"].as_str().expect("a requestState");
    (request, state.to_owned())
}

/// The retry of `invoice.discharge` of `handle` with the person's `answer` and `state`.
async fn answer_discharge(url: &str, handle: &str, answer: Value, state: &str) -> (Value, usize) {
    let params = json!({
        "_meta": shows_forms(),
        "inputResponses": {"turnstile.confirm": answer},
        "requestState": state,
    });
    common::call_2026(url, "invoice.discharge", json!({"handle": handle}), params).await
}

/// The invoice's state, as `invoice.status` says it.
async fn state_2026(url: &str, handle: &str) -> Value {
    let status = ok_2026(url, "invoice.status", json!({"handle": handle})).await;
    status["structuredContent"]["state"].clone()
}

/// A refused request's JSON-RPC error: its code and `data.reason`.
fn refusal(response: &Value) -> (i64, String) {
    let error = &response["error"];
    assert!(error.is_object(), "refused: {response}");
    (
        error["code"].as_i64().unwrap(),
        error["data"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// On 2026-07-28, whose requests declare the client's capabilities each time, a request that
/// declares no forms is refused a confirmed step as that revision says: -32021 with the
/// capability it needs (a `ClientCapabilities` object), HTTP 400; nothing moved.
#[tokio::test]
async fn a_2026_request_that_declares_no_forms_is_refused_the_missing_capability() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let url = &server.url;
    let handle = approved_2026(url).await;
    let params = json!({"name": "invoice.discharge", "arguments": {"handle": handle}});
    let response = common::post_sessionless(url, 1, "tools/call", params)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), 400);
    let refused: Value = response.json().await.expect("a JSON-RPC error");
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert_eq!(
        refused["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"form": {}}}),
        "{refused}"
    );
    assert_eq!(state_2026(url, &handle).await, "approved");
    // Declaring forms, the same call asks instead.
    ask_to_discharge(url, &handle).await;
}

/// Issue 50, item 4: a confirmation keeps the fields its form declares, each bounded, and
/// nothing else. The form the person is shown says the bound; a field past it does not fit the
/// form (DECLINED, nothing moves); a 3 MiB field the form never asked for is stored nowhere: not
/// in the result, the instance resource's audit trail, or the console (its API, which
/// `turnstile instances show --server` prints, and its page). The reference the person confirmed
/// reaches the handler, and so the result.
#[tokio::test]
async fn a_confirmation_keeps_only_what_its_form_asked_for() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let url = &server.url;
    let handle = approved_2026(url).await;

    let (request, state) = ask_to_discharge(url, &handle).await;
    let reference = &request["params"]["requestedSchema"]["properties"]["reference"];
    assert_eq!(
        reference["maxLength"], 1024,
        "the bound the person is shown: {request}"
    );
    // Past the bound: no fit for the form, as no answer.
    let long = json!({"action": "accept", "content": {"reference": "r".repeat(1025)}});
    let (declined, _) = answer_discharge(url, &handle, long, &state).await;
    let error = &declined["result"]["structuredContent"]["error"];
    assert_eq!(error["code"], "DECLINED", "{declined}");
    assert_eq!(state_2026(url, &handle).await, "approved");

    let junk = "J".repeat(3 << 20);
    let answer = json!({"action": "accept",
        "content": {"reference": "R-42", "note": junk, "extra": {"deep": [1, 2, 3]}}});
    let (request, state) = ask_to_discharge(url, &handle).await;
    assert!(request["params"]["message"].is_string());
    let (paid, size) = answer_discharge(url, &handle, answer, &state).await;
    let result = &paid["result"];
    assert_ne!(result["isError"], true, "{paid}");
    assert_eq!(result["structuredContent"]["state"], "discharged", "{paid}");
    assert_eq!(
        result["structuredContent"]["reference"], "R-42",
        "the confirmed reference reaches the handler and the result"
    );
    assert!(size < 16 << 10, "the result is {size} bytes");

    // The audit trail keeps the declared field alone, wherever it is read.
    let uri = format!("turnstile://invoice/{handle}");
    let read = common::post_sessionless(url, 2, "resources/read", json!({"uri": uri}))
        .header("Mcp-Name", &uri)
        .send()
        .await
        .expect("resources/read");
    let body = read.text().await.unwrap();
    assert!(
        body.len() < 64 << 10,
        "resources/read is {} bytes",
        body.len()
    );
    let read = common::result_of(&body, 2, "resources/read");
    let document: Value =
        serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    let payout = document["audit"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(payout["event"], "DISCHARGE", "{document}");
    assert_eq!(payout["confirmation"], json!({"reference": "R-42"}));

    let base = server.base();
    let shown = reqwest::get(format!("{base}/console/api/instance?id={handle}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        shown.len() < 64 << 10,
        "the console's API: {} bytes",
        shown.len()
    );
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let payout = shown["audit"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        payout["confirmation"],
        json!({"reference": "R-42"}),
        "{shown}"
    );
    let page = reqwest::get(format!("{base}/console/instance?id={handle}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("DISCHARGE"),
        "the console's page shows the payout"
    );
    assert!(
        page.len() < 256 << 10 && !page.contains("JJJJ"),
        "the console's page: {} bytes",
        page.len()
    );
}

/// Issue 50, item 5: a sealed `requestState` is good for the step it was made for. Paid out
/// with it once, then reset by an operator and approved again, the invoice is not paid out again
/// by the same state and answer, within its TTL: JSON-RPC -32602, nothing moves, and a new
/// call asks the person anew. A `requestState` sent to a tool that asks for nothing is refused
/// -32602 too, whatever it holds.
#[tokio::test]
async fn a_sealed_state_is_good_for_its_step_alone() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let url = &server.url;
    let handle = approved_2026(url).await;
    let (_, state) = ask_to_discharge(url, &handle).await;
    let yes = json!({"action": "accept", "content": {"reference": "R-1"}});
    let (paid, _) = answer_discharge(url, &handle, yes.clone(), &state).await;
    assert_eq!(
        paid["result"]["structuredContent"]["state"], "discharged",
        "{paid}"
    );

    // An operator resets the invoice; it is submitted and approved again.
    let reset = reqwest::Client::new()
        .post(format!(
            "{}/console/api/instance/reset?id={handle}",
            server.base()
        ))
        .send()
        .await
        .unwrap();
    assert!(reset.status().is_success(), "{}", reset.status());
    assert_eq!(state_2026(url, &handle).await, "draft");
    ok_2026(
        url,
        "invoice.submit",
        json!({"handle": handle, "amount": 8000}),
    )
    .await;
    ok_2026(url, "invoice.approve", json!({"handle": handle})).await;
    assert_eq!(state_2026(url, &handle).await, "approved");

    // The old state and answer, replayed: refused, and nothing is paid out.
    let (replayed, _) = answer_discharge(url, &handle, yes.clone(), &state).await;
    let (code, reason) = refusal(&replayed);
    assert_eq!(code, -32602, "{replayed}");
    assert!(reason.contains("moved on"), "{replayed}");
    assert_eq!(state_2026(url, &handle).await, "approved");
    // The person is asked anew, and that state pays out.
    let (_, fresh) = ask_to_discharge(url, &handle).await;
    let (paid, _) = answer_discharge(url, &handle, yes, &fresh).await;
    assert_eq!(
        paid["result"]["structuredContent"]["state"], "discharged",
        "{paid}"
    );

    // A tool that asks for nothing takes no state: a sealed one, or anything else.
    for sent in [state.as_str(), "v1.not.sealed"] {
        let params = json!({"_meta": shows_forms(), "requestState": sent});
        let (refused, _) =
            common::call_2026(url, "invoice.status", json!({"handle": handle}), params).await;
        let (code, reason) = refusal(&refused);
        assert_eq!(code, -32602, "{refused}");
        assert!(reason.contains("asks for nothing"), "{refused}");
    }
}
