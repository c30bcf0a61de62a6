//! Serving one client over stdin/stdout (stdout carries only the protocol; logs go to stderr).

use std::sync::Arc;

use rmcp::ServiceExt;

use super::server::{Shared, TurnstileServer};

/// Serves until the client closes stdin. The connection is one session, so its instances and
/// subscriptions end with it.
pub async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<()> {
    let running = TurnstileServer::new(shared)
        .serve(rmcp::transport::stdio())
        .await?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "stdio client disconnected");
    Ok(())
}
