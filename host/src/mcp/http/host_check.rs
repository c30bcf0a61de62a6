//! The `Host` check (DNS-rebinding protection) for every HTTP route but the health probes.
//!
//! rmcp checks `Host` on `/mcp` only; this middleware applies the same rule to every route it
//! wraps: the host part of `Host` (or of the request URI's authority, as HTTP/2 carries it) must
//! be a loopback name or one given with `--allowed-host`, compared case-insensitively; an allowed
//! entry with a port matches that port only, one without matches any. Anything else (a foreign,
//! malformed or missing `Host`) is answered 403 with a short JSON-RPC error body, the shape rmcp's
//! refusals take on `/mcp` (see `http/endpoint.rs`), before the route runs.
//!
//! A tower layer of its own rather than `axum::middleware::from_fn`: `from_fn` clones and boxes
//! the route it wraps and boxes its future on every request, for a check that needs neither.
//!
//! It must not wrap `/healthz` and `/readyz`: a probe sends the pod's address as `Host`.

use std::{
    convert::Infallible,
    future::{Ready, ready},
    sync::Arc,
    task::{Context, Poll},
};

use axum::{
    extract::Request,
    http::{StatusCode, header, uri::Authority},
    response::Response,
};
use futures_util::future::Either;
use serde_json::Value;
use tower::{Layer, Service};

use crate::mcp::jsonrpc_errors::Rejection;

/// The `Host` names accepted whatever the options say (rmcp's defaults).
pub(in crate::mcp) const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The hosts a request may name: loopback plus the operator's `--allowed-host` values.
#[derive(Clone, Debug)]
pub struct AllowedHosts(Arc<[(String, Option<u16>)]>);

impl AllowedHosts {
    /// Loopback names and `extra` (`name` or `name:port`).
    pub fn loopback_and(extra: &[String]) -> AllowedHosts {
        let entries = LOOPBACK_HOSTS
            .iter()
            .map(|host| host.to_string())
            .chain(extra.iter().cloned())
            .filter_map(|entry| parse(entry.trim()))
            .collect();
        AllowedHosts(entries)
    }

    /// Whether `host` (a `Host` header value) is one of them.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        self.0.iter().any(|(allowed, allowed_port)| {
            allowed.eq_ignore_ascii_case(name)
                && allowed_port.is_none_or(|allowed_port| port == Some(allowed_port))
        })
    }
}

/// A `Host` value as its name (IPv6 brackets removed) and port: `name`, `name:port`, `[v6]` or
/// `[v6]:port`. Split by hand, as this runs on every request and `Authority`'s parse copies the
/// value into a buffer of its own. The name is not checked further: it passes only if it equals
/// an allowed entry, which is itself a name.
fn split_host(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = match host.strip_prefix('[') {
        Some(bracketed) => {
            let (name, rest) = bracketed.split_once(']')?;
            let port = if rest.is_empty() {
                None
            } else {
                Some(rest.strip_prefix(':')?)
            };
            (name, port)
        }
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    let port = match port {
        None => None,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some(digits.parse().ok()?)
        }
        Some(_) => return None,
    };
    (!name.is_empty()).then_some((name, port))
}

/// An allowed entry as (name, port); rmcp takes an entry it cannot parse as an authority as a bare
/// name, and so does this.
fn parse(entry: &str) -> Option<(String, Option<u16>)> {
    if entry.is_empty() {
        return None;
    }
    Some(match Authority::try_from(entry) {
        Ok(authority) => (normalize(authority.host()), authority.port_u16()),
        Err(_) => (normalize(entry), None),
    })
}

/// Lowercase, IPv6 brackets removed: `[::1]` and `::1` are one host.
fn normalize(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// The check, as a layer for the routes that need it (`Router::layer`).
#[derive(Clone, Debug)]
pub struct RefuseForeignHost(pub AllowedHosts);

impl<S> Layer<S> for RefuseForeignHost {
    type Service = HostChecked<S>;

    fn layer(&self, route: S) -> HostChecked<S> {
        HostChecked {
            allowed: self.0.clone(),
            route,
        }
    }
}

/// A route behind the check.
#[derive(Clone, Debug)]
pub struct HostChecked<S> {
    allowed: AllowedHosts,
    route: S,
}

impl<S> Service<Request> for HostChecked<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.route.poll_ready(context)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let host = match request.headers().get(header::HOST) {
            Some(value) => value.to_str().ok(),
            None => request.uri().authority().map(Authority::as_str),
        };
        if host.is_some_and(|host| self.allowed.allows(host)) {
            return Either::Left(self.route.call(request));
        }
        Either::Right(ready(Ok(Rejection::invalid_request(
            Value::Null,
            "Forbidden: Host header is not allowed",
        )
        .into_response(StatusCode::FORBIDDEN))))
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    #[test]
    fn loopback_and_named_hosts_pass_with_any_port_unless_one_is_named() {
        let allowed = AllowedHosts::loopback_and(&[
            "Mcp.Example.com".to_string(),
            "pinned.example:8443".to_string(),
        ]);
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "127.0.0.1:9",
            "[::1]:8080",
            "mcp.example.com",
            "mcp.example.COM:443",
            "pinned.example:8443",
        ] {
            assert!(allowed.allows(host), "{host} is allowed");
        }
        for host in [
            "evil.example",
            "10.0.0.7:8080",
            "pinned.example",
            "pinned.example:80",
            "localhost.evil.example",
            "",
            "not a host",
            "localhost:",
            "localhost:http",
            "localhost:99999",
            "[::1",
            "[::1]x",
            "::1",
            "evil@localhost",
        ] {
            assert!(!allowed.allows(host), "{host} is refused");
        }
    }

    #[tokio::test]
    async fn a_foreign_host_gets_403_json_and_the_route_never_runs() {
        use axum::{Router, routing::get};
        use tower::ServiceExt;

        let app = Router::new()
            .route("/stats", get(|| async { "ran" }))
            .layer(RefuseForeignHost(AllowedHosts::loopback_and(&[])));
        let request = |host: &str| {
            Request::builder()
                .uri("/stats")
                .header(header::HOST, host)
                .body(Body::empty())
                .unwrap()
        };
        let refused = app.clone().oneshot(request("10.1.2.3:8080")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        let body = axum::body::to_bytes(refused.into_body(), 4096)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["error"]["message"],
            "Forbidden: Host header is not allowed"
        );
        let served = app.oneshot(request("localhost:8080")).await.unwrap();
        assert_eq!(served.status(), StatusCode::OK);
    }
}
