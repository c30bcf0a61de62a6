//! The probes: `GET /healthz` (the process answers) and `GET /readyz` (it can serve calls).
//!
//! Both are unauthenticated and reachable whatever the `Host` (a probe sends the pod's address),
//! so they answer nothing but their status: no instance, handle, path or store address. Why a
//! check failed goes to the log, once when readiness is lost and once when it is back, not on
//! every probe.
//!
//! It must not touch instances: readiness asks the store for a ping (see
//! [`StateStore::ping`](crate::store::StateStore::ping)) and the catalog for its plugins.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{Json, extract::State, http::StatusCode};
use serde_json::{Value, json};

use super::server::Shared;
use crate::store::StateStore;

/// Longest a readiness probe waits for the store. The remote stores bound their own operations
/// (2 s by default); this also bounds a store that does not.
const STORE_PING_TIMEOUT: Duration = Duration::from_secs(3);

/// What `/readyz` checks besides the catalog: the store, and whether it answered last time (to
/// log changes only).
pub struct Readiness {
    store: Arc<dyn StateStore>,
    store_was_up: AtomicBool,
}

impl Readiness {
    pub fn new(store: Arc<dyn StateStore>) -> Readiness {
        Readiness {
            store,
            store_was_up: AtomicBool::new(true),
        }
    }

    /// `None` when the store answers; else why not, which is logged when it is news.
    async fn store_problem(&self) -> Option<String> {
        let problem = match tokio::time::timeout(STORE_PING_TIMEOUT, self.store.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_) => Some(format!(
                "{}: no answer within {STORE_PING_TIMEOUT:?}",
                self.store.describe()
            )),
        };
        let was_up = self.store_was_up.swap(problem.is_none(), Ordering::Relaxed);
        match (&problem, was_up) {
            (Some(problem), true) => {
                tracing::warn!(%problem, "not ready: the store does not answer")
            }
            (None, false) => tracing::info!("ready again: the store answers"),
            _ => {}
        }
        problem
    }
}

/// `GET /healthz`: 200 `{"status":"ok"}` while the process serves HTTP at all.
pub async fn alive() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 `{"status":"ready"}` when the store answers and at least one plugin is
/// loaded; else 503 `{"status":"not ready","not_ready":{"store":"unreachable",...}}` naming each
/// check that failed.
pub async fn ready(State(shared): State<Arc<Shared>>) -> (StatusCode, Json<Value>) {
    let store_up = shared.readiness.store_problem().await.is_none();
    verdict(store_up, shared.catalog.current().plugins().len())
}

fn verdict(store_up: bool, plugins: usize) -> (StatusCode, Json<Value>) {
    let mut not_ready = serde_json::Map::new();
    if !store_up {
        not_ready.insert("store".into(), json!("unreachable"));
    }
    if plugins == 0 {
        not_ready.insert("plugins".into(), json!("no plugin is loaded"));
    }
    if not_ready.is_empty() {
        (StatusCode::OK, Json(json!({ "status": "ready" })))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "not_ready": not_ready })),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{InstanceRecord, MemoryStore, StoreError};

    /// A store whose server is gone: every operation fails.
    struct Unreachable;

    #[async_trait::async_trait]
    impl StateStore for Unreachable {
        fn describe(&self) -> String {
            "redis://gone:6379".into()
        }
        async fn load(&self, _: &str) -> Result<Option<InstanceRecord>, StoreError> {
            Err(self.down())
        }
        async fn save(&self, _: &str, _: &InstanceRecord, _: u64) -> Result<(), StoreError> {
            Err(self.down())
        }
        async fn delete(&self, _: &str, _: Option<u64>) -> Result<bool, StoreError> {
            Err(self.down())
        }
        async fn list_keys(
            &self,
            _: &str,
            _: Option<&str>,
            _: usize,
        ) -> Result<Vec<String>, StoreError> {
            Err(self.down())
        }
        async fn count(&self, _: &str) -> Result<u64, StoreError> {
            Err(self.down())
        }
        async fn audit(&self, _: &str) -> Result<Vec<crate::store::AuditEntry>, StoreError> {
            Err(self.down())
        }
        async fn save_machine(
            &self,
            _: &str,
            _: &str,
            _: &serde_json::Value,
        ) -> Result<(), StoreError> {
            Err(self.down())
        }
        async fn load_machine(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<serde_json::Value>, StoreError> {
            Err(self.down())
        }
        async fn ping(&self) -> Result<(), StoreError> {
            Err(self.down())
        }
        async fn due(
            &self,
            _: u64,
            _: Option<&crate::store::Due>,
            _: usize,
        ) -> Result<Vec<crate::store::Due>, StoreError> {
            Err(self.down())
        }
    }

    impl Unreachable {
        fn down(&self) -> StoreError {
            StoreError::Unavailable("redis://gone:6379: connection refused".into())
        }
    }

    #[tokio::test]
    async fn the_store_check_follows_the_store() {
        let up = Readiness::new(Arc::new(MemoryStore::default()));
        assert_eq!(up.store_problem().await, None);
        let down = Readiness::new(Arc::new(Unreachable));
        let problem = down
            .store_problem()
            .await
            .expect("a store that fails is a problem");
        assert!(problem.contains("connection refused"), "{problem}");
    }

    #[test]
    fn not_ready_names_what_is_missing_and_nothing_more() {
        let (status, Json(body)) = verdict(true, 2);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, json!({"status": "ready"}));
        let (status, Json(body)) = verdict(false, 0);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            json!({"status": "not ready", "not_ready": {
                "store": "unreachable",
                "plugins": "no plugin is loaded"
            }})
        );
    }
}
