//! `GET /metrics`: each call's count is recorded as it is answered
//! (`handler/call_record.rs`); [`serve`] answers a scrape: it reads what the actors, the plugin pools and rmcp's session
//! table hold at that moment (the numbers `/stats` shows), and the store's counts by state,
//! and renders them with the recorded metrics. It sits behind the same `Host` check and
//! authentication as `/stats`.
//!
//! It must not name metric series itself (`crate::metrics` renders them).

use std::sync::Arc;

use axum::{
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};

use super::{handshake::Handshakes, session_records::SessionRecords};
use crate::mcp::handler::server::Shared;
use crate::metrics::scrape::{self, Gauges, PluginPool};

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`: the Prometheus text exposition.
pub async fn serve(
    State(shared): State<Arc<Shared>>,
    sessions: Arc<SessionRecords>,
    handshakes: Arc<Handshakes>,
) -> Response {
    let (registry, notifier) = match shared.runtime.stats().await {
        Ok(stats) => stats,
        Err(error) => {
            // The actors are gone (a shutdown past its deadline): no numbers to give.
            return (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response();
        }
    };
    let plugins = shared
        .catalog
        .current()
        .plugins()
        .iter()
        .map(|plugin| {
            let pool = plugin.pool();
            PluginPool {
                plugin: plugin.manifest().name.clone(),
                size: pool.size(),
                running: pool.busy(),
                past_deadline: pool.past_deadline(),
                process_crashes: plugin.crashes(),
            }
        })
        .collect();
    // The store's index of counts by state: one small read, never a scan of the records.
    let instances = match shared.store.count_by_state().await {
        Ok(counts) => Some(counts),
        Err(error) => {
            tracing::debug!(%error, "no instance counts for this scrape: the store did not answer");
            None
        }
    };
    let gauges = Gauges {
        registry,
        notifier,
        http_sessions: sessions.count(),
        http_sessions_in_handshake: handshakes.pending(),
        http_sessions_passivated: sessions.passivated(),
        plugins,
        instances,
    };
    (
        [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
        scrape::render(&gauges),
    )
        .into_response()
}
