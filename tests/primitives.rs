//! Issue 15: prompts and resources from plugins, gated by workflow state like tools. The invoice
//! plugin offers a review checklist (a prompt) in `review` and the invoice itself
//! (`invoice://{handle}`) once submitted; the payment plugin a refund policy after capture. Each
//! scenario drives the real binary with rmcp's client over Streamable HTTP (2025-11-25).

mod common;

use common::{Client, PluginDir, handle_of, rpc_error};
use rmcp::model::{ErrorCode, ResourceContents};
use serde_json::{Value, json};

const CHECKLIST: &str = "invoice.review_checklist";

/// The text of a `resources/read` result's one content, parsed as JSON.
fn read_json(result: rmcp::model::ReadResourceResult) -> Value {
    match &result.contents[..] {
        [
            ResourceContents::TextResourceContents {
                text, mime_type, ..
            },
        ] => {
            assert_eq!(mime_type.as_deref(), Some("application/json"));
            serde_json::from_str(text).expect("the invoice is JSON")
        }
        other => panic!("expected one text content, got {other:?}"),
    }
}

/// Session mode: the session's own invoice. In `draft` nothing is offered and getting or
/// reading is refused with the state; `invoice.submit` moves it to `review`, which tells this
/// session, once each, that its tools, prompts and resources changed, and tells another
/// session nothing; then the checklist and the invoice (with the submitted amount) are served.
#[tokio::test]
async fn the_review_checklist_and_the_invoice_follow_the_workflow() {
    let (_plugins, server) = common::start(&["invoice"], &[]);
    let (alice, bob) = (
        Client::http(&server.url).await,
        Client::http(&server.url).await,
    );
    // Both sessions watch their own invoice from their first listing.
    assert_eq!(alice.prompt_names().await, Vec::<String>::new());
    assert_eq!(bob.prompt_names().await, Vec::<String>::new());
    assert_eq!(alice.resource_uris().await, Vec::<String>::new());
    // The host's template of invoice instances is offered in every state.
    assert_eq!(
        alice.resource_templates().await,
        ["turnstile://invoice/{handle}"]
    );

    let (code, data) = rpc_error(alice.get_prompt(CHECKLIST, json!({})).await);
    assert_eq!(code, ErrorCode::INVALID_PARAMS.0);
    assert_eq!(
        data,
        json!({"code": "FORBIDDEN", "kind": "prompt", "name": CHECKLIST,
            "workflow": "invoice", "state": "draft", "available": []})
    );
    let (_, data) = rpc_error(alice.read_resource("invoice://session").await);
    assert_eq!(
        (&data["code"], &data["kind"], &data["state"]),
        (&json!("FORBIDDEN"), &json!("resource"), &json!("draft"))
    );

    let submitted = alice
        .call(
            "invoice.submit",
            json!({"amount": 1234.5, "customer": "ACME"}),
        )
        .await;
    assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
    alice.changes.wait_for(1).await;
    alice.notices.prompts.wait_for(1).await;
    alice.notices.resources.wait_for(1).await;
    // Exactly once each, and nothing at all for the session that did not move.
    alice.notices.prompts.stays_at(1).await;
    assert_eq!(
        (alice.changes.count(), alice.notices.resources.count()),
        (1, 1)
    );
    bob.notices.prompts.stays_at(0).await;
    assert_eq!(
        (
            bob.changes.count(),
            bob.notices.resources.count(),
            bob.notices.updated.count()
        ),
        (0, 0, 0)
    );

    assert_eq!(alice.prompt_names().await, [CHECKLIST]);
    let checklist = alice
        .get_prompt(CHECKLIST, json!({"focus": "the VAT number"}))
        .await
        .expect("the checklist is served in review");
    let text = serde_json::to_value(&checklist.messages).unwrap()[0]["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("1234.50"),
        "the checklist reads the amount: {text}"
    );
    assert!(text.contains("the VAT number"), "{text}");
    let (_, data) = rpc_error(alice.get_prompt(CHECKLIST, json!({"focus": 3})).await);
    assert_eq!(data["code"], "INVALID_ARGUMENTS");

    assert_eq!(alice.resource_uris().await, ["invoice://session"]);
    assert_eq!(
        alice.resource_templates().await,
        ["invoice://{handle}", "turnstile://invoice/{handle}"]
    );
    let invoice = read_json(alice.read_resource("invoice://session").await.unwrap());
    assert_eq!(invoice["amount"], 1234.5);
    assert_eq!(invoice["state"], "review");

    // Bob's `invoice://session` is his own invoice, still a draft: Alice's is out of his reach.
    let (_, data) = rpc_error(bob.read_resource("invoice://session").await);
    assert_eq!(
        (&data["code"], &data["state"]),
        (&json!("FORBIDDEN"), &json!("draft"))
    );
    assert_eq!(bob.prompt_names().await, Vec::<String>::new());

    // Approving leaves review (the checklist goes) but not the invoice's states: the prompts
    // changed, the resources did not.
    alice.call("invoice.approve", json!({})).await;
    alice.changes.wait_for(2).await;
    alice.notices.prompts.wait_for(2).await;
    alice.notices.resources.stays_at(1).await;
    assert_eq!(alice.prompt_names().await, Vec::<String>::new());
    let invoice = read_json(alice.read_resource("invoice://session").await.unwrap());
    assert_eq!(invoice["state"], "approved");
}

/// Handle mode: the invoice resource names its instance's handle. It is listed for the
/// instances the session touched, readable by whoever holds the handle, and a subscriber hears
/// `resources/updated` once per transition. Under authentication another principal holding the
/// handle finds nothing, exactly as for a handle never minted.
#[tokio::test]
async fn an_instance_resource_follows_its_instance_and_only_its_owner_reaches_it() {
    let plugins = PluginDir::with(&["invoice"]);
    let (_tokens, _server, alice, bob) = common::alice_and_bob(&plugins).await;

    let handle = handle_of(&alice.call("invoice.submit", json!({"amount": 80})).await);
    let uri = format!("invoice://{handle}");
    assert_eq!(alice.resource_uris().await, std::slice::from_ref(&uri));
    assert_eq!(
        alice
            .prompt_names_with_meta(json!({"handle": handle}))
            .await,
        [CHECKLIST]
    );
    let invoice = read_json(alice.read_resource(&uri).await.unwrap());
    assert_eq!(
        (&invoice["amount"], &invoice["state"]),
        (&json!(80), &json!("review"))
    );
    let checklist = alice
        .get_prompt_with_meta(CHECKLIST, json!({}), json!({"handle": handle}))
        .await
        .unwrap();
    assert!(format!("{checklist:?}").contains("80.00"));

    alice.subscribe(&uri).await.expect("resources/subscribe");
    alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    alice.notices.updated.wait_for(1).await;
    alice
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    alice.notices.updated.wait_for(2).await;
    alice.notices.updated.stays_at(2).await;
    assert_eq!(
        *alice.notices.updated_uris.lock().unwrap(),
        [uri.clone(), uri.clone()]
    );
    let invoice = read_json(alice.read_resource(&uri).await.unwrap());
    assert_eq!(invoice["state"], "discharged");

    // Bob holding Alice's handle: not found, as for a handle nobody minted; and not listed.
    let never_minted = format!("invoice://invoice-{}", "0".repeat(32));
    for forged in [&uri, &never_minted] {
        let (code, data) = rpc_error(bob.read_resource(forged).await);
        assert_eq!(code, ErrorCode::RESOURCE_NOT_FOUND.0, "{forged}");
        assert_eq!(data["uri"], json!(forged));
        let (code, _) = rpc_error(bob.subscribe(forged).await);
        assert_eq!(code, ErrorCode::RESOURCE_NOT_FOUND.0, "{forged}");
    }
    assert_eq!(bob.resource_uris().await, Vec::<String>::new());
    let (code, _) = rpc_error(
        bob.get_prompt_with_meta(CHECKLIST, json!({}), json!({"handle": handle}))
            .await,
    );
    assert_eq!(
        code,
        ErrorCode::INVALID_PARAMS.0,
        "bob cannot name alice's instance"
    );
    assert_eq!(bob.notices.updated.count(), 0);
}

/// The payment plugin's refund policy (static text in its manifest) is offered once the money
/// has been captured, and not before.
#[tokio::test]
async fn the_refund_policy_is_offered_after_capture() {
    let (_plugins, _server, client) = common::serve_and_connect(&["payment"], &[]).await;
    let policy = "payment.refund_policy";
    client
        .call(
            "payment.authorize",
            json!({"amount": 20, "currency": "EUR"}),
        )
        .await;
    assert_eq!(client.prompt_names().await, Vec::<String>::new());
    let (_, data) = rpc_error(client.get_prompt(policy, json!({})).await);
    assert_eq!(
        (&data["code"], &data["state"]),
        (&json!("FORBIDDEN"), &json!("authorized"))
    );
    client.call("payment.capture", json!({})).await;
    client.notices.prompts.wait_for(1).await;
    assert_eq!(client.prompt_names().await, [policy]);
    let got = client.get_prompt(policy, json!({})).await.unwrap();
    assert!(format!("{got:?}").contains("in full only"), "{got:?}");
    // Unknown names are JSON-RPC errors naming them.
    let (code, data) = rpc_error(client.get_prompt("payment.nope", json!({})).await);
    assert_eq!(
        (code, &data["prompt"]),
        (ErrorCode::INVALID_PARAMS.0, &json!("payment.nope"))
    );
    let (code, _) = rpc_error(client.read_resource("nothing://here").await);
    assert_eq!(code, ErrorCode::RESOURCE_NOT_FOUND.0);
}

/// Issue 40: `completion/complete` of a prompt's argument is the plugin's, and follows the gate:
/// the review checklist completes nothing before the invoice is in review, then the reviewer's
/// usual focuses that fit what was typed; an argument the prompt does not have is -32602.
#[tokio::test]
async fn a_prompt_argument_completes_only_while_the_prompt_is_offered() {
    let (_plugins, _server, client) = common::serve_and_connect(&["invoice"], &[]).await;
    let focus = |typed: &str| {
        json!({"ref": {"type": "ref/prompt", "name": "invoice.review_checklist"},
            "argument": {"name": "focus", "value": typed}})
    };
    assert_eq!(
        client.complete(focus("the ")).await.unwrap(),
        Vec::<String>::new()
    );
    client.call("invoice.submit", json!({"amount": 10})).await;
    let all = client.complete(focus("the ")).await.unwrap();
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(
        client.complete(focus("the d")).await.unwrap(),
        ["the due date"]
    );
    let unknown = json!({"ref": {"type": "ref/prompt", "name": "invoice.review_checklist"},
        "argument": {"name": "nope", "value": ""}});
    let (code, _) = rpc_error(client.complete(unknown).await);
    assert_eq!(code, ErrorCode::INVALID_PARAMS.0);
}

/// The handles `client` is offered for `{handle}` of `template` when it has typed `typed`.
async fn handles(client: &Client, template: &str, typed: &str) -> Vec<String> {
    let params = json!({"ref": {"type": "ref/resource", "uri": template},
        "argument": {"name": "handle", "value": typed}});
    client.complete(params).await.unwrap()
}

/// Issue 40: `{handle}` of an instance template completes with the caller's own live instances,
/// newest first: with authentication another principal's never appear, and a finished one is
/// not offered; the host's template and the plugin's complete alike.
#[tokio::test]
async fn handles_complete_with_the_callers_own_live_instances_only() {
    let plugins = PluginDir::with(&["invoice"]);
    let (_tokens, _server, alice, bob) = common::alice_and_bob(&plugins).await;
    let mut minted = Vec::new();
    for amount in [1, 2, 3] {
        minted.push(handle_of(
            &alice
                .call("invoice.submit", json!({"amount": amount}))
                .await,
        ));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let bobs = handle_of(&bob.call("invoice.submit", json!({"amount": 4})).await);
    // The first moves last (newest); the third finishes.
    for step in ["invoice.approve", "invoice.discharge"] {
        alice.call(step, json!({"handle": minted[2]})).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    alice
        .call("invoice.approve", json!({"handle": minted[0]}))
        .await;
    for template in ["turnstile://invoice/{handle}", "invoice://{handle}"] {
        assert_eq!(
            handles(&alice, template, "").await,
            [minted[0].clone(), minted[1].clone()],
            "{template}"
        );
        assert_eq!(
            handles(&bob, template, "inv").await,
            std::slice::from_ref(&bobs)
        );
        assert!(handles(&bob, template, &minted[0][..20]).await.is_empty());
    }
}
