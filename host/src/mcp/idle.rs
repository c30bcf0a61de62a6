//! When an HTTP connection is idle, and for how long it may stay so.
//!
//! hyper has one clock for this, its header read timeout, and runs it both while a client sends
//! a request head and while a keep-alive connection waits for its next request. An operator needs
//! two: a short one against slowloris clients (`--header-timeout`) and a longer one for clients
//! that keep a connection open between requests (`--keepalive-timeout`). So each connection here
//! carries an [`Activity`] that knows which wait it is in:
//!
//! - **a request in flight** (its response not sent in full, an open SSE stream among them): no
//!   deadline. An event stream is never idle; rmcp sends SSE comments on it meanwhile.
//! - **bytes of a request head arrived** since the last response: `header_timeout` from the
//!   first of them.
//! - **nothing at all yet** on a new connection: `header_timeout` from the accept.
//! - **idle between requests**: `keepalive_timeout` from the end of the last response.
//!
//! [`Activity::watch`] wraps the connection's byte stream (reads say a head has begun),
//! [`Activity::wrap`] the service (a request begins when hyper hands it over and ends when its
//! response body is dropped), and [`Activity::expired`] resolves when the deadline of the
//! current wait passes; the accept loop then drops the connection.
//!
//! Over HTTP/2 any frame that arrives with no request in flight (a client's PING, say) counts as
//! the start of a head, so an HTTP/2 connection that only pings is closed after the header
//! timeout. MCP clients speak HTTP/1.1 in practice; a finer rule would need hyper's frames.
//!
//! It must not add work per byte beyond one uncontended lock on a read that returned data.

use std::{
    convert::Infallible,
    io,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::Request,
    response::Response,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::Notify,
    time::Instant,
};
use tower::ServiceExt;

/// What a connection is waiting for, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A new connection: for its first byte.
    FirstRequest { since: Instant },
    /// Between requests: for the next one.
    Idle { since: Instant },
    /// For the rest of a request head whose first bytes arrived.
    Head { since: Instant },
}

#[derive(Debug)]
struct State {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    wait: Wait,
}

/// One connection's activity (see the module doc).
#[derive(Debug)]
pub struct Activity {
    state: Mutex<State>,
    /// Woken on every change of state, so [`Activity::expired`] recomputes its deadline.
    changed: Notify,
    header_timeout: Duration,
    keepalive_timeout: Duration,
}

impl Activity {
    pub fn new(header_timeout: Duration, keepalive_timeout: Duration) -> Arc<Activity> {
        Arc::new(Activity {
            state: Mutex::new(State {
                in_flight: 0,
                wait: Wait::FirstRequest {
                    since: Instant::now(),
                },
            }),
            changed: Notify::new(),
            header_timeout,
            keepalive_timeout,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A std Mutex: nothing awaits while it is held, and the state stays consistent even if a
        // holder panicked (every change is a single assignment).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the current wait ends the connection; `None` while a request is in flight.
    fn deadline(&self) -> Option<Instant> {
        let state = self.lock();
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.wait {
            Wait::FirstRequest { since } | Wait::Head { since } => since + self.header_timeout,
            Wait::Idle { since } => since + self.keepalive_timeout,
        })
    }

    /// Resolves once the connection has waited past its current deadline.
    pub async fn expired(&self) {
        loop {
            // `notify_one` keeps a permit when nobody waits, so a change made between reading
            // the deadline and waiting below is not missed.
            match self.deadline() {
                None => self.changed.notified().await,
                Some(deadline) => {
                    tokio::select! {
                        () = self.changed.notified() => {}
                        () = tokio::time::sleep_until(deadline) => {
                            if self.deadline().is_some_and(|now_due| now_due <= Instant::now()) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Bytes arrived: when nothing is in flight, they begin a request head.
    fn bytes_read(&self) {
        let mut state = self.lock();
        if state.in_flight == 0 && !matches!(state.wait, Wait::Head { .. }) {
            state.wait = Wait::Head {
                since: Instant::now(),
            };
            drop(state);
            self.changed.notify_one();
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.lock().in_flight += 1;
        self.changed.notify_one();
        InFlight {
            activity: self.clone(),
        }
    }

    fn request_ended(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.wait = Wait::Idle {
                since: Instant::now(),
            };
        }
        drop(state);
        self.changed.notify_one();
    }

    /// `io` reporting its reads to this activity.
    pub fn watch<IO>(self: &Arc<Self>, io: IO) -> Watched<IO> {
        Watched {
            io,
            activity: self.clone(),
        }
    }

    /// `app` as a service that counts its requests in flight until their response bodies end.
    pub fn wrap(
        self: Arc<Self>,
        app: Router,
    ) -> impl tower::Service<
        Request<hyper::body::Incoming>,
        Response = Response,
        Error = Infallible,
        Future = impl Future<Output = Result<Response, Infallible>> + Send,
    > + Clone {
        let activity = self;
        tower::service_fn(move |request: Request<hyper::body::Incoming>| {
            let in_flight = activity.request_started();
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(Body::new)).await?;
                Ok(hold_until_sent(response, in_flight))
            }
        })
    }
}

/// A request in flight; dropping it (with its response body) ends it.
#[derive(Debug)]
struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.activity.request_ended();
    }
}

/// `response`, with `held` kept until hyper has sent its body in full (or the connection went
/// away): how a request is counted in flight until its response (an event stream among them)
/// ends. For the connection here, and for its session in `session_records.rs`.
pub fn hold_until_sent<T: Send + Unpin + 'static>(response: Response, held: T) -> Response {
    response.map(|body| Body::new(TrackedBody { body, _held: held }))
}

/// A response body that holds something until hyper has sent it all.
struct TrackedBody<T> {
    body: Body,
    _held: T,
}

impl<T: Unpin> http_body::Body for TrackedBody<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's byte stream that tells its [`Activity`] when data arrives.
#[derive(Debug)]
pub struct Watched<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The SSE keep-alive interval for a keep-alive timeout: comfortably below it (half), and no
/// longer than rmcp's default of 15 s, so proxies with their own idle timers see traffic too.
pub fn sse_keepalive_interval(keepalive_timeout: Duration) -> Duration {
    (keepalive_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_wait_has_its_own_deadline() {
        let activity = Activity::new(Duration::from_secs(10), Duration::from_secs(60));
        let opened = Instant::now();
        assert_eq!(activity.deadline(), Some(opened + Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.bytes_read();
        let head = Instant::now();
        assert_eq!(activity.deadline(), Some(head + Duration::from_secs(10)));
        let request = activity.request_started();
        assert_eq!(activity.deadline(), None, "in flight: no deadline");
        activity.bytes_read();
        assert_eq!(activity.deadline(), None, "a request body is not a head");
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(request);
        let idle = Instant::now();
        assert_eq!(activity.deadline(), Some(idle + Duration::from_secs(60)));
        activity.bytes_read();
        assert_eq!(
            activity.deadline(),
            Some(idle + Duration::from_secs(10)),
            "the next head has the header timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expired_waits_out_a_request_in_flight() {
        let activity = Activity::new(Duration::from_secs(1), Duration::from_secs(5));
        let request = activity.request_started();
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired().await }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(
            !expired.is_finished(),
            "expired while a request was in flight"
        );
        drop(request);
        let ended = Instant::now();
        expired.await.unwrap();
        assert!(Instant::now() >= ended + Duration::from_secs(5));
    }

    #[test]
    fn keepalive_comments_come_well_within_the_timeout() {
        assert_eq!(
            sse_keepalive_interval(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(
            sse_keepalive_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
