//! Who a request is from and what carried it: all the handler knows of its transport.
//!
//! The transport says it once, in its own terms (`http/caller.rs` reads the request's HTTP
//! parts; stdio has one caller for the whole connection), through the [`CallerOf`] it gives
//! the handler's [`Shared`](super::server::Shared). The handler then decides from a
//! [`Caller`] alone, so the same decision holds whatever carried the request.

use rmcp::model::Extensions;

use crate::{
    actors::Tenant,
    mcp::{
        auth::principal::Principal,
        quotas::{ClientAddr, Holder},
    },
};

/// How a transport tells the handler who a request (its `RequestContext` extensions) is from.
pub type CallerOf = for<'a> fn(&'a Extensions) -> Caller<'a>;

/// How a transport tells the handler the W3C `traceparent` its request carried (over HTTP, a
/// header), asked only when traces are exported: apart from [`Caller`], which is asked several
/// times per request, so that no request pays for reading it otherwise.
pub type TraceparentOf = for<'a> fn(&'a Extensions) -> Option<&'a str>;

/// The [`TraceparentOf`] of a transport that carries none (stdio: only `_meta` carries one).
pub fn no_traceparent(_: &Extensions) -> Option<&str> {
    None
}

/// Who a request is from and what carried it, borrowed from the request: asking costs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller<'a> {
    pub session: CarriedBy<'a>,
    /// Who the request is from, when authentication is on.
    pub principal: Option<&'a Principal>,
    /// The address the request came from, over HTTP.
    pub address: Option<&'a ClientAddr>,
}

/// What the request's session is, as its transport carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CarriedBy<'a> {
    /// The connection is one session (stdio), whatever the protocol revision says.
    Connection,
    /// An HTTP session, named by the request's `Mcp-Session-Id`.
    Session(&'a str),
    /// An HTTP request without a session (protocol 2026-07-28, or a server started
    /// `--stateless`): nothing sent after its answer can reach it.
    Nothing,
}

impl<'a> Caller<'a> {
    /// The one caller of a connection that is one session (stdio): no principal, no address.
    pub fn of_connection(_: &Extensions) -> Caller<'_> {
        Caller {
            session: CarriedBy::Connection,
            principal: None,
            address: None,
        }
    }

    /// The tenant whose instances the request may reach: its principal's, when authentication
    /// is on. Without authentication, and over stdio, handles alone name instances.
    pub fn tenant(&self) -> Option<Tenant> {
        self.principal.map(Principal::tenant)
    }

    /// The name of the principal the request is from, with authentication on.
    pub fn principal_name(&self) -> Option<String> {
        self.principal.map(|principal| principal.0.clone())
    }

    /// Who the request counts against for the per-client quotas (`quotas.rs`): its principal,
    /// else the address it came from (over stdio: nobody).
    pub fn quota_holder(&self) -> Option<Holder> {
        Holder::of(self.principal, self.address)
    }

    /// Whether the request has no session to send anything to after its answer.
    pub fn is_sessionless(&self) -> bool {
        self.session == CarriedBy::Nothing
    }

    /// The HTTP session the request names.
    pub fn http_session(&self) -> Option<&'a str> {
        match self.session {
            CarriedBy::Session(id) => Some(id),
            _ => None,
        }
    }
}
