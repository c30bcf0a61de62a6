//! Serving Streamable HTTP at `/mcp` on axum.
//!
//! rmcp's `StreamableHttpService` does the protocol work (sessions and `Mcp-Session-Id`, the GET
//! event stream, DELETE, and sessionless 2026-07-28 requests on the same endpoint); Turnstile
//! gives it a factory that makes one [`TurnstileServer`] per session.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    routing::get,
    serve::{Listener, ListenerExt},
};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use super::server::{Shared, TurnstileServer};

/// How the HTTP endpoint behaves.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// A session with no request for this long is ended (its subscriptions and session-keyed
    /// instances with it).
    pub session_idle_timeout: Duration,
    /// `Host` header values accepted besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// No sessions for any protocol revision: each request gets its own handler.
    pub stateless: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            session_idle_timeout: Duration::from_secs(300),
            allowed_hosts: Vec::new(),
            stateless: false,
        }
    }
}

/// Serves on `listener` until `shutdown` is cancelled.
pub async fn serve_http(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let local: SocketAddr = listener.local_addr()?;
    let mut allowed_hosts = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    allowed_hosts.extend(options.allowed_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(shutdown.child_token())
        // 2026-07-28 requests are always sessionless; this decides for the older revisions.
        .with_legacy_session_mode(!options.stateless);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.session_idle_timeout);
    let factory_shared = shared.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(TurnstileServer::new(factory_shared.clone())),
        Arc::new(sessions),
        config,
    );
    let app = Router::new()
        .nest_service("/mcp", mcp)
        .route("/stats", get(stats))
        .with_state(shared);
    tracing::info!(address = %local, "serving MCP over Streamable HTTP at http://{local}/mcp");
    axum::serve(without_nagle(listener), app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// Accepts connections with `TCP_NODELAY` set. A response streamed as SSE ends with a small
/// write; with Nagle's algorithm on, the kernel holds it back until the client acknowledges the
/// previous segment, and a keep-alive client delays that ACK by ~40 ms, so every response would
/// end 40 ms late.
fn without_nagle(
    listener: tokio::net::TcpListener,
) -> impl Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on an accepted connection");
        }
    })
}

/// What the actors hold, as JSON: for operators and for the leak tests.
async fn stats(State(shared): State<Arc<Shared>>) -> Result<Json<serde_json::Value>, String> {
    let (registry, notifier) = shared
        .runtime
        .stats()
        .await
        .map_err(|error| error.to_string())?;
    Ok(Json(
        serde_json::json!({ "registry": registry, "notifier": notifier, "memory": crate::memory::stats() }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut listener = without_nagle(listener);
        let client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await;
        assert!(
            accepted.nodelay().unwrap(),
            "the server's side has TCP_NODELAY"
        );
        drop(client);
    }
}
