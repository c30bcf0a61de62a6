//! `turnstile instances --server URL --token-file FILE`: the same listing, showing, reset and
//! delete, asked of a running server through its console's JSON API (`console/api.rs`), so that
//! they work on any store while servers run (the embedded store is one process's file) and a
//! reset or delete goes through the instance's actor there.
//!
//! Over `http://` or `https://`: a server with `--tls-cert` is reached as it serves, with rustls
//! on ring (the server's own TLS stack) verifying its certificate against the system's roots,
//! and, with `--ca-file`, the certificates in that file too (a private CA's, or the server's
//! own self-signed one, which is then trusted as it is: see `Pinned`). The token must be an
//! operator's (see `docs/operations.md`), and over plain HTTP it crosses the network as it is:
//! keep that to loopback or a trusted network.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use rustls::{
    DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use serde::Deserialize;
use serde_json::Value;

use super::{Filter, Summary};

/// A running server's console API.
pub struct Remote {
    base: String,
    token: Option<String>,
    client: reqwest::Client,
}

/// What a reset or delete answered.
#[derive(Debug, Deserialize)]
pub struct Done {
    pub key: String,
    pub done: String,
    #[serde(default)]
    pub state: Option<Value>,
}

#[derive(Deserialize)]
struct Listing {
    instances: Vec<Summary>,
}

/// The error body every console API refusal has.
#[derive(Deserialize)]
struct Refusal {
    error: String,
}

impl Remote {
    /// The server at `url` (`http://host:port` or `https://host:port`, with or without a path
    /// such as `/mcp`), with the bearer token in `token_file` (its first line that is not blank
    /// or a `#` comment); over HTTPS, also trusting the PEM certificates in `ca_file`.
    pub fn new(
        url: &str,
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
    ) -> anyhow::Result<Remote> {
        let parsed: reqwest::Url = url
            .parse()
            .with_context(|| format!("--server {url} is not a URL"))?;
        match parsed.scheme() {
            "https" => {}
            "http" if ca_file.is_some() => {
                bail!("--ca-file is for a server reached over HTTPS; --server {url} is plain HTTP")
            }
            "http" => {}
            other => bail!("--server {url}: {other}:// is not HTTP; give http:// or https://"),
        }
        let base = format!("{}://{}", parsed.scheme(), parsed.authority());
        let token = match token_file {
            None => None,
            Some(file) => Some(read_token(file)?),
        };
        let trusted = match ca_file {
            None => Vec::new(),
            Some(file) => read_certificates(file)?,
        };
        Ok(Remote {
            base,
            token,
            client: client(trusted)?,
        })
    }

    pub async fn list(&self, filter: &Filter) -> anyhow::Result<Vec<Summary>> {
        let mut query = vec![("limit", filter.limit.to_string())];
        if let Some(workflow) = &filter.workflow {
            query.push(("workflow", workflow.clone()));
        }
        if let Some(state) = &filter.state {
            query.push(("state", state.clone()));
        }
        if let Some(secs) = filter.older_than_secs {
            query.push(("older_than", secs.to_string()));
        }
        if let Some(principal) = &filter.principal {
            query.push(("principal", principal.clone()));
        }
        if let Some(after) = &filter.after {
            query.push(("after", after.clone()));
        }
        let listing: Listing = self
            .answer(self.request(reqwest::Method::GET, "instances", &query))
            .await?;
        Ok(listing.instances)
    }

    pub async fn show(&self, instance: &str, last: Option<usize>) -> anyhow::Result<Value> {
        let mut query = vec![("id", instance.to_owned())];
        if let Some(last) = last {
            query.push(("last", last.to_string()));
        }
        self.answer(self.request(reqwest::Method::GET, "instance", &query))
            .await
    }

    /// `action` is `reset` or `delete`.
    pub async fn act(&self, action: &str, instance: &str) -> anyhow::Result<Done> {
        let path = format!("instance/{action}");
        self.answer(self.request(reqwest::Method::POST, &path, &[("id", instance.to_owned())]))
            .await
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
    ) -> reqwest::RequestBuilder {
        let query = serde_urlencoded::to_string(query).unwrap_or_default();
        let request = self
            .client
            .request(method, format!("{}/console/api/{path}?{query}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The answer's JSON, or an error saying what the server refused and why.
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let response = request.send().await.map_err(|error| {
            let hint = if self.base.starts_with("https:") && names_a_certificate(&error) {
                " (a certificate no system root vouches for, such as a self-signed one or a \
                 private CA's, is trusted with --ca-file FILE)"
            } else {
                ""
            };
            anyhow::Error::new(error).context(format!("cannot reach {}{hint}", self.base))
        })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .with_context(|| format!("{} did not finish its answer", self.base))?;
        if status.is_success() {
            return serde_json::from_slice(&body).with_context(|| {
                format!(
                    "{} answered something that is not the console's JSON",
                    self.base
                )
            });
        }
        let reason = serde_json::from_slice::<Refusal>(&body)
            .map(|refusal| refusal.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).trim().to_owned());
        match status.as_u16() {
            401 => bail!(
                "{} wants an operator's token (--token-file): {reason}",
                self.base
            ),
            403 => bail!("{}: this token is not an operator's: {reason}", self.base),
            404 if reason.is_empty() => bail!(
                "{} serves no console: it needs authentication, or a loopback address",
                self.base
            ),
            _ => bail!("{reason}"),
        }
    }
}

/// The token in `file`: its first line that is not blank or a `#` comment, trimmed.
fn read_token(file: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the token file {}", file.display()))?;
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .with_context(|| format!("the token file {} holds no token", file.display()))
}

/// The HTTP client, for `http://` and `https://` alike, with [`tls_config`]'s TLS.
fn client(ca_file: Vec<CertificateDer<'static>>) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .tls_backend_preconfigured(tls_config(ca_file)?)
        .build()
        .context("cannot build the HTTP client")
}

/// The client's TLS: rustls on ring, the server's own stack (no second crypto library, no C to
/// build). A server's certificate is verified by WebPKI against the system's trusted roots (as
/// the OAuth client's, `mcp/auth/oauth.rs`) and `ca_file`'s certificates; or it is exactly one
/// of `ca_file`'s certificates, for the name asked for ([`Pinned`]).
fn tls_config(ca_file: Vec<CertificateDer<'static>>) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for error in &system.errors {
        tracing::debug!(%error, "a system root certificate could not be read");
    }
    roots.add_parsable_certificates(system.certs);
    for certificate in &ca_file {
        // A certificate that cannot anchor a chain may still be pinned.
        let _ = roots.add(certificate.clone());
    }
    let webpki = if roots.is_empty() {
        None
    } else {
        Some(
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .context("cannot build the certificate verifier")?,
        )
    };
    let verifier = Pinned {
        webpki,
        pinned: ca_file,
        schemes: provider.signature_verification_algorithms,
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("no TLS version in common with rustls")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Verifies a server's certificate: one that is exactly a certificate of `--ca-file` is trusted
/// as it is, if it names the host asked for; any other must chain to a trusted root.
///
/// Why the first: the usual self-signed certificate (`openssl req -x509`) is marked as a CA, and
/// WebPKI refuses a CA's certificate as a server's own (`CaUsedAsEndEntity`), though the
/// operator gave exactly it to be trusted and OpenSSL's clients (curl) accept it. An exact match
/// is the strongest trust there is (the key is the one given); its dates are not checked, as
/// with any pinned key.
#[derive(Debug)]
struct Pinned {
    /// `None` when there are no roots at all (no system store, no `--ca-file`).
    webpki: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    schemes: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.pinned.iter().any(|pinned| pinned == end_entity) {
            let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        match &self.webpki {
            Some(webpki) => webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.schemes)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.schemes)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.supported_schemes()
    }
}

/// The PEM certificates in `file` (`--ca-file`): one or more `BEGIN CERTIFICATE` blocks.
fn read_certificates(file: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(file)
        .with_context(|| format!("cannot read the CA file {}", file.display()))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("the CA file {} is not PEM certificates", file.display()))?;
    if certificates.is_empty() {
        bail!(
            "the CA file {} holds no certificate (PEM, `-----BEGIN CERTIFICATE-----`)",
            file.display()
        );
    }
    Ok(certificates)
}

/// Whether an error from sending a request says the server's certificate has no trusted issuer
/// (or is a CA's, as the usual self-signed one is): what `--ca-file` is for, which the error
/// then names. (Matched by text: the TLS error is boxed several layers down, as text and
/// debug output.)
fn names_a_certificate(error: &reqwest::Error) -> bool {
    let mut cause: Option<&dyn std::error::Error> = Some(error);
    while let Some(error) = cause {
        let text = error.to_string();
        if text.contains("UnknownIssuer") || text.contains("CaUsedAsEndEntity") {
            return true;
        }
        cause = error.source();
    }
    false
}
