//! Upstreams: an MCP server in any language made a plugin by a `NAME.upstream.toml` file, as a
//! client of Turnstile sees it, and as the upstream itself saw it (its own record of the calls
//! it received, `TICKETS_CALL_LOG`). The upstream is the example ticket desk
//! (`plugins/tickets/`: the official Python SDK, over stdio and Streamable HTTP) with the
//! example's own bindings, and its TypeScript twin (`tests/upstream/ts/`, the official
//! TypeScript SDK over Streamable HTTP).
//!
//! The desk's question to the person (`resolve` elicits) is answered by the Python SDK's client
//! in `python/mcp1_client.py` (scenario `tickets-resolve`): rmcp's test client answers none.

mod common;

use common::{
    CallLog, Client, HttpDesk, Server, UpstreamDir, UpstreamToml, error_code, handle_of, kill9,
    names, next_step_of, next_step_sentence, python, rpc_error, turnstile_bin,
};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The desk's process id, which every result of it carries (`structuredContent.pid`).
fn pid_of(result: &CallToolResult) -> u64 {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("the desk's result carries its pid: {result:?}"))
}

/// `structuredContent` of a call that must succeed.
fn ok(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result
        .structured_content
        .clone()
        .expect("structuredContent")
}

/// `structuredContent.error` of an error result.
fn error_of(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["error"]
        .clone()
}

/// The state `tickets.status` reports for the session's own instance.
async fn state(client: &Client) -> Value {
    ok(&client.call("tickets.status", json!({})).await)["state"].clone()
}

/// The instance the call log says a call was for (`_meta["dev.turnstile/instance"]`).
fn instance_of(call: &Value) -> &Value {
    &call["meta"]["dev.turnstile/instance"]
}

#[tokio::test]
async fn a_stdio_upstream_is_gated_by_its_machine_and_receives_only_the_calls_the_gate_lets_through()
 {
    let dir = UpstreamDir::stdio(|file| file);
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;

    // In `new`: the tools bound to `new` and the one bound to every state; `purge` is hidden.
    assert_eq!(
        client.tool_names().await,
        names(&["tickets.open", "tickets.status"])
    );
    let early = client
        .call("tickets.assign", json!({"assignee": "ana"}))
        .await;
    assert_eq!(error_code(&early), "FORBIDDEN");
    let refusal = error_of(&early);
    assert_eq!(refusal["state"], "new");
    assert_eq!(
        refusal["allowed"],
        json!(["tickets.open", "tickets.status"])
    );
    assert_eq!(next_step_of(&early)["moved"], false);
    let (code, _) = rpc_error(client.try_call("tickets.purge", json!({})).await);
    assert_eq!(code, -32602, "a hidden tool is no tool");

    let opened = client
        .call("tickets.open", json!({"title": "printer on fire"}))
        .await;
    let structured = ok(&opened);
    assert_eq!(
        structured["title"], "printer on fire",
        "the desk's own answer"
    );
    assert_eq!(structured["state"], "open");
    let desk = pid_of(&opened);
    assert_eq!(
        next_step_of(&opened),
        json!({"workflow": "tickets", "state": "open", "status": "active", "moved": true,
               "available": ["tickets.assign", "tickets.resolve", "tickets.fail", "tickets.slow",
                             "tickets.status"]})
    );
    assert_eq!(
        next_step_sentence(&opened),
        "Tickets is now in open. Next: tickets.assign, tickets.resolve, tickets.fail, \
         tickets.slow, tickets.status."
    );
    client.changes.wait_for(1).await;
    assert_eq!(
        client.tool_names().await,
        names(&[
            "tickets.assign",
            "tickets.fail",
            "tickets.resolve",
            "tickets.slow",
            "tickets.status"
        ])
    );

    // Out of order: refused, with the state's menu; nothing reaches the desk.
    for (tool, arguments) in [
        ("tickets.open", json!({"title": "again"})),
        ("tickets.reopen", json!({})),
    ] {
        let refused = client.call(tool, arguments).await;
        assert_eq!(error_code(&refused), "FORBIDDEN", "{tool}");
        assert_eq!(error_of(&refused)["state"], "open", "{tool}");
    }
    let (code, _) = rpc_error(client.try_call("tickets.purge", json!({})).await);
    assert_eq!(code, -32602);

    let assigned = client
        .call("tickets.assign", json!({"assignee": "ana"}))
        .await;
    assert_eq!(ok(&assigned)["assignee"], "ana");
    assert_eq!(pid_of(&assigned), desk, "one desk for the shared session");
    assert_eq!(
        next_step_sentence(&assigned),
        "Tickets is now in assigned. Next: tickets.resolve, tickets.fail, tickets.slow, \
         tickets.status."
    );
    client.changes.wait_for(2).await;

    // The desk asks the person before it resolves, and this client cannot show a form: refused,
    // and neither the workflow nor the desk's ticket moved (the desk ran up to its question).
    let unasked = client.call("tickets.resolve", json!({"note": "n"})).await;
    assert_eq!(error_code(&unasked), "INPUT_UNAVAILABLE");
    assert!(
        error_of(&unasked)["needed"]
            .as_str()
            .is_some_and(|needed| needed.contains("form elicitation")),
        "{unasked:?}"
    );
    let status = ok(&client.call("tickets.status", json!({})).await);
    assert_eq!(
        (&status["state"], &status["status"]),
        (&json!("assigned"), &json!("assigned")),
        "the workflow's state and the desk's own: {status}"
    );

    // The desk refuses `fail` (isError): its `on_error` fires, and the ticket is broken.
    let failed = client
        .call("tickets.fail", json!({"reason": "toner"}))
        .await;
    assert_eq!(error_code(&failed), "TOOL_ERROR");
    assert_eq!(
        next_step_of(&failed),
        json!({"workflow": "tickets", "state": "broken", "status": "done", "available": [],
               "moved": true})
    );
    assert!(
        common::text_of(&failed).contains("the desk refused: toner"),
        "the desk's own words: {failed:?}"
    );
    client.changes.wait_for(3).await;
    assert_eq!(state(&client).await, "broken");
    assert!(
        !client.offers("tickets.resolve").await,
        "a broken ticket is resolved no more"
    );

    // What the desk itself received: the calls the gate let through, each naming its instance
    // in the state it was called in, and nothing else (no refused call, no hidden tool).
    let calls = dir.calls.entries();
    let received: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(
        received,
        ["open", "assign", "resolve", "status", "fail", "status"],
        "{calls:#?}"
    );
    let states = ["new", "open", "assigned", "assigned", "assigned", "broken"];
    for (call, state) in calls.iter().zip(states) {
        let instance = instance_of(call);
        assert_eq!(instance["workflow"], "tickets", "{call}");
        assert_eq!(instance["state"], state, "{call}");
        assert!(
            instance["handle"]
                .as_str()
                .is_some_and(|handle| handle.starts_with("session:")),
            "a session's own instance: {call}"
        );
        assert!(
            call["meta"]["dev.turnstile/idempotencyKey"]
                .as_str()
                .is_some_and(|key| !key.is_empty()),
            "each call carries its idempotency key: {call}"
        );
    }
    assert_eq!(calls[0]["arguments"], json!({"title": "printer on fire"}));
}

/// The desk's `resolve` asks the person (an elicitation it sends Turnstile, put to the Python
/// SDK's client, whose callback answers): a decline fires nothing, an accept resolves.
#[test]
fn the_upstreams_question_reaches_the_person_and_a_decline_fires_nothing() {
    let dir = UpstreamDir::stdio(|file| file);
    let mut server = Server::http(dir.path(), &["--state-handle-key"]);
    let summary = python::run_scenario(python::Sdk::Mcp1, "tickets-resolve", &mut server);
    let asked = &summary["asked"];
    assert_eq!(asked.as_array().map(Vec::len), Some(2), "{summary:#}");
    assert!(
        asked[0]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("Resolve ticket T-")),
        "the desk's own question: {asked}"
    );
    assert_eq!(
        asked[0]["schema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    let declined = &summary["declined"];
    assert_eq!(
        declined["structured"]["error"]["code"], "TOOL_ERROR",
        "{declined}"
    );
    assert!(
        declined["text"]
            .as_str()
            .is_some_and(|text| text.contains("declined to resolve")),
        "the desk's own refusal: {declined}"
    );
    assert_eq!(summary["after_decline"]["state"], "open", "nothing fired");
    assert_eq!(summary["after_decline"]["status"], "open", "the desk's own");
    assert_eq!(summary["resolved"]["state"], "resolved");
    assert_eq!(summary["after_accept"]["status"], "resolved");
    assert_eq!(summary["after_accept"]["note"], "rebooted");

    // Every run the desk received was for the instance, in `open`.
    let handle = summary["handle"].as_str().unwrap();
    let resolves = dir.calls.calls_of("resolve");
    assert!(resolves.len() >= 2, "{resolves:#?}");
    for call in &resolves {
        assert_eq!(instance_of(call)["handle"], handle, "{call}");
        assert_eq!(instance_of(call)["state"], "open", "{call}");
    }
}

#[tokio::test]
async fn a_killed_upstream_is_started_again_and_a_call_it_was_running_moves_nothing() {
    // `slow` fires ASSIGN here, so a call that completed would move the ticket.
    let dir =
        UpstreamDir::stdio(|file| file.bind("slow", "states = [\"open\"]\nfires = \"ASSIGN\""));
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;
    let first = pid_of(&client.call("tickets.open", json!({"title": "t"})).await);

    // Between calls: the next call starts the desk again.
    kill9(first as u32);
    let status = client.call("tickets.status", json!({})).await;
    let second = pid_of(&status);
    assert_ne!(second, first, "a new desk answered");
    assert_eq!(ok(&status)["state"], "open");

    // During a call: the call was sent, and got no answer.
    let slow = {
        let url = server.url.clone();
        tokio::spawn(async move {
            let client = Client::http(&url).await;
            // The session's own instance is per session: this one opens its own first.
            client.call("tickets.open", json!({"title": "slow"})).await;
            let answer = client.call("tickets.slow", json!({"seconds": 20})).await;
            (client, answer)
        })
    };
    let received = tokio::task::spawn_blocking({
        let calls = dir.calls.clone();
        move || calls.wait_for("slow")
    })
    .await
    .unwrap();
    assert_eq!(received["pid"], second, "{received}");
    kill9(second as u32);
    let (other, answer) = slow.await.unwrap();
    assert_eq!(error_code(&answer), "UPSTREAM_UNAVAILABLE");
    assert_eq!(error_of(&answer)["handlerRan"], "unknown", "{answer:?}");
    assert_eq!(state(&other).await, "open", "nothing fired");
    // And again: a third desk runs it to the end.
    let again = other.call("tickets.slow", json!({"seconds": 0})).await;
    let third = pid_of(&again);
    assert!(third != first && third != second, "{third}");
    assert_eq!(ok(&again)["state"], "assigned");
}

#[tokio::test]
async fn an_upstream_file_dropped_in_edited_and_removed_is_announced_each_time() {
    let dir = UpstreamDir::empty();
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;
    assert_eq!(client.tool_names().await, Vec::<String>::new());
    let file = UpstreamToml::stdio(&dir.calls);

    dir.write("tickets.upstream.toml", &file);
    client.changes.wait_for(1).await;
    assert_eq!(
        client.tool_names().await,
        names(&["tickets.open", "tickets.status"])
    );

    // One more tool bound to `new`, and `status` bound to `open` only.
    let edited = file
        .bind("slow", "states = [\"new\"]")
        .bind("status", "states = [\"open\"]");
    dir.write("tickets.upstream.toml", &edited);
    client.changes.wait_for(2).await;
    assert_eq!(
        client.tool_names().await,
        names(&["tickets.open", "tickets.slow"])
    );
    let slept = client.call("tickets.slow", json!({"seconds": 0})).await;
    assert_eq!(ok(&slept)["slept"], 0.0, "the edited binding is served");

    dir.remove("tickets.upstream.toml");
    client.changes.wait_for(3).await;
    assert_eq!(client.tool_names().await, Vec::<String>::new());
    let (code, _) = rpc_error(client.try_call("tickets.open", json!({"title": "x"})).await);
    assert_eq!(code, -32602);
    server.wait_for_log("plugin removed");
}

/// The desk adds a tool while it runs and says so (`notifications/tools/list_changed`): its
/// tools are listed again on the links it has and the bindings checked again (one refused at
/// load now binds), the client is told, the new tool is served, and the desk is not started
/// anew (the ticket it keeps in memory, and its pid, are the same).
#[tokio::test]
async fn an_upstream_whose_tools_change_is_listed_again_without_a_restart() {
    // `escalate` is bound before the desk has it: refused at load, served once the desk adds it.
    let dir = UpstreamDir::stdio(|file| {
        file.bind("grow", "")
            .bind("escalate", "states = [\"open\"]")
    });
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;
    let opened = client
        .call("tickets.open", json!({"title": "printer"}))
        .await;
    let pid = pid_of(&opened);
    let told_before = client.changes.count();
    assert!(
        !client
            .tool_names()
            .await
            .contains(&"tickets.escalate".to_owned())
    );

    let grown = client.call("tickets.grow", json!({})).await;
    assert_eq!(pid_of(&grown), pid);
    client.changes.wait_for(told_before + 1).await;
    common::eventually(
        "tickets.escalate listed",
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        async || {
            client
                .tool_names()
                .await
                .contains(&"tickets.escalate".to_owned())
        },
    )
    .await;
    let escalated = client
        .call("tickets.escalate", json!({"reason": "smoke"}))
        .await;
    assert_eq!(pid_of(&escalated), pid, "the same desk, not a new one");
    assert_eq!(
        ok(&escalated)["title"],
        "printer",
        "the desk kept its ticket"
    );
    server.wait_for_log("an upstream's tools changed");
}

/// `session = "per-instance"`: each instance its own desk (and the same one on every call);
/// `shared`: one desk for all.
#[tokio::test]
async fn per_instance_sessions_give_each_instance_its_own_upstream_and_shared_ones_do_not() {
    for mode in ["per-instance", "shared"] {
        let dir = UpstreamDir::stdio(|file| file.set("session", mode));
        let server = Server::http(dir.path(), &["--state-handle-key"]);
        let client = Client::http(&server.url).await;
        let (a, b) = (
            client.call("tickets.open", json!({"title": "a"})).await,
            client.call("tickets.open", json!({"title": "b"})).await,
        );
        let (handle_a, handle_b) = (handle_of(&a), handle_of(&b));
        let (pid_a, pid_b) = (pid_of(&a), pid_of(&b));
        let again_a = pid_of(
            &client
                .call("tickets.status", json!({"handle": handle_a}))
                .await,
        );
        let again_b = pid_of(
            &client
                .call("tickets.status", json!({"handle": handle_b}))
                .await,
        );
        assert_eq!((again_a, again_b), (pid_a, pid_b), "{mode}: the same desk");
        if mode == "per-instance" {
            assert_ne!(pid_a, pid_b, "{mode}: a desk per instance");
        } else {
            assert_eq!(pid_a, pid_b, "{mode}: one desk");
        }
        // Each desk received its own instance's calls.
        for call in dir.calls.entries() {
            let handle = instance_of(&call)["handle"].as_str().unwrap().to_owned();
            let pid = if handle == handle_a { pid_a } else { pid_b };
            assert_eq!(call["pid"], pid, "{mode}: {call}");
        }
    }
}

/// open → assign over Streamable HTTP, answered by the desk whose process is `pid`, each
/// result with its next step, each call received by that desk.
async fn short_lifecycle(client: &Client, calls: &CallLog, pid: u32) {
    let opened = client.call("tickets.open", json!({"title": "t"})).await;
    assert_eq!(
        pid_of(&opened),
        u64::from(pid),
        "the desk at the URL answered"
    );
    assert_eq!(ok(&opened)["state"], "open");
    assert_eq!(next_step_of(&opened)["state"], "open");
    let early = client.call("tickets.reopen", json!({})).await;
    assert_eq!(error_code(&early), "FORBIDDEN");
    let assigned = client
        .call("tickets.assign", json!({"assignee": "ana"}))
        .await;
    assert_eq!(ok(&assigned)["assignee"], "ana");
    assert_eq!(
        next_step_of(&assigned)["available"],
        json!([
            "tickets.resolve",
            "tickets.fail",
            "tickets.slow",
            "tickets.status"
        ])
    );
    assert_eq!(
        next_step_sentence(&assigned),
        "Tickets is now in assigned. Next: tickets.resolve, tickets.fail, tickets.slow, \
         tickets.status."
    );
    assert_eq!(calls.tools(), ["open", "assign"]);
    for (call, state) in calls.entries().iter().zip(["new", "open"]) {
        assert_eq!(instance_of(call)["state"], state, "{call}");
    }
}

#[tokio::test]
async fn the_python_desk_over_streamable_http_walks_its_workflow_and_its_absence_is_told() {
    let dir = UpstreamDir::empty();
    let desk = HttpDesk::python(&dir.calls);
    dir.write("tickets.upstream.toml", &UpstreamToml::http(&desk.url));
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;
    short_lifecycle(&client, &dir.calls, desk.pid()).await;

    // The desk is gone: the call reaches nothing, and nothing moves.
    drop(desk);
    let unreached = client.call("tickets.resolve", json!({})).await;
    assert_eq!(error_code(&unreached), "UPSTREAM_UNAVAILABLE");
    assert_eq!(error_of(&unreached)["handlerRan"], false, "{unreached:?}");
    assert_eq!(
        client.tool_names().await,
        names(&[
            "tickets.fail",
            "tickets.resolve",
            "tickets.slow",
            "tickets.status"
        ]),
        "still assigned"
    );
}

#[tokio::test]
async fn the_typescript_desk_over_streamable_http_walks_its_workflow() {
    let dir = UpstreamDir::empty();
    let desk = HttpDesk::typescript(&dir.calls);
    dir.write("tickets.upstream.toml", &UpstreamToml::http(&desk.url));
    let server = Server::http(dir.path(), &[]);
    let client = Client::http(&server.url).await;
    short_lifecycle(&client, &dir.calls, desk.pid()).await;
    // This desk asks nothing: resolve, and reopen.
    let resolved = client.call("tickets.resolve", json!({"note": "n"})).await;
    assert_eq!(ok(&resolved)["state"], "resolved");
    assert_eq!(
        next_step_sentence(&resolved),
        "Tickets is now in resolved. Next: tickets.reopen, tickets.status."
    );
    let reopened = client.call("tickets.reopen", json!({})).await;
    assert_eq!(ok(&reopened)["state"], "open");
    assert_eq!(dir.calls.tools(), ["open", "assign", "resolve", "reopen"]);
}

/// A 2026-07-28 client's list is the catalog: every tool the file binds (not the hidden one),
/// each description the desk's own followed by the note the host writes from the machine.
#[tokio::test]
async fn a_2026_client_lists_every_bound_tool_with_its_usage_note() {
    let dir = UpstreamDir::stdio(|file| file);
    let server = Server::http(dir.path(), &[]);
    let client = Client::http_sessionless(&server.url).await;
    let tools = client.tools().await;
    let described: Vec<(String, String)> = tools
        .iter()
        .map(|tool| {
            let description = tool.description.as_deref().unwrap_or_default();
            (tool.name.to_string(), description.to_owned())
        })
        .collect();
    let expected = [
        (
            "tickets.assign",
            "Assign the open ticket to someone.",
            "Use while the tickets is in `open` (pass `handle`); it moves the tickets to \
             `assigned`.",
        ),
        (
            "tickets.fail",
            "Ask the desk for something it always refuses (answers an isError result).",
            "Use while the tickets is in `open` or `assigned` (pass `handle`).",
        ),
        (
            "tickets.open",
            "Open a new ticket with this title (replaces any ticket of this instance).",
            "Use while the tickets is in `new` (omit `handle` to start a new tickets); it moves \
             the tickets to `open`.",
        ),
        (
            "tickets.reopen",
            "Reopen the resolved ticket.",
            "Use while the tickets is in `resolved` (pass `handle`); it moves the tickets to \
             `open`.",
        ),
        (
            "tickets.resolve",
            "Resolve the ticket, with an optional note. Asks the person to confirm first.",
            "Use while the tickets is in `open` or `assigned` (pass `handle`); it moves the \
             tickets to `resolved`.",
        ),
        (
            "tickets.slow",
            "Take this many seconds to answer.",
            "Use while the tickets is in `open` or `assigned` (pass `handle`).",
        ),
        (
            "tickets.status",
            "The ticket of this instance, or {\"ticket\": null} if none was opened.",
            "Use at any step of the tickets (pass `handle`).",
        ),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(name, own, note)| (name.to_string(), format!("{own} {note}")))
        .collect();
    assert_eq!(described, expected);
}

/// `turnstile check --plugins DIR`: exit code and stdout.
fn check(dir: &UpstreamDir) -> (i32, String) {
    let output = std::process::Command::new(turnstile_bin())
        .args(["check", "--plugins"])
        .arg(dir.path())
        .output()
        .expect("run turnstile check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (
        output.status.code().unwrap_or(-1),
        format!("{stdout}\n--- stderr ---\n{stderr}"),
    )
}

#[tokio::test]
async fn check_names_the_file_and_the_key_of_a_bad_upstream_file_and_serve_keeps_the_rest() {
    let good = UpstreamDir::stdio(|file| file);
    let (code, output) = check(&good);
    assert_eq!(code, 0, "the example passes: {output}");

    let misspelt = UpstreamDir::stdio(|file| file.set("sesion", "shared"));
    let (code, output) = check(&misspelt);
    assert_ne!(code, 0, "{output}");
    let path = misspelt.file("tickets.upstream.toml");
    let line = output
        .lines()
        .find(|line| line.contains("sesion"))
        .unwrap_or_else(|| panic!("the key is named: {output}"));
    assert!(
        line.contains(path.to_str().unwrap()),
        "the file is named: {line}"
    );

    let escalate = UpstreamDir::stdio(|file| file.bind("escalate", "states = [\"open\"]"));
    let (code, output) = check(&escalate);
    assert_ne!(code, 0, "{output}");
    let line = output
        .lines()
        .find(|line| line.contains("tools.escalate"))
        .unwrap_or_else(|| panic!("the binding is named: {output}"));
    assert!(
        line.contains(escalate.file("tickets.upstream.toml").to_str().unwrap())
            && line.contains("no tool named \"escalate\""),
        "{line}"
    );

    // Served, without the binding.
    let server = Server::http(escalate.path(), &[]);
    let warned = server.wait_for_log("tools.escalate");
    assert!(warned.contains("WARN"), "{warned}");
    let client = Client::http(&server.url).await;
    assert_eq!(
        client.tool_names().await,
        names(&["tickets.open", "tickets.status"])
    );
    let opened = client.call("tickets.open", json!({"title": "t"})).await;
    assert_eq!(ok(&opened)["state"], "open");
}

/// Three servers on one Redis namespace share one desk over Streamable HTTP: 60 calls racing
/// for one move of one instance, spread over the three, move it once, and the desk is called
/// once (the loser never reaches it: the instance's lease puts the call on one server at a time,
/// and the gate refuses the rest once it moved).
#[tokio::test]
async fn racing_calls_over_three_servers_reach_a_shared_upstream_once() {
    let dir = UpstreamDir::empty();
    let desk = HttpDesk::python(&dir.calls);
    dir.write("tickets.upstream.toml", &UpstreamToml::http(&desk.url));
    let namespace = format!("upstreams_{}", uuid::Uuid::new_v4().simple());
    let servers: Vec<Server> = (0..3)
        .map(|_| {
            Server::sharing(
                dir.path(),
                &common::redis_url(),
                &namespace,
                &["--state-handle-key"],
            )
        })
        .collect();
    let mut clients = Vec::new();
    for server in &servers {
        for _ in 0..2 {
            clients.push(Client::http(&server.url).await);
        }
    }
    let opened = clients[0]
        .call("tickets.open", json!({"title": "race"}))
        .await;
    let handle = handle_of(&opened);
    let racing = (0..60).map(|n| {
        clients[n % clients.len()].call(
            "tickets.assign",
            json!({"handle": handle, "assignee": format!("agent-{n}")}),
        )
    });
    let results = futures_util::future::join_all(racing).await;
    let won = results.iter().filter(|r| r.is_error != Some(true)).count();
    let refused: Vec<Value> = results
        .iter()
        .filter(|r| r.is_error == Some(true))
        .map(error_code)
        .collect();
    assert_eq!(won, 1, "{refused:?}");
    assert!(
        refused.iter().all(|code| code == "FORBIDDEN"),
        "the losers are refused by the gate: {refused:?}"
    );
    assert_eq!(
        dir.calls.calls_of("assign").len(),
        1,
        "{:?}",
        dir.calls.tools()
    );
    let status = clients[5]
        .call("tickets.status", json!({"handle": handle}))
        .await;
    assert_eq!(ok(&status)["state"], "assigned");
}

/// A 2025-11-25 request in `session`: the result of request `id`.
async fn in_session(url: &str, session: &str, id: u64, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let answer = common::post_in_session(url, session, body.to_string())
        .send()
        .await
        .expect("the server answers");
    let body = answer.text().await.expect("a body");
    common::result_of(&body, id, method)
}

/// An upstream tool bound with `task` runs as an MCP task on Turnstile's side (the upstream gets
/// a plain `tools/call`); `tasks/cancel` reaches the upstream as `notifications/cancelled`, and
/// nothing fires.
#[tokio::test]
async fn a_cancelled_upstream_task_is_cancelled_upstream_and_fires_nothing() {
    let dir = UpstreamDir::stdio(|file| {
        file.bind(
            "slow",
            "states = [\"open\"]\nfires = \"ASSIGN\"\ntask = \"required\"",
        )
    });
    let server = Server::http(dir.path(), &[]);
    let url = &server.url;
    let session = common::open_session(url).await;
    let open = json!({"name": "tickets.open", "arguments": {"title": "t"}});
    let opened = in_session(url, &session, 1, "tools/call", open).await;
    assert_ne!(opened["isError"], true, "{opened}");

    let slow =
        json!({"name": "tickets.slow", "arguments": {"seconds": 20}, "task": {"ttl": 60000}});
    let created = in_session(url, &session, 2, "tools/call", slow).await;
    let task_id = created["task"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(created["task"]["status"], "working", "{created}");
    let calls = dir.calls.clone();
    tokio::task::spawn_blocking(move || calls.wait_for("slow"))
        .await
        .unwrap();

    let cancelled = in_session(url, &session, 3, "tasks/cancel", json!({"taskId": task_id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    common::eventually(
        "the upstream was never told to cancel the call",
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(20),
        async || match dir.calls.cancelled().as_slice() {
            [only] if only == "slow" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let status = json!({"name": "tickets.status", "arguments": {}});
    let status = in_session(url, &session, 4, "tools/call", status).await;
    assert_eq!(
        status["structuredContent"]["state"], "open",
        "nothing fired: {status}"
    );
}
