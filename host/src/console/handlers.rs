//! The pages' handlers: each gathers what its page shows (as the API does, `api.rs`) and
//! renders it (`pages.rs`). A reset or delete is two steps without a script: a GET page asking
//! for confirmation, whose form POSTs the act; the answer is a redirect to where its outcome
//! shows (POST, redirect, GET: a reload repeats nothing).

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    Extension, Form,
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};
use maud::Markup;

use super::{
    Access, Console,
    access::Operator,
    actions::{self, Act, Problem},
    api::{self, ListQuery, Named, diagram_of, lit_states},
    pages::{self, PluginShown, ServerShown, WorkflowShown, encode},
};
use crate::instances;

/// Whether the page offers to log out (an open console has no login).
fn signed_in(console: &Console) -> bool {
    matches!(console.access, Access::Operators(_))
}

/// A problem, as a page with its status.
fn problem_page(console: &Console, problem: Problem) -> Response {
    (problem.0, pages::problem(signed_in(console), &problem.1)).into_response()
}

/// `GET /console`: the workflows.
pub async fn workflows(State(console): State<Arc<Console>>) -> Response {
    let counts = match console.census.count().await {
        Ok(counts) => counts,
        Err(error) => return problem_page(&console, Problem::of(error)),
    };
    let catalog = console.catalog.current();
    let shown: Vec<WorkflowShown> = catalog
        .workflows()
        .map(|workflow| WorkflowShown {
            id: workflow.id.clone(),
            version: workflow.version.clone(),
            // No highlight: nothing is not a state the machine has.
            svg: diagram_of(&catalog, workflow, &[]).unwrap_or_default(),
            states: workflow.machine.state_paths(),
        })
        .collect();
    pages::workflows(signed_in(&console), &shown, &counts).into_response()
}

/// `GET /console/instances`: the search and filter forms and what they found.
pub async fn instances(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
) -> Response {
    let filter = query.filter();
    let listed = match instances::list(&*console.store, &filter).await {
        Ok(listed) => listed,
        Err(error) => return problem_page(&console, Problem::of(error)),
    };
    let workflows: Vec<String> = console
        .catalog
        .current()
        .workflows()
        .map(|workflow| workflow.id.clone())
        .collect();
    let notice = query.done.as_deref().map(|key| format!("Deleted {key}."));
    pages::instances(
        signed_in(&console),
        &workflows,
        &filter,
        &listed,
        notice.as_deref(),
    )
    .into_response()
}

/// `GET /console/instance?id=…`: one instance, found by handle or key.
pub async fn instance(State(console): State<Arc<Console>>, Query(named): Query<Named>) -> Response {
    let shown = match instances::show(&*console.store, &named.id, None).await {
        Ok(shown) => shown,
        Err(error) => return problem_page(&console, Problem::of(error)),
    };
    if shown["deleted"].is_object() {
        return pages::deleted(signed_in(&console), &shown).into_response();
    }
    let catalog = console.catalog.current();
    let svg = shown["workflow"]
        .as_str()
        .and_then(|id| catalog.workflow(id))
        .and_then(|workflow| {
            // Every state it is in: one per region of a parallel state.
            let lit = lit_states(workflow, &shown["state"]);
            let lit: Vec<&str> = lit.iter().map(String::as_str).collect();
            diagram_of(&catalog, workflow, &lit).ok()
        });
    let notice = named
        .done
        .as_deref()
        .map(|state| format!("Reset: now in state {state}."));
    pages::instance(
        signed_in(&console),
        &shown,
        svg.as_deref(),
        notice.as_deref(),
    )
    .into_response()
}

/// `GET /console/instance/{reset,delete}?id=…`: the confirmation.
pub async fn confirm(
    State(console): State<Arc<Console>>,
    Path(action): Path<String>,
    Query(named): Query<Named>,
) -> Response {
    let Some(act) = Act::parse(&action) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match instances::find(&*console.store, &named.id).await {
        Ok((key, record)) => pages::confirm(
            signed_in(&console),
            act.name(),
            &key,
            &record.snapshot["value"],
        )
        .into_response(),
        Err(error) => problem_page(&console, Problem::of(error)),
    }
}

/// The confirmation form's field.
#[derive(serde::Deserialize)]
pub struct Confirmed {
    id: String,
}

/// `POST /console/instance/{reset,delete}`: the act, then where its outcome shows.
pub async fn act(
    State(console): State<Arc<Console>>,
    Extension(operator): Extension<Operator>,
    Path(action): Path<String>,
    Form(confirmed): Form<Confirmed>,
) -> Response {
    let Some(act) = Act::parse(&action) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match actions::act(&console, act, &confirmed.id, operator.0).await {
        Ok(done) => {
            let to = match act {
                Act::Reset => format!(
                    "/console/instance?{}",
                    encode(&[
                        ("id", &done.key),
                        (
                            "done",
                            &done
                                .state
                                .as_ref()
                                .map(instances::state_text)
                                .unwrap_or_default()
                        )
                    ])
                ),
                Act::Delete => format!("/console/instances?{}", encode(&[("done", &done.key)])),
            };
            Redirect::to(&to).into_response()
        }
        Err(problem) => problem_page(&console, problem),
    }
}

/// `GET /console/server`.
pub async fn server(State(console): State<Arc<Console>>) -> Markup {
    let info = api::server_info(&console).await;
    let plugins = info
        .plugins
        .iter()
        .map(|plugin| PluginShown {
            name: plugin["name"].as_str().unwrap_or("?").to_owned(),
            version: plugin["version"].as_str().unwrap_or("?").to_owned(),
            abi: plugin["abi"].as_str().unwrap_or("?").to_owned(),
            isolated: plugin["isolated"].as_bool().unwrap_or(false),
            pool_size: plugin["pool_size"].as_u64().unwrap_or(0) as usize,
            running: plugin["calls_running"].as_u64().unwrap_or(0) as usize,
            past_deadline: plugin["calls_past_deadline"].as_u64().unwrap_or(0),
            crashes: plugin["process_crashes"].as_u64(),
        })
        .collect();
    let windows: BTreeMap<&'static str, _> = info.calls.clone();
    let shown = ServerShown {
        plugins,
        sessions: info.sessions,
        registry: info.registry,
        notifier: info.notifier,
        windows,
        store: info.store.clone(),
        shared: info.shared,
        health: match (info.store_ping_ms, &info.store_error) {
            (Some(ms), _) => Ok(ms),
            (None, error) => Err(error.clone().unwrap_or_default()),
        },
    };
    pages::server(signed_in(&console), &shown)
}
