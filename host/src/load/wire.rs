//! What the load tester's two transports share, the HTTP client (`client.rs`) and the stdio
//! link (`stdio.rs`): the ways a request can fail on the wire, and the `list_changed` each
//! session counts, whichever transport carried it.

use std::{
    sync::{
        Mutex,
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
}

impl Notices {
    pub(super) fn record(&self) {
        // A std Mutex: held for one store, never across an await.
        *self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(Instant::now());
        self.count.fetch_add(1, Ordering::SeqCst);
        self.arrived.notify_waiters();
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
                return *self
                    .last
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}

/// Whether `message` is a `notifications/tools/list_changed`.
pub(super) fn is_list_changed(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some(LIST_CHANGED)
}
