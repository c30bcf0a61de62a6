//! The console's JSON API under `/console/api/`, and what the pages are made of (the pages'
//! handlers in `handlers.rs` gather the same things): the workflows with their counts, a
//! diagram, instances listed and shown, reset and delete, the server's figures. Errors are
//! `{"error": "…"}` with a status saying what kind (404 none, 409 a race or an ambiguity, 503
//! the store). `turnstile instances --server` (`instances/remote.rs`) reads it.
//!
//! | route | what |
//! | --- | --- |
//! | `GET workflows` | each workflow: id, machine version, states, and counts per state |
//! | `GET workflows/{id}/diagram.svg?highlight=STATE…` | the diagram `turnstile graph --format svg` draws, each `highlight` (a state or a state value) lit |
//! | `GET instances?workflow&state&older_than&limit` | `{"instances": [summary, …]}` |
//! | `GET instance?id=HANDLE_OR_KEY&last=N` | what `turnstile instances show` prints |
//! | `POST instance/reset?id=…`, `POST instance/delete?id=…` | `{"key", "done", "state"}` |
//! | `GET server` | plugins, sessions, calls/s and p99, the store and its health |
//! | `GET live` | SSE: `counts` events (`live.rs`) |

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{
    Extension, Json,
    extract::{Path, Query, RawQuery, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    Console, SessionFigures,
    access::Operator,
    actions::{self, Act, Problem},
    rates::Window,
};
use crate::{
    actors::{NotifierStats, RegistryStats},
    catalog::{Workflow, offered},
    instances::{self, Filter},
    statechart::diagram,
};

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

/// The listing's query: `turnstile instances list`'s flags.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    pub workflow: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub older_than: Option<u64>,
    /// One principal's instances (`Filter::principal`).
    #[serde(default)]
    pub principal: Option<String>,
    /// The page after this key (`Filter::after`).
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    /// A reset or delete just done (the pages' notice).
    #[serde(default)]
    pub done: Option<String>,
}

/// How many instances a listing holds unless asked for another number.
pub const DEFAULT_LIMIT: usize = 100;

impl ListQuery {
    /// The filter, empty fields (a form's blank inputs) meaning none.
    pub fn filter(&self) -> Filter {
        let given = |text: &Option<String>| text.clone().filter(|text| !text.trim().is_empty());
        Filter {
            workflow: given(&self.workflow),
            state: given(&self.state),
            older_than_secs: self.older_than,
            principal: given(&self.principal),
            after: given(&self.after),
            limit: self.limit.unwrap_or(DEFAULT_LIMIT).max(1),
        }
    }
}

/// Which instance, by handle or store key.
#[derive(Debug, Deserialize)]
pub struct Named {
    pub id: String,
    #[serde(default)]
    pub last: Option<usize>,
    #[serde(default)]
    pub done: Option<String>,
}

/// One workflow, as the API lists it.
#[derive(Debug, Serialize)]
pub struct WorkflowInfo {
    pub id: String,
    pub version: String,
    pub states: Vec<String>,
    pub total: u64,
    pub counts: BTreeMap<String, u64>,
}

/// `GET /console/api/workflows`.
pub async fn workflows(State(console): State<Arc<Console>>) -> Result<Json<Value>, Problem> {
    let counts = console.census.count().await.map_err(Problem::of)?;
    let catalog = console.catalog.current();
    let listed: Vec<WorkflowInfo> = catalog
        .workflows()
        .map(|workflow| {
            let count = counts.get(&workflow.id).cloned().unwrap_or_default();
            WorkflowInfo {
                id: workflow.id.clone(),
                version: workflow.version.clone(),
                states: workflow.machine.state_paths(),
                total: count.total,
                counts: count.states,
            }
        })
        .collect();
    Ok(Json(json!({ "workflows": listed })))
}

/// The diagram of `workflow` with the states `highlight` names lit, as `turnstile graph --format
/// svg` draws it (each a state, or a whole state value: `diagram::highlighted`).
pub fn diagram_of(
    catalog: &crate::catalog::Catalog,
    workflow: &Workflow,
    highlight: &[&str],
) -> Result<String, diagram::UnknownState> {
    diagram::render_svg(&workflow.machine, &offered(catalog, workflow), highlight)
}

/// The states to light for an instance's state value: every active leaf, one per region of a
/// parallel state (lighting only the first would hide what the other regions wait for). States
/// the loaded machine lacks (an instance pinned to an older version) are left out, so that the
/// diagram still shows where it is in the states both versions have.
pub fn lit_states(workflow: &Workflow, value: &Value) -> Vec<String> {
    diagram::leaf_states(value)
        .into_iter()
        .filter(|state| workflow.machine.has_state(state))
        .collect()
}

/// `GET /console/api/workflows/{id}/diagram.svg?highlight=STATE[&highlight=STATE…]`: each
/// `highlight` a state, or an instance's whole state value as JSON; all are lit.
pub async fn diagram(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let catalog = console.catalog.current();
    let Some(workflow) = catalog.workflow(&id) else {
        return Problem(StatusCode::NOT_FOUND, format!("no workflow {id} is loaded"))
            .into_response();
    };
    // Repeated keys: serde's query maps cannot hold them, a list of pairs can.
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    let highlight: Vec<&str> = pairs
        .iter()
        .filter(|(key, value)| key == "highlight" && !value.is_empty())
        .map(|(_, value)| value.as_str())
        .collect();
    match diagram_of(&catalog, workflow, &highlight) {
        Ok(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        Err(unknown) => Problem(StatusCode::NOT_FOUND, unknown.to_string()).into_response(),
    }
}

/// `GET /console/api/instances`.
pub async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, Problem> {
    let filter = query.filter();
    let listed = instances::list(&*console.store, &filter)
        .await
        .map_err(Problem::of)?;
    // A full page may have more: `next` is the `after` of the page that follows.
    Ok(Json(
        json!({ "instances": listed, "next": filter.next_after(&listed) }),
    ))
}

/// `GET /console/api/instance?id=…`.
pub async fn show(
    State(console): State<Arc<Console>>,
    Query(named): Query<Named>,
) -> Result<Json<Value>, Problem> {
    let shown = instances::show(&*console.store, &named.id, named.last)
        .await
        .map_err(Problem::of)?;
    Ok(Json(shown))
}

/// `POST /console/api/instance/{reset,delete}?id=…`.
pub async fn act(
    State(console): State<Arc<Console>>,
    Extension(operator): Extension<Operator>,
    Path(action): Path<String>,
    Query(named): Query<Named>,
) -> Result<Json<actions::Done>, Problem> {
    let act = Act::parse(&action).ok_or_else(|| {
        Problem(
            StatusCode::NOT_FOUND,
            format!("no action {action}: reset or delete"),
        )
    })?;
    actions::act(&console, act, &named.id, operator.0)
        .await
        .map(Json)
}

/// The server's figures.
#[derive(Serialize)]
pub struct ServerInfo {
    pub plugins: Vec<Value>,
    pub sessions: SessionFigures,
    pub registry: Option<RegistryStats>,
    pub notifier: Option<NotifierStats>,
    pub calls: BTreeMap<&'static str, Option<Window>>,
    pub store: String,
    pub shared: bool,
    /// How long the store took to answer a ping, in ms; `null` with `store_error` when it did
    /// not.
    pub store_ping_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
}

/// Gathers the server's figures: the numbers `/stats` and `/metrics` read.
pub async fn server_info(console: &Console) -> ServerInfo {
    let catalog = console.catalog.current();
    let plugins = catalog
        .plugins()
        .iter()
        .map(|plugin| {
            let pool = plugin.pool();
            json!({
                "name": plugin.manifest().name,
                "version": plugin.manifest().version,
                "abi": turnstile_plugin_abi::abi::ABI_VERSION.to_string(),
                "isolated": plugin.is_isolated(),
                "pool_size": pool.size(),
                "calls_running": pool.busy(),
                "calls_past_deadline": pool.past_deadline(),
                "process_crashes": plugin.crashes(),
            })
        })
        .collect();
    let (registry, notifier) = match console.runtime.stats().await {
        Ok((registry, notifier)) => (Some(registry), Some(notifier)),
        Err(_) => (None, None),
    };
    // Keyed so that they sort shortest first.
    let calls = [
        ("1 minute", Duration::from_secs(60)),
        ("5 minutes", Duration::from_secs(300)),
    ]
    .into_iter()
    .map(|(label, span)| (label, console.rates.over(span)))
    .collect();
    let started = std::time::Instant::now();
    let (store_ping_ms, store_error) = match console.store.ping().await {
        Ok(()) => (Some(started.elapsed().as_millis() as u64), None),
        Err(error) => (None, Some(error.to_string())),
    };
    ServerInfo {
        plugins,
        sessions: (console.sessions)(),
        registry,
        notifier,
        calls,
        store: console.store.describe(),
        shared: console.store.is_shared(),
        store_ping_ms,
        store_error,
    }
}

/// `GET /console/api/server`.
pub async fn server(State(console): State<Arc<Console>>) -> Json<ServerInfo> {
    Json(server_info(&console).await)
}
