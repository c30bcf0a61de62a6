//! OAuth 2.1 resource-server mode, as the MCP authorization spec describes it: Turnstile accepts
//! access tokens (JWTs) issued by an authorization server it trusts, for itself and no one else.
//!
//! - **Keys**: the issuer's JWKS, found through its metadata (`--oauth-issuer`: RFC 8414's
//!   `/.well-known/oauth-authorization-server`, else OpenID Connect's
//!   `/.well-known/openid-configuration`) or named directly (`--oauth-jwks`), over HTTPS (plain
//!   HTTP only for an issuer on this machine's loopback). Fetched at start, then again on a
//!   schedule: when the set's `Cache-Control: max-age` says, and at least every
//!   [`LONGEST_KEY_AGE`], so a key the issuer removed (revoked) stops being trusted within that
//!   time; and when a token names a key id the cached set lacks (at most every
//!   [`REFRESH_AT_MOST_EVERY`], so unknown ids cannot make the server hammer the issuer). A
//!   fetch that fails keeps the keys in force and is tried again after
//!   [`REFRESH_AT_MOST_EVERY`]: an issuer that is down does not lock every client out.
//! - **Which key**: the one the token's `kid` names (or the only one, without a `kid`), if the
//!   JWK allows it: a `use` other than `sig`, or an `alg` other than the token's, refuses it.
//! - **Checks**: signature (asymmetric algorithms only: a JWKS is public, so an HMAC "key" from
//!   it would be a forgery kit), `exp` and `nbf` (with [`LEEWAY_S`] for clock skew), `aud` naming
//!   the canonical resource (`--public-url`), `iss` naming the issuer when one is configured,
//!   and a `sub`, which becomes the request's [`Principal`].
//! - **Discovery**: the protected-resource metadata of RFC 9728, served by
//!   [`OAuth::metadata`]; its URL goes in every 401's `WWW-Authenticate` (`resource_metadata=`).
//!
//! It must not decide what a refusal looks like on the wire: `auth/bearer.rs` builds the 401.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context;
use axum::{body::Bytes, http::Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation, decode, decode_header,
    errors::ErrorKind,
    jwk::{JwkSet, PublicKeyUse},
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::principal::{Principal, Role};

/// Seconds of clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 30;

/// The shortest time between two JWKS fetches caused by unknown key ids, and the wait before a
/// fetch that failed is tried again.
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// The longest a fetched key set is trusted without fetching it again, whatever its
/// `Cache-Control` says: how long a removed key may still be accepted.
pub const LONGEST_KEY_AGE: Duration = Duration::from_secs(600);

/// The shortest refetch period a `Cache-Control: max-age` can ask for.
const SHORTEST_KEY_AGE: Duration = Duration::from_secs(1);

/// How long one request to the issuer may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest metadata or JWKS document read from the issuer.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// An HTTP(S) client for the issuer: rustls on ring, the system's root certificates.
type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The algorithms a token may be signed with: the asymmetric ones.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What the operator configured.
#[derive(Debug, Clone)]
pub struct OAuthOptions {
    /// `--oauth-issuer`: the authorization server; tokens must carry it as `iss`.
    pub issuer: Option<String>,
    /// `--oauth-jwks`: where the signing keys are, when not from the issuer's metadata.
    pub jwks: Option<String>,
    /// `--public-url`: the canonical URL of this MCP server, which tokens must name in `aud`.
    pub public_url: String,
    /// `--operator-scope`: a token whose `scope` (or `scp`) claim holds this scope is an
    /// operator's (`principal::Role`); `None`: no OAuth token is.
    pub operator_scope: Option<String>,
}

/// The resource server: trusted keys and what a token must say.
pub struct OAuth {
    resource: String,
    issuer: Option<String>,
    jwks_url: String,
    metadata_url: String,
    operator_scope: Option<String>,
    keys: RwLock<Arc<JwkSet>>,
    /// When the keys were last fetched; also serializes fetches.
    fetched: tokio::sync::Mutex<Instant>,
    client: HttpClient,
}

/// Why a token was refused, in words a client's developer can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// RFC 8693 / RFC 9068: the granted scopes, space-separated.
    #[serde(default)]
    scope: Option<String>,
    /// The same as a list, as some issuers (Azure AD, Okta) write it.
    #[serde(default)]
    scp: Option<Value>,
}

impl Claims {
    /// Whether the token grants `wanted`.
    fn grants(&self, wanted: &str) -> bool {
        let in_scope = self
            .scope
            .as_deref()
            .is_some_and(|scope| scope.split_whitespace().any(|s| s == wanted));
        let in_scp = match &self.scp {
            Some(Value::String(scp)) => scp.split_whitespace().any(|s| s == wanted),
            Some(Value::Array(scp)) => scp.iter().any(|s| s.as_str() == Some(wanted)),
            _ => false,
        };
        in_scope || in_scp
    }
}

impl OAuth {
    /// Finds the issuer's keys (from its metadata or `--oauth-jwks`) and fetches them, then keeps
    /// them fresh on a schedule (a task that ends with the last reference); an error names what
    /// could not be read, so a misconfigured server does not start.
    pub async fn start(options: &OAuthOptions) -> anyhow::Result<Arc<OAuth>> {
        let resource: Uri = options
            .public_url
            .parse()
            .with_context(|| format!("--public-url {} is not a URL", options.public_url))?;
        if resource.scheme().is_none() || resource.authority().is_none() {
            anyhow::bail!("--public-url {} is not an absolute URL", options.public_url);
        }
        if options.public_url.contains('#') {
            anyhow::bail!("--public-url must not have a fragment (RFC 8707)");
        }
        let client = http_client()?;
        if let Some(issuer) = &options.issuer {
            check_transport("--oauth-issuer", issuer)?;
        }
        let jwks_url = match (&options.jwks, &options.issuer) {
            (Some(jwks), _) => jwks.clone(),
            (None, Some(issuer)) => jwks_uri_of(&client, issuer).await?,
            (None, None) => anyhow::bail!("OAuth needs --oauth-issuer or --oauth-jwks"),
        };
        check_transport("the JWKS URL", &jwks_url)?;
        let (keys, fresh_for) = fetch_keys(&client, &jwks_url).await?;
        tracing::info!(jwks = %jwks_url, keys = keys.keys.len(), refetch_s = fresh_for.as_secs(), "OAuth signing keys loaded");
        let oauth = Arc::new(OAuth {
            metadata_url: metadata_url(&resource),
            operator_scope: options.operator_scope.clone(),
            resource: options.public_url.clone(),
            issuer: options.issuer.clone(),
            jwks_url,
            keys: RwLock::new(Arc::new(keys)),
            fetched: tokio::sync::Mutex::new(Instant::now()),
            client,
        });
        tokio::spawn(keep_keys_fresh(Arc::downgrade(&oauth), fresh_for));
        Ok(oauth)
    }

    /// The URL of this server's protected-resource metadata (for `resource_metadata=`).
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// The protected-resource metadata document (RFC 9728 section 2).
    pub fn metadata(&self) -> Value {
        let mut document = json!({
            "resource": self.resource,
            "bearer_methods_supported": ["header"],
            "resource_name": "Turnstile MCP server",
        });
        if let Some(issuer) = &self.issuer {
            document["authorization_servers"] = json!([issuer]);
        }
        document
    }

    /// The principal a valid access token stands for (its `sub`) and its role (an operator's
    /// when it grants `--operator-scope`), or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<(Principal, Role), Refused> {
        let header = decode_header(token)
            .map_err(|_| Refused("the bearer token is not a JWT".to_string()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(Refused(format!(
                "tokens signed with {:?} are not accepted; the issuer's keys are asymmetric",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let key = match signing_key(&self.keys(), kid, header.alg) {
            Ok(key) => key,
            Err(KeyMissing::Unknown) => {
                self.refresh_keys().await;
                signing_key(&self.keys(), kid, header.alg).map_err(KeyMissing::refusal)?
            }
            Err(refused) => return Err(refused.refusal()),
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_audience(&[&self.resource]);
        let mut required = vec!["exp", "aud", "sub"];
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let claims = decode::<Claims>(token, &key, &validation).map_err(|error| {
            Refused(match error.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_string(),
                ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_string(),
                ErrorKind::InvalidAudience => {
                    format!(
                        "the token is not for this server: its aud must name {}",
                        self.resource
                    )
                }
                ErrorKind::InvalidIssuer => format!(
                    "the token is not from the trusted issuer {}",
                    self.issuer.as_deref().unwrap_or("")
                ),
                ErrorKind::MissingRequiredClaim(claim) => format!("the token has no {claim} claim"),
                ErrorKind::InvalidSignature => "the token's signature does not verify".to_string(),
                _ => "the token is not a valid JWT".to_string(),
            })
        })?;
        if claims.claims.sub.is_empty() || claims.claims.sub.chars().any(char::is_control) {
            return Err(Refused(
                "the token's sub is empty or holds control characters".into(),
            ));
        }
        let role = match &self.operator_scope {
            Some(scope) if claims.claims.grants(scope) => Role::Operator,
            _ => Role::Client,
        };
        let principal = Principal::oauth(
            self.issuer.as_deref().unwrap_or(&self.jwks_url),
            &claims.claims.sub,
        );
        Ok((principal, role))
    }

    /// The key set in force.
    fn keys(&self) -> Arc<JwkSet> {
        self.keys
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Fetches the keys again for a token naming a key the set lacks, unless that was done less
    /// than [`REFRESH_AT_MOST_EVERY`] ago.
    async fn refresh_keys(&self) {
        let mut fetched = self.fetched.lock().await;
        if fetched.elapsed() < REFRESH_AT_MOST_EVERY {
            return;
        }
        *fetched = Instant::now();
        self.fetch_now().await;
    }

    /// Fetches the key set and puts it in force; returns how long it may be trusted, or `None`
    /// when the fetch failed (the keys in force stay).
    async fn fetch_now(&self) -> Option<Duration> {
        match fetch_keys(&self.client, &self.jwks_url).await {
            Ok((keys, fresh_for)) => {
                let kids = |set: &JwkSet| -> Vec<Option<String>> {
                    set.keys.iter().map(|k| k.common.key_id.clone()).collect()
                };
                let before = kids(&self.keys());
                if kids(&keys) == before {
                    tracing::debug!(
                        keys = keys.keys.len(),
                        "OAuth signing keys fetched again, unchanged"
                    );
                } else {
                    tracing::info!(keys = keys.keys.len(), "OAuth signing keys changed");
                }
                *self
                    .keys
                    .write()
                    .unwrap_or_else(|poison| poison.into_inner()) = Arc::new(keys);
                Some(fresh_for)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot refresh the OAuth signing keys; keeping the old ones");
                None
            }
        }
    }
}

/// Fetches the key set again whenever it has been trusted for as long as its issuer allows
/// (`fresh_for`), until the server lets go of `oauth`.
async fn keep_keys_fresh(oauth: std::sync::Weak<OAuth>, mut fresh_for: Duration) {
    loop {
        tokio::time::sleep(fresh_for).await;
        let Some(oauth) = oauth.upgrade() else {
            return;
        };
        let fetched = {
            let mut fetched = oauth.fetched.lock().await;
            *fetched = Instant::now();
            oauth.fetch_now().await
        };
        fresh_for = fetched.unwrap_or(REFRESH_AT_MOST_EVERY);
    }
}

/// Why no key verifies a token.
#[derive(Debug, PartialEq, Eq)]
enum KeyMissing {
    /// The set has no key by that id (or, without an id, not exactly one key).
    Unknown,
    /// The key by that id says it is not for this: its `use` or its `alg`.
    NotFor(String),
}

impl KeyMissing {
    fn refusal(self) -> Refused {
        match self {
            KeyMissing::Unknown => {
                Refused("the token is signed with a key the issuer does not publish".into())
            }
            KeyMissing::NotFor(why) => Refused(why),
        }
    }
}

/// The decoding key for `kid` (or the only key, for a token without a `kid`) in `keys`, if the
/// JWK allows verifying `alg` signatures with it (RFC 7517: `use` is `sig` when present, `alg`
/// is the token's when present).
fn signing_key(
    keys: &JwkSet,
    kid: Option<&str>,
    alg: Algorithm,
) -> Result<DecodingKey, KeyMissing> {
    let jwk = match kid {
        Some(kid) => keys.find(kid).ok_or(KeyMissing::Unknown)?,
        None if keys.keys.len() == 1 => &keys.keys[0],
        None => return Err(KeyMissing::Unknown),
    };
    let named = kid.unwrap_or("(the only one)");
    match &jwk.common.public_key_use {
        None | Some(PublicKeyUse::Signature) => {}
        Some(_) => {
            return Err(KeyMissing::NotFor(format!(
                "the issuer's key {named} is not a signing key (its use is not sig)"
            )));
        }
    }
    if let Some(key_alg) = &jwk.common.key_algorithm
        && key_alg.to_string() != format!("{alg:?}")
    {
        return Err(KeyMissing::NotFor(format!(
            "the issuer's key {named} is for {key_alg} signatures, the token is signed with {alg:?}"
        )));
    }
    DecodingKey::from_jwk(jwk).map_err(|_| KeyMissing::Unknown)
}

/// Refuses a plain-HTTP URL for the issuer's documents unless it is on this machine's loopback:
/// keys fetched in clear from elsewhere could be anyone's.
fn check_transport(what: &str, url: &str) -> anyhow::Result<()> {
    let uri: Uri = url
        .parse()
        .with_context(|| format!("{what} {url} is not a URL"))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if uri.host().is_some_and(is_loopback) => Ok(()),
        Some("http") => anyhow::bail!(
            "{what} {url} is plain HTTP: signing keys are fetched over HTTPS (plain HTTP only \
             from this machine's loopback)"
        ),
        _ => anyhow::bail!("{what} {url} is not an http(s) URL"),
    }
}

/// Whether `host` (as a URI holds it: an IPv6 address in brackets) is this machine's loopback.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `https://host/.well-known/oauth-protected-resource/path` for `https://host/path`: the
/// well-known suffix goes between the authority and the path (RFC 9728 section 3.1).
fn metadata_url(resource: &Uri) -> String {
    well_known(resource, "oauth-protected-resource")
}

/// `scheme://authority/.well-known/NAME/path` for `scheme://authority/path` (a `/` path adds
/// nothing), as RFC 8414 and RFC 9728 place well-known documents.
fn well_known(url: &Uri, name: &str) -> String {
    let scheme = url.scheme_str().unwrap_or("https");
    let authority = url.authority().map_or("", |authority| authority.as_str());
    let path = url.path().trim_end_matches('/');
    format!("{scheme}://{authority}/.well-known/{name}{path}")
}

/// The issuer's `jwks_uri`, from its RFC 8414 metadata or, failing that, its OpenID Connect
/// configuration; the document must name the same issuer.
async fn jwks_uri_of(client: &HttpClient, issuer: &str) -> anyhow::Result<String> {
    let issuer_url: Uri = issuer
        .parse()
        .with_context(|| format!("--oauth-issuer {issuer} is not a URL"))?;
    let candidates = [
        well_known(&issuer_url, "oauth-authorization-server"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ];
    let mut problems = Vec::new();
    for candidate in candidates {
        match fetch_json(client, &candidate).await {
            Ok(metadata) => {
                if metadata["issuer"].as_str() != Some(issuer) {
                    anyhow::bail!(
                        "{candidate} names the issuer {}, not {issuer}",
                        metadata["issuer"]
                    );
                }
                let jwks = metadata["jwks_uri"]
                    .as_str()
                    .with_context(|| format!("{candidate} has no jwks_uri"))?;
                return Ok(jwks.to_string());
            }
            Err(error) => problems.push(format!("{candidate}: {error:#}")),
        }
    }
    anyhow::bail!(
        "cannot read the metadata of the OAuth issuer {issuer}: {}",
        problems.join("; ")
    )
}

/// The key set at `url`, and how long it may be trusted: its `Cache-Control: max-age`, within
/// [`SHORTEST_KEY_AGE`] and [`LONGEST_KEY_AGE`] (the longest without one).
async fn fetch_keys(client: &HttpClient, url: &str) -> anyhow::Result<(JwkSet, Duration)> {
    let (document, max_age) = fetch(client, url).await?;
    let keys =
        serde_json::from_value(document).with_context(|| format!("{url} is not a JWK set"))?;
    let fresh_for = max_age
        .unwrap_or(LONGEST_KEY_AGE)
        .clamp(SHORTEST_KEY_AGE, LONGEST_KEY_AGE);
    Ok((keys, fresh_for))
}

/// The `max-age` of a `Cache-Control` header (`no-store` and `no-cache` count as 0).
fn max_age(cache_control: &str) -> Option<Duration> {
    cache_control
        .split(',')
        .map(str::trim)
        .find_map(|directive| {
            let directive = directive.to_ascii_lowercase();
            if directive == "no-store" || directive == "no-cache" {
                return Some(Duration::ZERO);
            }
            let seconds = directive.strip_prefix("max-age=")?;
            seconds
                .trim_matches('"')
                .parse()
                .ok()
                .map(Duration::from_secs)
        })
}

/// The client for the issuer: HTTPS (or plain HTTP, for an issuer on this machine or network)
/// with rustls on ring and the system's trusted roots.
fn http_client() -> anyhow::Result<HttpClient> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(Arc::new(rustls::crypto::ring::default_provider()))
        .context("cannot load the system's root certificates")?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector))
}

async fn fetch_json(client: &HttpClient, url: &str) -> anyhow::Result<Value> {
    Ok(fetch(client, url).await?.0)
}

/// The JSON document at `url`, and its `Cache-Control: max-age` if it has one.
async fn fetch(client: &HttpClient, url: &str) -> anyhow::Result<(Value, Option<Duration>)> {
    let uri: Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let (body, max_age) = tokio::time::timeout(FETCH_TIMEOUT, async {
        let response = client.get(uri).await?;
        if !response.status().is_success() {
            anyhow::bail!("answered {}", response.status());
        }
        let max_age = response
            .headers()
            .get(axum::http::header::CACHE_CONTROL)
            .and_then(|value| value.to_str().ok())
            .and_then(max_age);
        let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
            .collect()
            .await
            .map_err(|error| anyhow::anyhow!("cannot read the answer: {error}"))?;
        Ok((body.to_bytes(), max_age))
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {FETCH_TIMEOUT:?}"))??;
    let document =
        serde_json::from_slice(&body).with_context(|| format!("{url} did not answer JSON"))?;
    Ok((document, max_age))
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::jwk::{Jwk, KeyAlgorithm};

    use super::*;

    /// A published P-256 key with id `kid`, as an issuer's JWKS lists it.
    fn jwk(kid: &str) -> Jwk {
        let mut jwk: Jwk = serde_json::from_value(json!({
            "kty": "EC", "crv": "P-256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
        }))
        .unwrap();
        jwk.common.key_id = Some(kid.to_owned());
        jwk
    }

    #[test]
    fn a_key_verifies_only_what_its_use_and_alg_allow() {
        let plain = jwk("plain");
        let mut for_encryption = jwk("enc");
        for_encryption.common.public_key_use = Some(PublicKeyUse::Encryption);
        let mut for_es384 = jwk("es384");
        for_es384.common.key_algorithm = Some(KeyAlgorithm::ES384);
        let mut for_es256 = jwk("es256");
        for_es256.common.key_algorithm = Some(KeyAlgorithm::ES256);
        for_es256.common.public_key_use = Some(PublicKeyUse::Signature);
        let keys = JwkSet {
            keys: vec![plain, for_encryption, for_es384, for_es256],
        };
        let found = |kid| signing_key(&keys, Some(kid), Algorithm::ES256);
        assert!(found("plain").is_ok());
        assert!(found("es256").is_ok());
        assert!(
            matches!(found("enc"), Err(KeyMissing::NotFor(why)) if why.contains("not a signing key"))
        );
        assert!(matches!(found("es384"), Err(KeyMissing::NotFor(why)) if why.contains("ES384")));
        assert_eq!(found("absent").err(), Some(KeyMissing::Unknown));
        // Without a `kid`, only a set of one key names it.
        assert_eq!(
            signing_key(&keys, None, Algorithm::ES256).err(),
            Some(KeyMissing::Unknown)
        );
    }

    #[test]
    fn keys_come_over_https_or_from_the_loopback() {
        for allowed in [
            "https://issuer.example.com/jwks",
            "http://127.0.0.1:8080/jwks",
            "http://localhost/jwks",
            "http://[::1]:9000/",
        ] {
            assert!(check_transport("x", allowed).is_ok(), "{allowed}");
        }
        for refused in [
            "http://issuer.example.com/jwks",
            "http://10.0.0.1/jwks",
            "ftp://127.0.0.1/jwks",
        ] {
            assert!(check_transport("x", refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_refetch_period_follows_cache_control() {
        assert_eq!(
            max_age("public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(max_age("public"), None);
        assert_eq!(max_age("max-age=abc"), None);
    }

    #[test]
    fn the_metadata_url_puts_the_well_known_part_before_the_path() {
        let url = |resource: &str| metadata_url(&resource.parse().unwrap());
        assert_eq!(
            url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            url("https://mcp.example.com:8443/"),
            "https://mcp.example.com:8443/.well-known/oauth-protected-resource"
        );
    }
}
