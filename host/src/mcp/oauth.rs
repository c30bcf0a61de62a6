//! OAuth 2.1 resource-server mode, as the MCP authorization spec describes it: Turnstile accepts
//! access tokens (JWTs) issued by an authorization server it trusts, for itself and no one else.
//!
//! - **Keys**: the issuer's JWKS, found through its metadata (`--oauth-issuer`: RFC 8414's
//!   `/.well-known/oauth-authorization-server`, else OpenID Connect's
//!   `/.well-known/openid-configuration`) or named directly (`--oauth-jwks`). Fetched at start,
//!   and again when a token names a key id the cached set lacks (at most every
//!   [`REFRESH_AT_MOST_EVERY`], so unknown ids cannot make the server hammer the issuer).
//! - **Checks**: signature (asymmetric algorithms only: a JWKS is public, so an HMAC "key" from
//!   it would be a forgery kit), `exp` and `nbf` (with [`LEEWAY_S`] for clock skew), `aud` naming
//!   the canonical resource (`--public-url`), `iss` naming the issuer when one is configured,
//!   and a `sub`, which becomes the request's [`Principal`].
//! - **Discovery**: the protected-resource metadata of RFC 9728, served by
//!   [`OAuth::metadata`]; its URL goes in every 401's `WWW-Authenticate` (`resource_metadata=`).
//!
//! It must not decide what a refusal looks like on the wire: `auth.rs` builds the 401.

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
    Algorithm, DecodingKey, Validation, decode, decode_header, errors::ErrorKind, jwk::JwkSet,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::auth::Principal;

/// Seconds of clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 30;

/// The shortest time between two JWKS fetches caused by unknown key ids.
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(10);

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
}

/// The resource server: trusted keys and what a token must say.
pub struct OAuth {
    resource: String,
    issuer: Option<String>,
    jwks_url: String,
    metadata_url: String,
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
}

impl OAuth {
    /// Finds the issuer's keys (from its metadata or `--oauth-jwks`) and fetches them; an error
    /// names what could not be read, so a misconfigured server does not start.
    pub async fn start(options: &OAuthOptions) -> anyhow::Result<OAuth> {
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
        let jwks_url = match (&options.jwks, &options.issuer) {
            (Some(jwks), _) => jwks.clone(),
            (None, Some(issuer)) => jwks_uri_of(&client, issuer).await?,
            (None, None) => anyhow::bail!("OAuth needs --oauth-issuer or --oauth-jwks"),
        };
        let keys = fetch_keys(&client, &jwks_url).await?;
        tracing::info!(jwks = %jwks_url, keys = keys.keys.len(), "OAuth signing keys loaded");
        Ok(OAuth {
            metadata_url: metadata_url(&resource),
            resource: options.public_url.clone(),
            issuer: options.issuer.clone(),
            jwks_url,
            keys: RwLock::new(Arc::new(keys)),
            fetched: tokio::sync::Mutex::new(Instant::now()),
            client,
        })
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

    /// The principal a valid access token stands for (its `sub`), or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, Refused> {
        let header = decode_header(token)
            .map_err(|_| Refused("the bearer token is not a JWT".to_string()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(Refused(format!(
                "tokens signed with {:?} are not accepted; the issuer's keys are asymmetric",
                header.alg
            )));
        }
        let key = match self.key_for(header.kid.as_deref()) {
            Some(key) => key,
            None => {
                self.refresh_keys().await;
                self.key_for(header.kid.as_deref()).ok_or_else(|| {
                    Refused("the token is signed with a key the issuer does not publish".into())
                })?
            }
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
        Ok(Principal(claims.claims.sub))
    }

    /// The decoding key for `kid` (or the only key, for a token without a `kid`).
    fn key_for(&self, kid: Option<&str>) -> Option<DecodingKey> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        let jwk = match kid {
            Some(kid) => keys.find(kid)?,
            None if keys.keys.len() == 1 => &keys.keys[0],
            None => return None,
        };
        DecodingKey::from_jwk(jwk).ok()
    }

    /// Fetches the keys again, unless that was done less than [`REFRESH_AT_MOST_EVERY`] ago; a
    /// failed fetch keeps the keys in force.
    async fn refresh_keys(&self) {
        let mut fetched = self.fetched.lock().await;
        if fetched.elapsed() < REFRESH_AT_MOST_EVERY {
            return;
        }
        *fetched = Instant::now();
        match fetch_keys(&self.client, &self.jwks_url).await {
            Ok(keys) => {
                tracing::info!(keys = keys.keys.len(), "OAuth signing keys refreshed");
                *self
                    .keys
                    .write()
                    .unwrap_or_else(|poison| poison.into_inner()) = Arc::new(keys);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot refresh the OAuth signing keys; keeping the old ones");
            }
        }
    }
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

async fn fetch_keys(client: &HttpClient, url: &str) -> anyhow::Result<JwkSet> {
    let document = fetch_json(client, url).await?;
    serde_json::from_value(document).with_context(|| format!("{url} is not a JWK set"))
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
    let uri: Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let body = tokio::time::timeout(FETCH_TIMEOUT, async {
        let response = client.get(uri).await?;
        if !response.status().is_success() {
            anyhow::bail!("answered {}", response.status());
        }
        let body = Limited::new(response.into_body(), MAX_DOCUMENT_BYTES)
            .collect()
            .await
            .map_err(|error| anyhow::anyhow!("cannot read the answer: {error}"))?;
        Ok(body.to_bytes())
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {FETCH_TIMEOUT:?}"))??;
    serde_json::from_slice(&body).with_context(|| format!("{url} did not answer JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
