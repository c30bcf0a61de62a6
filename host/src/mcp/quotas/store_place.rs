//! A place held in a shared store under one of the per-principal limits
//! ([`StateStore::reserve_place`]), so that servers sharing the store count each other's mints
//! and tasks: taken once, renewed while held, given back when dropped.
//!
//! It owns the place's life, not the decision: `quotas.rs` decides from the count taking it
//! returns.

use std::{sync::Arc, time::Duration};

use crate::store::{StateStore, StoreError};

/// How long a place lives unless renewed. A holder renews it every third of this, so a place
/// lapses only once its server has stopped renewing it (it died, or lost the store): what a
/// server that died mid-mint or mid-task costs its principal until then.
const PLACE_TTL: Duration = Duration::from_secs(300);

/// A place held under a scope; renewed while it lives, given back when dropped.
pub struct StorePlace {
    store: Arc<dyn StateStore>,
    scope: String,
    id: String,
    renewing: tokio::task::AbortHandle,
}

impl StorePlace {
    /// Takes a place under `scope`: the place, and how many places `scope` holds with it
    /// (every server's); `None` for a store that keeps no places.
    pub async fn take(
        store: &Arc<dyn StateStore>,
        scope: String,
    ) -> Result<Option<(StorePlace, u64)>, StoreError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let Some(held) = store.reserve_place(&scope, &id, PLACE_TTL).await? else {
            return Ok(None);
        };
        let renewing = tokio::spawn(renew(Arc::clone(store), scope.clone(), id.clone()));
        let place = StorePlace {
            store: Arc::clone(store),
            scope,
            id,
            renewing: renewing.abort_handle(),
        };
        Ok(Some((place, held)))
    }
}

/// Renews the place `id` under `scope` every third of its time to live, until aborted. A
/// renewal that fails is tried again at the next; the place lapses only after three in a row.
async fn renew(store: Arc<dyn StateStore>, scope: String, id: String) {
    let mut every = tokio::time::interval(PLACE_TTL / 3);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        if let Err(error) = store.reserve_place(&scope, &id, PLACE_TTL).await {
            tracing::debug!(%error, scope, "a place was not renewed; trying again");
        }
    }
}

impl Drop for StorePlace {
    /// Gives the place back in a task of its own, since a drop cannot wait; if that fails, or
    /// a renewal already sent lands after it, the place lapses after [`PLACE_TTL`].
    fn drop(&mut self) {
        self.renewing.abort();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = Arc::clone(&self.store);
        let scope = std::mem::take(&mut self.scope);
        let id = std::mem::take(&mut self.id);
        runtime.spawn(async move {
            if let Err(error) = store.release_place(&scope, &id).await {
                tracing::debug!(%error, scope, "a place was not given back; it lapses");
            }
        });
    }
}
