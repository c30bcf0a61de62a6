//! Which era of the protocol a request is of: the 2025 revisions' sessions, negotiated once by
//! `initialize`, or 2026-07-28's self-describing requests, whose `_meta` names the revision and
//! the client's capabilities.

use rmcp::{RoleServer, service::RequestContext};

/// The protocol extension (SEP-2133 naming) a 2026-07-28 client declares in its capabilities
/// to be served lists that follow its instances, as the 2025 revisions are (`docs/gated-lists.md`).
pub const GATED_LISTS_EXTENSION: &str = "dev.turnstile/gated-lists";

/// Whether `context` is a request of protocol 2026-07-28 (or later): its `_meta` names a
/// revision without an `initialize` handshake.
pub(in crate::mcp) fn is_2026_07_28(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// Whether the client of a 2026-07-28 request declares [`GATED_LISTS_EXTENSION`] in the
/// capabilities the request carries.
pub(in crate::mcp) fn declares_gated_lists(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .client_capabilities()
        .and_then(|capabilities| capabilities.extensions)
        .is_some_and(|extensions| extensions.contains_key(GATED_LISTS_EXTENSION))
}
