//! Accepting HTTP connections so that a long-running server cannot be locked up by its sockets:
//! a cap on open connections with back-pressure, deadlines for request headers and bodies,
//! `TCP_NODELAY`, and a drain that lets responses in flight finish.
//!
//! `axum::serve` has none of the limits, so this is the accept loop of axum's "serve with hyper"
//! pattern, with them added:
//! - **`max_connections`**: a connection holds a place for its whole life, and the loop takes a
//!   place *before* `accept`. At the cap it takes one of the few places past it
//!   (`reserve.rs`: for the probes, and for requests that wait there for a place within the
//!   cap), and once those are taken too it stops accepting, so new connections wait in the
//!   kernel's backlog instead of being accepted and starved; an accept error (such as running
//!   out of file descriptors) backs off instead of spinning.
//! - **`header_timeout`**, **`body_timeout`** and **`keepalive_timeout`**: a connection that
//!   waits for a request head longer than the first (a slowloris client, a socket that never
//!   sends), whose request body does not arrive within the second (or trickles,
//!   `body_clock.rs`), or that sits idle between requests longer than the third, is closed. A
//!   connection with a request in flight (a slow tool call, an open SSE stream) is never idle;
//!   `idle.rs` keeps the clocks.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{
    idle::Activity,
    reserve::{self, Places, Seat},
    tls::Tls,
};
use crate::actors::Workers;

/// The most an HTTP/1 connection buffers of what it reads (hyper's `max_buf_size`, at its
/// least): a request head must fit in it, and a body is read in pieces of at most this size.
///
/// Why the least: hyper's read buffer is the largest thing a held event stream costs. With its
/// default bound (~400 KiB) the buffer of a connection that sent one GET grows to 16 KiB as
/// hyper reads ahead, and stays so for the life of the stream; bounded here it stays at 8 KiB
/// (BENCHMARKS.md, "Memory per watching session"). Request heads past 8 KiB are refused (431),
/// as nginx and most proxies in front of a server refuse them by default.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// How connections are accepted and bounded.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Open connections at most; past it, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (and a new connection its first
    /// byte).
    pub header_timeout: Duration,
    /// How long a request body may take to arrive once its handler waits for it (and it must
    /// keep `body_clock::MIN_RATE` after its grace).
    pub body_timeout: Duration,
    /// How long a keep-alive connection may sit idle, with no request in flight, between
    /// requests.
    pub keepalive_timeout: Duration,
    /// The percentage of `max_connections` that responses held open (event streams, listens)
    /// may hold (`--stream-share`, `held.rs`).
    pub stream_share: u8,
}

impl ConnectionLimits {
    /// How many responses may be held open at once: `stream_share` percent of the connections,
    /// at least one.
    pub fn max_streams(&self) -> usize {
        (self.max_connections * usize::from(self.stream_share) / 100).max(1)
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            stream_share: 80,
        }
    }
}

/// The default connection cap: what the process's file-descriptor limit leaves after a reserve
/// for the store, plugins and logs (at least 64).
pub fn default_max_connections() -> usize {
    /// Descriptors kept for everything that is not a client connection.
    const RESERVE: u64 = 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` to the pointer it is given, which is valid.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let soft = if known { limit.rlim_cur } else { 1024 };
    usize::try_from(soft.saturating_sub(RESERVE).max(64)).unwrap_or(usize::MAX)
}

/// Serves `app` on `listener` until `stop_accepting` is cancelled, then lets every open
/// connection finish its responses in flight (idle keep-alive connections are closed at once,
/// open event streams end when the app ends them). Each connection is served on one of
/// `workers`, the threads its calls' instance actors run on (`actors::Workers`), or on this
/// runtime without them.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    tls: Option<Tls>,
    stop_accepting: CancellationToken,
    workers: Option<Arc<Workers>>,
) {
    let max = limits.max_connections.max(1);
    // A request past the cap waits for a place as long as an idle connection may keep one.
    let places = Places::new(max, limits.keepalive_timeout, stop_accepting.clone());
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No hyper header read timeout: it would also end idle keep-alive connections at the header
    // timeout. `idle::Activity` keeps both clocks.
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(READ_BUFFER_BYTES);
    let mut full_logged = false;
    loop {
        // Back-pressure: no place, no accept.
        let seat = tokio::select! {
            seat = places.next() => seat,
            () = stop_accepting.cancelled() => break,
        };
        if places.free() == 0 && !full_logged {
            full_logged = true;
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection limit reached; new connections wait until one closes (the probes \
                 are still answered)"
            );
        } else if places.free() > limits.max_connections / 10 {
            full_logged = false;
        }
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, or the peer gave up before the accept: wait a little
                    // for descriptors to free up rather than spin.
                    tracing::warn!(%error, "cannot accept a connection; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop_accepting.cancelled() => break,
        };
        let seat = seat.within_if_free(&places);
        // Past the cap, a connection is kept idle no longer than it may take to send a head: its
        // place is for the next probe.
        let keepalive_timeout = match seat {
            Seat::Within(_) => limits.keepalive_timeout,
            Seat::Past(_) => limits.keepalive_timeout.min(limits.header_timeout),
        };
        let connection = Connection {
            builder: builder.clone(),
            watcher: graceful.watcher(),
            peer,
            app: app.clone(),
            seat,
            activity: Activity::new(
                limits.header_timeout,
                keepalive_timeout,
                limits.body_timeout,
            ),
        };
        without_nagle(&stream);
        let tls = tls.as_ref().map(Tls::acceptor);
        let handshake_timeout = limits.header_timeout;
        let Some(workers) = &workers else {
            tokio::spawn(connection.serve_accepted(stream, tls, handshake_timeout));
            continue;
        };
        // Moved to the worker's own reactor, so the socket's readiness wakes that thread only.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%peer, %error, "cannot hand an accepted connection over");
                continue;
            }
        };
        workers.spawn(async move {
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => {
                    connection
                        .serve_accepted(stream, tls, handshake_timeout)
                        .await;
                }
                Err(error) => {
                    tracing::debug!(%peer, %error, "cannot take an accepted connection up")
                }
            }
        });
    }
    drop(listener);
    // Idle connections close now; busy ones after their responses.
    graceful.shutdown().await;
}

/// Turns Nagle's algorithm off on an accepted connection. The end of an SSE-framed response is a
/// small write; with Nagle on, the kernel holds it until the client acknowledges the previous
/// segment, and a keep-alive client delays that ACK by ~40 ms, so every response would end late.
fn without_nagle(stream: &tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
    }
}

/// One accepted connection and what serving it needs; its place is given back when it ends.
struct Connection {
    builder: auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: SocketAddr,
    app: Router,
    seat: Seat,
    activity: Arc<Activity>,
}

impl Connection {
    /// Serves the accepted `stream`, over TLS when there is an acceptor.
    async fn serve_accepted(
        self,
        stream: tokio::net::TcpStream,
        tls: Option<tokio_rustls::TlsAcceptor>,
        handshake_timeout: Duration,
    ) {
        let peer = self.peer;
        match tls {
            None => self.serve(stream).await,
            // The TLS handshake is part of sending a request: the header timeout bounds it.
            Some(acceptor) => {
                match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => self.serve(stream).await,
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            }
        }
    }

    /// Serves HTTP on `io` (the TCP stream, or TLS over it) until the client leaves, the drain
    /// closes it, or it stays idle past its deadline.
    async fn serve<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            builder,
            watcher,
            peer,
            app,
            seat,
            activity,
        } = self;
        let app = match &seat {
            Seat::Within(_) => app,
            Seat::Past(past) => reserve::probes_first(app, past.clone()),
        };
        let service = TowerToHyperService::new(activity.clone().wrap(app, peer.ip()));
        let io = TokioIo::new(activity.watch(io));
        let connection = builder.serve_connection_with_upgrades(io, service);
        tokio::select! {
            served = watcher.watch(connection.into_owned()) => {
                if let Err(error) = served {
                    // A client that hangs up is normal; nothing for the operator.
                    tracing::debug!(%peer, %error, "connection ended");
                }
            }
            // Dropping the connection closes its socket; nothing was in flight on it, or a
            // request body did not come in time (and the client gets no answer).
            () = activity.expired() => {
                if activity.body_was_late() {
                    tracing::info!(%peer, "closed a connection whose request body did not arrive within --body-timeout (or came slower than the minimum rate)");
                } else {
                    tracing::debug!(%peer, "closed an idle connection");
                }
            }
        }
        drop(seat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        without_nagle(&accepted);
        assert!(
            accepted.nodelay().unwrap(),
            "the server's side has TCP_NODELAY"
        );
        drop(client);
    }

    /// A client that never finishes its request headers is closed after the header timeout,
    /// and the cap makes further connections wait instead of being accepted.
    #[tokio::test]
    async fn a_slow_header_is_cut_off_and_the_cap_holds() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = ConnectionLimits {
            max_connections: 1,
            header_timeout: Duration::from_millis(300),
            body_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            stream_share: 80,
        };
        let stop = CancellationToken::new();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(serve(listener, app, limits, None, stop.clone(), None));

        let mut slow = tokio::net::TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        // The only place is taken: a second client waits (past the cap) while the slow one lives.
        let mut second = tokio::net::TcpStream::connect(address).await.unwrap();
        second
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 256];
        let early =
            tokio::time::timeout(Duration::from_millis(150), second.read(&mut buffer)).await;
        assert!(early.is_err(), "served past the connection cap");
        // The slow one is cut off at the header timeout (hyper answers 408 or closes) ...
        let cut =
            tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut Vec::new())).await;
        assert!(cut.is_ok(), "the slow client was not cut off");
        // ... which frees the place for the second.
        let read = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buffer))
            .await
            .expect("the second client is served")
            .unwrap();
        assert!(String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"));
        stop.cancel();
        drop((slow, second));
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    /// An idle keep-alive connection is closed after the keep-alive timeout, long before the
    /// header timeout would; one streaming a response stays open however long it streams.
    #[tokio::test]
    async fn idle_keepalive_connections_close_and_streams_stay_open() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = ConnectionLimits {
            max_connections: 8,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_millis(300),
            stream_share: 80,
        };
        let stop = CancellationToken::new();
        let ticks = || {
            let ticks = futures_util::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((
                    Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"tick\n")),
                    (),
                ))
            });
            axum::body::Body::from_stream(ticks)
        };
        let app = Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route(
                "/stream",
                axum::routing::get(move || async move { ticks() }),
            );
        let server = tokio::spawn(serve(listener, app, limits, None, stop.clone(), None));

        let mut idle = tokio::net::TcpStream::connect(address).await.unwrap();
        idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut streaming = tokio::net::TcpStream::connect(address).await.unwrap();
        streaming
            .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // The idle one: its response, then the close, well before the 30 s header timeout.
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut answer))
            .await
            .expect("the idle keep-alive connection was closed")
            .unwrap();
        assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
        // The streaming one is still receiving, several keep-alive timeouts later.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let mut buffer = vec![0u8; 64 * 1024];
        let read = tokio::time::timeout(Duration::from_secs(5), streaming.read(&mut buffer))
            .await
            .expect("the stream goes on")
            .unwrap();
        assert!(read > 0, "the streaming connection was closed");
        stop.cancel();
        drop((idle, streaming));
        server.abort();
    }
}
