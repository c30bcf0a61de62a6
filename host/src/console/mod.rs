//! The operator console at `/console`, on the HTTP listener: the loaded workflows as diagrams with
//! live counts of instances per state, instances found and shown (diagram with the current state
//! lit, context, timers, audit trail) and reset or deleted, and the server's plugins, sessions,
//! call rate and store. A small JSON API under `/console/api/` serves the same, for the pages'
//! script and for `turnstile instances --server`.
//!
//! Rooms: `routes.rs` (the routes and the headers every answer carries), `access.rs` (who may:
//! operators only, by bearer token or the login cookie), `pages.rs` (the HTML, rendered here with
//! `maud`), `handlers.rs` (what each page shows, gathered), `api.rs` (the JSON), `actions.rs` (reset and delete, through the instance's actor),
//! `live.rs` (the counts per state, and their SSE stream), `rates.rs` (calls/s and p99 from the
//! figures `/metrics` serves), `assets/` (the one stylesheet and the one script, served as files:
//! no inline script, so the Content-Security-Policy can forbid every other).
//!
//! Served only where it cannot open the server to strangers: with authentication configured
//! (then to operators only), or on a loopback address. It must not write the store behind a live
//! actor's back (a reset or delete is the actor's, `actors/operator.rs`), nor name rmcp types.

mod access;
mod actions;
mod api;
mod handlers;
mod live;
mod pages;
mod rates;
mod routes;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use self::{access::Access, routes::router};
use crate::{actors::Runtime, catalog::LiveCatalog, store::StateStore};

/// The HTTP sessions the transport holds, as `/stats` counts them.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SessionFigures {
    /// Every session held (2025 revisions), live or passivated.
    pub held: usize,
    /// Of those, sessions still in their handshake.
    pub in_handshake: usize,
    /// Of those, sessions passivated (only their record kept).
    pub passivated: usize,
}

/// What the console reads and acts through: everything is the server's own, shared.
pub struct Console {
    pub catalog: Arc<LiveCatalog>,
    pub runtime: Runtime,
    pub store: Arc<dyn StateStore>,
    /// The transport's session counts, read when the server page is shown.
    pub sessions: Box<dyn Fn() -> SessionFigures + Send + Sync>,
    /// Who may use the console.
    pub access: Access,
    /// Whether the listener serves HTTPS: the login cookie is then `Secure`.
    pub https: bool,
    /// Cancelled when a shutdown closes the event streams: the live streams end with it.
    pub closing: CancellationToken,
    pub(crate) census: Arc<live::Census>,
    pub(crate) rates: rates::Rates,
}

impl Console {
    /// A console over the server's parts; starts the samplers of its call rates.
    #[allow(clippy::too_many_arguments)] // The server's parts, each named.
    pub fn new(
        catalog: Arc<LiveCatalog>,
        runtime: Runtime,
        store: Arc<dyn StateStore>,
        sessions: Box<dyn Fn() -> SessionFigures + Send + Sync>,
        access: Access,
        https: bool,
        closing: CancellationToken,
    ) -> Arc<Console> {
        let census = Arc::new(live::Census::new(store.clone(), catalog.clone()));
        let rates = rates::Rates::start(closing.clone());
        Arc::new(Console {
            catalog,
            runtime,
            store,
            sessions,
            access,
            https,
            closing,
            census,
            rates,
        })
    }
}
