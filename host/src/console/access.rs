//! Who may use the console: operators only. With authentication configured, a request proves
//! who it is from as on every other route (`Authorization: Bearer`, checked by
//! `mcp/auth/bearer.rs`), or, from a browser, which cannot add that header to a page load, with
//! the cookie the login form sets to the same token; its principal must have the operator
//! [`Role`] (a token line marked `operator`, an OAuth token with `--operator-scope`). No token is
//! 401, a token that is not an operator's is 403. On a loopback address without authentication
//! the console is open (everyone who can reach it could drive every workflow anyway).
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page sends
//! it) and `Secure` over HTTPS, scoped to `/console`, and holds the token itself (base64url): the
//! server keeps no login state, and rotating the token file logs the console out. A POST that
//! does not carry a bearer header (a form of the console's own pages) must also come from the
//! console's own origin (`Sec-Fetch-Site`, else `Origin`), which stops another site's page from
//! resetting instances through an operator's browser, cookie or not (an open loopback console
//! has no cookie to withhold); the login and logout forms are held to the same rule.

use std::sync::Arc;

use axum::{
    Form,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::Deserialize;

use super::{Console, pages};
use crate::mcp::auth::{
    bearer::{self, Authenticator},
    oauth::Refused,
    principal::Role,
};

/// Who may use the console.
#[derive(Clone)]
pub enum Access {
    /// Anyone who reaches it: a loopback address without authentication.
    Open,
    /// Operators, proven as every request is proven.
    Operators(Authenticator),
}

/// The operator a console request is from: the principal's name, or `None` on an open console.
/// Put in the request's extensions by [`operators_only`].
#[derive(Debug, Clone)]
pub struct Operator(pub Option<String>);

/// The login cookie's name.
const COOKIE: &str = "turnstile_console";

/// The middleware in front of every console route but the login form and the assets.
pub async fn operators_only(
    State(console): State<Arc<Console>>,
    mut request: Request,
    next: Next,
) -> Response {
    let api = request.uri().path().starts_with("/console/api/");
    let from_header = bearer::presented(request.headers()).is_some();
    if request.method() == Method::POST && !from_header && !same_origin(request.headers()) {
        return refuse(
            api,
            StatusCode::FORBIDDEN,
            "a form of another site cannot act on this console",
        );
    }
    let operator = match &console.access {
        Access::Open => Operator(None),
        Access::Operators(authenticator) => {
            let token = bearer::presented(request.headers())
                .map(str::to_owned)
                .or_else(|| cookie_token(request.headers()));
            let Some(token) = token else {
                return refuse(
                    api,
                    StatusCode::UNAUTHORIZED,
                    "log in with an operator's token (send Authorization: Bearer <token>)",
                );
            };
            match authenticator.identify(&token).await {
                Err(Refused(reason)) => return refuse(api, StatusCode::UNAUTHORIZED, &reason),
                Ok((principal, Role::Client)) => {
                    return refuse(
                        api,
                        StatusCode::FORBIDDEN,
                        &format!(
                            "{} is not an operator (mark its token line `operator`, or grant \
                             it the --operator-scope)",
                            principal.0
                        ),
                    );
                }
                Ok((principal, Role::Operator)) => Operator(Some(principal.0)),
            }
        }
    };
    request.extensions_mut().insert(operator);
    next.run(request).await
}

/// A refusal: JSON for the API, the login page for a person.
fn refuse(api: bool, status: StatusCode, reason: &str) -> Response {
    let mut response = if api {
        (status, axum::Json(serde_json::json!({ "error": reason }))).into_response()
    } else {
        (status, pages::login(Some(reason))).into_response()
    };
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Bearer realm="turnstile""#),
        );
    }
    response
}

/// The token of the login cookie, if the request has one.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| URL_SAFE_NO_PAD.decode(value).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

/// Whether a form's POST comes from a page of this server: the browser says so
/// (`Sec-Fetch-Site: same-origin`, or `none` for one the user typed), or, from a browser that
/// does not say, its `Origin` names the host it was sent to. A client that sends neither is not
/// a browser, which a foreign page could not have used.
fn same_origin(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = header(SEC_FETCH_SITE) {
        return site == "same-origin" || site == "none";
    }
    match (
        header(header::ORIGIN.as_str()),
        header(header::HOST.as_str()),
    ) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// Where a browser says a request comes from (`same-origin`, `cross-site`, `none`: typed).
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// The login form's fields.
#[derive(Deserialize)]
pub struct Login {
    token: String,
}

/// `GET /console/login`: the form (an open console needs none).
pub async fn login_form(State(console): State<Arc<Console>>) -> Response {
    match console.access {
        Access::Open => Redirect::to("/console").into_response(),
        Access::Operators(_) => pages::login(None).into_response(),
    }
}

/// `POST /console/login`: checks the token as the console would, and keeps it in the cookie.
pub async fn log_in(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(login): Form<Login>,
) -> Response {
    let Access::Operators(authenticator) = &console.access else {
        return Redirect::to("/console").into_response();
    };
    if !same_origin(&headers) {
        return refuse(
            false,
            StatusCode::FORBIDDEN,
            "a form of another site cannot log in here",
        );
    }
    let token = login.token.trim();
    match authenticator.identify(token).await {
        Err(Refused(reason)) => refuse(false, StatusCode::UNAUTHORIZED, &reason),
        Ok((principal, Role::Client)) => refuse(
            false,
            StatusCode::FORBIDDEN,
            &format!("{} is not an operator", principal.0),
        ),
        Ok((_, Role::Operator)) => {
            let secure = if console.https { "; Secure" } else { "" };
            let cookie = format!(
                "{COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict{secure}",
                URL_SAFE_NO_PAD.encode(token)
            );
            let mut response = Redirect::to("/console").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
    }
}

/// `POST /console/logout`: forgets the cookie, for a form of the console's own pages only (as
/// every other action: another site's page must not end an operator's login either).
pub async fn log_out(headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return refuse(
            false,
            StatusCode::FORBIDDEN,
            "a form of another site cannot log out here",
        );
    }
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "turnstile_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_form_must_come_from_this_origin() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "https://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-origin")
        ])));
        // Chromium sends `Origin: null` for a form under `Referrer-Policy: no-referrer`.
        assert!(same_origin(&headers(&[
            host,
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(same_origin(&headers(&[host])), "not a browser");
    }

    #[test]
    fn the_cookie_holds_the_token() {
        let value = URL_SAFE_NO_PAD.encode("tok;en");
        let found = cookie_token(&headers(&[(
            "cookie",
            &format!("a=b; {COOKIE}={value}; c=d"),
        )]));
        assert_eq!(found.as_deref(), Some("tok;en"));
        assert_eq!(cookie_token(&headers(&[("cookie", "a=b")])), None);
    }
}
