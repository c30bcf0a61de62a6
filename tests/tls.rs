//! TLS (`--tls-cert`, `--tls-key`): a real MCP client (rmcp's, over an HTTP client with its own
//! TLS stack, OpenSSL) completes a session over HTTPS with a certificate generated here, and a
//! renewed certificate is served after SIGHUP without a restart.

mod common;

use std::{path::Path, time::Duration};

use common::{Client, PluginDir, Server, eventually};
use serde_json::json;

/// A self-signed certificate for this machine's loopback names; returns its PEM.
fn write_certificate(dir: &Path) -> String {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("a self-signed certificate");
    std::fs::write(dir.join("cert.pem"), generated.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), generated.signing_key.serialize_pem()).unwrap();
    generated.cert.pem()
}

/// An HTTPS client that trusts only `certificate`.
fn trusting(certificate: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(certificate.as_bytes()).unwrap()])
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_completes_a_session_over_tls_and_a_renewed_certificate_is_served_after_sighup() {
    let plugins = PluginDir::with(&["invoice"]);
    let files = tempfile::tempdir().unwrap();
    let first = write_certificate(files.path());
    let cert = files.path().join("cert.pem");
    let key = files.path().join("key.pem");
    let server = Server::http(
        plugins.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(server.url.starts_with("https://"), "{}", server.url);

    let client = Client::http_through(&server.url, trusting(&first), None).await;
    let result = client.call("invoice.submit", json!({"amount": 7})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(client.invoice_state().await, "review");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = reqwest::Client::new()
        .get(format!(
            "{}/healthz",
            server.base().replace("https://", "http://")
        ))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    // Renewal: new files, SIGHUP, and new connections get the new certificate.
    let second = write_certificate(files.path());
    server.signal(libc::SIGHUP);
    let health = format!("{}/healthz", server.base());
    eventually(
        "the renewed certificate was not served after SIGHUP",
        Duration::from_secs(5),
        Duration::from_millis(100),
        async || match trusting(&second).get(&health).send().await {
            Ok(answer) => {
                assert_eq!(answer.status(), 200);
                true
            }
            Err(_) => false,
        },
    )
    .await;
    assert!(
        trusting(&first).get(&health).send().await.is_err(),
        "the old certificate is still served"
    );
}
