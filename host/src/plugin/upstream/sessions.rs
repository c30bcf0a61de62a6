//! [`Sessions`]: which upstream session a call goes to, opened when first needed and opened again
//! after the upstream went away.
//!
//! `shared`: one link for every call. `per-instance`: one link per instance handle (calls of
//! tools bound to no instance use the shared one), closed after `idle_s` without calls, at most
//! `max_sessions` at once: past that, the least recently used link with no call in flight is
//! closed to make room, and with none, the call waits for one, then is refused (busy).
//!
//! A link that closed (the process exited, the connection broke) is opened again by the next call
//! that needs it, no sooner than its backoff allows: 100 ms after a failure, doubling up to 10 s,
//! back to 100 ms once a connection worked.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::{Mutex, Notify};

use super::{
    file::{Sessions as Mode, UpstreamFile},
    link::{Link, ListChanged},
};

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LAST_BACKOFF: Duration = Duration::from_secs(10);

/// Why no link could be had.
#[derive(Debug)]
pub enum NoLink {
    /// The upstream could not be reached (or is in its backoff after failing).
    Unreachable(String),
    /// Every per-instance session is taken by a call in flight.
    Busy(String),
}

/// Every link of one upstream.
pub struct Sessions {
    file: Arc<UpstreamFile>,
    list_changed: ListChanged,
    shared: Arc<Slot>,
    per_instance: Mutex<HashMap<String, Arc<Slot>>>,
    /// Woken when a per-instance call ends (a session may have come free).
    freed: Notify,
}

/// One link, as a call sees it: open, or when it may be opened again.
#[derive(Default)]
pub struct Slot {
    /// An async mutex: a call that finds the link down connects while holding it, so the calls
    /// behind it wait for that connection rather than start their own.
    state: Mutex<SlotState>,
    /// A std mutex: held for a read or a write, never across an await, and taken when a call
    /// ends, which may be outside any runtime.
    usage: std::sync::Mutex<Usage>,
}

#[derive(Default)]
struct SlotState {
    link: Option<Arc<Link>>,
    /// No new attempt before this, after a failure.
    retry_at: Option<Instant>,
    backoff: Option<Duration>,
}

#[derive(Default, Clone, Copy)]
struct Usage {
    last_used: Option<Instant>,
    /// Calls holding this slot's link right now.
    in_flight: usize,
}

impl Slot {
    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A call's hold on a link; the slot counts it until dropped.
pub struct Held {
    pub link: Arc<Link>,
    slot: Arc<Slot>,
    freed: Option<Arc<Sessions>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let mut usage = self.slot.usage();
            usage.in_flight -= 1;
            usage.last_used = Some(Instant::now());
        }
        if let Some(sessions) = &self.freed {
            sessions.freed.notify_waiters();
        }
    }
}

impl Sessions {
    /// The sessions of `file`'s upstream, starting with the shared link `first` (the one its
    /// tools were listed on).
    pub fn new(file: Arc<UpstreamFile>, list_changed: ListChanged, first: Link) -> Arc<Sessions> {
        let shared = Arc::new(Slot::default());
        // Nobody else can hold the lock of a slot made on the line above.
        shared.state.try_lock().expect("a new slot").link = Some(Arc::new(first));
        Arc::new(Sessions {
            file,
            list_changed,
            shared,
            per_instance: Mutex::default(),
            freed: Notify::new(),
        })
    }

    /// The link for a call on the instance `handle` (empty: no instance), waiting at most
    /// `wait` for a session to come free.
    pub async fn hold(self: &Arc<Self>, handle: &str, wait: Duration) -> Result<Held, NoLink> {
        let Mode::PerInstance { max, .. } = self.file.sessions else {
            return self.shared_link().await;
        };
        if handle.is_empty() {
            return self.shared_link().await;
        }
        let deadline = Instant::now() + wait;
        let slot = loop {
            // Registered before looking, so a session freed meanwhile is not missed.
            let freed = self.freed.notified();
            if let Some(slot) = self.room_for(handle, max).await {
                break slot;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, freed).await.is_err() {
                return Err(NoLink::Busy(format!(
                    "all {max} of its per-instance sessions are in use (max_sessions)"
                )));
            }
        };
        let mut held = self.open(&slot).await?;
        held.freed = Some(self.clone());
        Ok(held)
    }

    async fn shared_link(self: &Arc<Self>) -> Result<Held, NoLink> {
        self.open(&self.shared).await
    }

    /// The instance's slot, made if there is room (closing the least recently used idle one
    /// when there is not); `None` when every session is busy.
    async fn room_for(&self, handle: &str, max: usize) -> Option<Arc<Slot>> {
        let mut slots = self.per_instance.lock().await;
        if let Some(slot) = slots.get(handle) {
            return Some(slot.clone());
        }
        if slots.len() >= max {
            let mut idle = None;
            for (key, slot) in slots.iter() {
                let usage = *slot.usage();
                if usage.in_flight == 0
                    && idle
                        .as_ref()
                        .is_none_or(|(_, used)| usage.last_used < *used)
                {
                    idle = Some((key.clone(), usage.last_used));
                }
            }
            let (key, _) = idle?;
            if let Some(slot) = slots.remove(&key) {
                close(&slot).await;
            }
        }
        let slot = Arc::new(Slot::default());
        slots.insert(handle.to_owned(), slot.clone());
        Some(slot)
    }

    /// Opens `slot`'s link if it is not open, and holds it.
    async fn open(&self, slot: &Arc<Slot>) -> Result<Held, NoLink> {
        let mut state = slot.state.lock().await;
        let open = state
            .link
            .as_ref()
            .filter(|link| !link.is_closed())
            .cloned();
        let link = match open {
            Some(link) => link,
            None => {
                if let Some(retry_at) = state.retry_at {
                    // A call arriving inside the backoff waits it out rather than fail at once:
                    // a restart after a crash is usually ready by then.
                    tokio::time::sleep_until(retry_at.into()).await;
                }
                if state.link.take().is_some() {
                    tracing::warn!(
                        upstream = %self.file.name,
                        "the upstream went away; connecting again"
                    );
                }
                match Link::connect(&self.file, self.list_changed.clone()).await {
                    Ok(link) => {
                        state.retry_at = None;
                        state.backoff = None;
                        let link = Arc::new(link);
                        state.link = Some(link.clone());
                        link
                    }
                    Err(reason) => {
                        let backoff = state
                            .backoff
                            .map_or(FIRST_BACKOFF, |backoff| (backoff * 2).min(LAST_BACKOFF));
                        state.backoff = Some(backoff);
                        state.retry_at = Some(Instant::now() + backoff);
                        return Err(NoLink::Unreachable(reason));
                    }
                }
            }
        };
        slot.usage().in_flight += 1;
        Ok(Held {
            link,
            slot: slot.clone(),
            freed: None,
        })
    }

    /// Lists the upstream again on the shared link (its tools changed).
    pub async fn list(self: &Arc<Self>) -> Result<super::Listing, String> {
        let held = self.hold("", Duration::ZERO).await.map_err(|no| match no {
            NoLink::Unreachable(reason) | NoLink::Busy(reason) => reason,
        })?;
        Ok(super::Listing {
            tools: held.link.list_tools().await?,
            primitives: held.link.list_primitives().await?,
            version: held.link.version(),
        })
    }

    /// Closes the per-instance sessions unused for `idle`; returns how many are left.
    pub async fn close_idle(&self, idle: Duration) -> usize {
        let mut slots = self.per_instance.lock().await;
        let mut stale = Vec::new();
        for (key, slot) in slots.iter() {
            let usage = *slot.usage();
            if usage.in_flight == 0 && usage.last_used.is_none_or(|used| used.elapsed() >= idle) {
                stale.push(key.clone());
            }
        }
        for key in stale {
            if let Some(slot) = slots.remove(&key) {
                close(&slot).await;
            }
        }
        slots.len()
    }

    /// Closes every link (the plugin is being dropped).
    pub async fn close_all(&self) {
        let slots: Vec<_> = self
            .per_instance
            .lock()
            .await
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            close(&slot).await;
        }
        close_state(&mut *self.shared.state.lock().await).await;
    }
}

async fn close(slot: &Slot) {
    close_state(&mut *slot.state.lock().await).await;
}

async fn close_state(state: &mut SlotState) {
    if let Some(link) = state.link.take() {
        // Calls in flight hold their own Arc; the session ends when the last one lets go.
        if let Ok(link) = Arc::try_unwrap(link) {
            link.close().await;
        }
    }
}
