//! What a plugin says while its call runs — log messages and progress (host services, ABI 1.1) —
//! and the call's own move, forwarded to the client **before** the call's result.
//!
//! The plugin's words arrive from its thread through the call's [`EventReceiver`]. The request's
//! task takes them while it waits for the call, and once more after the call ended and before it
//! answers, so every message the plugin sent before returning is handed on ahead of the result,
//! every time. (A forwarder task of its own would race the result.) Progress goes on the
//! request's own stream. Log messages go there too when the request has one Turnstile writes
//! (the request's own [`RequestStream`], written by `http/direct.rs`: a session's request without a progress token, which is how
//! the Python and TypeScript SDKs call) or when it has no session. A session's request that rmcp
//! serves has its log messages sent where the session's other messages go, its event stream
//! (`outbox.rs`): rmcp would route them to the GET stream anyway, and sending them there
//! ourselves keeps their order with the session's other news.

// rmcp marks MCP logging deprecated (SEP-2577, a future revision); 2025-06-18 and 2025-11-25
// clients, which Turnstile serves, still use it.
#![allow(deprecated)]

use std::{future::Future, pin::Pin, sync::Arc};

use rmcp::{
    Peer, RoleServer,
    model::{
        LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam,
        ProgressNotificationParam, ProgressToken, ServerJsonRpcMessage, ServerNotification,
    },
};

use crate::actors::{Notice, notices_of_move};
use crate::gate::ListsChanged;
use crate::mcp::session::{
    outbox::{Outbox, notice_through_peer},
    request_stream::RequestStream,
};
use crate::metrics;
use crate::plugin::{CallEvent, EventReceiver, LogLevel};

/// Where one call's events go, and which of them the client wants. Borrowed from the request
/// for as long as its call runs: most calls say nothing.
pub struct CallEvents<'a> {
    /// Progress goes here, on the request's own stream.
    pub peer: &'a Peer<RoleServer>,
    /// The request's own stream, when Turnstile writes it (`direct.rs`): log messages go there.
    pub own_stream: Option<&'a RequestStream>,
    /// A session's log messages go where its other messages go (`outbox.rs`); a request
    /// without a session has only its own stream, through `peer`.
    pub outbox: Option<&'a Arc<Outbox>>,
    /// The request's `_meta.progressToken`: progress is sent only when the client asked for it.
    pub progress_token: Option<ProgressToken>,
    /// Messages below this level are not sent (`logging/setLevel`); `None`: none are.
    pub min_level: Option<LogLevel>,
    /// Whether the caller hears of its own move here, ahead of the result, rather than from the
    /// notifier ([`Self::tell_of_move`]).
    pub tells_own_move: bool,
}

impl CallEvents<'_> {
    /// Runs `call` to its end while forwarding what arrives on `events`; returns the call's output
    /// once everything the plugin sent before returning has been handed to the transport.
    ///
    /// `call` comes pinned where its caller holds it: a future taken by value would be kept
    /// twice in this one (as the argument and as the pinned local), and this one is kept in
    /// every `tools/call`'s future.
    pub async fn forward_during<T>(
        &self,
        mut call: Pin<&mut impl Future<Output = T>>,
        mut events: EventReceiver,
    ) -> T {
        let output = loop {
            tokio::select! {
                biased;
                // Boxed: most calls send nothing, and need no room for sending.
                Some(event) = events.recv() => Box::pin(self.send(event)).await,
                output = &mut call => break output,
            }
        };
        // Whatever a plugin sends from now on (a thread it left running) is not for this answer.
        events.close();
        while let Some(event) = events.try_recv() {
            Box::pin(self.send(event)).await;
        }
        output
    }

    /// Tells the caller, ahead of its result, of the move its call made, by the notifier's
    /// rule ([`notices_of_move`]), when [`Self::tells_own_move`]. Only here can it be told in
    /// time: the notifier's news of a session's move comes on its event stream, after the
    /// result, where a client that closes once its call returns (the Python SDK 1.x) meets it
    /// while closing and logs an ERROR; and a request without a session has no other stream.
    pub async fn tell_of_move(&self, lists: ListsChanged) {
        if !self.tells_own_move {
            return;
        }
        for notice in notices_of_move(lists) {
            let counted = notice == Notice::ToolsChanged;
            let sent = match self.own_stream {
                Some(stream) => {
                    stream.notice(&notice);
                    Ok(())
                }
                None => Box::pin(notice_through_peer(self.peer, notice)).await,
            };
            match sent {
                Ok(()) if counted => metrics::list_changed_sent(metrics::Cause::Transition, 1),
                Ok(()) => {}
                Err(error) => {
                    tracing::debug!(%error, "cannot tell the caller its lists changed");
                    return;
                }
            }
        }
    }

    async fn send(&self, event: CallEvent) {
        let sent = match event {
            CallEvent::Log {
                level,
                logger,
                data,
            } => {
                if self.min_level.is_none_or(|min| level < min) {
                    return;
                }
                let mut message = LoggingMessageNotificationParam::new(to_rmcp(level), data);
                message.logger = logger;
                match (&self.own_stream, &self.outbox) {
                    (Some(stream), _) => {
                        stream.send(&ServerJsonRpcMessage::notification(
                            ServerNotification::LoggingMessageNotification(
                                LoggingMessageNotification::new(message),
                            ),
                        ));
                        Ok(())
                    }
                    (None, Some(outbox)) => outbox.log(message).await,
                    (None, None) => self
                        .peer
                        .notify_logging_message(message)
                        .await
                        .map_err(|error| error.to_string()),
                }
            }
            CallEvent::Progress {
                progress,
                total,
                message,
            } => {
                let Some(token) = &self.progress_token else {
                    return;
                };
                let mut report = ProgressNotificationParam::new(token.clone(), progress);
                report.total = total;
                report.message = message;
                self.peer
                    .notify_progress(report)
                    .await
                    .map_err(|error| error.to_string())
            }
        };
        if let Err(error) = sent {
            // The client went away mid-call; its answer will not be delivered either.
            tracing::debug!(%error, "cannot forward a plugin's message to the client");
        }
    }
}

/// The MCP level of a plugin's log level.
pub fn to_rmcp(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// The plugin-side level of an MCP level.
pub fn from_rmcp(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}
