//! A request body's clock: a body must arrive in full within `--body-timeout` of the moment its
//! handler first had to wait for it, and, past its first [`GRACE`], at [`MIN_RATE`] on average at
//! least. Past either, the connection it came on is told ([`Late`]), and closes (`idle.rs`).
//!
//! The clock starts only when a body is first found not there yet: a body that came with its
//! head (nearly every MCP request, a few hundred bytes) is read without a timer or a clock
//! reading: a request pays for its clock a reference count and a few words more in the box its
//! body already has. A body that keeps its handler waiting gets one timer (boxed), moved later
//! as its bytes come in. A handler that drops a body unread stops its
//! clock: hyper then reads no more of it and closes the connection after the answer.
//!
//! It must not answer the client: a body that does not come is a client that is not talking
//! HTTP at the speed of any real one, and the end of its connection is the answer. So a body
//! whose clock ran out does not end with an error its handler would answer (a 400 that could
//! beat the connection's close): it waits on, until the connection it came on is dropped, and
//! only then ends with [`BodyTooSlow`].

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How long a body may be waited for before its rate counts. (`--body-timeout`'s help, in
/// `config/settings.rs`, says this and [`MIN_RATE`] in words.)
pub const GRACE: Duration = Duration::from_secs(2);

/// The slowest a body may arrive once its [`GRACE`] is over, in bytes a second, on average since
/// it was first waited for.
pub const MIN_RATE: u64 = 1024;

/// Told when a body's clock runs out: the connection it came on, which is then closed.
pub trait Late: Send + Sync + 'static {
    fn body_late(&self);
}

/// The error a body whose clock ran out ends with, once its connection is gone.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive in time (--body-timeout, or slower than {MIN_RATE} bytes a second)"
)]
pub struct BodyTooSlow;

/// A request body with its clock.
pub struct TimedBody<B, L> {
    body: B,
    late: Arc<L>,
    timeout: Duration,
    /// Started when the body was first waited for; dropped when it has all come.
    clock: Option<Clock>,
    ran_out: bool,
}

impl<B, L> TimedBody<B, L> {
    pub fn new(body: B, late: Arc<L>, timeout: Duration) -> Self {
        TimedBody {
            body,
            late,
            timeout,
            clock: None,
            ran_out: false,
        }
    }
}

/// When a body was first waited for, how much of it came since, and the timer of its deadline.
struct Clock {
    started: Instant,
    received: u64,
    timer: Pin<Box<Sleep>>,
}

impl Clock {
    fn start(timeout: Duration) -> Clock {
        let started = Instant::now();
        Clock {
            started,
            received: 0,
            timer: Box::pin(tokio::time::sleep_until(started + timeout.min(GRACE))),
        }
    }

    /// The end of `timeout`, or sooner, when what came so far is less than the rate asks.
    fn deadline(&self, timeout: Duration) -> Instant {
        let at_rate = GRACE + Duration::from_millis(self.received.saturating_mul(1000) / MIN_RATE);
        self.started + timeout.min(at_rate)
    }

    /// Whether the deadline has passed; if not, the task is woken when it does.
    fn ran_out(&mut self, timeout: Duration, cx: &mut Context<'_>) -> bool {
        let deadline = self.deadline(timeout);
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

impl<B, L> Body for TimedBody<B, L>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
    L: Late,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        if this.ran_out {
            // Waiting for the connection's end, which ends the body underneath.
            return match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(_) => Poll::Ready(Some(Err(BodyTooSlow.into()))),
            };
        }
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(clock), Some(data)) = (&mut this.clock, frame.data_ref()) {
                    clock.received += data.len() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => {
                this.clock = None;
                Poll::Ready(other.map(|frame| frame.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let clock = this.clock.get_or_insert_with(|| Clock::start(timeout));
                if !clock.ran_out(timeout, cx) {
                    return Poll::Pending;
                }
                this.clock = None;
                this.ran_out = true;
                this.late.body_late();
                // The body underneath has the task's waker: its end (the connection's) wakes it.
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.ran_out && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures_util::StreamExt;
    use http_body_util::{BodyExt, StreamBody};
    use tokio::sync::mpsc;

    use super::*;

    /// The connection, as far as a body can tell: told when its clock ran out.
    #[derive(Default)]
    struct Connection {
        told: AtomicBool,
    }

    impl Late for Connection {
        fn body_late(&self) {
            self.told.store(true, Ordering::SeqCst);
        }
    }

    /// A body whose chunks the test sends, timed with `timeout`.
    fn body(
        timeout: Duration,
    ) -> (
        mpsc::UnboundedSender<Bytes>,
        Arc<Connection>,
        impl Body<Data = Bytes, Error = axum::BoxError> + Unpin,
    ) {
        let (sender, mut receiver) = mpsc::unbounded_channel::<Bytes>();
        let chunks = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
            .map(|chunk| Ok::<_, axum::BoxError>(Frame::data(chunk)));
        let connection = Arc::new(Connection::default());
        let timed = TimedBody::new(
            StreamBody::new(Box::pin(chunks)),
            connection.clone(),
            timeout,
        );
        (sender, connection, timed)
    }

    /// Sends `chunk` every second until the connection is told its body is late, then drops
    /// the connection (here: the body's sender), as the accept loop does.
    fn send_every_second(
        sender: mpsc::UnboundedSender<Bytes>,
        connection: Arc<Connection>,
        chunk: &'static [u8],
    ) {
        tokio::spawn(async move {
            while !connection.told.load(Ordering::SeqCst) {
                sender.send(Bytes::from_static(chunk)).unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Reads `body` to its end: when it was cut, how long after the start that was.
    async fn cut_after(
        mut body: impl Body<Data = Bytes, Error = axum::BoxError> + Unpin,
    ) -> Option<Duration> {
        let started = Instant::now();
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(error)) => {
                    assert!(error.is::<BodyTooSlow>(), "{error}");
                    return Some(started.elapsed());
                }
                None => return None,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_is_there_is_read_without_a_clock() {
        let (sender, connection, mut body) = body(Duration::from_secs(10));
        sender.send(Bytes::from_static(b"{}")).unwrap();
        drop(sender);
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "{}");
        assert!(body.frame().await.is_none());
        assert!(!connection.told.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_once_it_falls_below_the_rate() {
        let (sender, connection, body) = body(Duration::from_secs(10));
        send_every_second(sender, connection.clone(), b"x");
        // A byte a second: cut just past the grace, long before the timeout.
        let after = cut_after(body).await.expect("cut");
        assert!(
            connection.told.load(Ordering::SeqCst),
            "the connection is told"
        );
        assert!(
            after >= GRACE && after < GRACE + Duration::from_secs(2),
            "{after:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_rate_is_cut_only_at_the_timeout() {
        let (sender, connection, body) = body(Duration::from_secs(5));
        send_every_second(sender, connection.clone(), &[b'x'; 4096]);
        let after = cut_after(body).await.expect("cut");
        assert!(connection.told.load(Ordering::SeqCst));
        assert!(
            after >= Duration::from_secs(5) && after < Duration::from_secs(7),
            "{after:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_comes_in_time_is_not_cut() {
        let (sender, connection, body) = body(Duration::from_secs(5));
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                sender.send(Bytes::from(vec![b'x'; 2048])).unwrap();
            }
        });
        let whole = body.collect().await.unwrap().to_bytes();
        assert_eq!(whole.len(), 3 * 2048);
        assert!(!connection.told.load(Ordering::SeqCst));
    }
}
