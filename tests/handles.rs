//! DESIGN behaviours 5–7 in handle mode: minted handles, many instances per session, menus that
//! follow the handle, clear errors for bad handles, and list_changed to every session that
//! touched an instance.

mod common;

use std::time::Duration;

use common::{Client, PluginDir, Server, error_code, eventually, names, text_of};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The handle a starting call minted ([`common::handle_of`]), which its text shows too.
fn handle_of(result: &CallToolResult) -> String {
    let handle = common::handle_of(result);
    assert!(
        text_of(result).contains(&handle),
        "the text carries the handle too"
    );
    handle
}

fn handle_server(plugins: &PluginDir) -> Server {
    Server::http(plugins.path(), &["--state-handle-key"])
}

/// Every listed tool carries the handle property; it is required except on `starters`.
fn assert_handle_in_every_schema(tools: &[rmcp::model::Tool], starters: &[&str]) {
    for tool in tools {
        let schema = &tool.input_schema;
        assert_eq!(
            schema["properties"]["handle"]["type"], "string",
            "{} names the handle: {schema:?}",
            tool.name
        );
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|required| required.contains(&json!("handle")));
        assert_eq!(
            required,
            !starters.contains(&tool.name.as_ref()),
            "{}: the handle is required unless the tool starts an instance",
            tool.name
        );
    }
}

#[tokio::test]
async fn a_starting_call_mints_a_handle_and_the_menu_follows_it() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = handle_server(&plugins);
    let client = Client::http(&server.url).await;
    // Nothing started yet: the tools that start an invoice, and the workflow's tools bound to
    // no state (always visible; they need a handle, which their schema says).
    assert_eq!(
        client.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );
    assert_handle_in_every_schema(&client.tools().await, &["invoice.submit"]);

    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 10})).await);
    assert!(
        handle.starts_with("invoice-") && handle.len() == "invoice-".len() + 32,
        "{handle}"
    );
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    // A model builds its arguments from the schemas: each one names the handle.
    assert_handle_in_every_schema(
        &client.tools_with_meta(json!({"handle": handle})).await,
        &[],
    );
    let approve = client
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_eq!(handle_of(&approve), handle);
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": handle})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    let status = client
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "approved");
}

#[tokio::test]
async fn one_session_drives_several_instances_by_handle() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = handle_server(&plugins);
    let client = Client::http(&server.url).await;
    let first = handle_of(&client.call("invoice.submit", json!({"amount": 1})).await);
    let second = handle_of(&client.call("invoice.submit", json!({"amount": 2})).await);
    assert_ne!(first, second);
    client
        .call("invoice.approve", json!({"handle": first}))
        .await;

    assert_eq!(
        client.tool_names_with_meta(json!({"handle": first})).await,
        names(&["invoice.discharge", "invoice.status"])
    );
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": second})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    // Without a handle: what it can do on any of its instances, plus what starts a new one.
    assert_eq!(
        client.tool_names().await,
        names(&[
            "invoice.approve",
            "invoice.discharge",
            "invoice.reject",
            "invoice.status",
            "invoice.submit"
        ])
    );
    // The gate is per instance: discharging the one still in review is refused.
    let refused = client
        .call("invoice.discharge", json!({"handle": second}))
        .await;
    assert_eq!(error_code(&refused), "FORBIDDEN");
    assert_eq!(
        refused.structured_content.unwrap()["error"]["state"],
        "review"
    );
}

#[tokio::test]
async fn bad_handles_get_clear_errors_and_never_a_new_instance() {
    let plugins = PluginDir::with(&["invoice", "payment"]);
    let server = handle_server(&plugins);
    let client = Client::http(&server.url).await;

    let required = client.call("invoice.approve", json!({})).await;
    assert_eq!(error_code(&required), "HANDLE_REQUIRED");
    assert!(
        text_of(&required).contains("invoice.submit"),
        "says how to start: {}",
        text_of(&required)
    );

    let forged = format!("invoice-{}", "0123456789abcdef".repeat(2));
    let unknown = client
        .call("invoice.approve", json!({"handle": forged}))
        .await;
    assert_eq!(error_code(&unknown), "UNKNOWN_HANDLE");
    let unknown = client
        .call("invoice.submit", json!({"handle": forged, "amount": 1}))
        .await;
    assert_eq!(
        error_code(&unknown),
        "UNKNOWN_HANDLE",
        "a starting tool with a forged handle starts nothing"
    );
    // Listing the tools of a handle nobody minted is a JSON-RPC error a client can tell apart
    // by the same stable code.
    let listing = client
        .try_tools_with_meta(json!({"handle": forged}))
        .await
        .expect_err("no instance to list");
    let rmcp::service::ServiceError::McpError(listing) = listing else {
        panic!("a JSON-RPC error, not {listing:?}")
    };
    assert_eq!(listing.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert_eq!(
        listing.data.as_ref().map(|data| &data["code"]),
        Some(&json!("UNKNOWN_HANDLE")),
        "{listing:?}"
    );

    let malformed = client
        .call("invoice.approve", json!({"handle": "invoice-42"}))
        .await;
    assert_eq!(error_code(&malformed), "INVALID_HANDLE");

    let payment = client
        .call("payment.authorize", json!({"amount": 5, "currency": "EUR"}))
        .await;
    let payment_handle = handle_of(&payment);
    let wrong = client
        .call("invoice.status", json!({"handle": payment_handle}))
        .await;
    assert_eq!(error_code(&wrong), "INVALID_HANDLE");

    // None of this created an invoice: the session touched only the payment.
    assert!(!client.offers("invoice.approve").await);
}

#[tokio::test]
async fn a_transition_notifies_every_session_that_touched_the_instance_and_no_other() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = handle_server(&plugins);
    let alice = Client::http(&server.url).await;
    let bob = Client::http(&server.url).await;
    let carol = Client::http(&server.url).await;
    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 7})).await);
    alice.changes.wait_for(1).await;
    // Bob touches the instance by listing it; Carol works on her own invoice.
    bob.tool_names_with_meta(json!({"handle": handle})).await;
    carol.call("invoice.submit", json!({"amount": 8})).await;

    bob.call("invoice.approve", json!({"handle": handle})).await;
    alice.changes.wait_for(2).await;
    bob.changes.wait_for(1).await;
    carol.changes.stays_at(1).await;
}

#[tokio::test]
async fn stateless_mode_keeps_state_across_connections_by_handle() {
    let (_plugins, server) = common::start(&["invoice"], &["--stateless"]);
    let handle = {
        let client = Client::http(&server.url).await;
        let handle = handle_of(&client.call("invoice.submit", json!({"amount": 3})).await);
        client.close().await;
        handle
    };
    for (tool, state) in [
        ("invoice.approve", "approved"),
        ("invoice.discharge", "discharged"),
    ] {
        let client = Client::http(&server.url).await;
        handle_of(&client.call(tool, json!({"handle": handle})).await);
        client.close().await;
        let client = Client::http(&server.url).await;
        let status = client
            .call("invoice.status", json!({"handle": handle}))
            .await;
        assert_eq!(status.structured_content.unwrap()["state"], state);
        client.close().await;
    }
    let client = Client::http(&server.url).await;
    let forged = client
        .call(
            "invoice.status",
            json!({"handle": format!("invoice-{}", "f".repeat(32))}),
        )
        .await;
    assert_eq!(error_code(&forged), "UNKNOWN_HANDLE");
}

/// Minting is one step: a starting call that fails creates nothing and returns no handle, so no
/// instance is left behind that nobody can name.
#[tokio::test]
async fn a_starting_call_that_fails_creates_nothing_and_returns_no_handle() {
    let plugins = PluginDir::with(&["testkit"]);
    let server = handle_server(&plugins);
    let client = Client::http(&server.url).await;
    let failed = client.call("testkit.go", json!({"fail": true})).await;
    assert_eq!(error_code(&failed), "TOOL_ERROR");
    let structured = failed.structured_content.as_ref().unwrap();
    assert!(structured.get("handle").is_none(), "{structured}");
    assert!(
        !text_of(&failed).contains("testkit-"),
        "{}",
        text_of(&failed)
    );
    // The session touched no instance: only what starts one (and needs no handle) is listed.
    assert_eq!(
        client.tool_names().await,
        names(&common::TESTKIT_STARTING_TOOLS)
    );
    assert_eq!(server.stats().await["registry"]["instances"], 0);
    // A successful start does create it, with its handle.
    let started = client.call("testkit.go", json!({})).await;
    assert!(handle_of(&started).starts_with("testkit-"));
}

/// Issue 39, attack 5: a session whose finished invoice was deleted by retention keeps listing
/// (tools, prompts, resources), and mints and lists a new invoice; the gone one is forgotten.
#[tokio::test]
async fn a_session_keeps_listing_after_an_instance_it_touched_is_deleted() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["invoice"], &["--state-handle-key", "--retain-final", "1"])
            .await;
    let done = common::discharged_invoice(&client).await;
    common::until_deleted(&client, &done, "retention deleted the finished invoice").await;
    assert_eq!(
        client.tool_names().await,
        names(&["invoice.status", "invoice.submit"])
    );
    assert_eq!(client.prompt_names().await, Vec::<String>::new());
    client.resource_uris().await;
    let fresh = handle_of(&client.call("invoice.submit", json!({"amount": 7})).await);
    assert_eq!(
        client.tool_names().await,
        names(&[
            "invoice.approve",
            "invoice.reject",
            "invoice.status",
            "invoice.submit"
        ])
    );
    assert_ne!(fresh, done);
}

/// Issue 39, attack 4: one handle named 10,000 times in `_meta` is one lookup's answer; more
/// than `--max-handles-per-request` different handles is -32602 naming the limit.
#[tokio::test]
async fn handles_named_in_meta_are_deduplicated_and_capped() {
    let (_plugins, _server, client) = common::serve_and_connect(
        &["invoice"],
        &["--state-handle-key", "--max-handles-per-request", "8"],
    )
    .await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    let copies = vec![handle.clone(); 10_000];
    assert_eq!(
        client.tool_names_with_meta(json!({"handle": copies})).await,
        names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    let distinct: Vec<String> = (0..9).map(|i| format!("invoice-{i:032x}")).collect();
    let (code, _) = common::rpc_error(
        client
            .try_tools_with_meta(json!({"handle": distinct}))
            .await,
    );
    assert_eq!(code, -32602);
    let error = client
        .try_tools_with_meta(json!({"handle": distinct}))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("more than 8 handles"), "{error}");
}

/// Issue 39, attack 1: calls naming random well-formed handles are each `UNKNOWN_HANDLE`, and
/// leave no instance actor behind (`/stats` `registry.instances` does not grow).
#[tokio::test]
async fn forged_handles_leave_no_instance_behind() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = handle_server(&plugins);
    let client = Client::http(&server.url).await;
    let kept = handle_of(&client.call("invoice.submit", json!({"amount": 5})).await);
    let live = |stats: Value| stats["registry"]["instances"].as_u64().expect("a count");
    let before = live(server.stats().await);
    for i in 0..200u32 {
        let forged = format!("invoice-{:032x}", u128::from(i) * 7_919 + 1);
        let refused = client
            .call("invoice.approve", json!({"handle": forged}))
            .await;
        assert_eq!(error_code(&refused), "UNKNOWN_HANDLE");
        let named = client.try_tools_with_meta(json!({"handle": forged})).await;
        assert!(named.is_err(), "a listing naming it is refused");
    }
    // The registry forgets by message: wait for it to have taken them all.
    let after = eventually(
        "no actor stays for a handle that names nothing",
        Duration::from_secs(1),
        Duration::from_millis(20),
        async || {
            let after = live(server.stats().await);
            if after <= before {
                Ok(after)
            } else {
                Err(after)
            }
        },
    )
    .await;
    assert_eq!(
        after, before,
        "no actor stays for a handle that names nothing"
    );
    let status = client.call("invoice.status", json!({"handle": kept})).await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
}
