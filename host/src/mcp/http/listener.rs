//! Serving Streamable HTTP at `/mcp` on axum.
//!
//! rmcp's `StreamableHttpService` does the protocol work (sessions and `Mcp-Session-Id`, the GET
//! event stream, DELETE, and sessionless 2026-07-28 requests on the same endpoint); Turnstile
//! gives it a factory that makes one [`TurnstileServer`] per session. `http/endpoint.rs` sits in
//! front of it and turns its plain-text refusals into JSON-RPC errors.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::{Request, State},
    http::Method,
    middleware::{self, Next},
    response::Response,
    routing::get,
};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use super::{
    connections::{self, ConnectionLimits},
    endpoint::{McpEndpoint, McpLayer},
    handshake::Handshakes,
    health,
    held::HeldStreams,
    host_check::{self, AllowedHosts, RefuseForeignHost},
    idle, metrics,
    session_records::SessionRecords,
    tls::Tls,
};
use crate::console::{self, Console, SessionFigures};
use crate::mcp::{
    auth::bearer::{self, Authenticator},
    auth::oauth::{OAuth, OAuthOptions},
    handler::server::{SessionHome, Shared, TurnstileServer},
};

/// How long a session waits with nothing in flight before it is passivated, unless configured.
pub const DEFAULT_SESSION_PASSIVATE_AFTER: Duration = Duration::from_secs(30);

/// How the HTTP endpoint behaves.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// A session with no request for this long is ended (its subscriptions and session-keyed
    /// instances with it).
    pub session_idle_timeout: Duration,
    /// A session with no request in flight (no open stream) for this long is passivated: only
    /// its record is kept, and its next request restores it (`session_records`). `None`: never.
    pub session_passivate_after: Option<Duration>,
    /// `Host` header values accepted besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted besides loopback ones (`scheme://host[:port]`, `:*` for any
    /// port). A request with another `Origin` is refused with 403; one without passes.
    pub allowed_origins: Vec<String>,
    /// No sessions for any protocol revision: each request gets its own handler.
    pub stateless: bool,
    /// Connection cap, header deadline and keep-alive timeout (see `connections`).
    pub connections: ConnectionLimits,
    /// A session whose client has not sent `notifications/initialized` this long after its
    /// `initialize` is ended (see `handshake`).
    pub handshake_timeout: Duration,
    /// At most this many sessions at once; an `initialize` past it is refused with 503.
    pub max_sessions: Option<usize>,
    /// `--auth-token-file`: bearer tokens required on every route but the health probes.
    pub auth_token_file: Option<std::path::PathBuf>,
    /// `--allow-unauthenticated`: serve a non-loopback address without authentication.
    pub allow_unauthenticated: bool,
    /// OAuth resource-server mode (`--oauth-issuer` / `--oauth-jwks`, `--public-url`).
    pub oauth: Option<OAuthOptions>,
    /// `--tls-cert` and `--tls-key`: serve HTTPS.
    pub tls: Option<TlsFiles>,
}

/// The PEM files of the certificate chain and its private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            session_idle_timeout: Duration::from_secs(300),
            session_passivate_after: Some(DEFAULT_SESSION_PASSIVATE_AFTER),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            stateless: false,
            connections: ConnectionLimits::default(),
            handshake_timeout: Duration::from_secs(10),
            max_sessions: None,
            auth_token_file: None,
            allow_unauthenticated: false,
            oauth: None,
            tls: None,
        }
    }
}

/// Serves on `listener` until a shutdown has drained (see `crate::shutdown`): accepting stops
/// when draining begins, responses in flight are delivered, and event streams are closed only
/// once the calls in flight are done.
pub async fn serve_http(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
) -> anyhow::Result<()> {
    let tokens = match &options.auth_token_file {
        Some(file) => {
            let tokens = bearer::Tokens::load(file)?;
            tokens.reload_on_sighup()?;
            // Before any request: the instances of the principals' old forms become theirs.
            if let Err(error) =
                crate::actors::move_tenants(&*shared.store, &tokens.legacy_tenants()).await
            {
                tracing::warn!(%error, "could not move the token principals' instances to their namespaced tenants; the next start tries again");
            }
            Some(tokens)
        }
        None => None,
    };
    let oauth = match &options.oauth {
        Some(oauth) => Some(OAuth::start(oauth).await?),
        None => None,
    };
    let tls = match &options.tls {
        Some(files) => {
            let tls = Tls::load(&files.cert, &files.key)?;
            tls.reload_on_sighup()?;
            Some(tls)
        }
        None => None,
    };
    let local: SocketAddr = listener.local_addr()?;
    let authenticated = tokens.is_some() || oauth.is_some();
    if !authenticated && !local.ip().is_loopback() && !options.allow_unauthenticated {
        anyhow::bail!(
            "refusing to serve {local} without authentication: anyone who can reach it could \
             drive every workflow. Give --auth-token-file or --oauth-issuer, or \
             --allow-unauthenticated if it is meant (behind an authenticating proxy, say)"
        );
    }
    let shutdown = shared.shutdown.clone();
    // rmcp ends every open event stream when this is cancelled: only after the listens have had
    // their final result (they end on `closing_streams`), a moment later.
    let streams = CancellationToken::new();
    tokio::spawn({
        let (closing, streams) = (shutdown.closing_streams.clone(), streams.clone());
        async move {
            closing.cancelled().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            streams.cancel();
        }
    });
    // rmcp checks `Host` on `/mcp` itself; the same names as `host_check` accepts elsewhere.
    let allowed_hosts: Vec<String> = host_check::LOOPBACK_HOSTS
        .iter()
        .map(ToString::to_string)
        .chain(options.allowed_hosts.iter().cloned())
        .collect();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_allowed_origins(allowed_origins(local, &options.allowed_origins))
        // Validate even when the list is empty (a non-loopback address and no `--allowed-origin`):
        // the MCP spec requires refusing a foreign `Origin`, and without this rmcp checks none.
        .enforce_origin_validation()
        .with_cancellation_token(streams.child_token())
        // Event streams are not idle connections: comments on them, well within the keep-alive
        // timeout, keep proxies and clients from taking them for dead.
        .with_sse_keep_alive(Some(idle::sse_keepalive_interval(
            options.connections.keepalive_timeout,
        )))
        // 2026-07-28 requests are always sessionless; this decides for the older revisions.
        .with_legacy_session_mode(!options.stateless)
        // Sessionless requests whose answer is nothing but the result (a listing, a call that
        // moved nothing and reported no progress) get it as plain JSON; rmcp falls back to an
        // SSE stream per request as soon as anything precedes the result (a `list_changed`,
        // a log line, progress). Session mode always streams: rmcp has no per-request choice
        // there (BENCHMARKS.md's history measures what the framing costs).
        .with_json_response(true);
    let mut workers = LocalSessionManager::default();
    // The idle timeout is the session records' (`session_records.rs`): requests served outside
    // rmcp's session machinery (`direct.rs`) never reach the worker whose timer this would be.
    workers.session_config.keep_alive = None;
    let sessions = SessionRecords::new(
        Arc::new(workers),
        options.session_passivate_after,
        options.session_idle_timeout,
    );
    sessions.start_sweeping();
    // The records are rmcp's session store: where it keeps each session's `initialize`, and
    // asks for it to restore a passivated session.
    let mut config = config;
    config.session_store = Some(sessions.clone());
    let handshakes = Handshakes::new(sessions.clone(), options.handshake_timeout);
    let (factory_shared, factory_sessions) = (shared.clone(), sessions.clone());
    let mcp = StreamableHttpService::new(
        move || {
            Ok(TurnstileServer::new(
                factory_shared.clone(),
                Some(factory_sessions.clone() as Arc<dyn SessionHome>),
            ))
        },
        sessions.workers(),
        config,
    );
    // Events are counted from here on, for `/metrics` (over stdio nothing is counted).
    crate::metrics::install();
    // Every response held open counts here, whatever route it is on.
    let held = Arc::new(HeldStreams::new(
        options.connections.max_streams(),
        shared.quotas.clone(),
    ));
    let app = Router::new()
        .route_service(
            "/mcp",
            McpEndpoint::new(McpLayer {
                rmcp: mcp,
                sessions: sessions.clone(),
                max_sessions: options.max_sessions,
                stateless: options.stateless,
                handshakes: handshakes.clone(),
                // Each session is its opener's: a principal exists only with authentication.
                owners: authenticated.then(Arc::default),
                sse_keep_alive: idle::sse_keepalive_interval(options.connections.keepalive_timeout),
                closing_streams: streams.child_token(),
                opening: Default::default(),
                held: held.clone(),
                quotas: shared.quotas.clone(),
            }),
        )
        .route(
            "/stats",
            get({
                let (sessions, handshakes) = (sessions.clone(), handshakes.clone());
                move |state| stats(state, sessions, handshakes)
            }),
        )
        .route(
            "/metrics",
            get({
                let (sessions, handshakes) = (sessions.clone(), handshakes.clone());
                move |state| metrics::serve(state, sessions, handshakes)
            }),
        );
    let authenticator = Authenticator {
        tokens,
        oauth: oauth.clone(),
    };
    // The operator console: only where it cannot open the server to strangers (with
    // authentication, to operators only; else on loopback).
    let console_served = authenticated || local.ip().is_loopback();
    let console = console_served.then(|| {
        let access = if authenticated {
            console::Access::Operators(authenticator.clone())
        } else {
            console::Access::Open
        };
        let (sessions, handshakes) = (sessions.clone(), handshakes.clone());
        Console::new(
            shared.catalog.clone(),
            shared.runtime.clone(),
            shared.store.clone(),
            Box::new(move || SessionFigures {
                held: sessions.count(),
                in_handshake: handshakes.pending(),
                passivated: sessions.passivated(),
            }),
            access,
            tls.is_some(),
            shutdown.closing_streams.clone(),
        )
    });
    // Every route above needs a token, when authentication is configured.
    let app = if authenticated {
        app.layer(middleware::from_fn_with_state(
            authenticator,
            bearer::require_token,
        ))
    } else {
        app
    };
    // The console checks its own access (a browser brings a cookie, not a bearer header). Its
    // live counts are a stream held open like any other.
    let app = match console {
        Some(console) => app.merge(
            console::router(console).layer(middleware::from_fn_with_state(held, hold_console_live)),
        ),
        None => app,
    };
    // Where to get a token is public (RFC 9728): at the root and under the resource's path.
    let app = match oauth {
        Some(oauth) => {
            let metadata = Json(oauth.metadata());
            app.route(
                "/.well-known/oauth-protected-resource",
                get({
                    let metadata = metadata.clone();
                    move || async move { metadata }
                }),
            )
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(move || async move { metadata }),
            )
        }
        None => app,
    };
    let workers = shared.runtime.workers();
    let app = app
        // Every route above refuses a foreign `Host`; the probes below answer any.
        .layer(RefuseForeignHost(AllowedHosts::loopback_and(
            &options.allowed_hosts,
        )))
        .route("/healthz", get(health::alive))
        .route("/readyz", {
            let readiness = Arc::new(health::Readiness::new(shared.store.clone()));
            get(move |State(shared)| health::ready(shared, readiness.clone()))
        })
        .with_state(shared);
    let scheme = if tls.is_some() { "https" } else { "http" };
    if console_served {
        tracing::info!(address = %local, "serving MCP over Streamable HTTP at {scheme}://{local}/mcp, and the operator console at {scheme}://{local}/console");
    } else {
        tracing::info!(address = %local, "serving MCP over Streamable HTTP at {scheme}://{local}/mcp");
    }
    connections::serve(
        listener,
        app,
        options.connections.clone(),
        tls,
        shutdown.draining,
        Some(workers),
    )
    .await;
    Ok(())
}

/// The console's live counts (`GET /console/api/live`, an SSE stream) take their places among
/// the held streams (`held.rs`); every other console request passes untouched.
async fn hold_console_live(
    State(held): State<Arc<HeldStreams>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::GET || request.uri().path() != CONSOLE_LIVE {
        return next.run(request).await;
    }
    held.serve(request, |request| next.run(request)).await
}

/// The console's live stream.
const CONSOLE_LIVE: &str = "/console/api/live";

/// The `Origin`s to accept: loopback ones on any port when the server listens on loopback (or on
/// every interface, loopback among them), plus those the operator named. A page served from this
/// machine is not the cross-site attacker the check is for; any other origin must be named.
fn allowed_origins(local: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut origins = Vec::new();
    if local.ip().is_loopback() || local.ip().is_unspecified() {
        for scheme in ["http", "https"] {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                // `:*` and not a bare host: rmcp deprecates port-less entries.
                origins.push(format!("{scheme}://{host}:*"));
            }
        }
    }
    origins.extend(extra.iter().cloned());
    origins
}

/// What the actors hold, as JSON: for operators and for the leak tests.
/// `http_sessions` counts every session held, also those that have not sent `initialized`
/// (`http_sessions_in_handshake` of them, ended after `--handshake-timeout`) and those
/// passivated (`http_sessions_passivated`);
/// `plugins` shows each plugin's call pool and how many of its calls outlived their deadline.
async fn stats(
    State(shared): State<Arc<Shared>>,
    sessions: Arc<SessionRecords>,
    handshakes: Arc<Handshakes>,
) -> Result<Json<serde_json::Value>, String> {
    let (registry, notifier) = shared
        .runtime
        .stats()
        .await
        .map_err(|error| error.to_string())?;
    let plugins: serde_json::Map<String, serde_json::Value> = shared
        .catalog
        .current()
        .plugins()
        .iter()
        .map(|plugin| {
            let pool = plugin.pool();
            let mut entry = serde_json::json!({
                "pool_size": pool.size(),
                "calls_running": pool.busy(),
                "calls_past_deadline": pool.past_deadline(),
            });
            if let Some(crashes) = plugin.crashes() {
                entry["isolated"] = serde_json::json!(true);
                entry["process_crashes"] = serde_json::json!(crashes);
            }
            (plugin.manifest().name.clone(), entry)
        })
        .collect();
    Ok(Json(serde_json::json!({
        "registry": registry,
        "notifier": notifier,
        "http_sessions": sessions.count(),
        "http_sessions_in_handshake": handshakes.pending(),
        "http_sessions_passivated": sessions.passivated(),
        "plugins": plugins,
        "memory": crate::memory::stats(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_are_allowed_only_on_loopback() {
        let on = |address: &str| allowed_origins(address.parse().unwrap(), &[]);
        assert!(on("127.0.0.1:8080").contains(&"http://127.0.0.1:*".to_string()));
        assert!(on("[::1]:8080").contains(&"https://[::1]:*".to_string()));
        assert!(on("0.0.0.0:8080").contains(&"http://localhost:*".to_string()));
        assert!(on("192.0.2.7:8080").is_empty());
        assert_eq!(
            allowed_origins(
                "192.0.2.7:8080".parse().unwrap(),
                &["https://app.example.com:443".to_string()]
            ),
            ["https://app.example.com:443"]
        );
    }
}
