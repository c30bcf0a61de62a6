//! Connections past `--max-connections`: a few ([`PAST_THE_CAP`]) are still accepted, so that
//! `/healthz` and `/readyz` are answered whatever holds the others (event streams and listens,
//! bodies that trickle, keep-alive connections that sit idle, clients that do not read).
//!
//! The accept loop takes a place within the cap when there is one, else one past it, and waits
//! only when both are taken. A connection past the cap is served like any other, except that
//! nothing but a probe is served on it before it has a place within the cap:
//! - a probe is answered at once (over HTTP/1 with `Connection: close`, so its place is free for
//!   the next as soon as the answer is written);
//! - any other request waits for a place within the cap, as it would have waited in the listen
//!   backlog, at most `--keepalive-timeout` (the longest an idle connection keeps its place).
//!   With one, the connection is an ordinary one and its place past the cap is free; without,
//!   or once the server drains, it gets 503 with `Retry-After` and the connection closes.
//!
//! So the cap holds for everything but the probes, and the probes find a place unless all the
//! places past it are taken too: by clients beyond the cap each sending a head slowly (for at
//! most `--header-timeout`), or each waiting for a place itself (at most `--keepalive-timeout`).
//!
//! It must not count anything that connections within the cap do: those pass here once, when
//! their place is taken, and their requests never meet this module.

use std::{
    convert::Infallible,
    sync::{
        Arc, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::Request,
    http::{HeaderValue, Version, header},
    response::Response,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::caps::{BUSY_RETRY_AFTER_S, busy};

/// How many connections may be open past `--max-connections`, for the probes (and the requests
/// waiting for a place among them).
pub const PAST_THE_CAP: usize = 8;

/// The probes' paths: answered on a connection past the cap.
const PROBES: &[&str] = &["/healthz", "/readyz"];

/// The places of connections: `max` within the cap, and [`PAST_THE_CAP`] past it.
pub struct Places {
    within: Arc<Semaphore>,
    past: Arc<Semaphore>,
    max: usize,
    /// How long a request past the cap waits for a place within it.
    wait: Duration,
    /// Cancelled when the server drains: no request waits for a place any more.
    draining: CancellationToken,
}

/// A connection's place, held for its whole life.
pub enum Seat {
    // Never read: held for the connection's life, its drop gives the place back.
    Within(#[allow(dead_code)] OwnedSemaphorePermit),
    Past(Arc<PastTheCap>),
}

/// A connection past the cap: its place, which its first request that is not a probe exchanges
/// for one within the cap.
pub struct PastTheCap {
    /// Its place, past the cap until it is exchanged. A std Mutex: nothing awaits while it is
    /// held.
    held: std::sync::Mutex<OwnedSemaphorePermit>,
    /// Whether the place it holds is within the cap.
    within: AtomicBool,
    /// Held by the request waiting for a place (over HTTP/2, the connection's others that are
    /// not probes wait behind it, for the same place).
    waiting: tokio::sync::Mutex<()>,
    places: Arc<Places>,
}

impl Places {
    pub fn new(max: usize, wait: Duration, draining: CancellationToken) -> Arc<Places> {
        Arc::new(Places {
            within: Arc::new(Semaphore::new(max)),
            past: Arc::new(Semaphore::new(PAST_THE_CAP)),
            max,
            wait,
            draining,
        })
    }

    /// The next connection's place: within the cap if one is free, else past it; waits while
    /// there is neither.
    pub async fn next(self: &Arc<Self>) -> Seat {
        tokio::select! {
            biased;
            permit = self.within.clone().acquire_owned() => {
                Seat::Within(permit.expect("the semaphore is never closed"))
            }
            permit = self.past.clone().acquire_owned() => {
                self.past_the_cap(permit.expect("the semaphore is never closed"))
            }
        }
    }

    /// Places within the cap free now.
    pub fn free(&self) -> usize {
        self.within.available_permits()
    }

    fn past_the_cap(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Seat {
        Seat::Past(Arc::new(PastTheCap {
            held: std::sync::Mutex::new(permit),
            within: AtomicBool::new(false),
            waiting: tokio::sync::Mutex::new(()),
            places: self.clone(),
        }))
    }
}

impl Seat {
    /// A place past the cap exchanged for one within it, if one was freed meanwhile (the accept
    /// loop took it while none was, then waited for a connection).
    pub fn within_if_free(self, places: &Places) -> Seat {
        match self {
            Seat::Past(_) => match places.within.clone().try_acquire_owned() {
                Ok(permit) => Seat::Within(permit),
                Err(_) => self,
            },
            within => within,
        }
    }
}

impl PastTheCap {
    /// A place within the cap for this connection, waited for at most as long as the places
    /// say; `false` when none came.
    async fn take_a_place(&self) -> bool {
        if self.is_within() {
            return true;
        }
        let _turn = self.waiting.lock().await;
        if self.is_within() {
            return true;
        }
        let places = &self.places;
        let permit = tokio::select! {
            permit = tokio::time::timeout(places.wait, places.within.clone().acquire_owned()) => {
                permit.ok().and_then(Result::ok)
            }
            () = places.draining.cancelled() => None,
        };
        let Some(permit) = permit else {
            return false;
        };
        // The place past the cap is given back as the one within it is taken.
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = permit;
        self.within.store(true, Ordering::Release);
        true
    }

    fn is_within(&self) -> bool {
        self.within.load(Ordering::Acquire)
    }
}

/// `app` as served on a connection past the cap: probes at once, anything else once the
/// connection has a place within the cap (see the module doc).
pub fn probes_first(app: Router, seat: Arc<PastTheCap>) -> Router {
    let max = seat.places.max;
    Router::new().fallback_service(tower::service_fn(move |request: Request| {
        let (app, seat) = (app.clone(), seat.clone());
        async move {
            // `Connection` is HTTP/1's; over HTTP/2 hyper would drop it, with a warning.
            let http1 = request.version() < Version::HTTP_2;
            if PROBES.contains(&request.uri().path()) {
                let within = seat.is_within();
                let mut response = app.oneshot(request).await?;
                if http1 && !within {
                    closing(&mut response);
                }
                return Ok::<_, Infallible>(response);
            }
            if seat.take_a_place().await {
                return app.oneshot(request).await;
            }
            tracing::debug!("refused a request past the connection limit: no place came free");
            let mut response = busy(format!(
                "Service Unavailable: this server holds its maximum of {max} connections \
                 (--max-connections); retry in {BUSY_RETRY_AFTER_S} s"
            ));
            if http1 {
                closing(&mut response);
            }
            Ok(response)
        }
    }))
}

/// Marks `response` as the last on its HTTP/1 connection (hyper closes it once written).
fn closing(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, http::StatusCode, routing::get};

    use super::*;

    fn app() -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/mcp", get(|| async { "served" }))
    }

    fn get_of(path: &str) -> Request {
        Request::builder().uri(path).body(Body::empty()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_cap_a_probe_is_answered_and_anything_else_waits_for_a_place() {
        let places = Places::new(1, Duration::from_secs(60), CancellationToken::new());
        let Seat::Within(first) = places.next().await else {
            panic!("the one place within the cap");
        };
        let Seat::Past(past) = places.next().await else {
            panic!("a place past the cap");
        };
        let served = probes_first(app(), past.clone());
        let probe = served.clone().oneshot(get_of("/healthz")).await.unwrap();
        assert_eq!(probe.status(), StatusCode::OK);
        assert_eq!(probe.headers()[header::CONNECTION], "close");
        // A request waits for the place within the cap, then is served on it.
        let waiting = tokio::spawn(served.clone().oneshot(get_of("/mcp")));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "served past the cap");
        assert_eq!(places.past.available_permits(), PAST_THE_CAP - 1);
        drop(first);
        let answer = waiting.await.unwrap().unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        // Its place past the cap is free again; the connection now is an ordinary one.
        assert_eq!(places.past.available_permits(), PAST_THE_CAP);
        assert_eq!(places.free(), 0);
        let probe = served.oneshot(get_of("/healthz")).await.unwrap();
        assert!(!probe.headers().contains_key(header::CONNECTION));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_waits_too_long_gets_503_and_the_connection_closes() {
        let places = Places::new(1, Duration::from_secs(3), CancellationToken::new());
        let _first = places.next().await;
        let Seat::Past(past) = places.next().await else {
            panic!("a place past the cap");
        };
        let answer = probes_first(app(), past)
            .oneshot(get_of("/mcp"))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "5");
        assert_eq!(answer.headers()[header::CONNECTION], "close");
    }

    #[tokio::test(start_paused = true)]
    async fn past_every_place_the_next_connection_waits() {
        let places = Places::new(1, Duration::from_secs(3), CancellationToken::new());
        let mut seats = Vec::new();
        for _ in 0..=PAST_THE_CAP {
            seats.push(places.next().await);
        }
        let next = tokio::time::timeout(Duration::from_secs(1), places.next()).await;
        assert!(next.is_err(), "a place beyond every place");
        // A place past the cap freed while none within it was: taken, and kept past the cap
        // until one within it frees.
        seats.pop();
        let seat = places.next().await;
        assert!(matches!(seat.within_if_free(&places), Seat::Past(_)));
        seats.remove(0);
        let seat = places.next().await;
        assert!(matches!(seat, Seat::Within(_)));
    }
}
