//! A live session's event stream (its GET), served here instead of by rmcp's session worker.
//!
//! The stream carries what the session's [`Outbox`] is given (see `outbox.rs` for why), framed
//! as SSE events, with a comment every keep-alive interval so that proxies and clients do not
//! take a quiet stream for a dead one. It ends when the client closes it, when the session ends,
//! or when a shutdown closes the streams. Its events carry no ids: nothing on it can be resumed
//! (rmcp's replay after `Last-Event-ID` served the same purpose only within one process).
//!
//! A GET this module is not sure of goes to rmcp as before: one with an `Origin` (rmcp checks
//! it), a `Last-Event-ID` (a resumption of one of rmcp's streams), a protocol revision rmcp
//! must validate, or of a session that is not live. Then rmcp's stream gets the session's
//! messages ([`Outbox::route_through_peer`]).
//!
//! It must not decide what a session is told: it only writes what the outbox holds.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, header},
    response::Response,
};
use http_body::Frame;
use rmcp::model::ProtocolVersion;
use tokio::{sync::mpsc, time::Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{
    accept::accepts,
    header_names::{LAST_EVENT_ID, PROTOCOL_VERSION, SESSION_ID},
};
use crate::mcp::session::outbox::Outbox;

/// An SSE comment: ignored by clients, proof of life for everything in between.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// Whether a GET with these headers may be served here (given a live session): what rmcp would
/// check first, answered the way rmcp would let it through.
pub fn may_serve(headers: &HeaderMap) -> bool {
    if !headers.contains_key(SESSION_ID)
        || headers.contains_key(header::ORIGIN)
        || headers.contains_key(LAST_EVENT_ID)
        || !accepts(headers, &["text/event-stream"])
    {
        return false;
    }
    match headers.get(PROTOCOL_VERSION) {
        None => true,
        Some(version) => version.to_str().is_ok_and(|version| {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|known| known.as_str() == version)
                && version < ProtocolVersion::STANDARD_HEADERS.as_str()
        }),
    }
}

/// The session's event stream: what `outbox` holds and is given from now on, a keep-alive
/// comment every `keep_alive`, until `closing` (a shutdown) or the session's end. A second
/// stream while one is open gets keep-alives only, as rmcp's does.
pub fn serve(outbox: &Outbox, keep_alive: Duration, closing: CancellationToken) -> Response {
    let events = EventStream {
        messages: outbox.open_stream(),
        keep_alive: Box::pin(tokio::time::sleep(keep_alive)),
        period: keep_alive,
        closing: Box::pin(closing.cancelled_owned()),
        ended: false,
    };
    let mut response = streaming(Body::new(events));
    response.extensions_mut().insert(Watching);
    response
}

/// The body of a session's event stream, written out as one poll function rather than a stream
/// combinator chain: it is polled once per event on every watching connection, so a fan-out
/// to N sessions runs it N times, each on a connection's state that is cold in cache.
struct EventStream {
    /// `None` for a second stream of the session (keep-alives only).
    messages: Option<mpsc::Receiver<Bytes>>,
    keep_alive: Pin<Box<Sleep>>,
    period: Duration,
    /// A token of its own (the endpoint gives each stream a child of the server's): every
    /// stream polls it, and a token's state sits behind a lock.
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    ended: bool,
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let stream = &mut *self;
        if stream.ended {
            return Poll::Ready(None);
        }
        if stream.closing.as_mut().poll(cx).is_ready() {
            stream.ended = true;
            return Poll::Ready(None);
        }
        if let Some(messages) = &mut stream.messages {
            match messages.poll_recv(cx) {
                Poll::Ready(Some(event)) => return Poll::Ready(Some(Ok(Frame::data(event)))),
                // The session ended.
                Poll::Ready(None) => {
                    stream.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => {}
            }
        }
        if stream.keep_alive.as_mut().poll(cx).is_ready() {
            let next = tokio::time::Instant::now() + stream.period;
            stream.keep_alive.as_mut().reset(next);
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(KEEP_ALIVE)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// Marks a response as a session's event stream served here, which needs no handler of the
/// session's: it does not keep the session from passivating (`session_records.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Watching;

/// A 200 response whose body is SSE events, with the headers that keep proxies from buffering
/// them (also the stream of a POST that says something before its result: `direct.rs`).
pub fn streaming(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::http::direct::tests::headers;

    #[test]
    fn a_plain_get_of_a_session_is_served_here_and_a_resumption_is_not() {
        let plain = [
            ("mcp-session-id", "abc"),
            ("accept", "text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        assert!(may_serve(&headers(&plain)));
        assert!(may_serve(&headers(&plain[..2])));
        for extra in [
            ("last-event-id", "0"),
            ("origin", "http://localhost:1"),
            ("mcp-protocol-version", "2026-07-28"),
        ] {
            let mut pairs = plain.to_vec();
            pairs.retain(|(name, _)| *name != extra.0);
            pairs.push(extra);
            assert!(!may_serve(&headers(&pairs)), "{extra:?}");
        }
        assert!(!may_serve(&headers(&[
            ("mcp-session-id", "abc"),
            ("accept", "application/json")
        ])));
    }

    #[tokio::test]
    async fn the_stream_carries_what_waited_then_what_comes_and_ends_with_the_session() {
        use crate::actors::{Listener, Notice};
        let outbox = Outbox::for_stream();
        outbox.notify(Notice::ToolsChanged).await.unwrap();
        let response = serve(&outbox, Duration::from_secs(60), CancellationToken::new());
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        // A second stream while this one is open hears nothing (keep-alives only).
        let shadow = serve(&outbox, Duration::from_secs(60), CancellationToken::new());
        outbox
            .notify(Notice::ResourceUpdated("invoice://h".into()))
            .await
            .unwrap();
        outbox.close_stream();
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        let events: Vec<&str> = body.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 2, "{body}");
        assert!(
            events[0].contains("notifications/tools/list_changed"),
            "{body}"
        );
        assert!(events[1].contains("invoice://h"), "{body}");
        // Every stream ends with the server's shutdown.
        let closing = CancellationToken::new();
        let ended = serve(&outbox, Duration::from_secs(60), closing.clone());
        closing.cancel();
        assert!(
            axum::body::to_bytes(ended.into_body(), 64)
                .await
                .unwrap()
                .is_empty()
        );
        drop(shadow);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_sends_a_keep_alive_each_period_and_messages_at_once() {
        use http_body_util::BodyExt;

        use crate::actors::{Listener, Notice};
        let outbox = Outbox::for_stream();
        let period = Duration::from_secs(15);
        let mut body = serve(&outbox, period, CancellationToken::new()).into_body();
        let started = tokio::time::Instant::now();
        for n in 1..=2 {
            let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(&frame[..], KEEP_ALIVE);
            assert_eq!(started.elapsed(), period * n);
        }
        outbox.notify(Notice::ToolsChanged).await.unwrap();
        let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&frame).contains("tools/list_changed"));
        assert_eq!(started.elapsed(), period * 2, "a message waits for no tick");
    }
}
