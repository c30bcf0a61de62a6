//! Issue 50, item 1: the truth about a failed call. A proxy before the store forwards a save and
//! then breaks the connection, so the save is sent and its answer lost. The server reads the
//! record again once the store answers: no answer says "changed nothing" of a transition that
//! was saved, every answer says what is known (`handlerRan`, `committed`) and closes with the
//! next step.

mod common;

use common::{
    Client, Cutter, PluginDir, PrivateRedis, Server, error_code_if_any, handle_of, next_step_of,
    reachable_postgres_url, state_if_ok, text_of,
};
use serde_json::{Value, json};

const INSTANCES: usize = 8;

/// Mints `INSTANCES` invoices (in review), cuts the connection after each `invoice.reject`'s
/// save (to draft), and checks every answer against where the instance is.
async fn saves_with_lost_replies(server: &Server, cutter: &Cutter) {
    let client = Client::http(&server.url).await;
    let mut handles = Vec::new();
    for _ in 0..INSTANCES {
        let minted = client.call("invoice.submit", json!({"amount": 5})).await;
        handles.push(handle_of(&minted));
    }
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
        // A read may meet a pooled connection the cut left dead: read until the store answers.
        let mut state = None;
        for _ in 0..20 {
            let status = client
                .call("invoice.status", json!({"handle": handle}))
                .await;
            state = state_if_ok(&status);
            if state.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let state = state.expect("the store answers again");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_a_save_on_redis_is_settled_by_reading_again() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let redis = PrivateRedis::start();
    let cutter = Cutter::before(&redis.url());
    let server = Server::http_in(
        plugins.path(),
        data.path(),
        &["--state-handle-key", "--store", &cutter.url(&redis.url())],
    );
    saves_with_lost_replies(&server, &cutter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_a_save_on_postgres_is_settled_by_reading_again() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let postgres = reachable_postgres_url();
    let cutter = Cutter::before(&postgres);
    let namespace = format!("lost{}", std::process::id());
    let server = Server::on_store(
        plugins.path(),
        data.path(),
        Some(&cutter.url(&postgres)),
        &namespace,
        &["--state-handle-key"],
        &[],
    );
    saves_with_lost_replies(&server, &cutter).await;
}
