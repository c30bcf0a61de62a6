//! The responses the server holds open, counted as one kind whatever carries them: a session's
//! GET event stream, a 2026-07-28 `subscriptions/listen` (a POST whose answer is a stream that
//! lasts as long as the client listens), and the console's live counts. Each keeps its
//! connection for as long as it is open, so each takes a place among the `--stream-share` of
//! `--max-connections` and one under its holder's `--max-streams-per-principal`, given back when
//! its body is dropped (the stream ended, or the client went away).
//!
//! Past either, the request is refused before anything serves it: 429 with `Retry-After` past
//! the holder's quota (checked first, so that a client over its own quota takes no place of the
//! server's), 503 with `Retry-After` past the share.
//!
//! It must not read a body: what holds its response open is told by the method and headers
//! alone. A listen says so in its `Mcp-Method` header, which rmcp requires of every request of
//! 2026-07-28 (the only revision with listens) and refuses when it differs from the body's.

use std::sync::{Arc, atomic::AtomicUsize};

use axum::{extract::Request, http::HeaderMap, response::Response};

use super::{
    caller,
    caps::{self, BUSY_RETRY_AFTER_S, Place},
    header_names::MCP_METHOD,
    idle,
};
use crate::mcp::quotas::{self, Quotas};

/// The method of a 2026-07-28 listen.
const LISTEN: &str = "subscriptions/listen";

/// The held responses open now, and how many may be.
pub struct HeldStreams {
    open: Arc<AtomicUsize>,
    /// `--stream-share` percent of `--max-connections`.
    max: usize,
    /// Each holder's share (`--max-streams-per-principal`).
    quotas: Arc<Quotas>,
}

/// A held response's places, given back when dropped.
struct HeldPlace {
    _open: Place,
    _its_own: Option<quotas::Place>,
}

/// Whether a POST to `/mcp` says it is a `subscriptions/listen` (a GET of `/mcp` is held open
/// whatever it says: an event stream, served here or by rmcp).
pub fn is_listen(headers: &HeaderMap) -> bool {
    headers
        .get(MCP_METHOD)
        .is_some_and(|method| method.as_bytes() == LISTEN.as_bytes())
}

impl HeldStreams {
    pub fn new(max: usize, quotas: Arc<Quotas>) -> HeldStreams {
        HeldStreams {
            open: Arc::default(),
            max,
            quotas,
        }
    }

    /// Serves `request`, whose response is held open, with `serve` once it has its places
    /// (given back when the response's body is dropped: the stream closed); or refuses it.
    pub async fn serve<F>(&self, request: Request, serve: impl FnOnce(Request) -> F) -> Response
    where
        F: Future<Output = Response>,
    {
        // One client's streams first: past its own limit it waits for one of its own to close.
        let its_own = match caller::of_request(&request)
            .quota_holder()
            .map(|holder| self.quotas.admit_stream(&holder))
        {
            Some(Err(refusal)) => return caps::over_quota(&refusal),
            Some(Ok(place)) => place,
            None => None,
        };
        let max = self.max;
        let Some(open) = Place::take(&self.open, |open| open < max) else {
            tracing::info!(
                max_streams = max,
                "stream limit reached; refusing a new event stream or listen"
            );
            return caps::busy(format!(
                "Service Unavailable: {max} streams (event streams and listens) are open, the \
                 most this server keeps beside its calls (--stream-share); retry in \
                 {BUSY_RETRY_AFTER_S} s"
            ));
        };
        let place = HeldPlace {
            _open: open,
            _its_own: its_own,
        };
        idle::hold_until_sent(serve(request).await, place)
    }
}

#[cfg(test)]
mod tests {
    use axum::{
        body::Body,
        http::{Method, StatusCode},
    };

    use super::*;
    use crate::mcp::quotas::{ClientAddr, QuotaLimits};

    fn request(method: Method, mcp_method: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().method(method).uri("/mcp");
        if let Some(mcp_method) = mcp_method {
            builder = builder.header("mcp-method", mcp_method);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn a_listen_is_told_by_its_mcp_method() {
        let listens = |mcp_method| is_listen(request(Method::POST, mcp_method).headers());
        assert!(listens(Some("subscriptions/listen")));
        assert!(!listens(Some("tools/call")));
        assert!(!listens(Some("subscriptions/listen2")));
        assert!(!listens(None));
    }

    fn from(address: &str) -> Request {
        let mut request = request(Method::GET, None).map(|()| Body::empty());
        request
            .extensions_mut()
            .insert(ClientAddr(address.parse().unwrap()));
        request
    }

    #[tokio::test]
    async fn the_holders_quota_is_checked_before_the_servers_share() {
        let quotas = Quotas::new(QuotaLimits {
            streams: Some(1),
            ..QuotaLimits::default()
        });
        let streams = HeldStreams::new(2, quotas);
        let open = |request| streams.serve(request, |_| async { Response::new(Body::empty()) });
        let first = open(from("192.0.2.7")).await;
        assert_eq!(first.status(), StatusCode::OK, "within both");
        let refused = open(from("192.0.2.7")).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.headers().contains_key("retry-after"));
        // Another client: its own quota, and the last place of the server's share.
        let second = open(from("192.0.2.8")).await;
        assert_eq!(second.status(), StatusCode::OK, "the last place");
        let refused = open(from("192.0.2.9")).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()["retry-after"], "5");
        // A stream whose body is dropped (it closed) gives its places back.
        drop(first);
        let third = open(from("192.0.2.9")).await;
        assert_eq!(third.status(), StatusCode::OK);
        // Within its own quota again, the first client now finds the server's share full.
        assert_eq!(
            open(from("192.0.2.7")).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        drop((second, third));
    }
}
