//! The handler's [`Caller`] of an HTTP request, read from the request's parts, which rmcp (and
//! `direct.rs`, the same way) puts in the request's extensions: the principal `auth/` found,
//! the client's address the connection added (`idle.rs`), and the session the request names.

use axum::http::{self, HeaderMap, request::Parts};
use rmcp::model::Extensions;

use super::header_names::SESSION_ID;
use crate::mcp::{
    auth::principal::Principal,
    handler::caller::{Caller, CarriedBy},
    quotas::ClientAddr,
};

/// The [`CallerOf`](crate::mcp::handler::caller::CallerOf) of the HTTP transport.
pub fn of(extensions: &Extensions) -> Caller<'_> {
    let Some(parts) = extensions.get::<Parts>() else {
        // Every request the HTTP transport hands the handler carries its parts.
        return Caller {
            session: CarriedBy::Nothing,
            principal: None,
            address: None,
        };
    };
    read(&parts.headers, &parts.extensions)
}

/// The [`Caller`] of a request the endpoint has not handed on yet (`endpoint.rs`' per-client
/// quotas), read from the same headers and extensions as [`of`] reads: so whatever a quota
/// counts a request against is the holder the handler's own checks see.
pub fn of_request<B>(request: &http::Request<B>) -> Caller<'_> {
    read(request.headers(), request.extensions())
}

fn read<'a>(headers: &'a HeaderMap, extensions: &'a http::Extensions) -> Caller<'a> {
    Caller {
        // A session id that is not visible ASCII names no session the records hold.
        session: match headers.get(SESSION_ID) {
            Some(id) => CarriedBy::Session(id.to_str().unwrap_or_default()),
            None => CarriedBy::Nothing,
        },
        principal: extensions.get::<Principal>(),
        address: extensions.get::<ClientAddr>(),
    }
}

/// The [`TraceparentOf`](crate::mcp::handler::caller::TraceparentOf) of the HTTP transport:
/// the request's `traceparent` header, if it is visible ASCII.
pub fn traceparent(extensions: &Extensions) -> Option<&str> {
    extensions
        .get::<Parts>()?
        .headers
        .get("traceparent")?
        .to_str()
        .ok()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn extensions_of(request: axum::http::Request<()>) -> Extensions {
        let (parts, ()) = request.into_parts();
        let mut extensions = Extensions::new();
        extensions.insert(parts);
        extensions
    }

    #[test]
    fn an_http_request_names_its_session_principal_and_address() {
        let mut request = axum::http::Request::builder()
            .header(SESSION_ID, "abc")
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(Principal("token:alice".into()));
        let address = ClientAddr(IpAddr::V4(Ipv4Addr::LOCALHOST));
        request.extensions_mut().insert(address);
        // The endpoint reads the request before rmcp moves its parts into the handler's context.
        let at_the_endpoint = of_request(&request);
        assert_eq!(at_the_endpoint.http_session(), Some("abc"));
        let holder = at_the_endpoint.quota_holder();
        let extensions = extensions_of(request);
        let caller = of(&extensions);
        assert_eq!(caller.http_session(), Some("abc"));
        assert!(!caller.is_sessionless());
        assert_eq!(caller.principal_name().as_deref(), Some("token:alice"));
        assert_eq!(caller.address, Some(&address));
        assert_eq!(caller.quota_holder(), holder);
    }

    #[test]
    fn a_request_without_a_session_id_is_sessionless() {
        let extensions = extensions_of(axum::http::Request::new(()));
        let caller = of(&extensions);
        assert!(caller.is_sessionless());
        assert_eq!(caller.principal, None);
        assert_eq!(caller.quota_holder(), None);
    }
}
