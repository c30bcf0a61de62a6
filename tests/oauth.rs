//! OAuth 2.1 resource-server mode: access tokens (JWTs) from a test authorization server, whose
//! keys are generated here and served with its metadata by a small HTTP server in the test. A
//! valid token opens a session a real MCP client completes; expired, wrong-audience,
//! wrong-issuer and unknown-key tokens get 401 with a `WWW-Authenticate` that says why and where
//! the protected-resource metadata is; the metadata answers as RFC 9728 says.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Json, Router, routing::get};
use common::{Client, PluginDir, Server, eventually, initialize_request};
use jsonwebtoken::{
    Algorithm, EncodingKey, Header, encode,
    jwk::{Jwk, JwkSet},
};
use serde_json::{Value, json};

/// The resource the server says it is, and tokens must name.
const PUBLIC_URL: &str = "https://mcp.example.test/mcp";
const METADATA_URL: &str = "https://mcp.example.test/.well-known/oauth-protected-resource/mcp";

/// An authorization server: a P-256 signing key, its JWKS and RFC 8414 metadata over HTTP.
struct Issuer {
    url: String,
    key: EncodingKey,
    /// A key the issuer does not publish.
    stranger: EncodingKey,
    /// The JWK set it serves; a test may add a key to it (rotation).
    jwks: Arc<Mutex<JwkSet>>,
}

fn p256_key() -> EncodingKey {
    let pair = rcgen::KeyPair::generate().expect("a P-256 key");
    EncodingKey::from_ec_der(&pair.serialize_der())
}

impl Issuer {
    async fn start() -> Issuer {
        Self::start_caching(None).await
    }

    /// An issuer whose JWKS answers say `Cache-Control: max-age=` `max_age` seconds.
    async fn start_caching(max_age: Option<u64>) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let key = p256_key();
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some("key-1".to_string());
        let jwks = Arc::new(Mutex::new(JwkSet { keys: vec![jwk] }));
        let metadata = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
        });
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { Json(metadata) }),
            )
            .route(
                "/jwks",
                get({
                    let jwks = jwks.clone();
                    let cache_control = max_age.map_or_else(
                        || "no-transform".to_owned(),
                        |seconds| format!("max-age={seconds}"),
                    );
                    move || async move {
                        (
                            [(axum::http::header::CACHE_CONTROL, cache_control)],
                            Json(jwks.lock().unwrap().clone()),
                        )
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer {
            url,
            key,
            stranger: p256_key(),
            jwks,
        }
    }

    /// Starts publishing `key` under `kid`, as an issuer rotating its keys does.
    fn publish(&self, key: &EncodingKey, kid: &str) {
        let mut jwk = Jwk::from_encoding_key(key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.to_string());
        self.jwks.lock().unwrap().keys.push(jwk);
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    /// Valid claims for this server; tests change one thing at a time.
    fn claims(&self, sub: &str) -> Value {
        json!({"iss": self.url, "sub": sub, "aud": PUBLIC_URL,
               "iat": Self::now(), "exp": Self::now() + 600})
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_with(claims, &self.key, "key-1")
    }

    fn sign_with(&self, claims: &Value, key: &EncodingKey, kid: &str) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_string());
        encode(&header, claims, key).unwrap()
    }
}

/// A server in OAuth mode trusting `issuer`.
fn server(issuer: &Issuer) -> (PluginDir, Server) {
    let plugins = PluginDir::with(&["invoice"]);
    let flags = ["--oauth-issuer", &issuer.url, "--public-url", PUBLIC_URL];
    let server = Server::http(plugins.path(), &flags);
    (plugins, server)
}

/// The status of an `initialize` POST with `token` as bearer token (none if `None`).
async fn status_for(server: &Server, token: Option<&str>) -> reqwest::StatusCode {
    initialize_request(&server.url, token).await.status()
}

/// Starts a server trusting `issuer`, which must refuse to start; its stderr.
fn refused_start_with_issuer(issuer: &str) -> String {
    let flags = ["--http", "127.0.0.1:0", "--store", "memory:"];
    let trusting = ["--oauth-issuer", issuer, "--public-url", PUBLIC_URL];
    common::refused_start(&["invoice"], &[&flags[..], &trusting].concat())
}

fn challenge(response: &reqwest::Response) -> String {
    response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_is_accepted_and_a_real_client_completes_a_session() {
    let issuer = Issuer::start().await;
    let (_plugins, server) = server(&issuer);
    let token = issuer.sign(&issuer.claims("alice"));
    assert_eq!(status_for(&server, Some(&token)).await, 200);
    let client = Client::http_through(&server.url, reqwest::Client::new(), Some(&token)).await;
    let result = client.call("invoice.submit", json!({"amount": 12})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(client.invoice_state().await, "review");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_get_401_saying_why_and_where_the_metadata_is() {
    let issuer = Issuer::start().await;
    let (_plugins, server) = server(&issuer);

    let missing = initialize_request(&server.url, None).await;
    assert_eq!(missing.status(), 401);
    let header = challenge(&missing);
    assert!(header.starts_with("Bearer "), "{header}");
    assert!(
        header.contains(&format!(r#"resource_metadata="{METADATA_URL}""#)),
        "{header}"
    );
    assert!(!header.contains("invalid_token"), "{header}");

    let mut expired = issuer.claims("alice");
    expired["exp"] = json!(Issuer::now() - 3600);
    let mut wrong_audience = issuer.claims("alice");
    wrong_audience["aud"] = json!("https://other.example.test/mcp");
    let mut wrong_issuer = issuer.claims("alice");
    wrong_issuer["iss"] = json!("https://evil.example.test");
    let mut not_yet = issuer.claims("alice");
    not_yet["nbf"] = json!(Issuer::now() + 3600);
    let cases = [
        ("expired", issuer.sign(&expired), "expired"),
        ("wrong audience", issuer.sign(&wrong_audience), "aud"),
        ("wrong issuer", issuer.sign(&wrong_issuer), "issuer"),
        ("not valid yet", issuer.sign(&not_yet), "not valid yet"),
        (
            "unknown key",
            issuer.sign_with(&issuer.claims("alice"), &issuer.stranger, "key-9"),
            "key",
        ),
        (
            "known kid, wrong key",
            issuer.sign_with(&issuer.claims("alice"), &issuer.stranger, "key-1"),
            "signature",
        ),
        ("not a JWT", "s3cret".to_string(), "not a JWT"),
    ];
    for (case, token, reason) in cases {
        let refused = initialize_request(&server.url, Some(&token)).await;
        assert_eq!(refused.status(), 401, "{case}");
        let header = challenge(&refused);
        assert!(header.starts_with("Bearer "), "{case}: {header}");
        assert!(
            header.contains(r#"error="invalid_token""#),
            "{case}: {header}"
        );
        assert!(
            header.contains(&format!(r#"resource_metadata="{METADATA_URL}""#)),
            "{case}: {header}"
        );
        let body: Value = refused.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{case}: {message}");
    }
    // The server kept serving throughout.
    let token = issuer.sign(&issuer.claims("alice"));
    assert_eq!(status_for(&server, Some(&token)).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protected_resource_metadata_answers_without_a_token() {
    let issuer = Issuer::start().await;
    let (_plugins, server) = server(&issuer);
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let answer = reqwest::get(format!("{}{path}", server.base()))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert!(
            answer.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let metadata: Value = answer.json().await.unwrap();
        assert_eq!(metadata["resource"], PUBLIC_URL, "{metadata}");
        assert_eq!(metadata["authorization_servers"], json!([issuer.url]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    // /stats is not public.
    let stats = reqwest::get(format!("{}/stats", server.base()))
        .await
        .unwrap();
    assert_eq!(stats.status(), 401);
}

#[test]
fn an_issuer_that_cannot_be_read_stops_the_start_with_a_clear_error() {
    let stderr = refused_start_with_issuer("http://127.0.0.1:9/");
    assert!(
        stderr.contains("cannot read the metadata of the OAuth issuer"),
        "{stderr}"
    );
}

/// Key rotation: a token signed with a key the issuer started publishing after the server
/// fetched its keys is accepted once the server fetches them again (on the unknown `kid`, at
/// most every 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_fetched_when_a_token_names_it() {
    let issuer = Issuer::start().await;
    let (_plugins, server) = server(&issuer);
    let rotated = p256_key();
    issuer.publish(&rotated, "key-2");
    let token = issuer.sign_with(&issuer.claims("bob"), &rotated, "key-2");
    eventually(
        "the rotated key was never fetched",
        Duration::from_secs(30),
        Duration::from_millis(500),
        async || {
            let status = status_for(&server, Some(&token)).await;
            if status != 200 {
                assert_eq!(status, 401);
            }
            status == 200
        },
    )
    .await;
}

/// Key revocation: a key the issuer stops publishing stops being trusted within the refetch
/// period its JWKS answers name (`Cache-Control: max-age`), although no token named an unknown
/// key meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_is_refused_within_the_refetch_period() {
    let issuer = Issuer::start_caching(Some(1)).await;
    let (_plugins, server) = server(&issuer);
    let token = issuer.sign(&issuer.claims("alice"));
    assert_eq!(status_for(&server, Some(&token)).await, 200);
    // The issuer revokes key-1: it publishes a new key instead.
    let successor = p256_key();
    issuer.jwks.lock().unwrap().keys.clear();
    issuer.publish(&successor, "key-2");
    let refused = eventually(
        "a removed key was still trusted 10 s later (refetch period 1 s)",
        Duration::from_secs(10),
        Duration::from_millis(200),
        async || {
            let response = initialize_request(&server.url, Some(&token)).await;
            if response.status() == 401 {
                return Some(response);
            }
            assert_eq!(response.status(), 200);
            None
        },
    )
    .await;
    assert!(
        challenge(&refused).contains("does not publish"),
        "{}",
        challenge(&refused)
    );
    let fresh = issuer.sign_with(&issuer.claims("alice"), &successor, "key-2");
    assert_eq!(status_for(&server, Some(&fresh)).await, 200);
}

/// Signing keys fetched in clear from another machine could be anyone's: a plain-HTTP issuer
/// that is not on the loopback stops the start, saying so.
#[test]
fn a_plain_http_issuer_elsewhere_is_refused_at_start() {
    let stderr = refused_start_with_issuer("http://issuer.example.test/");
    assert!(stderr.contains("is plain HTTP"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_scope_opens_the_console_and_nothing_else_does() {
    let issuer = Issuer::start().await;
    let plugins = PluginDir::with(&["invoice"]);
    let flags = [
        "--oauth-issuer",
        &issuer.url,
        "--public-url",
        PUBLIC_URL,
        "--operator-scope",
        "turnstile:operate",
    ];
    let server = Server::http(plugins.path(), &flags);
    let console = |token: Option<String>| {
        let url = format!("{}/console/api/workflows", server.base());
        async move {
            let mut request = reqwest::Client::new().get(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.unwrap().status().as_u16()
        }
    };
    let with_scope = |scope: Value| {
        let mut claims = issuer.claims("ops");
        claims["scope"] = scope;
        issuer.sign(&claims)
    };
    let operator = with_scope(json!("openid turnstile:operate"));
    assert_eq!(console(Some(operator.clone())).await, 200);
    // The same token is an ordinary client's on /mcp.
    assert_eq!(status_for(&server, Some(&operator)).await, 200);
    // `scp` as a list, as some issuers write it.
    let mut listed = issuer.claims("ops");
    listed["scp"] = json!(["turnstile:operate"]);
    assert_eq!(console(Some(issuer.sign(&listed))).await, 200);
    // Another scope, one that merely contains the name, or none: not an operator.
    assert_eq!(
        console(Some(with_scope(json!("turnstile:read")))).await,
        403
    );
    assert_eq!(
        console(Some(with_scope(json!("turnstile:operate:all")))).await,
        403
    );
    assert_eq!(
        console(Some(issuer.sign(&issuer.claims("alice")))).await,
        403
    );
    assert_eq!(console(None).await, 401);
}
