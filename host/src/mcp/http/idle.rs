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
//! - **a request body too slow** (`body_clock.rs` tells it): at once, whatever is in flight.
//!
//! [`Activity::watch`] wraps the connection's byte stream (reads say a head has begun),
//! [`Activity::wrap`] the service (a request begins when hyper hands it over and ends when its
//! response body is dropped; its body is timed by `body_clock.rs`), and [`Activity::expired`]
//! resolves when the deadline of the current wait passes; the accept loop then drops the
//! connection.
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

use super::body_clock::{Late, TimedBody};

/// What a connection is waiting for, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A new connection: for its first byte.
    FirstRequest { since: Instant },
    /// Between requests: for the next one.
    Idle { since: Instant },
    /// For the rest of a request head whose first bytes arrived.
    Head { since: Instant },
    /// For nothing: a request body did not come in time, and the connection is to be closed.
    BodyLate { since: Instant },
}

#[derive(Debug)]
struct State {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    wait: Wait,
    /// The deadline [`Activity::expired`] sleeps until, `None` when it sleeps without one.
    armed: Option<Instant>,
}

/// One connection's activity (see the module doc).
#[derive(Debug)]
pub struct Activity {
    state: Mutex<State>,
    /// Woken when the deadline moves before the one [`Activity::expired`] sleeps until. Only
    /// then: the waiter shares the connection's task with hyper, so every wake-up re-polls the
    /// connection too, and waking it on each of a request's three changes (head, start, end)
    /// cost more than the rest of this module. A deadline that moves later (every change of a
    /// busy keep-alive connection once it has armed the header timeout) lets the waiter wake
    /// early, find the later deadline and sleep again.
    changed: Notify,
    header_timeout: Duration,
    keepalive_timeout: Duration,
    body_timeout: Duration,
}

impl Activity {
    pub fn new(
        header_timeout: Duration,
        keepalive_timeout: Duration,
        body_timeout: Duration,
    ) -> Arc<Activity> {
        Arc::new(Activity {
            state: Mutex::new(State {
                in_flight: 0,
                wait: Wait::FirstRequest {
                    since: Instant::now(),
                },
                armed: None,
            }),
            changed: Notify::new(),
            header_timeout,
            keepalive_timeout,
            body_timeout,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A std Mutex: nothing awaits while it is held, and the state stays consistent even if a
        // holder panicked (every change is a single assignment).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the current wait ends the connection; `None` while a request is in flight.
    fn deadline(&self) -> Option<Instant> {
        self.deadline_of(&self.lock())
    }

    fn deadline_of(&self, state: &State) -> Option<Instant> {
        if let Wait::BodyLate { since } = state.wait {
            return Some(since);
        }
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.wait {
            Wait::FirstRequest { since } | Wait::Head { since } => since + self.header_timeout,
            Wait::Idle { since } => since + self.keepalive_timeout,
            Wait::BodyLate { since } => since,
        })
    }

    /// Whether the connection is being closed for a request body that did not come in time.
    pub fn body_was_late(&self) -> bool {
        matches!(self.lock().wait, Wait::BodyLate { .. })
    }

    /// The state changed: wakes the waiter if the deadline now comes before the one it sleeps
    /// until (see the `changed` field).
    fn wake_if_sooner(&self, state: std::sync::MutexGuard<'_, State>) {
        let sooner = match (self.deadline_of(&state), state.armed) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(deadline), Some(armed)) => deadline < armed,
        };
        drop(state);
        if sooner {
            self.changed.notify_one();
        }
    }

    /// The current deadline, recorded as the one the waiter sleeps until.
    fn arm(&self) -> Option<Instant> {
        let mut state = self.lock();
        state.armed = self.deadline_of(&state);
        state.armed
    }

    /// Resolves once the connection has waited past its current deadline.
    pub async fn expired(&self) {
        loop {
            // `notify_one` keeps a permit when nobody waits, so a change made between arming
            // and waiting below is not missed.
            match self.arm() {
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
        if state.in_flight == 0
            && matches!(state.wait, Wait::FirstRequest { .. } | Wait::Idle { .. })
        {
            state.wait = Wait::Head {
                since: Instant::now(),
            };
            self.wake_if_sooner(state);
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut state = self.lock();
        state.in_flight += 1;
        self.wake_if_sooner(state);
        InFlight {
            activity: self.clone(),
        }
    }

    fn request_ended(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 && !matches!(state.wait, Wait::BodyLate { .. }) {
            state.wait = Wait::Idle {
                since: Instant::now(),
            };
        }
        self.wake_if_sooner(state);
    }

    /// `io` reporting its reads to this activity.
    pub fn watch<IO>(self: &Arc<Self>, io: IO) -> Watched<IO> {
        Watched {
            io,
            activity: self.clone(),
        }
    }

    /// `app` as a service that counts its requests in flight until their response bodies end,
    /// and times their bodies (`body_clock.rs`). Each request carries the client's address
    /// (`quotas::ClientAddr`).
    pub fn wrap(
        self: Arc<Self>,
        app: Router,
        client: std::net::IpAddr,
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
            let body_timeout = activity.body_timeout;
            let mut request =
                request.map(|body| Body::new(TimedBody::new(body, activity.clone(), body_timeout)));
            request
                .extensions_mut()
                .insert(crate::mcp::quotas::ClientAddr(client));
            async move {
                let response = app.oneshot(request).await?;
                Ok(hold_until_sent(response, in_flight))
            }
        })
    }
}

impl Late for Activity {
    /// A request body did not come in time: the connection is closed now, whatever is in flight
    /// on it (`Activity::expired` resolves).
    fn body_late(&self) {
        let mut state = self.lock();
        state.wait = Wait::BodyLate {
            since: Instant::now(),
        };
        drop(state);
        self.changed.notify_one();
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
        let activity = Activity::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
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

    /// Whether a wake-up is waiting for [`Activity::expired`] (consumes it).
    fn woken(activity: &Activity) -> bool {
        use futures_util::FutureExt;
        activity.changed.notified().now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_sooner_deadline_wakes_the_waiter() {
        let activity = Activity::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        activity.arm();
        tokio::time::advance(Duration::from_secs(1)).await;
        // A busy connection's requests: every deadline is later than the armed one.
        for _ in 0..3 {
            activity.bytes_read();
            let request = activity.request_started();
            drop(request);
        }
        assert!(!woken(&activity), "later deadlines let the waiter sleep");
        // Idle, armed at the keep-alive deadline: a new head has the sooner header timeout.
        activity.arm();
        activity.bytes_read();
        assert!(woken(&activity), "a sooner deadline wakes it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_expires_a_keepalive_after_its_last_response() {
        let activity = Activity::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired().await }
        });
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        activity.bytes_read();
        let request = activity.request_started();
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(request);
        let ended = Instant::now();
        // Past the header timeout the waiter wakes, finds the later deadline and sleeps again.
        tokio::time::advance(Duration::from_secs(58)).await;
        tokio::task::yield_now().await;
        assert!(
            !expired.is_finished(),
            "expired before the keep-alive timeout"
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        expired.await.unwrap();
        assert!(Instant::now() >= ended + Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn expired_waits_out_a_request_in_flight() {
        let activity = Activity::new(
            Duration::from_secs(1),
            Duration::from_secs(5),
            Duration::from_secs(10),
        );
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

    #[tokio::test(start_paused = true)]
    async fn a_late_body_expires_the_connection_with_its_request_in_flight() {
        let activity = Activity::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(10),
        );
        let request = activity.request_started();
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!expired.is_finished(), "expired with a request in flight");
        activity.body_late();
        expired.await.unwrap();
        assert!(activity.body_was_late());
        // Neither the end of its request nor more bytes make it a connection to keep.
        drop(request);
        activity.bytes_read();
        assert!(activity.body_was_late());
        assert!(activity.deadline().is_some_and(|due| due <= Instant::now()));
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
