//! Issue 50, item 1: the truth about a failed call. A proxy before the store forwards a save and
//! then breaks the connection, so the save is sent and its answer lost. The server reads the
//! record again once the store answers: no answer says "changed nothing" of a transition that
//! was saved, every answer says what is known (`handlerRan`, `committed`) and closes with the
//! next step.
//!
//! The `mcp1_`/`mcp2_` tests are the same lost replies as the official Python SDK (tests/python,
//! scenario `lost-reply`) shows them to its user: the text, `isError` and next step it hands
//! back for each call, checked against where the instance really is, and nothing printed on its
//! stderr.

mod common;

use common::python::{Sdk, run_scenario};
use common::{
    Client, Cutter, PluginDir, PrivateRedis, Server, error_code_if_any, handle_of, next_step_of,
    reachable_postgres_url, state_if_ok, text_of,
};
use serde_json::{Value, json};
use tempfile::TempDir;

const INSTANCES: usize = 8;

/// A server in handle mode whose store is behind a [`Cutter`]. Fields drop in order: the server
/// stops before the proxy and the store it runs on.
struct CutStore {
    server: Server,
    cutter: Cutter,
    _redis: Option<PrivateRedis>,
    _plugins: PluginDir,
    _data: TempDir,
}

impl CutStore {
    /// On a private Redis.
    fn redis() -> CutStore {
        let plugins = PluginDir::with(&["invoice"]);
        let data = tempfile::tempdir().expect("temp dir");
        let redis = PrivateRedis::start();
        let cutter = Cutter::before(&redis.url());
        let server = Server::http_in(
            plugins.path(),
            data.path(),
            &["--state-handle-key", "--store", &cutter.url(&redis.url())],
        );
        CutStore {
            server,
            cutter,
            _redis: Some(redis),
            _plugins: plugins,
            _data: data,
        }
    }

    /// On the shared PostgreSQL, under a namespace of this test's own (`name` and the process).
    fn postgres(name: &str) -> CutStore {
        let plugins = PluginDir::with(&["invoice"]);
        let data = tempfile::tempdir().expect("temp dir");
        let postgres = reachable_postgres_url();
        let cutter = Cutter::before(&postgres);
        let namespace = format!("{name}{}", std::process::id());
        let server = Server::on_store(
            plugins.path(),
            data.path(),
            Some(&cutter.url(&postgres)),
            &namespace,
            &["--state-handle-key"],
            &[],
        );
        CutStore {
            server,
            cutter,
            _redis: None,
            _plugins: plugins,
            _data: data,
        }
    }
}

/// Mints `INSTANCES` invoices, in review.
async fn invoices_in_review(client: &Client) -> Vec<String> {
    let mut handles = Vec::new();
    for _ in 0..INSTANCES {
        let minted = client.call("invoice.submit", json!({"amount": 5})).await;
        handles.push(handle_of(&minted));
    }
    handles
}

/// Where `handle` is, read with `invoice.status` until the store answers: a read may meet a
/// pooled connection the cut left dead.
async fn settled_state(client: &Client, handle: &str) -> String {
    for _ in 0..20 {
        let status = client
            .call("invoice.status", json!({"handle": handle}))
            .await;
        if let Some(state) = state_if_ok(&status) {
            return state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{handle}: the store never answered invoice.status again");
}

/// Mints `INSTANCES` invoices (in review), cuts the connection after each `invoice.reject`'s
/// save (to draft), and checks every answer against where the instance is.
async fn saves_with_lost_replies(server: &Server, cutter: &Cutter) {
    let client = Client::http(&server.url).await;
    let handles = invoices_in_review(&client).await;
    // Only a save to draft carries "draft" as its new state... and as the audit's `to`.
    cutter.cut_after("\"draft\"", INSTANCES);
    let mut answers = Vec::new();
    for handle in &handles {
        let answer = client
            .call(
                "invoice.reject",
                json!({"handle": handle, "reason": "lost reply"}),
            )
            .await;
        answers.push(answer);
    }
    // A pooled connection the cut left dead may fail the next save before it is sent (that
    // answer may only say "unknown"): most saves are cut, not necessarily all.
    let cuts = cutter.cuts();
    assert!(cuts >= INSTANCES / 2, "only {cuts} saves were cut");
    let mut saved_successes = 0;
    for (handle, answer) in handles.iter().zip(&answers) {
        let state = settled_state(&client, handle).await;
        let text = text_of(answer);
        assert!(
            state == "review" || !text.contains("changed nothing"),
            "{handle} (now in {state}): a save that was sent is never \"changed nothing\": {text}"
        );
        let next = next_step_of(answer);
        assert_eq!(next["workflow"], "invoice", "{handle}: {answer:?}");
        match error_code_if_any(answer) {
            None => {
                assert_eq!(state, "draft", "{handle}: acknowledged but not saved");
                assert_eq!(next["state"], "draft");
                saved_successes += 1;
            }
            Some(code) => {
                let error = &answer.structured_content.as_ref().unwrap()["error"];
                assert_eq!(code, "STORE_UNAVAILABLE", "{handle}: {answer:?}");
                match &error["committed"] {
                    // A pooled connection the cut left dead may fail a call before its handler
                    // (taking the lease): nothing ran, nothing was sent.
                    Value::Bool(false) if error["handlerRan"] == false => {
                        assert_eq!(
                            state, "review",
                            "{handle}: told not saved, but saved: {text}"
                        );
                    }
                    Value::Bool(false) => {
                        assert_eq!(error["handlerRan"], true, "{handle}: {error}");
                        assert_eq!(
                            state, "review",
                            "{handle}: told not saved, but saved: {text}"
                        );
                        assert!(text.contains("the handler ran but the workflow did not move"));
                    }
                    Value::String(unknown) if unknown == "unknown" => {
                        assert!(text.contains("it may have moved"), "{text}");
                        assert!(text.contains("invoice.status"), "{text}");
                        assert_eq!(next["moved"], "unknown", "{next}");
                    }
                    other => panic!("{handle}: committed {other}: {error}"),
                }
            }
        }
    }
    // The proxy forwarded every save it cut: the rereads find them applied.
    assert!(
        saved_successes >= cuts,
        "{cuts} saves cut, {saved_successes} acknowledged: {answers:#?}"
    );
}

/// The lost replies of [`saves_with_lost_replies`] as the official Python SDK `sdk` shows them
/// to its user. The test mints the invoices and arms the cutter; the SDK's client rejects each
/// and reports what it was handed (its text blocks, `isError`, `structuredContent.error`, the
/// next step in `_meta`, or what it raised instead), then where each invoice is, which must be
/// where the store holds it.
async fn lost_replies_as_python_shows_them(sdk: Sdk, store: &mut CutStore) {
    let client = Client::http(&store.server.url).await;
    let handles = invoices_in_review(&client).await;
    store.cutter.cut_after("\"draft\"", INSTANCES);
    let scenario = format!("lost-reply:{}", handles.join(","));
    let summary = tokio::task::block_in_place(|| run_scenario(sdk, &scenario, &mut store.server));
    let cuts = store.cutter.cuts();
    assert!(
        cuts >= INSTANCES / 2,
        "only {cuts} saves were cut: {summary:#}"
    );
    // A warning a real client prints is one its user reads: nothing at all, here.
    assert_eq!(summary["stderr"], json!([]), "{sdk:?} printed: {summary:#}");
    let calls = summary["calls"].as_array().expect("the calls");
    assert_eq!(calls.len(), INSTANCES, "{summary:#}");
    let mut saved_successes = 0;
    for (handle, call) in handles.iter().zip(calls) {
        let shown = format!("{sdk:?} showed for {handle}: {call:#}");
        assert_eq!(call["handle"], handle.as_str(), "{shown}");
        assert_eq!(
            call["raised"],
            Value::Null,
            "an exception, not a result: {shown}"
        );
        let state = settled_state(&client, handle).await;
        assert_eq!(
            summary["states"][handle],
            state.as_str(),
            "invoice.status through the SDK: {shown}"
        );
        let texts: Vec<&str> = call["texts"]
            .as_array()
            .unwrap_or_else(|| panic!("no text blocks: {shown}"))
            .iter()
            .map(|text| text.as_str().expect("a text"))
            .collect();
        let text = texts.join("\n");
        assert!(
            state == "review" || !text.contains("changed nothing"),
            "now in {state}: a save that was sent is never \"changed nothing\": {shown}"
        );
        assert!(!text.contains("  "), "a run of spaces in the text: {shown}");
        // The last text block is the next step, as `_meta` says it.
        let next = &call["next"];
        assert_eq!(next["workflow"], "invoice", "{shown}");
        assert_eq!(next["handle"], handle.as_str(), "{shown}");
        let available = next["available"]
            .as_array()
            .unwrap_or_else(|| panic!("no next tools: {shown}"))
            .iter()
            .map(|tool| tool.as_str().expect("a tool name"))
            .collect::<Vec<_>>()
            .join(", ");
        let closing = texts.last().copied().unwrap_or_default();
        if call["isError"] == false {
            assert_eq!(state, "draft", "acknowledged but not saved: {shown}");
            assert_eq!(next["state"], "draft", "{shown}");
            assert_eq!(next["moved"], true, "{shown}");
            let moved = format!("Invoice {handle} is now in draft. Next: {available}.");
            assert_eq!(closing, moved, "{shown}");
            saved_successes += 1;
            continue;
        }
        assert_eq!(call["isError"], true, "{shown}");
        let error = &call["error"];
        assert_eq!(error["code"], "STORE_UNAVAILABLE", "{shown}");
        assert!(texts.len() >= 2, "the error, then its next step: {shown}");
        match &error["committed"] {
            Value::Bool(false) => {
                assert_eq!(state, "review", "told not saved, but saved: {shown}");
                if error["handlerRan"] == true {
                    let words = "the handler ran but the workflow did not move";
                    assert!(text.contains(words), "{shown}");
                } else {
                    assert_eq!(error["handlerRan"], false, "{shown}");
                }
                assert_eq!(next["moved"], false, "{shown}");
                let stayed = match next["status"].as_str() {
                    Some("active") => {
                        assert_eq!(next["state"], "review", "{shown}");
                        format!("Invoice {handle} is in review. Next: {available}.")
                    }
                    // A call that failed before its handler, taking the lease, read nothing.
                    Some("unknown") => {
                        assert_eq!(error["handlerRan"], false, "{shown}");
                        assert_eq!(next["state"], Value::Null, "{shown}");
                        format!(
                            "Invoice {handle}: where it stands could not be read just now; call \
                             again once the store answers."
                        )
                    }
                    other => panic!("next step status {other:?}: {shown}"),
                };
                assert_eq!(closing, stayed, "{shown}");
            }
            Value::String(unknown) if unknown == "unknown" => {
                assert!(text.contains("it may have moved"), "{shown}");
                assert_eq!(next["moved"], "unknown", "{shown}");
                let unsure = format!(
                    "Invoice {handle} may have moved: before this call it was in review. To \
                     learn where it is, call invoice.status, or retry with the same idempotency \
                     key."
                );
                assert_eq!(closing, unsure, "{shown}");
            }
            other => panic!("committed {other}: {shown}"),
        }
    }
    assert!(
        saved_successes >= cuts,
        "{cuts} saves cut, {saved_successes} acknowledged: {summary:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_a_save_on_redis_is_settled_by_reading_again() {
    let store = CutStore::redis();
    saves_with_lost_replies(&store.server, &store.cutter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_a_save_on_postgres_is_settled_by_reading_again() {
    let store = CutStore::postgres("lost");
    saves_with_lost_replies(&store.server, &store.cutter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp1_shows_a_reply_lost_after_a_save_on_redis_truthfully() {
    lost_replies_as_python_shows_them(Sdk::Mcp1, &mut CutStore::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp2_shows_a_reply_lost_after_a_save_on_redis_truthfully() {
    lost_replies_as_python_shows_them(Sdk::Mcp2, &mut CutStore::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp1_shows_a_reply_lost_after_a_save_on_postgres_truthfully() {
    lost_replies_as_python_shows_them(Sdk::Mcp1, &mut CutStore::postgres("lostpy1")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp2_shows_a_reply_lost_after_a_save_on_postgres_truthfully() {
    lost_replies_as_python_shows_them(Sdk::Mcp2, &mut CutStore::postgres("lostpy2")).await;
}
