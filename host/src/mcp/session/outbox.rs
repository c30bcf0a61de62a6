//! Where one session's unprompted messages go: `list_changed`, `resources/updated`, and the
//! plugins' log messages.
//!
//! Over stdio, and over HTTP for an event stream rmcp serves, they go through rmcp's peer, as
//! they always did. But that path crosses four tasks per message and session (the peer, the
//! service loop, the session worker, the SSE channel) before hyper writes it, and a transition
//! watched by 10,000 sessions reached the last of them after a second (BENCHMARKS.md,
//! "Fan-out"). So a live HTTP session's event stream (its GET) is served by Turnstile itself
//! (`event_stream.rs`), and its messages are put straight on the channel that stream reads: a
//! notice is encoded once, the same bytes for every session, and one task, hyper's, writes it.
//!
//! While such a session has no stream open, its messages wait here, the last
//! [`MAX_WAITING`] of them, for the stream it opens next (rmcp kept them the same way). A
//! passivated session with no stream is told nothing, and lists again when it comes back; one
//! passivated while its stream was open (it only watches: `session_records.rs`) keeps that
//! stream, which needs no handler, and is told on it as before.
//!
//! It must not decide who is told what (the notifier does): it only carries messages.

// rmcp marks MCP logging deprecated (SEP-2577, a future revision); 2025-06-18 and 2025-11-25
// clients, which Turnstile serves, still use it.
#![allow(deprecated)]

use std::{
    collections::VecDeque,
    sync::{Mutex, PoisonError},
};

use bytes::Bytes;
use rmcp::{
    Peer, RoleServer,
    model::{
        LoggingMessageNotificationParam, ResourceUpdatedNotificationParam, ServerJsonRpcMessage,
        ServerNotification,
    },
};
use tokio::sync::mpsc;

use super::sse;
use crate::actors::{Listener, Notice, Sending};

/// How many messages wait for a session's next stream; older ones are dropped.
pub const MAX_WAITING: usize = 64;

/// How many messages may be on their way to a stream's client (queued here, not yet taken by
/// hyper) before more are dropped: a client this far behind is not reading.
///
/// Why this many: one transition can send three notices (tools, prompts and resources
/// `list_changed`, as the invoice workflow does), and on a saturated server a stream's task can
/// wait tens of milliseconds between runs while its session's notices keep coming. Under
/// `turnstile load` at 128 sessions on 2 cores, streams whose clients were reading fell 40–209
/// messages behind that way, and a bound of 256 dropped notices in about one run in four
/// (BENCHMARKS.md's history, sessions 21 and 22). The channel holds only what is queued, so a
/// stream that keeps up costs no more for the larger bound; one whose client stopped reading
/// holds at most this many (~100 KiB).
pub const STREAM_CAPACITY: usize = 1024;

/// One session's messages (see the module doc).
pub struct Outbox {
    /// A std mutex: held to pick a route and queue bytes, never across an await.
    state: Mutex<State>,
}

struct State {
    /// The peer of the handler serving the session.
    peer: Option<Peer<RoleServer>>,
    /// The session is passivated: it has no handler and no stream, and is told nothing.
    passivated: bool,
    route: Route,
}

enum Route {
    /// Through rmcp's peer (stdio, or a stream rmcp serves).
    Peer,
    /// Onto the stream Turnstile serves.
    Stream(mpsc::Sender<Bytes>),
    /// No stream is open: the messages wait for the next one.
    Waiting(VecDeque<Message>),
}

/// A message for the session, as it is carried.
enum Message {
    Notice(Notice),
    Log(LoggingMessageNotificationParam),
    /// Any other notification (a task's status, `handler/legacy_tasks.rs`).
    Other(ServerNotification),
}

impl Outbox {
    /// Everything goes through rmcp's peer (stdio).
    pub fn new() -> Outbox {
        Outbox::with_route(Route::Peer)
    }

    /// An HTTP session's: its messages wait for the event stream Turnstile will serve it.
    pub fn for_stream() -> Outbox {
        Outbox::with_route(Route::Waiting(VecDeque::new()))
    }

    fn with_route(route: Route) -> Outbox {
        Outbox {
            state: Mutex::new(State {
                peer: None,
                passivated: false,
                route,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session is passivated (its handler is gone): until [`Outbox::restore`] it is told
    /// nothing, unless a stream Turnstile serves is open, which goes on carrying its messages.
    pub fn passivate(&self) {
        let mut state = self.state();
        state.peer = None;
        if !state.has_open_stream() {
            state.passivated = true;
            if let Route::Stream(_) = state.route {
                state.route = Route::Waiting(VecDeque::new());
            }
        }
    }

    /// Whether a stream Turnstile serves is open: a GET then gets keep-alives only, whether the
    /// session is live or passivated while watching.
    pub fn has_open_stream(&self) -> bool {
        self.state().has_open_stream()
    }

    /// A new handler serves the passivated session: messages go to its peer or its streams.
    pub fn restore(&self, peer: &Peer<RoleServer>) {
        let mut state = self.state();
        state.passivated = false;
        state.peer = Some(peer.clone());
    }

    /// Sets the peer unless one is set (every request of one handler carries the same peer).
    pub fn bind_if_unbound(&self, peer: &Peer<RoleServer>) {
        self.state().peer.get_or_insert_with(|| peer.clone());
    }

    /// A stream Turnstile serves opens: the returned receiver gets what waited and what comes.
    /// `None`: another stream of the session is open and gets the messages (the caller serves
    /// this one with keep-alives only, as rmcp does a second stream).
    pub fn open_stream(&self) -> Option<mpsc::Receiver<Bytes>> {
        let mut state = self.state();
        if state.has_open_stream() {
            return None;
        }
        let (sender, receiver) = mpsc::channel(STREAM_CAPACITY);
        if let Route::Waiting(waiting) = &mut state.route {
            for message in waiting.drain(..) {
                // A new channel has room for every waiting message (MAX_WAITING < capacity).
                let _ = sender.try_send(encode(&message));
            }
        }
        state.route = Route::Stream(sender);
        Some(receiver)
    }

    /// rmcp serves the session's stream from now on (a GET this server leaves to rmcp):
    /// messages go through the peer, those that waited first (rmcp keeps them for its stream).
    pub fn route_through_peer(&self) {
        let (peer, waiting) = {
            let mut state = self.state();
            let waiting = match std::mem::replace(&mut state.route, Route::Peer) {
                Route::Waiting(waiting) => waiting,
                Route::Peer | Route::Stream(_) => VecDeque::new(),
            };
            (state.peer.clone(), waiting)
        };
        let Some(peer) = peer else { return };
        if waiting.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for message in waiting {
                let _ = through_peer(peer.clone(), message).await;
            }
        });
    }

    /// Takes over what `earlier` carried: its open stream, or its waiting messages, or its
    /// choice of rmcp's stream. For an HTTP session whose handler made its own scope (and with
    /// it this outbox) before it took up the one its session record made when it opened: a GET
    /// may have found the earlier one meanwhile (`session_records.rs`).
    pub fn take_over(&self, earlier: &Outbox) {
        let taken = std::mem::replace(&mut earlier.state().route, Route::Waiting(VecDeque::new()));
        if matches!(taken, Route::Peer) {
            // rmcp serves the session's stream: this outbox's messages go there too.
            self.route_through_peer();
            return;
        }
        let mut state = self.state();
        let mine = std::mem::replace(&mut state.route, Route::Waiting(VecDeque::new()));
        state.route = match (taken, mine) {
            (Route::Stream(stream), Route::Waiting(waiting))
            | (Route::Waiting(waiting), Route::Stream(stream)) => {
                for message in waiting {
                    let _ = stream.try_send(encode(&message));
                }
                Route::Stream(stream)
            }
            (Route::Waiting(mut waiting), Route::Waiting(later)) => {
                for message in later {
                    wait(&mut waiting, message);
                }
                Route::Waiting(waiting)
            }
            (_, mine) => mine,
        };
    }

    /// Ends the stream Turnstile serves, if one is open (the session ends).
    pub fn close_stream(&self) {
        let mut state = self.state();
        if matches!(state.route, Route::Stream(_)) {
            state.route = Route::Waiting(VecDeque::new());
        }
    }

    /// A plugin's log message, sent as a notice is.
    pub fn log(&self, message: LoggingMessageNotificationParam) -> Sending {
        self.send(Message::Log(message))
    }

    /// A notification of another kind, sent as a notice is.
    pub fn notify_other(&self, notification: ServerNotification) -> Sending {
        self.send(Message::Other(notification))
    }

    fn send(&self, message: Message) -> Sending {
        let mut state = self.state();
        let State {
            peer,
            passivated,
            route,
        } = &mut *state;
        if *passivated {
            // Nobody to tell, and not gone (a gone session is forgotten on error).
            return Sending::Done(Ok(()));
        }
        match route {
            Route::Peer => {
                if let Some(peer) = peer {
                    return Sending::Later(Box::pin(through_peer(peer.clone(), message)));
                }
            }
            Route::Stream(stream) => match stream.try_send(encode(&message)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!("a session's event stream is full; a message is dropped");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    // The client closed its stream: keep the message for the next one.
                    *route = Route::Waiting(VecDeque::from([message]));
                }
            },
            Route::Waiting(waiting) => wait(waiting, message),
        }
        Sending::Done(Ok(()))
    }
}

impl State {
    fn has_open_stream(&self) -> bool {
        matches!(&self.route, Route::Stream(open) if !open.is_closed())
    }
}

/// Keeps `message` for the next stream, dropping the oldest past [`MAX_WAITING`].
fn wait(waiting: &mut VecDeque<Message>, message: Message) {
    if waiting.len() >= MAX_WAITING {
        waiting.pop_front();
    }
    waiting.push_back(message);
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox::new()
    }
}

impl Listener for Outbox {
    fn notify(&self, notice: Notice) -> Sending {
        self.send(Message::Notice(notice))
    }
}

async fn through_peer(peer: Peer<RoleServer>, message: Message) -> Result<(), String> {
    match message {
        Message::Notice(notice) => notice_through_peer(&peer, notice).await,
        Message::Log(message) => peer
            .notify_logging_message(message)
            .await
            .map_err(|error| error.to_string()),
        Message::Other(notification) => peer
            .send_notification(notification)
            .await
            .map_err(|error| error.to_string()),
    }
}

/// Sends `notice` through rmcp's `peer`: on a session, where rmcp routes its messages; on a
/// request without a session, on that request's own stream.
pub async fn notice_through_peer(peer: &Peer<RoleServer>, notice: Notice) -> Result<(), String> {
    let sent = match notice {
        Notice::ToolsChanged => peer.notify_tool_list_changed().await,
        Notice::PromptsChanged => peer.notify_prompt_list_changed().await,
        Notice::ResourcesChanged => peer.notify_resource_list_changed().await,
        Notice::ResourceUpdated(uri) => {
            peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(&*uri))
                .await
        }
    };
    sent.map_err(|error| error.to_string())
}

/// One SSE event, `data: <JSON-RPC notification>` and a blank line.
fn encode(message: &Message) -> Bytes {
    match message {
        Message::Notice(notice) => sse::notice(notice),
        Message::Log(message) => sse::log(message),
        Message::Other(notification) => {
            sse::message(&ServerJsonRpcMessage::notification(notification.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ServerJsonRpcMessage;

    use super::*;

    #[test]
    fn every_encoded_notice_decodes_as_the_notification_it_is() {
        for (message, method) in [
            (
                Message::Notice(Notice::ToolsChanged),
                "notifications/tools/list_changed",
            ),
            (
                Message::Notice(Notice::PromptsChanged),
                "notifications/prompts/list_changed",
            ),
            (
                Message::Notice(Notice::ResourcesChanged),
                "notifications/resources/list_changed",
            ),
            (
                Message::Notice(Notice::ResourceUpdated("invoice://h1".into())),
                "notifications/resources/updated",
            ),
        ] {
            let event = encode(&message);
            let json: serde_json::Value =
                serde_json::from_slice(&event[6..event.len() - 2]).unwrap();
            assert_eq!(json["method"], method);
            assert_eq!(json["jsonrpc"], "2.0");
            assert!(
                matches!(
                    serde_json::from_slice(&event[6..event.len() - 2]),
                    Ok(ServerJsonRpcMessage::Notification(_))
                ),
                "{method}"
            );
        }
    }

    #[tokio::test]
    async fn a_stream_that_falls_hundreds_of_notices_behind_loses_none() {
        let outbox = Outbox::for_stream();
        let mut stream = outbox
            .open_stream()
            .expect("the first stream gets the messages");
        // 300 transitions of a workflow whose tools, prompts and resources all change, sent
        // while the stream's writer takes nothing (a 256-message bound dropped notices here
        // under load: see `STREAM_CAPACITY`).
        let transitions = 300;
        for _ in 0..transitions {
            for notice in [
                Notice::ToolsChanged,
                Notice::PromptsChanged,
                Notice::ResourcesChanged,
            ] {
                outbox.notify(notice).await.unwrap();
            }
        }
        let mut tools_changed = 0;
        let mut received = 0;
        while let Ok(event) = stream.try_recv() {
            received += 1;
            if String::from_utf8_lossy(&event).contains("tools/list_changed") {
                tools_changed += 1;
            }
        }
        assert_eq!(received, 3 * transitions);
        assert_eq!(tools_changed, transitions);
    }
}
