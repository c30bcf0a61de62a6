//! A session, whatever carries it: its scope (identity, listener for `list_changed`, end), the
//! outbox its unprompted messages go to, and the SSE framing those messages are written in.

pub mod outbox;
pub mod request_stream;
pub mod scope;
pub mod sse;
