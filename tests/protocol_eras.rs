//! The two protocol eras, as their clients see them (issue 37).
//!
//! 2026-07-28: `tools/list`, `prompts/list` and `resources/list` depend on the catalog alone,
//! whatever handle a request names and whatever calls came before; a transition is no list
//! change; each workflow tool's description says when it can be used. A client that declares
//! the `dev.turnstile/gated-lists` extension gets the per-instance menus instead. In both eras,
//! every result of a workflow tool ends with its instance's next step.

mod common;

use std::{fs, time::Duration};

use common::{
    Client, GATED_LISTS_EXTENSION, NEXT_STEP_META_KEY, PluginDir, Server, built_plugin, error_code,
    handle_of, names, text_of,
};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// One 2026-07-28 request over raw HTTP, as a client without a session sends it: the response
/// body, as bytes arrive (a list is answered as plain JSON).
async fn raw_2026(url: &str, method: &str, meta: Value) -> String {
    let response = common::post_sessionless(url, 1, method, json!({"_meta": meta}))
        .send()
        .await
        .expect("the server answers");
    assert!(
        response.status().is_success(),
        "{method}: {}",
        response.status()
    );
    response.text().await.expect("a body")
}

/// The three lists, as bytes, for a request naming `meta`.
async fn lists(url: &str, meta: Value) -> [String; 3] {
    [
        raw_2026(url, "tools/list", meta.clone()).await,
        raw_2026(url, "prompts/list", meta.clone()).await,
        raw_2026(url, "resources/list", meta).await,
    ]
}

fn next_step(result: &CallToolResult) -> Value {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(NEXT_STEP_META_KEY))
        .cloned()
        .unwrap_or_else(|| panic!("the result carries its next step: {result:?}"))
}

fn last_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .next_back()
        .expect("a text block")
}

#[tokio::test]
async fn a_2026_client_gets_the_same_lists_whatever_it_names_or_did_before() {
    let (_plugins, server) = common::start(&["invoice", "payment"], &[]);
    let url = &server.url;
    let first = lists(url, json!({})).await;

    let one = Client::http_sessionless(url).await;
    let two = Client::http_sessionless(url).await;
    let a = handle_of(&one.call("invoice.submit", json!({"amount": 120})).await);
    let b = handle_of(&two.call("invoice.submit", json!({"amount": 7})).await);
    let middle = lists(url, json!({"handle": a})).await;
    one.call("invoice.approve", json!({"handle": a})).await;
    two.call("invoice.reject", json!({"handle": b, "reason": "typo"}))
        .await;
    let after = [
        lists(url, json!({"handle": a})).await,
        lists(url, json!({"handle": b})).await,
        lists(url, json!({"handle": [a.as_str(), b.as_str()]})).await,
        lists(url, json!({})).await,
    ];
    for (kind, listed) in ["tools", "prompts", "resources"].iter().enumerate() {
        assert_eq!(middle[kind], first[kind], "{listed}/list after a call");
        for later in &after {
            assert_eq!(later[kind], first[kind], "{listed}/list after transitions");
        }
    }

    let tools: Value = serde_json::from_str(&first[0]).expect("JSON");
    let result = &tools["result"];
    assert_eq!(result["ttlMs"], 300_000, "cacheable for --list-ttl");
    assert_eq!(result["cacheScope"], "public", "no authentication: public");
    let listed: Vec<&Value> = result["tools"].as_array().expect("tools").iter().collect();
    let named = |name: &str| -> &Value {
        listed
            .iter()
            .find(|tool| tool["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed: {listed:?}"))
    };
    // Every tool of every workflow, whatever state any instance is in.
    for tool in [
        "invoice.submit",
        "invoice.approve",
        "invoice.second_approve",
        "invoice.reject",
        "invoice.discharge",
        "invoice.status",
        "payment.authorize",
        "payment.capture",
    ] {
        named(tool);
    }
    let approve = named("invoice.approve");
    let description = approve["description"].as_str().expect("a description");
    assert!(
        description.contains("Use while the invoice is in `review` (pass `handle`)"),
        "{description}"
    );
    assert!(
        description.contains("it moves the invoice to `second_approval` or `approved`"),
        "{description}"
    );
    assert!(
        approve["inputSchema"]["required"]
            .as_array()
            .is_some_and(|required| required.contains(&json!("handle"))),
        "a tool acting on an instance requires its handle: {approve}"
    );
    let submit = named("invoice.submit");
    assert!(
        !submit["inputSchema"]["required"]
            .as_array()
            .is_some_and(|required| required.contains(&json!("handle"))),
        "the starting tool takes no handle to start: {submit}"
    );
    let order: Vec<&str> = listed
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "a deterministic order");
}

#[tokio::test]
async fn a_2026_listen_hears_a_plugin_dropped_in_but_no_transition() {
    let (plugins, server) = common::start(&["invoice"], &[]);
    let watcher = Client::http_sessionless(&server.url).await;
    let caller = Client::http_sessionless(&server.url).await;
    let handle = handle_of(&caller.call("invoice.submit", json!({"amount": 5})).await);
    let listened = watcher.listen().await;
    let named = {
        // A listen that names the handle, as a 2025-minded client might: still no transition
        // reaches it.
        let meta = json!({"handle": handle});
        watcher.tool_names_with_meta(meta).await
    };
    assert!(named.iter().any(|name| name == "invoice.discharge"));
    for step in [
        ("invoice.reject", json!({"handle": handle, "reason": "r"})),
        ("invoice.submit", json!({"handle": handle, "amount": 5})),
        ("invoice.approve", json!({"handle": handle})),
    ] {
        let result = caller.call(step.0, step.1).await;
        assert_ne!(result.is_error, Some(true), "{result:?}");
    }

    let payment = built_plugin("payment");
    fs::copy(&payment, plugins.path().join(payment.file_name().unwrap())).expect("drop in");
    listened.wait_for(1).await;
    while !watcher.offers("payment.authorize").await {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Notices arrive in order: had the three moves been list changes, they would have come
    // before the plugin's.
    listened.stays_at(1).await;
}

#[tokio::test]
async fn a_client_declaring_gated_lists_gets_the_menus_of_the_instances_it_names() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let client = Client::http_sessionless_declaring(&server.url, &[GATED_LISTS_EXTENSION]).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    // The same server, to a client without the extension: the catalog.
    let plain = Client::http_sessionless(&server.url).await;
    let listed = plain.tool_names_with_meta(json!({"handle": handle})).await;
    assert!(listed.len() > 3, "{listed:?}");
}

#[tokio::test]
async fn every_result_of_a_workflow_tool_ends_with_its_next_step() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let client = Client::http_sessionless(&server.url).await;

    // A starting call that minted a handle.
    let minted = client.call("invoice.submit", json!({"amount": 5})).await;
    let handle = handle_of(&minted);
    assert_eq!(
        next_step(&minted),
        json!({"workflow": "invoice", "handle": handle, "state": "review", "status": "active",
               "available": ["invoice.approve", "invoice.reject", "invoice.status"],
               "moved": true})
    );
    assert_eq!(
        last_text(&minted),
        format!(
            "Invoice {handle} is now in review. Next: invoice.approve, invoice.reject, \
             invoice.status."
        )
    );
    assert!(
        !text_of(&minted).contains("handle: "),
        "the next step replaces the separate handle line: {minted:?}"
    );
    // structuredContent stays the plugin's (with the state and handle the schema declares).
    let structured = minted.structured_content.clone().expect("structured");
    assert!(structured.get(NEXT_STEP_META_KEY).is_none());

    // A refusal: nothing moved, the same menu.
    let refused = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_eq!(error_code(&refused), "FORBIDDEN");
    let next = next_step(&refused);
    assert_eq!(next["moved"], false);
    assert_eq!(next["state"], "review");
    assert_eq!(
        next["available"],
        json!(["invoice.approve", "invoice.reject", "invoice.status"])
    );

    client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    let done = client
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    let next = next_step(&done);
    assert_eq!(next["status"], "done");
    assert_eq!(next["available"], json!([]));
    assert_eq!(
        last_text(&done),
        format!("Invoice {handle} is now in discharged, a final state: there is no next step.")
    );
}

#[tokio::test]
async fn a_2025_session_hears_the_next_step_too_and_it_can_be_turned_off() {
    let (plugins, _server, session) = common::serve_and_connect(&["invoice"], &[]).await;
    let submitted = session.call("invoice.submit", json!({"amount": 5})).await;
    assert_eq!(
        last_text(&submitted),
        "Invoice is now in review. Next: invoice.approve, invoice.reject, invoice.status."
    );
    assert!(
        next_step(&submitted).get("handle").is_none(),
        "a session's own instance"
    );

    let quiet_server = Server::http(plugins.path(), &["--next-step", "off"]);
    let quiet = Client::http(&quiet_server.url).await;
    let submitted = quiet.call("invoice.submit", json!({"amount": 5})).await;
    assert!(submitted.meta.is_none(), "{submitted:?}");
    assert_eq!(submitted.content.len(), 1, "the plugin's text alone");

    let meta_only = Server::http(plugins.path(), &["--next-step", "meta"]);
    let client = Client::http_sessionless(&meta_only.url).await;
    let minted = client.call("invoice.submit", json!({"amount": 5})).await;
    let handle = handle_of(&minted);
    assert_eq!(next_step(&minted)["handle"], handle.as_str());
    assert!(
        text_of(&minted).contains(&format!("handle: {handle}")),
        "without the next step's text, the handle keeps its own line: {minted:?}"
    );
}

/// `turnstile instances --json STORE_ARGS reset HANDLE`, as an operator runs it.
fn reset(store_args: &[&str], handle: &str) {
    let output = std::process::Command::new(common::turnstile_bin())
        .args(["instances", "--json"])
        .args(store_args)
        .args(["reset", handle])
        .output()
        .expect("run turnstile instances");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn document(read: &rmcp::model::ReadResourceResult) -> Value {
    let text = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text,
        other => panic!("a text resource: {other:?}"),
    };
    serde_json::from_str(text).expect("JSON")
}

/// The host's `turnstile://invoice/<handle>`: it reads as where the instance is and what comes
/// next, and a 2026-07-28 listen subscribed to it hears exactly one `resources/updated` per
/// transition, whatever made it: a call on either of two servers sharing Redis, an `after`
/// timer, an operator's `instances reset`.
#[tokio::test]
async fn an_instance_resource_reads_the_instance_and_is_updated_once_per_transition() {
    let plugins = PluginDir::with(&["invoice"]);
    let redis = common::redis_url();
    let namespace = format!("eras{}", uuid::Uuid::new_v4().simple());
    let store_args = ["--store", redis.as_str(), "--store-namespace", &namespace];
    let deadline = [("TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS", "2000")];
    let east = Server::http_with_env(plugins.path(), &store_args, &deadline);
    let west = Server::http_with_env(plugins.path(), &store_args, &deadline);
    let caller = Client::http_sessionless(&east.url).await;
    let other_caller = Client::http_sessionless(&west.url).await;
    let watcher = Client::http_sessionless(&west.url).await;

    let templates = watcher.resource_templates().await;
    assert!(
        templates
            .iter()
            .any(|t| t == "turnstile://invoice/{handle}"),
        "{templates:?}"
    );
    let handle = handle_of(&caller.call("invoice.submit", json!({"amount": 5})).await);
    let uri = format!("turnstile://invoice/{handle}");
    let read = document(&watcher.read_resource(&uri).await.expect("read"));
    assert_eq!(read["workflow"], "invoice");
    assert_eq!(read["handle"], handle.as_str());
    assert_eq!(read["state"], "review");
    assert_eq!(read["status"], "active");
    assert_eq!(
        read["available"]["tools"],
        json!(["invoice.approve", "invoice.reject", "invoice.status"])
    );
    assert_eq!(read["version"], 1);
    assert!(read.get("context").is_none(), "no context: {read}");
    assert_eq!(read["audit"][0]["by"], "tool:invoice.submit");

    let updates = watcher
        .listen_resources(&[uri.as_str()])
        .await
        .expect("listen");
    // The review deadline passes: the timer moves it back to draft.
    updates.wait_for(1).await;
    moved(
        "invoice.submit",
        json!({"handle": handle, "amount": 5}),
        &caller,
    )
    .await;
    updates.wait_for(2).await;
    moved("invoice.approve", json!({"handle": handle}), &other_caller).await;
    updates.wait_for(3).await;
    reset(&store_args, &handle);
    updates.wait_for(4).await;
    // A call that moves nothing is no update.
    moved("invoice.status", json!({"handle": handle}), &caller).await;
    updates.stays_at(4).await;
    let read = document(&watcher.read_resource(&uri).await.expect("read"));
    assert_eq!(read["state"], "draft");
    let trail: Vec<&Value> = read["audit"]
        .as_array()
        .expect("audit")
        .iter()
        .map(|entry| &entry["by"])
        .collect();
    assert_eq!(
        trail,
        [
            "tool:invoice.submit",
            "timer",
            "tool:invoice.submit",
            "tool:invoice.approve",
            "operator:reset"
        ]
    );
}

/// Tenancy is that of handles: another principal reading or subscribing to an instance's
/// resource gets -32002, word for word the answer for a handle never minted.
#[tokio::test]
async fn another_principal_finds_no_instance_resource() {
    let plugins = PluginDir::with(&["invoice"]);
    let (_tokens, _server, alice, bob) = common::alice_and_bob(&plugins).await;
    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 5})).await);
    let uri = format!("turnstile://invoice/{handle}");
    let read = document(&alice.read_resource(&uri).await.expect("alice reads hers"));
    assert_eq!(read["state"], "review");
    alice.subscribe(&uri).await.expect("alice subscribes");

    let never = format!("invoice-{}", "0".repeat(32));
    let never_uri = format!("turnstile://invoice/{never}");
    let (code, data) = common::rpc_error(bob.read_resource(&uri).await);
    let (never_code, never_data) = common::rpc_error(bob.read_resource(&never_uri).await);
    assert_eq!(code, -32002);
    assert_eq!(
        (code, data["uri"].as_str().map(|u| u.replace(&handle, "H"))),
        (
            never_code,
            never_data["uri"].as_str().map(|u| u.replace(&never, "H"))
        )
    );
    let (code, _) = common::rpc_error(bob.subscribe(&uri).await);
    assert_eq!(code, -32002);
}

/// Calls `tool`, which must succeed.
async fn moved(tool: &str, arguments: Value, on: &Client) {
    let result = on.call(tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
}

/// A 2025 session subscribes to its own instance's host resource, `turnstile://invoice/session`,
/// and hears one `resources/updated` per transition of it.
#[tokio::test]
async fn a_session_watches_its_own_instance_resource() {
    let (_plugins, _server, session) = common::serve_and_connect(&["invoice"], &[]).await;
    let uri = "turnstile://invoice/session";
    session.subscribe(uri).await.expect("subscribe");
    let read = document(&session.read_resource(uri).await.expect("read"));
    assert_eq!(read["state"], "draft");
    assert_eq!(read["version"], 0, "never saved yet");
    moved("invoice.submit", json!({"amount": 5}), &session).await;
    moved("invoice.approve", json!({}), &session).await;
    moved("invoice.status", json!({}), &session).await;
    session.notices.updated.wait_for(2).await;
    session.notices.updated.stays_at(2).await;
    assert_eq!(
        *session.notices.updated_uris.lock().unwrap(),
        [uri, uri],
        "one per transition"
    );
    let read = document(&session.read_resource(uri).await.expect("read"));
    assert_eq!(read["state"], "approved");
    assert_eq!(
        read["available"]["tools"],
        json!(["invoice.discharge", "invoice.status"])
    );
}
