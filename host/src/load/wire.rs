//! What the load tester's two transports share, the HTTP client (`client.rs`) and the stdio
//! link (`stdio.rs`): the ways a request can fail on the wire, and the `list_changed` each
//! session counts, whichever transport carried it.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;
use tokio::sync::Notify;

const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Why a request got no usable answer: the transport's failures, not the server's verdicts.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the server: {0}")]
    Connect(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("the server ended the session (HTTP 404)")]
    SessionGone,
    #[error("unreadable answer: {0}")]
    BadAnswer(String),
}

impl ClientError {
    /// A short, stable name, for counting errors by kind.
    pub fn kind(&self) -> String {
        match self {
            ClientError::Connect(_) => "transport: connect".into(),
            ClientError::Timeout(_) => "transport: timeout".into(),
            ClientError::Status(code) => format!("transport: HTTP {code}"),
            ClientError::SessionGone => "transport: session gone".into(),
            ClientError::BadAnswer(_) => "transport: bad answer".into(),
        }
    }

    pub(super) fn from_reqwest(error: reqwest::Error, timeout: Duration) -> ClientError {
        if error.is_timeout() {
            ClientError::Timeout(timeout)
        } else {
            ClientError::Connect(error.to_string())
        }
    }
}

/// The `list_changed` notifications one session has heard.
#[derive(Default)]
pub struct Notices {
    count: AtomicU64,
    last: Mutex<Option<Instant>>,
    arrived: Notify,
    /// What every session of its endpoint heard, counted together.
    tally: Arc<Tally>,
}

impl Notices {
    /// A session's notices, counted in `tally` too.
    pub(super) fn counted_in(tally: Arc<Tally>) -> Notices {
        Notices {
            tally,
            ..Notices::default()
        }
    }

    pub(super) fn record(&self) {
        // A std Mutex: held for one store, never across an await.
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(Instant::now());
        self.count.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_waiters();
        self.tally.heard_one();
    }

    /// When the last one arrived.
    pub fn last(&self) -> Option<Instant> {
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits up to `timeout` until at least `n` have arrived; when they have, the time the last
    /// one arrived.
    pub async fn wait_for(&self, n: u64, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.arrived.notified();
            if self.count() >= n {
                return self.last();
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}

/// The `list_changed` the sessions of one endpoint heard, together: what a fan-out round waits
/// on. Its waiter is woken once, when the count it waits for is reached: waiting on each of N
/// sessions instead woke the waiting task N times from every reading thread, which on 2 cores
/// cost the load tester a tenth of its CPU per notice (BENCHMARKS.md, "Fan-out").
#[derive(Default)]
pub struct Tally {
    heard: AtomicU64,
    /// The count a waiter waits for.
    target: AtomicU64,
    reached: Notify,
}

impl Tally {
    fn heard_one(&self) {
        let heard = self.heard.fetch_add(1, Ordering::SeqCst) + 1;
        if heard == self.target.load(Ordering::SeqCst) {
            self.reached.notify_one();
        }
    }

    pub fn heard(&self) -> u64 {
        self.heard.load(Ordering::SeqCst)
    }

    /// Waits up to `timeout` until `n` have been heard in all; whether they were. One waiter at
    /// a time.
    pub async fn wait_for(&self, n: u64, timeout: Duration) -> bool {
        // Set before the count is read: a notice counted after the read sees the target.
        self.target.store(n, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // A permit left by an earlier round only costs one more turn of this loop.
            let reached = self.reached.notified();
            if self.heard() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, reached).await.is_err() {
                return self.heard() >= n;
            }
        }
    }
}

/// Whether `message` is a `notifications/tools/list_changed`.
pub(super) fn is_list_changed(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some(LIST_CHANGED)
}

/// Whether the data of an SSE event is a `notifications/tools/list_changed`: read for its method
/// alone, borrowed, since an event stream carries one per session per transition.
pub(super) fn is_list_changed_event(data: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method>(data)
        .is_ok_and(|message| message.method.as_deref() == Some(LIST_CHANGED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_a_list_changed_by_its_method_alone() {
        assert!(is_list_changed_event(
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#
        ));
        // Escaped, the method is still read.
        assert!(is_list_changed_event(
            br#"{"method":"notifications\/tools\/list_changed","params":{}}"#
        ));
        for other in [
            &br#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            b"not json",
        ] {
            assert!(!is_list_changed_event(other));
        }
    }

    #[tokio::test]
    async fn a_tally_wakes_its_waiter_when_every_session_heard() {
        let tally = Arc::new(Tally::default());
        let sessions: Vec<Notices> = (0..3).map(|_| Notices::counted_in(tally.clone())).collect();
        sessions[0].record();
        assert!(tally.wait_for(1, Duration::from_secs(5)).await);
        let waiting = tokio::spawn({
            let tally = tally.clone();
            async move { tally.wait_for(4, Duration::from_secs(5)).await }
        });
        for session in &sessions {
            tokio::task::yield_now().await;
            session.record();
        }
        assert!(waiting.await.unwrap());
        assert!(!tally.wait_for(5, Duration::from_millis(20)).await);
        assert_eq!(sessions[0].count(), 2);
    }
}
