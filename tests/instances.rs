//! `turnstile instances`: an operator finds an instance in the store, shows it with its audit
//! trail (who moved it, by which tool, from and to), resets it and deletes it, and the server's
//! clients see the result: on the embedded store (server stopped, as its file is one process's),
//! and on Redis and PostgreSQL while servers run; and through a running server's console API
//! over HTTPS (`--server https://… --ca-file`).

mod common;

use std::{process::Command, time::Duration};

use common::{Client, PluginDir, Server, error_code, handle_of, state_of, turnstile_bin};
use serde_json::{Value, json};

/// Runs `turnstile instances --json STORE_ARGS ARGS…`: exit success, and stdout as JSON lines.
fn instances(store_args: &[&str], args: &[&str]) -> Result<Vec<Value>, String> {
    let output = Command::new(turnstile_bin())
        .arg("instances")
        .arg("--json")
        // Who a delete's tombstone names.
        .env("USER", "ops-person")
        .args(store_args)
        .args(args)
        .output()
        .expect("run turnstile instances");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect())
}

/// Two invoices, one approved: the listing finds both, filters by state, shows one with its
/// context; a reset sends it back to draft, which its client then sees; a delete makes its
/// handle unknown. `restart` stops and starts the server around each command (embedded store).
async fn find_show_reset_delete(store_args: Vec<String>, restart: bool) {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().unwrap();
    let store_args: Vec<&str> = store_args.iter().map(String::as_str).collect();
    let tokens = data.path().join("tokens");
    std::fs::write(&tokens, "alice tok-alice\n").unwrap();
    let mut flags = vec![
        "--state-handle-key",
        "--auth-token-file",
        tokens.to_str().unwrap(),
    ];
    flags.extend(&store_args);
    let start = || Server::http_in(plugins.path(), data.path(), &flags);
    let connect = |url: String| async move { Client::http_as(&url, "tok-alice").await };
    let server = start();
    let client = connect(server.url.clone()).await;
    let approved = handle_of(&client.call("invoice.submit", json!({"amount": 300})).await);
    client
        .call("invoice.approve", json!({"handle": approved}))
        .await;
    let waiting = handle_of(&client.call("invoice.submit", json!({"amount": 20})).await);
    let mut cli_args: Vec<&str> = store_args.clone();
    let data_dir = data.path().to_str().unwrap().to_string();
    let mut serving = Some((server, client));
    if restart {
        let (mut server, client) = serving.take().unwrap();
        cli_args.extend(["--data-dir", &data_dir]);
        // While the server holds the file, the command says what to do instead of failing
        // obscurely.
        let busy = instances(&cli_args, &["list"]).unwrap_err();
        assert!(busy.contains("stop it first"), "{busy}");
        client.close().await;
        server.signal(libc::SIGTERM);
        assert_eq!(server.exit_code_within(Duration::from_secs(10)), Some(0));
    }

    let listed = instances(&cli_args, &["list", "--workflow", "invoice"]).unwrap();
    // Alice's instances are keyed by her tenant: `handle/<handle>@<tenant>`.
    let listed_handle = |handle: &str| {
        listed.iter().any(|l| {
            l["key"]
                .as_str()
                .unwrap()
                .starts_with(&format!("handle/{handle}@"))
        })
    };
    assert!(
        listed_handle(&approved) && listed_handle(&waiting),
        "{listed:?}"
    );
    let in_review = instances(&cli_args, &["list", "--state", "review"]).unwrap();
    assert_eq!(in_review.len(), 1, "{in_review:?}");
    assert!(in_review[0]["key"].as_str().unwrap().contains(&waiting));
    let shown = instances(&cli_args, &["show", &approved]).unwrap();
    assert_eq!(shown[0]["state"], "approved");
    assert_eq!(shown[0]["context"]["amount"], 300);
    // Who moved it, with which tool, from where to where.
    let trail: Vec<Value> = shown[0]["audit"]
        .as_array()
        .expect("an audit trail")
        .iter()
        .map(|entry| json!([entry["by"], entry["from"], entry["to"], entry["principal"]]))
        .collect();
    assert_eq!(
        trail,
        [
            json!(["tool:invoice.submit", "draft", "review", "token:alice"]),
            json!(["tool:invoice.approve", "review", "approved", "token:alice"]),
        ]
    );

    let reset = instances(&cli_args, &["reset", &approved]).unwrap();
    assert_eq!(reset[0]["state"], "draft");
    let shown = instances(&cli_args, &["show", &approved]).unwrap();
    let last = shown[0]["audit"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["by"], &last["to"]),
        (&json!("operator:reset"), &json!("draft"))
    );
    instances(&cli_args, &["delete", &waiting]).unwrap();
    // The delete left a tombstone: who, how, and what the instance was.
    let gone = instances(&cli_args, &["show", &waiting]).unwrap();
    let deleted = &gone[0]["deleted"];
    assert_eq!(
        (
            &deleted["by"],
            &deleted["kind"],
            &gone[0]["state"],
            &gone[0]["version"]
        ),
        (
            &json!("ops-person"),
            &json!("cli"),
            &json!("review"),
            &json!(1)
        ),
        "{gone:?}"
    );
    // Read as a person reads it.
    let text = Command::new(turnstile_bin())
        .arg("instances")
        .args(&cli_args)
        .args(["show", &waiting])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("deleted at ")
            && text.contains(" by ops-person (cli) in state review (version 1)"),
        "{text}"
    );
    // A handle never minted has no tombstone: still not found.
    let never = instances(&cli_args, &["show", "no-such-handle"]).unwrap_err();
    assert!(never.contains("no instance"), "{never}");

    let (_server, client) = match serving {
        Some(serving) => serving,
        None => {
            let server = start();
            let client = connect(server.url.clone()).await;
            (server, client)
        }
    };
    assert_eq!(state_of(&client, &approved).await, "draft");
    let deleted = client
        .call("invoice.status", json!({"handle": waiting}))
        .await;
    assert_eq!(error_code(&deleted), "UNKNOWN_HANDLE");
}

#[tokio::test]
async fn on_the_embedded_store() {
    find_show_reset_delete(Vec::new(), true).await;
}

fn shared(url: String) -> Vec<String> {
    let namespace = format!("instances{}", uuid::Uuid::new_v4().simple());
    vec!["--store".into(), url, "--store-namespace".into(), namespace]
}

#[tokio::test]
async fn on_redis_while_serving() {
    find_show_reset_delete(shared(common::reachable_redis_url()), false).await;
}

#[tokio::test]
async fn on_postgres_while_serving() {
    find_show_reset_delete(shared(common::reachable_postgres_url()), false).await;
}

/// A server's certificate for this machine's loopback names, as PEM (certificate, key), signed
/// by `ca` (a private CA), or self-signed and marked as a CA as `openssl req -x509` makes it.
fn certificate(ca: Option<&rcgen::Issuer<'_, rcgen::KeyPair>>) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let certificate = match ca {
        Some(ca) => params.signed_by(&key, ca).unwrap(),
        None => {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.self_signed(&key).unwrap()
        }
    };
    (certificate.pem(), key.serialize_pem())
}

/// `--server URL --token-file TOKEN --ca-file CA`.
fn remote<'a>(base: &'a str, token: &'a str, ca: &'a str) -> Vec<&'a str> {
    vec!["--server", base, "--token-file", token, "--ca-file", ca]
}

/// `--server https://…`: against a server serving TLS with a private CA's certificate, the
/// command lists, shows and resets once told to trust that CA (`--ca-file`), and the server's
/// client sees the reset; without it, or trusting another CA, it refuses to talk, saying what to
/// give. A server's own self-signed certificate marked as a CA (what `openssl req -x509` makes,
/// which WebPKI alone refuses as a server's) is trusted when given.
#[tokio::test(flavor = "multi_thread")]
async fn through_a_server_serving_tls() {
    let plugins = PluginDir::with(&["invoice"]);
    let files = tempfile::tempdir().unwrap();
    let path = |name: &str| files.path().join(name).to_str().unwrap().to_owned();
    let write = |name: &str, text: &str| std::fs::write(path(name), text).unwrap();
    let authority = |name: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        write(name, &params.self_signed(&key).unwrap().pem());
        rcgen::Issuer::new(params, key)
    };
    let ca = authority("ca.pem");
    authority("other-ca.pem");
    let (cert, key) = certificate(Some(&ca));
    write("cert.pem", &cert);
    write("key.pem", &key);
    write("tokens", "ops tok-ops operator\nalice tok-alice\n");
    write("ops", "tok-ops\n");
    let tls = |cert: &str, key: &str| {
        let flags = [
            "--state-handle-key",
            "--auth-token-file",
            &path("tokens"),
            "--tls-cert",
            &path(cert),
            "--tls-key",
            &path(key),
        ];
        Server::http(plugins.path(), &flags)
    };
    let server = tls("cert.pem", "key.pem");
    let base = server.base();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let trusting = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cert.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let client = Client::http_through(&server.url, trusting, Some("tok-alice")).await;
    let handle = handle_of(&client.call("invoice.submit", json!({"amount": 300})).await);

    let (ops, ca_file) = (path("ops"), path("ca.pem"));
    let listed = instances(&remote(&base, &ops, &ca_file), &["list"]).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0]["key"].as_str().unwrap().contains(&handle));
    let shown = instances(&remote(&base, &ops, &ca_file), &["show", &handle]).unwrap();
    assert_eq!(shown[0]["state"], "review");
    let reset = instances(&remote(&base, &ops, &ca_file), &["reset", &handle]).unwrap();
    assert_eq!(reset[0]["state"], "draft");
    assert_eq!(state_of(&client, &handle).await, "draft");

    // A certificate no system root vouches for: refused, saying what to give.
    let refused = instances(&["--server", &base, "--token-file", &ops], &["list"]).unwrap_err();
    assert!(
        refused.contains("certificate") && refused.contains("--ca-file"),
        "{refused}"
    );
    // Trusting another CA is no better.
    let refused = instances(&remote(&base, &ops, &path("other-ca.pem")), &["list"]).unwrap_err();
    assert!(refused.contains("certificate"), "{refused}");
    // A CA file is for HTTPS, and must hold certificates.
    let plain = base.replace("https://", "http://");
    let refused = instances(&remote(&plain, &ops, &ca_file), &["list"]).unwrap_err();
    assert!(
        refused.contains("--ca-file is for a server reached over HTTPS"),
        "{refused}"
    );
    let refused = instances(&remote(&base, &ops, &ops), &["list"]).unwrap_err();
    assert!(refused.contains("holds no certificate"), "{refused}");

    // The usual self-signed certificate, given as it is.
    let (own, own_key) = certificate(None);
    write("own.pem", &own);
    write("own-key.pem", &own_key);
    let own_server = tls("own.pem", "own-key.pem");
    let own_base = own_server.base();
    let listed = instances(&remote(&own_base, &ops, &path("own.pem")), &["list"]).unwrap();
    assert!(listed.is_empty(), "a store of its own: {listed:?}");
    let refused = instances(&remote(&own_base, &ops, &ca_file), &["list"]).unwrap_err();
    assert!(refused.contains("certificate"), "{refused}");
}

/// Issue 51, item 3: one principal's instances, listed a page at a time from the store's
/// per-owner index, and `--max-instances-per-principal` holding when one principal's mints
/// race: of twenty at once with a limit of five, five are created and fifteen are
/// `QUOTA_EXCEEDED`; the listing of that principal holds the five (nothing was created for the
/// refused ones), the other principal's holds its own only, and paging by `--after` walks
/// through them once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principals_instances_are_listed_by_page_and_racing_mints_keep_its_quota() {
    let plugins = PluginDir::with(&["invoice"]);
    let files = tempfile::tempdir().unwrap();
    let path = |name: &str| files.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(
        path("tokens"),
        "ops tok-ops operator\nalice tok-alice\nbob tok-bob\n",
    )
    .unwrap();
    std::fs::write(path("ops"), "tok-ops\n").unwrap();
    let server = Server::http_in(
        plugins.path(),
        files.path(),
        &[
            "--state-handle-key",
            "--auth-token-file",
            &path("tokens"),
            "--max-instances-per-principal",
            "5",
        ],
    );
    let mut alices = Vec::new();
    for _ in 0..4 {
        alices.push(Client::http_as(&server.url, "tok-alice").await);
    }
    let mints = alices.iter().flat_map(|alice| {
        (0..5).map(move |n| alice.call("invoice.submit", json!({ "amount": n + 1 })))
    });
    let results = futures_util::future::join_all(mints).await;
    let minted: Vec<String> = results
        .iter()
        .filter(|result| result.is_error != Some(true))
        .map(handle_of)
        .collect();
    let refused = results
        .iter()
        .filter(|result| result.is_error == Some(true))
        .inspect(|result| assert_eq!(error_code(result), "QUOTA_EXCEEDED", "{result:?}"))
        .count();
    assert_eq!((minted.len(), refused), (5, 15), "{results:?}");
    let bob = Client::http_as(&server.url, "tok-bob").await;
    let bobs = handle_of(&bob.call("invoice.submit", json!({"amount": 9})).await);

    let base = server.base();
    let ops = path("ops");
    let list = |args: &[&str]| {
        let mut all = vec!["list"];
        all.extend(args);
        instances(&["--server", &base, "--token-file", &ops], &all).unwrap()
    };
    let key_of = |line: &Value| line["key"].as_str().unwrap().to_owned();
    // Alice's, two at a time: each page starts after the last key of the one before.
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["--principal", "token:alice", "--limit", "2"];
        if let Some(after) = &after {
            args.extend(["--after", after.as_str()]);
        }
        let page: Vec<String> = list(&args).iter().map(key_of).collect();
        if page.is_empty() {
            break;
        }
        after = page.last().cloned();
        pages.push(page);
    }
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        [2, 2, 1],
        "{pages:?}"
    );
    let listed: Vec<String> = pages.concat();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "pages come in key order");
    for handle in &minted {
        assert_eq!(
            listed
                .iter()
                .filter(|key| key.starts_with(&format!("handle/{handle}@")))
                .count(),
            1,
            "{handle} is listed once: {listed:?}"
        );
    }
    let bobs_listed: Vec<String> = list(&["--principal", "token:bob"])
        .iter()
        .map(key_of)
        .collect();
    assert_eq!(bobs_listed.len(), 1, "{bobs_listed:?}");
    assert!(bobs_listed[0].starts_with(&format!("handle/{bobs}@")));
    assert!(list(&["--principal", "token:carol"]).is_empty());
    // The whole store holds the six.
    assert_eq!(list(&[]).len(), 6);
    // For a person, a full page says where the next one starts.
    let output = Command::new(turnstile_bin())
        .args(["instances", "--server", &base, "--token-file", &ops])
        .args(["list", "--principal", "token:alice", "--limit", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!("the next page is --after '{}'", pages[0][1])),
        "{text}"
    );
}
