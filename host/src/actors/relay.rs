//! The relay of other servers' changes: with a store several server processes share, a
//! transition made on another process must still notify the sessions here that watch the
//! instance (DESIGN behaviour 7).

use std::{collections::HashSet, sync::Arc, time::Duration};

use super::{InstanceKey, Owner, Runtime, WatchEvent};
use crate::store::StateStore;

/// With a store that several server processes share, a transition made on another process must
/// still notify the sessions here that watch the instance (DESIGN behaviour 7). The feed
/// listens to the instances watched here only (`watched` says when one gains its first watcher
/// or loses its last), so a transition reaches the servers watching it and no others. Opens a
/// new feed, and watches again, when the store's connection drops.
pub async fn relay_changes_from_other_servers(
    store: Arc<dyn StateStore>,
    runtime: Runtime,
    node: Arc<str>,
    mut watched: tokio::sync::mpsc::UnboundedReceiver<WatchEvent>,
) {
    use futures_util::StreamExt;
    // Handle-keyed instances only: a session's instances live with the session, on one server.
    let key_of = |instance: &InstanceKey| {
        matches!(instance.owner, Owner::Handle(_)).then(|| instance.store_key())
    };
    let mut keys: HashSet<String> = HashSet::new();
    let mut announced = false;
    loop {
        let mut feed = match store.watch_changes().await {
            None => return,
            Some(Ok(feed)) => feed,
            Some(Err(error)) => {
                tracing::warn!(%error, "cannot watch other servers' changes; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut listening = true;
        for key in &keys {
            if let Err(error) = feed.subscriptions.watch(key).await {
                tracing::warn!(%error, "cannot watch other servers' changes; retrying");
                listening = false;
                break;
            }
        }
        if listening && !announced {
            tracing::info!("watching changes made by other servers sharing the store");
            announced = true;
        }
        while listening {
            tokio::select! {
                change = feed.changes.next() => match change {
                    Some((origin, key)) => {
                        if *origin != *node
                            && let Some(instance) = InstanceKey::from_store_key(&key)
                        {
                            crate::metrics::change_relayed();
                            runtime.changed_elsewhere(instance);
                        }
                    }
                    None => listening = false,
                },
                event = watched.recv() => {
                    let outcome = match event {
                        None => return,
                        Some(WatchEvent::Watched(instance)) => match key_of(&instance) {
                            Some(key) if keys.insert(key.clone()) => {
                                feed.subscriptions.watch(&key).await
                            }
                            _ => Ok(()),
                        },
                        Some(WatchEvent::Unwatched(instance)) => match key_of(&instance) {
                            Some(key) if keys.remove(&key) => feed.subscriptions.unwatch(&key).await,
                            _ => Ok(()),
                        },
                    };
                    if let Err(error) = outcome {
                        tracing::warn!(%error, "lost the store's change feed; resubscribing");
                        listening = false;
                    }
                }
            }
        }
        tracing::warn!("lost the store's change feed; resubscribing");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
