//! Bearer-token authentication (`--auth-token-file`): what a client without a token, with a
//! wrong one and with a right one sees; token rotation on SIGHUP; and the refusal to serve a
//! non-loopback address without authentication.

mod common;

use std::time::Duration;

use common::{
    Client, PluginDir, SESSION_PROTOCOL, Server, TokenFile, error_code, eventually, handle_of,
    initialize_message, initialize_request, post, text_of,
};
use serde_json::{Value, json};

/// Waits (asking every 50 ms, for at most `within`) until `server` takes `token`, as it does
/// once it has read its token file again after a SIGHUP; after that, fails the test with `what`.
async fn until_accepted(server: &Server, token: &str, within: Duration, what: &str) {
    let accepted = async || initialize_request(&server.url, Some(token)).await.status() == 200;
    eventually(what, within, Duration::from_millis(50), accepted).await;
}

#[tokio::test]
async fn a_request_needs_a_known_bearer_token_and_tokens_rotate_on_sighup() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("# who may call\nalice s3cret-alice\n");
    let server = Server::http(plugins.path(), &["--auth-token-file", file.arg()]);

    let missing = initialize_request(&server.url, None).await;
    assert_eq!(missing.status(), 401);
    assert!(
        missing.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"),
        "{:?}",
        missing.headers()
    );
    let body: Value = missing.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer"),
        "{body}"
    );

    let wrong = initialize_request(&server.url, Some("s3cret-alicf")).await;
    assert_eq!(wrong.status(), 401);
    assert!(
        wrong.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );

    assert_eq!(
        initialize_request(&server.url, Some("s3cret-alice"))
            .await
            .status(),
        200
    );
    // /stats needs the token too; the probes do not.
    let http = reqwest::Client::new();
    let stats = format!("{}/stats", server.base());
    assert_eq!(http.get(&stats).send().await.unwrap().status(), 401);
    let stats_ok = http
        .get(&stats)
        .bearer_auth("s3cret-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(stats_ok.status(), 200);
    let health = format!("{}/healthz", server.base());
    assert_eq!(http.get(&health).send().await.unwrap().status(), 200);

    // Rotation: a new file, SIGHUP, and only the new token works.
    file.rewrite("alice s3cret-alice-2\n");
    server.signal(libc::SIGHUP);
    let what = "the new token was not taken up after SIGHUP";
    until_accepted(&server, "s3cret-alice-2", Duration::from_millis(2500), what).await;
    assert_eq!(
        initialize_request(&server.url, Some("s3cret-alice"))
            .await
            .status(),
        401
    );
}

#[test]
fn a_non_loopback_address_without_authentication_is_refused_at_start() {
    let flags = ["--http", "0.0.0.0:0", "--store", "memory:"];
    let stderr = common::refused_start(&["invoice"], &flags);
    assert!(
        stderr.contains("without authentication") && stderr.contains("--auth-token-file"),
        "{stderr}"
    );
}

/// A raw POST of `body` with `token`, in the session `session` when given.
async fn post_as_principal(
    server: &Server,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = post(&server.url, body.to_string())
        .header("Mcp-Protocol-Version", SESSION_PROTOCOL)
        .bearer_auth(token);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    request.send().await.expect("an answer")
}

#[tokio::test]
async fn a_principal_cannot_reach_another_principals_instances_or_sessions() {
    let plugins = PluginDir::with(&["invoice"]);
    let (_tokens, server, alice, bob) = common::alice_and_bob(&plugins).await;

    let submitted = alice.call("invoice.submit", json!({"amount": 120})).await;
    let handle = handle_of(&submitted);
    // A handle of the same form that no one minted: what "does not exist" looks like.
    let never_minted = format!("invoice-{}", "0".repeat(32));

    // Bob holding Alice's handle gets exactly what a handle that does not exist gets.
    for tool in ["invoice.status", "invoice.approve"] {
        let stolen = bob.call(tool, json!({"handle": handle})).await;
        let unknown = bob.call(tool, json!({"handle": never_minted})).await;
        assert_eq!(error_code(&stolen), "UNKNOWN_HANDLE", "{tool}: {stolen:?}");
        assert_eq!(
            text_of(&stolen).replace(&handle, "H"),
            text_of(&unknown).replace(&never_minted, "H"),
            "{tool}"
        );
    }
    let listed = bob
        .try_tools_with_meta(json!({"handle": handle}))
        .await
        .expect_err("bob may not list alice's instance")
        .to_string();
    let listed_unknown = bob
        .try_tools_with_meta(json!({"handle": never_minted}))
        .await
        .expect_err("no instance to list")
        .to_string();
    assert_eq!(
        listed.replace(&handle, "H"),
        listed_unknown.replace(&never_minted, "H")
    );
    // Alice's instance is untouched by all that, and still hers.
    let status = alice
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_eq!(status.structured_content.unwrap()["state"], "review");
    assert_eq!(
        alice.tool_names_with_meta(json!({"handle": handle})).await,
        common::names(&["invoice.approve", "invoice.reject", "invoice.status"])
    );

    // A session is its opener's: another principal naming it is told it does not exist.
    let opened = post_as_principal(
        &server,
        "tok-alice",
        None,
        initialize_message(1, SESSION_PROTOCOL),
    )
    .await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let foreign = post_as_principal(&server, "tok-bob", Some(&session), ping.clone()).await;
    assert_eq!(foreign.status(), 404);
    let body: Value = foreign.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no session has this Mcp-Session-Id"),
        "{body}"
    );
    let deleted_by_bob = reqwest::Client::new()
        .delete(&server.url)
        .bearer_auth("tok-bob")
        .header("Mcp-Session-Id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted_by_bob.status(), 404);
    let own = post_as_principal(&server, "tok-alice", Some(&session), ping).await;
    assert_eq!(
        own.status(),
        200,
        "bob's DELETE did not end alice's session"
    );
}

/// Issue 39, attack 6: a bare token's principal is a digest of the token, not its line. Token A
/// mints an instance; the file then lists a new token B first and A second (A's old line is
/// B's now); after SIGHUP, B sees nothing of A's instance, and A still has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordering_bare_tokens_gives_no_token_another_s_instances() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("tok-a-0123456789\n");
    let server = Server::http(
        plugins.path(),
        &["--auth-token-file", file.arg(), "--state-handle-key"],
    );
    let a = Client::http_as(&server.url, "tok-a-0123456789").await;
    let handle = handle_of(&a.call("invoice.submit", json!({"amount": 5})).await);
    file.rewrite("tok-b-9876543210\ntok-a-0123456789\n");
    server.signal(libc::SIGHUP);
    let what = "token B never came in";
    until_accepted(&server, "tok-b-9876543210", Duration::from_secs(10), what).await;
    let b = Client::http_as(&server.url, "tok-b-9876543210").await;
    let seen_by_b = b.call("invoice.status", json!({"handle": handle})).await;
    assert_eq!(error_code(&seen_by_b), "UNKNOWN_HANDLE");
    let a = Client::http_as(&server.url, "tok-a-0123456789").await;
    let seen_by_a = a.call("invoice.status", json!({"handle": handle})).await;
    assert_ne!(seen_by_a.is_error, Some(true), "{seen_by_a:?}");
    // A bare token is named in a WARN: it cannot be rotated without its instances.
    assert!(
        server.stderr().contains("a token without a name"),
        "{}",
        server.stderr()
    );
}

/// Instances that a named token's principal made before principals were namespaced (stored
/// under the tenant of the bare name) are moved to its namespaced tenant at start, and it keeps
/// using them; a JWT `sub` of that name would not reach them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_keeps_the_instances_it_made_under_its_old_principal() {
    use sha2::{Digest, Sha256};
    let tenant = |name: &str| -> String {
        Sha256::digest(name.as_bytes())[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    };
    let namespace = format!("legacy_{}", uuid::Uuid::new_v4().simple());
    let store = common::redis_url();
    // An instance in review, made without authentication, then put where the previous release
    // kept alice's: under the tenant of her bare name.
    let handle = {
        let plugins = PluginDir::with(&["invoice"]);
        let open = Server::sharing(plugins.path(), &store, &namespace, &["--state-handle-key"]);
        let client = Client::http(&open.url).await;
        handle_of(&client.call("invoice.submit", json!({"amount": 5})).await)
    };
    let key = format!("handle/{handle}@{}", tenant("alice"));
    let redis = redis::Client::open(store.as_str()).unwrap();
    let mut con = redis.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("RENAME")
        .arg(format!("{namespace}:i:handle/{handle}"))
        .arg(format!("{namespace}:i:{key}"))
        .exec_async(&mut con)
        .await
        .unwrap();
    redis::cmd("ZREM")
        .arg(format!("{namespace}:index"))
        .arg(format!("handle/{handle}"))
        .exec_async(&mut con)
        .await
        .unwrap();
    redis::cmd("ZADD")
        .arg(format!("{namespace}:index"))
        .arg(0)
        .arg(&key)
        .exec_async(&mut con)
        .await
        .unwrap();
    // That release kept no owner index; the first server of a later one filled it with every
    // owned key it found (here the namespace was filled already, when the instance was made).
    redis::cmd("ZADD")
        .arg(format!("{namespace}:owned"))
        .arg(0)
        .arg(format!("{}\0{key}", tenant("alice")))
        .exec_async(&mut con)
        .await
        .unwrap();

    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("alice s3cret-alice\n");
    let flags = ["--auth-token-file", file.arg(), "--state-handle-key"];
    let server = Server::sharing(plugins.path(), &store, &namespace, &flags);
    let alice = Client::http_as(&server.url, "s3cret-alice").await;
    let status = alice
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
    assert_eq!(status.structured_content.unwrap()["state"], "review");
    let approved = alice
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    let old: bool = redis::cmd("EXISTS")
        .arg(format!("{namespace}:i:{key}"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!old, "the old key is gone");
    drop(server);
    common::delete_redis_namespace(&mut con, &namespace).await;
}
