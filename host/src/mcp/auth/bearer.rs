//! Bearer-token authentication for HTTP: static tokens (`--auth-token-file`) and OAuth access
//! tokens (`oauth.rs`), both giving a request one [`Principal`].
//!
//! The token file holds one token per line, `TOKEN` or `NAME TOKEN`, either followed by the
//! word `operator` for a token that may also use the console (`console/`); blank lines and lines
//! starting with `#` are skipped. A named token's principal is `token:NAME`; a bare token's is
//! `token:sha256:` and a digest of the token itself, so it moves with the token and never with
//! its line (reordering the file gives no token another's instances), and each bare token is
//! named in a WARN at load: it cannot be rotated without its instances. Tokens are compared in
//! constant time, and the file is read again on SIGHUP, so tokens can be rotated without a restart
//! (a file that does not parse keeps the old tokens and logs why).
//!
//! Every route but the health probes and the OAuth metadata needs `Authorization: Bearer TOKEN`;
//! a request without one, or with a token that is neither in the file nor a valid access token,
//! gets 401 with `WWW-Authenticate: Bearer` (naming the protected-resource metadata when OAuth is
//! on, as the MCP authorization spec asks) and a JSON-RPC error body. The principal is put in the
//! request's extensions for what comes after, and [`Role::Operator`] beside it for an operator.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use super::{
    oauth::{OAuth, Refused},
    principal::{Principal, Role},
};
use crate::actors::Tenant;
use crate::mcp::jsonrpc_errors::{Rejection, UNAUTHORIZED};
use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::Response,
};

/// One line of the token file: the token, its principal, and what that principal was called
/// before principals were namespaced (for moving its instances: `legacy_tenants`).
struct TokenLine {
    token: String,
    principal: Principal,
    role: Role,
    legacy_name: String,
}

/// Every way a request may prove who it is from; at least one is set.
#[derive(Clone)]
pub struct Authenticator {
    pub tokens: Option<Tokens>,
    pub oauth: Option<Arc<OAuth>>,
}

impl Authenticator {
    /// The principal `token` stands for, and its role: a static token first (a cheap
    /// comparison), then an OAuth access token.
    pub async fn identify(&self, token: &str) -> Result<(Principal, Role), Refused> {
        if let Some(found) = self
            .tokens
            .as_ref()
            .and_then(|tokens| tokens.identify(token))
        {
            return Ok(found);
        }
        match &self.oauth {
            Some(oauth) => oauth.verify(token).await,
            None => Err(Refused("the bearer token is not valid".to_string())),
        }
    }
}

/// The token file's lines, in order.
type TokenList = Vec<TokenLine>;

/// The tokens in force, and the file they come from.
#[derive(Clone)]
pub struct Tokens {
    file: PathBuf,
    /// Swapped whole on reload; a request clones the `Arc` and reads without holding the lock.
    current: Arc<RwLock<Arc<TokenList>>>,
}

impl Tokens {
    /// Reads `file`; an unreadable file, or one with no token, is an error (a server that was
    /// asked to authenticate must not start open).
    pub fn load(file: &Path) -> anyhow::Result<Tokens> {
        let tokens = parse_file(file)?;
        warn_of_bare_tokens(file, &tokens);
        Ok(Tokens {
            file: file.to_owned(),
            current: Arc::new(RwLock::new(Arc::new(tokens))),
        })
    }

    /// Reads the file again; on a problem keeps the tokens in force and says why.
    pub fn reload(&self) {
        match parse_file(&self.file) {
            Ok(tokens) => {
                warn_of_bare_tokens(&self.file, &tokens);
                let count = tokens.len();
                *self
                    .current
                    .write()
                    .unwrap_or_else(|poison| poison.into_inner()) = Arc::new(tokens);
                tracing::info!(tokens = count, file = %self.file.display(), "auth tokens reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "auth tokens not reloaded; the previous ones stay in force");
            }
        }
    }

    /// The principal `token` stands for.
    pub fn principal(&self, token: &str) -> Option<Principal> {
        self.identify(token).map(|(principal, _)| principal)
    }

    /// The principal `token` stands for, and its role. Every known token is compared, each in
    /// constant time, so the answer's timing says nothing about which token came close.
    pub fn identify(&self, token: &str) -> Option<(Principal, Role)> {
        let tokens = self
            .current
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        let mut found = None;
        for line in tokens.iter() {
            if constant_time_eq(line.token.as_bytes(), token.as_bytes()) && found.is_none() {
                found = Some((line.principal.clone(), line.role));
            }
        }
        found
    }

    /// The tenants the file's principals had before principals were namespaced (`NAME`, and a
    /// bare token's `line-N` as the file stands now), each with the tenant it has now: what
    /// moving their instances at start needs.
    pub fn legacy_tenants(&self) -> Vec<(Tenant, Tenant)> {
        let tokens = self
            .current
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        tokens
            .iter()
            .map(|line| (Tenant::of(&line.legacy_name), line.principal.tenant()))
            .collect()
    }

    /// Reloads on every SIGHUP.
    pub fn reload_on_sighup(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let tokens = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                tokens.reload();
            }
        });
        Ok(())
    }
}

/// The word that ends an operator's token line.
const OPERATOR: &str = "operator";

fn parse_file(file: &Path) -> anyhow::Result<TokenList> {
    let text = std::fs::read_to_string(file).map_err(|error| {
        anyhow::anyhow!("cannot read the token file {}: {error}", file.display())
    })?;
    let mut tokens = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words: Vec<&str> = line.split_whitespace().collect();
        // A last word `operator` marks the role; a token of that spelling needs a name before it.
        let role = if words.len() > 1 && words.last() == Some(&OPERATOR) {
            words.pop();
            Role::Operator
        } else {
            Role::Client
        };
        let line = match words.as_slice() {
            [token] => TokenLine {
                token: (*token).to_owned(),
                principal: Principal::bare_token(token),
                role,
                legacy_name: format!("line-{}", index + 1),
            },
            [name, token] => TokenLine {
                token: (*token).to_owned(),
                principal: Principal::named_token(name),
                role,
                legacy_name: (*name).to_owned(),
            },
            _ => anyhow::bail!(
                "{} line {}: expected `TOKEN` or `NAME TOKEN`, either followed by `operator`",
                file.display(),
                index + 1
            ),
        };
        tokens.push(line);
    }
    if tokens.is_empty() {
        anyhow::bail!("the token file {} holds no token", file.display());
    }
    Ok(tokens)
}

/// A WARN for each bare token: its principal is a digest of the token, so a new token for the
/// same client is a new principal, which does not see the old one's instances.
fn warn_of_bare_tokens(file: &Path, tokens: &TokenList) {
    for (index, line) in tokens.iter().enumerate() {
        if line.principal.0.starts_with("token:sha256:") {
            tracing::warn!(
                file = %file.display(),
                token = index + 1,
                principal = %line.principal.0,
                "a token without a name: its principal is a digest of the token, so its \
                 instances do not survive rotating it; give it a name (`NAME TOKEN`)"
            );
        }
    }
}

/// Equal bytes, compared without an early exit (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The middleware (`axum::middleware::from_fn_with_state`): 401 without a valid bearer token.
pub async fn require_token(
    State(authenticator): State<Authenticator>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = presented(request.headers());
    let metadata = authenticator
        .oauth
        .as_ref()
        .map(|oauth| oauth.metadata_url());
    let Some(token) = presented else {
        return unauthorized(None, metadata);
    };
    match authenticator.identify(token).await {
        Ok((principal, role)) => {
            request.extensions_mut().insert(principal);
            // Only an operator's is put there: absent is a client's, and costs a request nothing.
            if role == Role::Operator {
                request.extensions_mut().insert(role);
            }
            next.run(request).await
        }
        Err(refused) => unauthorized(Some(&refused), metadata),
    }
}

/// The bearer token a request with `headers` presents, if any.
pub fn presented(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The 401: `WWW-Authenticate: Bearer` with `error="invalid_token"` and a description when a
/// token was refused, and `resource_metadata` when OAuth says where to get one (RFC 6750 section
/// 3, RFC 9728 section 5.1).
pub fn unauthorized(refused: Option<&Refused>, resource_metadata: Option<&str>) -> Response {
    let mut challenge = String::from(r#"Bearer realm="turnstile""#);
    let message = match refused {
        Some(Refused(reason)) => {
            // A description is a quoted string: no quotes or backslashes inside.
            let description: String = reason
                .chars()
                .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
                .collect();
            challenge.push_str(&format!(
                r#", error="invalid_token", error_description="{description}""#
            ));
            format!("Unauthorized: {reason}")
        }
        None => "Unauthorized: send Authorization: Bearer <token>".to_string(),
    };
    if let Some(url) = resource_metadata {
        challenge.push_str(&format!(r#", resource_metadata="{url}""#));
    }
    let rejection = Rejection {
        code: UNAUTHORIZED,
        message,
        id: serde_json::Value::Null,
    };
    let mut response = rejection.into_response(StatusCode::UNAUTHORIZED);
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_and_bare_tokens_and_comments() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# operators\nalice s3cret\n\nbare-token\n").unwrap();
        let tokens = Tokens::load(&file).unwrap();
        assert_eq!(
            tokens.principal("s3cret"),
            Some(Principal("token:alice".into()))
        );
        let bare = tokens.principal("bare-token").expect("the bare token");
        assert!(bare.0.starts_with("token:sha256:"), "{bare:?}");
        // The same token on another line is the same principal: lines do not name principals.
        std::fs::write(&file, "bare-token\nalice s3cret\n").unwrap();
        tokens.reload();
        assert_eq!(tokens.principal("bare-token"), Some(bare));
        assert_eq!(tokens.principal("s3cre"), None);
        assert_eq!(tokens.principal("alice"), None, "a name is not a token");
    }

    #[test]
    fn an_operator_line_ends_with_operator() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "ops t-ops operator\nalice t-alice\nt-bare operator\n",
        )
        .unwrap();
        let tokens = Tokens::load(&file).unwrap();
        assert_eq!(
            tokens.identify("t-ops"),
            Some((Principal("token:ops".into()), Role::Operator))
        );
        assert_eq!(tokens.identify("t-alice").unwrap().1, Role::Client);
        assert_eq!(tokens.identify("t-bare").unwrap().1, Role::Operator);
        assert_eq!(tokens.identify("operator"), None, "a role is not a token");
        std::fs::write(&file, "a b c operator\n").unwrap();
        assert!(Tokens::load(&file).is_err(), "three words and a role");
    }

    #[test]
    fn a_bad_file_is_refused_and_a_bad_reload_keeps_the_old_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# nothing\n").unwrap();
        assert!(Tokens::load(&file).is_err(), "no token");
        std::fs::write(&file, "a b c\n").unwrap();
        assert!(Tokens::load(&file).is_err(), "three words");
        std::fs::write(&file, "old\n").unwrap();
        let tokens = Tokens::load(&file).unwrap();
        std::fs::write(&file, "x y z\n").unwrap();
        tokens.reload();
        assert!(tokens.principal("old").is_some());
        std::fs::write(&file, "new\n").unwrap();
        tokens.reload();
        assert!(tokens.principal("old").is_none());
        assert!(tokens.principal("new").is_some());
    }
}
