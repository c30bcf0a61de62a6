//! A place under one of the server's caps, and the answers a client gets when there is none: 503
//! with `Retry-After` when a server-wide cap is reached (sessions, held streams, connections),
//! 429 with `Retry-After` when the client's own quota is (`mcp/quotas.rs`).
//!
//! It owns no count of its own: each cap keeps its counter where it is decided (`endpoint.rs`,
//! `held.rs`, `reserve.rs`) and takes its places here.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::Response,
};
use serde_json::Value;

use crate::mcp::{
    jsonrpc_errors::{Rejection, SERVER_BUSY},
    quotas::OverQuota,
};

/// How long a client refused for a server-wide cap is told to wait (`Retry-After`, seconds).
pub const BUSY_RETRY_AFTER_S: u64 = 5;

/// A place under a cap (a session opening, a held stream), taken with the check in one atomic
/// step and given back when dropped.
pub struct Place(Arc<AtomicUsize>);

impl Place {
    /// A place among `taken`, if `fits` says one more fits beside those taken now.
    pub fn take(taken: &Arc<AtomicUsize>, fits: impl Fn(usize) -> bool) -> Option<Place> {
        taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                fits(now).then_some(now + 1)
            })
            .ok()
            .map(|_| Place(taken.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// 503 with `Retry-After` and a JSON-RPC error saying `message`: a cap is reached.
pub fn busy(message: String) -> Response {
    let rejection = Rejection {
        code: SERVER_BUSY,
        message,
        id: Value::Null,
    };
    let mut response = rejection.into_response(StatusCode::SERVICE_UNAVAILABLE);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(BUSY_RETRY_AFTER_S));
    response
}

/// 429 with `Retry-After` and a JSON-RPC error: one client's quota is reached.
pub fn over_quota(refusal: &OverQuota) -> Response {
    tracing::debug!(holder = %refusal.holder, quota = refusal.what, "a client is over its quota");
    let rejection = Rejection {
        code: SERVER_BUSY,
        message: format!("Too Many Requests: {}", refusal.message()),
        id: Value::Null,
    };
    let mut response = rejection.into_response(StatusCode::TOO_MANY_REQUESTS);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(refusal.retry_after.unwrap_or_default().as_secs().max(1)),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_taken_only_while_one_fits_and_given_back_when_dropped() {
        let taken = Arc::new(AtomicUsize::new(0));
        let first = Place::take(&taken, |now| now < 2).unwrap();
        let _second = Place::take(&taken, |now| now < 2).unwrap();
        assert!(Place::take(&taken, |now| now < 2).is_none());
        drop(first);
        assert!(Place::take(&taken, |now| now < 2).is_some());
    }
}
