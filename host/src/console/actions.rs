//! The console's reset and delete, for its forms and its API alike: the instance is found as
//! `turnstile instances` finds it (`instances::find`), then acted on by its actor in this
//! process (`Runtime::reset` / `Runtime::delete`, `actors/operator.rs`), which keeps its copy in
//! memory right and tells its watchers. Only an instance no actor here may hold (a session of
//! another server sharing the store, a workflow no plugin loads any more) is written in the store
//! directly, with compare-and-set under its lease (`instances/repair.rs`).
//!
//! Also what goes wrong, as a status and words an operator can act on ([`Problem`]).

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;

use super::Console;
use crate::{
    actors::{InstanceError, Operated},
    instances::{self, query::NotFound, repair},
    store::{DeleteKind, StoreError},
};

/// What an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Reset,
    Delete,
}

impl Act {
    pub fn parse(name: &str) -> Option<Act> {
        match name {
            "reset" => Some(Act::Reset),
            "delete" => Some(Act::Delete),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Act::Reset => "reset",
            Act::Delete => "delete",
        }
    }
}

/// What was done: the API's answer (`turnstile instances --server` reads it).
#[derive(Debug, Clone, Serialize)]
pub struct Done {
    pub key: String,
    /// `reset` or `deleted`.
    pub done: &'static str,
    /// The state value after a reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
}

/// A request the console could not serve: the status and why, for a person.
#[derive(Debug, Clone)]
pub struct Problem(pub StatusCode, pub String);

impl Problem {
    /// What went wrong finding or reading an instance: 404 for none, 503 when the store does
    /// not answer, else 409 (a handle naming several instances, a write that lost a race).
    pub fn of(error: anyhow::Error) -> Problem {
        let status = if error.downcast_ref::<NotFound>().is_some() {
            StatusCode::NOT_FOUND
        } else if matches!(
            error.downcast_ref::<StoreError>(),
            Some(StoreError::Unavailable(_) | StoreError::NoAnswer(_) | StoreError::Dropped(_))
        ) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::CONFLICT
        };
        Problem(status, format!("{error:#}"))
    }
}

/// Resets or deletes the instance `instance` names (a handle or a store key) as `operator`.
pub async fn act(
    console: &Console,
    act: Act,
    instance: &str,
    operator: Option<String>,
) -> Result<Done, Problem> {
    let (key, _) = instances::find(&*console.store, instance)
        .await
        .map_err(Problem::of)?;
    let by_actor = match act {
        Act::Reset => console.runtime.reset(&key, operator.clone()).await,
        Act::Delete => console.runtime.delete(&key, operator.clone()).await,
    };
    let done = match by_actor {
        Ok(Some(Operated::Reset { to, .. })) => done(&key, act, Some(to)),
        Ok(Some(Operated::Deleted)) => done(&key, act, None),
        Ok(Some(Operated::Missing)) => {
            return Err(Problem(
                StatusCode::NOT_FOUND,
                format!("{key} was deleted meanwhile; nothing was done"),
            ));
        }
        // No actor of this process may hold it: the store, under the instance's lease.
        Ok(None) | Err(InstanceError::UnknownWorkflow(_)) => {
            directly(console, act, &key, operator).await?
        }
        Err(InstanceError::LeaseBusy { retry_after_ms }) => {
            return Err(Problem(
                StatusCode::CONFLICT,
                format!(
                    "another server is running a call on {key}; nothing was done: try again in \
                     {retry_after_ms} ms"
                ),
            ));
        }
        Err(InstanceError::TaskRunning { id, tool }) => {
            return Err(Problem(
                StatusCode::CONFLICT,
                format!(
                    "{tool} is running on {key} as task {id}; nothing was done: wait until the \
                     task ends (its client may cancel it), then try again"
                ),
            ));
        }
        Err(InstanceError::Store(StoreError::Conflict { .. } | StoreError::Fenced { .. })) => {
            return Err(Problem(
                StatusCode::CONFLICT,
                repair::changed_meanwhile(&key),
            ));
        }
        Err(InstanceError::Store(
            error @ (StoreError::Unavailable(_) | StoreError::NoAnswer(_) | StoreError::Dropped(_)),
        )) => {
            return Err(Problem(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the store did not answer; nothing may have been done: {error}"),
            ));
        }
        Err(error) => return Err(Problem(StatusCode::CONFLICT, error.to_string())),
    };
    // The counts per state change with it.
    crate::metrics::changes::changes().tell();
    Ok(done)
}

/// The act done in the store itself (see the module docs for when).
async fn directly(
    console: &Console,
    act: Act,
    key: &str,
    operator: Option<String>,
) -> Result<Done, Problem> {
    let store = &*console.store;
    match act {
        Act::Reset => {
            let state = repair::reset(store, key, operator)
                .await
                .map_err(Problem::of)?;
            Ok(done(key, act, Some(state)))
        }
        Act::Delete => {
            let by = operator.as_deref().unwrap_or("console");
            repair::delete(store, key, by, DeleteKind::Console)
                .await
                .map_err(Problem::of)?;
            tracing::info!(
                principal = operator.as_deref().unwrap_or("-"),
                "an operator deleted an instance"
            );
            Ok(done(key, act, None))
        }
    }
}

fn done(key: &str, act: Act, state: Option<Value>) -> Done {
    Done {
        key: key.to_owned(),
        done: match act {
            Act::Reset => "reset",
            Act::Delete => "deleted",
        },
        state,
    }
}
