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

use std::{convert::Infallible, time::Duration};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, header},
    response::Response,
};
use futures_util::StreamExt;
use http_body::Frame;
use rmcp::model::ProtocolVersion;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
    let messages = outbox.open_stream();
    let start = tokio::time::Instant::now() + keep_alive;
    let ticks = tokio::time::interval_at(start, keep_alive);
    let events =
        futures_util::stream::unfold((messages, ticks), |(mut messages, mut ticks)| async move {
            let event = tokio::select! {
                biased;
                message = next(&mut messages) => message?,
                _ = ticks.tick() => Bytes::from_static(KEEP_ALIVE),
            };
            Some((Ok::<_, Infallible>(Frame::data(event)), (messages, ticks)))
        })
        .take_until(closing.cancelled_owned());
    let mut response = streaming(Body::new(http_body_util::StreamBody::new(events)));
    response.extensions_mut().insert(Watching);
    response
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

/// The next message; `None` when the stream's sender is gone (the session ended). A shadow
/// stream (no receiver) waits forever: only its keep-alives and its end come.
async fn next(messages: &mut Option<mpsc::Receiver<Bytes>>) -> Option<Bytes> {
    match messages {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
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
}
