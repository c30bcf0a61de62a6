//! The console's routes, and the headers every answer of theirs carries: a strict
//! Content-Security-Policy (scripts, styles, images and connections from this server only, no
//! inline script; the one inline stylesheet allowed is the diagrams' own, by its hash), no
//! framing, no referrer to other sites, no caching, no sniffing.

use std::sync::{Arc, OnceLock};

use axum::{
    Router,
    extract::Request,
    http::{HeaderValue, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use sha2::{Digest, Sha256};

use super::{Console, access, api, handlers, live};
use crate::statechart::diagram::svg;

/// The routes under `/console`, with their own access check (not the listener's bearer layer:
/// a browser proves itself with the login cookie).
pub fn router<S: Clone + Send + Sync + 'static>(console: Arc<Console>) -> Router<S> {
    tokio::spawn(
        console
            .census
            .clone()
            .keep_counting(console.closing.clone()),
    );
    let operators = Router::new()
        .route("/console", get(handlers::workflows))
        .route("/console/", get(handlers::workflows))
        .route("/console/instances", get(handlers::instances))
        .route("/console/instance", get(handlers::instance))
        .route(
            "/console/instance/{action}",
            get(handlers::confirm).post(handlers::act),
        )
        .route("/console/server", get(handlers::server))
        .route("/console/api/workflows", get(api::workflows))
        .route("/console/api/workflows/{id}/diagram.svg", get(api::diagram))
        .route("/console/api/instances", get(api::list))
        .route("/console/api/instance", get(api::show))
        .route("/console/api/instance/{action}", post(api::act))
        .route("/console/api/server", get(api::server))
        .route("/console/api/live", get(live::stream))
        .route_layer(middleware::from_fn_with_state(
            console.clone(),
            access::operators_only,
        ));
    Router::new()
        .merge(operators)
        .route(
            "/console/login",
            get(access::login_form).post(access::log_in),
        )
        .route("/console/logout", post(access::log_out))
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/assets/console.js", get(script))
        .layer(middleware::from_fn(secure_headers))
        .with_state(console)
}

/// The console's stylesheet.
async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
        .into_response()
}

/// The console's one script: the live counts.
async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
        .into_response()
}

/// The Content-Security-Policy of every console answer.
fn policy() -> &'static HeaderValue {
    static POLICY: OnceLock<HeaderValue> = OnceLock::new();
    POLICY.get_or_init(|| {
        // CSP hashes an inline <style>'s text exactly as it stands between its tags.
        let hash = STANDARD.encode(Sha256::digest(svg::style_sheet().as_bytes()));
        let policy = format!(
            "default-src 'none'; script-src 'self'; style-src 'self' 'sha256-{hash}'; \
             img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
             base-uri 'none'"
        );
        // Base64 and ASCII words only: always a valid header value.
        HeaderValue::from_str(&policy).expect("an ASCII policy")
    })
}

/// Adds the security headers to every console answer.
async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy().clone());
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: under it Chromium sends a form's `Origin` as `null`.
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
