//! `turnstile instances --server URL --token-file FILE`: the same listing, showing, reset and
//! delete, asked of a running server through its console's JSON API (`console/api.rs`), so that
//! they work on any store while servers run (the embedded store is one process's file) and a
//! reset or delete goes through the instance's actor there.
//!
//! Plain HTTP only (the client has no TLS stack): on a server served over HTTPS, ask through a
//! loopback listener or a tunnel. The token must be an operator's (see `docs/operations.md`).

use std::{path::Path, time::Duration};

use anyhow::{Context, bail};
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
    /// The server at `url` (`http://host:port`, with or without a path such as `/mcp`), with
    /// the bearer token in `token_file` (its first line that is not blank or a `#` comment).
    pub fn new(url: &str, token_file: Option<&Path>) -> anyhow::Result<Remote> {
        let parsed: reqwest::Url = url
            .parse()
            .with_context(|| format!("--server {url} is not a URL"))?;
        if parsed.scheme() != "http" {
            bail!(
                "--server {url}: only http:// is supported by this client; reach an HTTPS server \
                 through a loopback listener or a tunnel"
            );
        }
        let base = format!("{}://{}", parsed.scheme(), parsed.authority());
        let token = match token_file {
            None => None,
            Some(file) => Some(read_token(file)?),
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Remote {
            base,
            token,
            client,
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
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
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
