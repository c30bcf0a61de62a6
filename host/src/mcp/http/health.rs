//! The probes: `GET /healthz` (the process answers) and `GET /readyz` (it can serve calls).
//!
//! Both are unauthenticated and reachable whatever the `Host` (a probe sends the pod's address),
//! so they answer nothing but their status: no instance, handle, path or store address. Why a
//! check failed goes to the log, once when readiness is lost and once when it is back, not on
//! every probe.
//!
//! It must not touch instances: readiness asks the store for a ping (see
//! [`StateStore::ping`](crate::store::StateStore::ping)) and the catalog for its plugins. The
//! store is asked at most once a second, whatever the probe rate: the probe is open to anyone,
//! and a flood of it must not take the store's connections from the calls.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Json, http::StatusCode};
use serde_json::{Value, json};

use crate::mcp::handler::server::Shared;
use crate::store::StateStore;

/// Longest a readiness probe waits for the store. The remote stores bound their own operations
/// (2 s by default); this also bounds a store that does not.
const STORE_PING_TIMEOUT: Duration = Duration::from_secs(3);

/// How often at most `/readyz` pings the store; probes in between get the last answer.
const STORE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// What `/readyz` checks besides the catalog: the store, whether it answered last time (the
/// answer probes get until the next check, and what lets a change alone be logged), and when
/// it was last asked.
pub struct Readiness {
    store: Arc<dyn StateStore>,
    store_was_up: AtomicBool,
    /// Milliseconds since `epoch` when the last check started; 0: never.
    checked_at_ms: AtomicU64,
    epoch: Instant,
}

impl Readiness {
    pub fn new(store: Arc<dyn StateStore>) -> Readiness {
        Readiness {
            store,
            store_was_up: AtomicBool::new(true),
            checked_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Whether the store answers: asked if the last check is a second old or more and no other
    /// probe is asking it now (the one that claims the check asks; the others, like every
    /// probe within the second, get the last answer). No lock is held while the store is asked.
    async fn store_up(&self) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = self.checked_at_ms.load(Ordering::Acquire);
        let fresh = last != 0 && now.saturating_sub(last) < STORE_CHECK_EVERY.as_millis() as u64;
        let claimed = !fresh
            && self
                .checked_at_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if claimed {
            self.store_problem().await.is_none()
        } else {
            self.store_was_up.load(Ordering::Relaxed)
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
pub async fn ready(shared: Arc<Shared>, readiness: Arc<Readiness>) -> (StatusCode, Json<Value>) {
    let store_up = readiness.store_up().await;
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

    /// A store whose server is gone: every operation fails. It counts the pings it was sent.
    #[derive(Default)]
    struct Unreachable {
        pings: std::sync::atomic::AtomicUsize,
    }

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
        async fn delete(
            &self,
            _: &str,
            _: Option<u64>,
            _: Option<&crate::store::Fence>,
        ) -> Result<bool, StoreError> {
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
        async fn count_owned(&self, _: &str) -> Result<u64, StoreError> {
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
            self.pings.fetch_add(1, Ordering::SeqCst);
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
        async fn delete_leaving(
            &self,
            _: &str,
            _: u64,
            _: Option<&crate::store::Fence>,
            _: &crate::store::Tombstone,
        ) -> Result<bool, StoreError> {
            Err(self.down())
        }
        async fn tombstones(
            &self,
            _: &str,
            _: usize,
        ) -> Result<Vec<crate::store::Tombstone>, StoreError> {
            Err(self.down())
        }
        async fn prune_tombstones(&self, _: u64, _: usize) -> Result<usize, StoreError> {
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
        let down = Readiness::new(Arc::new(Unreachable::default()));
        let problem = down
            .store_problem()
            .await
            .expect("a store that fails is a problem");
        assert!(problem.contains("connection refused"), "{problem}");
    }

    #[tokio::test]
    async fn a_flood_of_probes_pings_the_store_once_a_second() {
        let store = Arc::new(Unreachable::default());
        let readiness = Readiness::new(store.clone());
        let answers = futures_util::future::join_all((0..200).map(|_| readiness.store_up())).await;
        // One probe asked; those that came while it asked had the last answer (up, at start).
        assert_eq!(store.pings.load(Ordering::SeqCst), 1);
        assert!(
            answers.iter().any(|up| !up),
            "the check that asked saw it down"
        );
        for _ in 0..100 {
            assert!(!readiness.store_up().await, "the last answer, down");
        }
        assert_eq!(store.pings.load(Ordering::SeqCst), 1);
        tokio::time::sleep(STORE_CHECK_EVERY + Duration::from_millis(50)).await;
        assert!(!readiness.store_up().await);
        assert_eq!(
            store.pings.load(Ordering::SeqCst),
            2,
            "asked again after a second"
        );
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
