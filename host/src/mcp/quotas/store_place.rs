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

/// A place held under a scope; renewed once kept, given back when dropped.
pub struct StorePlace {
    store: Arc<dyn StateStore>,
    scope: String,
    id: String,
    /// The renewal, from [`StorePlace::keep`] on.
    renewing: Option<tokio::task::AbortHandle>,
}

impl StorePlace {
    /// Takes a place under `scope`: the place, and how many places `scope` holds with it
    /// (every server's); `None` for a store that keeps no places. The place lasts
    /// [`PLACE_TTL`] unless [`kept`](Self::keep): a place refused on its count is only
    /// dropped, and costs no renewal.
    pub async fn take(
        store: &Arc<dyn StateStore>,
        scope: String,
    ) -> Result<Option<(StorePlace, u64)>, StoreError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let Some(held) = store.reserve_place(&scope, &id, PLACE_TTL).await? else {
            return Ok(None);
        };
        let place = StorePlace {
            store: Arc::clone(store),
            scope,
            id,
            renewing: None,
        };
        Ok(Some((place, held)))
    }

    /// Keeps the place for as long as it lives: renewed every third of [`PLACE_TTL`] until
    /// dropped.
    pub fn keep(mut self) -> StorePlace {
        let renewing = tokio::spawn(renew(
            Arc::clone(&self.store),
            self.scope.clone(),
            self.id.clone(),
        ));
        self.renewing = Some(renewing.abort_handle());
        self
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
        if let Some(renewing) = &self.renewing {
            renewing.abort();
        }
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
