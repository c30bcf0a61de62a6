//! What one client may hold at once and how fast it may start instances: sessions, event
//! streams, and mints, counted per principal (with authentication) or per client address
//! (without), so that one client cannot take what the server-wide caps leave for the others.
//!
//! This module owns the counts and the decisions; `http/endpoint.rs` asks it before opening a
//! session, `http/held.rs` before holding a response open (a refusal is HTTP 429 with
//! `Retry-After`), and the `tools/call` handler before a call mints an instance (a refusal is
//! `isError` with code `QUOTA_EXCEEDED` and `retryAfterMs`, built in `reply.rs`). Every limit is
//! off unless configured.
//!
//! - **Sessions**: a session is its opener's. Admission counts the sessions the server still
//!   holds for that holder (a scan of the opener table, only with the limit set, only on
//!   `initialize`) plus those of its `initialize`s still being answered, and takes a place in
//!   the same step under the holder's entry lock, so racing `initialize`s cannot all pass.
//! - **Event streams**: a place per response held open (a GET event stream, a 2026-07-28
//!   `subscriptions/listen`, the console's live counts), given back when its body is dropped.
//! - **Mints**: a token bucket per holder (`--mint-rate` per second, `--mint-burst` at once).
//! - **Instances** (`--max-instances-per-principal`): the handle-keyed instances a principal's
//!   tenant holds in the store, counted by the store's owner index (`store/owned.rs`) before each
//!   mint, plus its mints in flight (each holds a place until its call settles, waiting for a
//!   person included), so the bound holds across restarts and under any concurrency. On a
//!   shared store the places are the store's (`StateStore::reserve_place`), taken before the
//!   count, so mints racing on several servers count each other; on one no other process
//!   shares, this server counts its own. Without authentication an instance belongs to no one
//!   (its handle is the only key to it), so there is nothing to count it against: the mint rate
//!   per address bounds such a client.
//! - **Tasks** (`--max-tasks-per-principal`): a place per task not ended, taken before the task
//!   is created and given back when it ends (completed, failed or cancelled), in the shared
//!   store (every server's counted together) or on this server: a call past it is answered
//!   `QUOTA_EXCEEDED`, and nothing ran.

mod store_place;

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use dashmap::DashMap;

use self::store_place::StorePlace;
use crate::mcp::auth::principal::Principal;
use crate::{
    actors::Tenant,
    store::{StateStore, StoreError},
};

/// How many sessions open between two prunings of ended sessions' entries.
const PRUNE_EVERY: usize = 1024;

/// Mint buckets kept before the full ones (holders that stopped minting) are dropped.
const MAX_IDLE_BUCKETS: usize = 10_000;

/// The client address a request came from, put in its extensions by the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Who a quota counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    Principal(Arc<str>),
    Address(IpAddr),
}

impl Holder {
    /// The principal when the request has one, else the client's address.
    pub fn of(principal: Option<&Principal>, address: Option<&ClientAddr>) -> Option<Holder> {
        match (principal, address) {
            (Some(principal), _) => Some(Holder::Principal(principal.0.as_str().into())),
            (None, Some(address)) => Some(Holder::Address(address.0)),
            (None, None) => None,
        }
    }

    /// The scope of this holder's places of `kind` in a shared store
    /// ([`StateStore::reserve_place`]).
    fn scope(&self, kind: &str) -> String {
        match self {
            Holder::Principal(principal) => format!("{kind}:principal:{principal}"),
            Holder::Address(address) => format!("{kind}:address:{address}"),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Principal(principal) => write!(f, "principal {principal}"),
            Holder::Address(address) => write!(f, "client address {address}"),
        }
    }
}

/// The limits (`None`: no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaLimits {
    /// `--max-sessions-per-principal`.
    pub sessions: Option<usize>,
    /// `--max-streams-per-principal`.
    pub streams: Option<usize>,
    /// `--mint-rate`: instances one holder may start per second, on average.
    pub mint_rate: Option<f64>,
    /// `--mint-burst`: how many it may start at once (the bucket's size).
    pub mint_burst: f64,
    /// `--max-instances-per-principal`.
    pub instances: Option<u64>,
    /// `--max-tasks-per-principal`.
    pub tasks: Option<usize>,
}

/// The counts behind the limits; one per server, shared by every request.
#[derive(Default)]
pub struct Quotas {
    limits: QuotaLimits,
    /// Who opened each session (every session, while the session limit is set).
    openers: DashMap<Arc<str>, Holder>,
    opened: AtomicUsize,
    /// Each holder's `initialize`s admitted and not yet answered.
    opening: DashMap<Holder, usize>,
    /// Each holder's open event streams.
    streams: DashMap<Holder, usize>,
    /// Each holder's mints in flight, under `--max-instances-per-principal`.
    minting: DashMap<Holder, usize>,
    /// Each holder's tasks not ended, under `--max-tasks-per-principal`.
    tasks: DashMap<Holder, usize>,
    buckets: DashMap<Holder, Bucket>,
}

/// A refusal: what ran out, for whom, and when to try again.
#[derive(Debug, Clone, PartialEq)]
pub struct OverQuota {
    pub what: &'static str,
    pub limit: String,
    pub holder: String,
    /// When waiting helps, how long; `None` when only the holder's own action frees a place
    /// (finishing or deleting instances).
    pub retry_after: Option<Duration>,
}

impl OverQuota {
    /// The sentence a client is told.
    pub fn message(&self) -> String {
        let then = match self.retry_after {
            Some(wait) => format!("retry in {} ms", wait.as_millis()),
            None => {
                "one goes when it is deleted (`--retain-final` deletes finished ones)".to_owned()
            }
        };
        format!(
            "{} holds its maximum of {} {} (the server's per-client limit); {then}",
            self.holder, self.limit, self.what,
        )
    }
}

/// A place under a holder's session or stream limit, given back when dropped.
pub struct Place {
    counts: Arc<Quotas>,
    holder: Holder,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Opening,
    Stream,
    /// A mint in flight, under `--max-instances-per-principal`.
    Minting,
    /// A task not ended, under `--max-tasks-per-principal`.
    Task,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.counts
            .places(self.kind)
            .remove_if_mut(&self.holder, |_, count| {
                *count = count.saturating_sub(1);
                *count == 0
            });
    }
}

/// A token bucket: `tokens` when last looked at, `at`.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Quotas {
    pub fn new(limits: QuotaLimits) -> Arc<Quotas> {
        Arc::new(Quotas {
            limits,
            ..Quotas::default()
        })
    }

    /// Whether sessions are counted per holder (only then does an `initialize` need one).
    pub fn counts_sessions(&self) -> bool {
        self.limits.sessions.is_some()
    }

    /// A place for `holder`'s new session, if it holds fewer than its limit (counting its
    /// `initialize`s still being answered); `None` without a limit.
    pub fn admit_session(
        self: &Arc<Self>,
        holder: &Holder,
        session_exists: impl Fn(&str) -> bool,
    ) -> Result<Option<Place>, OverQuota> {
        let Some(max) = self.limits.sessions else {
            return Ok(None);
        };
        // Counted under the holder's entry lock, which `opened` also holds while it records a
        // session: an `initialize` being answered is then counted by its place or its record,
        // never by neither (counted outside it, a race let a fourth of three sessions in).
        let held = || {
            self.openers
                .iter()
                .filter(|entry| entry.value() == holder && session_exists(entry.key()))
                .count()
        };
        self.take_place(Kind::Opening, holder, held, max).map(Some)
    }

    /// Records that `holder` opened `session` (before its admission's place is given back);
    /// now and then drops the entries of sessions that no longer exist.
    pub fn opened(&self, session: &str, holder: Holder, session_exists: impl Fn(&str) -> bool) {
        if !self.counts_sessions() {
            return;
        }
        // Under the holder's entry lock, before its place is given back (see `admit_session`).
        let entry = self.opening.entry(holder.clone()).or_insert(0);
        self.openers.insert(session.into(), holder);
        drop(entry);
        if self.opened.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.openers.retain(|session, _| session_exists(session));
        }
    }

    /// A place for one more event stream of `holder`; `None` without a limit.
    pub fn admit_stream(self: &Arc<Self>, holder: &Holder) -> Result<Option<Place>, OverQuota> {
        let Some(max) = self.limits.streams else {
            return Ok(None);
        };
        self.take_place(Kind::Stream, holder, || 0, max).map(Some)
    }

    /// A place for a new task of `holder`'s, if it has fewer than its limit not ended (`None`:
    /// no limit is set): on every server sharing `store`, through the store's places, or on
    /// this one where the store keeps none. The task holds it until it ends.
    pub async fn admit_task(
        self: &Arc<Self>,
        store: &Arc<dyn StateStore>,
        holder: &Holder,
    ) -> Result<Result<Option<QuotaPlace>, OverQuota>, StoreError> {
        let Some(max) = self.limits.tasks else {
            return Ok(Ok(None));
        };
        if let Some((place, places)) = StorePlace::take(store, holder.scope("tasks")).await? {
            if places <= max as u64 {
                return Ok(Ok(Some(QuotaPlace::Store(place.keep()))));
            }
            return Ok(Err(over_quota(Kind::Task, max.to_string(), holder)));
        }
        Ok(self
            .take_place(Kind::Task, holder, || 0, max)
            .map(|place| Some(QuotaPlace::Here(place))))
    }

    /// A place of `kind` for `holder`, if what it `held` (counted elsewhere) and the places of
    /// that kind it has taken come to less than `max`: counted, checked and taken under the
    /// holder's entry lock.
    fn take_place(
        self: &Arc<Self>,
        kind: Kind,
        holder: &Holder,
        held: impl FnOnce() -> usize,
        max: usize,
    ) -> Result<Place, OverQuota> {
        let mut taken = self.places(kind).entry(holder.clone()).or_insert(0);
        if held() + *taken >= max {
            return Err(over_quota(kind, max.to_string(), holder));
        }
        *taken += 1;
        Ok(Place {
            counts: self.clone(),
            holder: holder.clone(),
            kind,
        })
    }

    /// Each holder's places of `kind`.
    fn places(&self, kind: Kind) -> &DashMap<Holder, usize> {
        match kind {
            Kind::Opening => &self.opening,
            Kind::Stream => &self.streams,
            Kind::Minting => &self.minting,
            Kind::Task => &self.tasks,
        }
    }

    /// Puts back a mint taken for a call that is served again from the start (`direct.rs` hands
    /// it to rmcp), which takes its own.
    pub fn give_back_mint(&self, holder: &Holder) {
        let burst = self.limits.mint_burst.max(1.0);
        if let Some(mut bucket) = self.buckets.get_mut(holder) {
            bucket.tokens = (bucket.tokens + 1.0).min(burst);
        }
    }

    /// Takes one mint from `holder`'s bucket, or says when the next one will be there.
    pub fn take_mint(&self, holder: &Holder) -> Result<(), OverQuota> {
        let Some(rate) = self.limits.mint_rate else {
            return Ok(());
        };
        let burst = self.limits.mint_burst.max(1.0);
        let now = Instant::now();
        if self.buckets.len() > MAX_IDLE_BUCKETS {
            self.buckets.retain(|_, bucket| {
                bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate < burst
            });
        }
        let mut bucket = self.buckets.entry(holder.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(burst);
        bucket.at = now;
        if tokens >= 1.0 {
            bucket.tokens = tokens - 1.0;
            return Ok(());
        }
        bucket.tokens = tokens;
        Err(OverQuota {
            what: "new instances per second",
            limit: format!("{rate}"),
            holder: holder.to_string(),
            retry_after: Some(Duration::from_secs_f64((1.0 - tokens) / rate)),
        })
    }

    /// A place for one more instance of `holder`, whose instances belong to `tenant`, if the
    /// ones it holds in the store and its mints in flight come to less than its limit (`None`:
    /// no limit is set). Keep the place until the mint has settled: saved, or not.
    ///
    /// On a store shared by several servers, the mints in flight are counted by the store's
    /// places ([`StateStore::reserve_place`]), every server's, taken before the records are
    /// counted; on one no other process shares, or one that keeps no places, by this server's
    /// own count.
    pub async fn reserve_instance(
        self: &Arc<Self>,
        store: &Arc<dyn StateStore>,
        tenant: &Tenant,
        holder: &Holder,
    ) -> Result<Result<Option<QuotaPlace>, OverQuota>, StoreError> {
        let Some(limit) = self.limits.instances else {
            return Ok(Ok(None));
        };
        let owner = tenant.as_str();
        let scope = format!("instances:{owner}");
        // A refusal, or a store error while counting, drops the place: it is given back.
        if let Some((place, places)) = StorePlace::take(store, scope).await? {
            if held_within(store.as_ref(), owner, places, limit).await? {
                return Ok(Ok(Some(QuotaPlace::Store(place.keep()))));
            }
            return Ok(Err(over_quota(Kind::Minting, limit.to_string(), holder)));
        }
        let held = held_now(store.as_ref(), owner, limit).await?;
        let held = usize::try_from(held).unwrap_or(usize::MAX);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(self
            .take_place(Kind::Minting, holder, || held, limit)
            .map(|place| Some(QuotaPlace::Here(place))))
    }
}

/// The refusal of a place of `kind` for `holder`, past `limit`.
fn over_quota(kind: Kind, limit: String, holder: &Holder) -> OverQuota {
    OverQuota {
        what: match kind {
            Kind::Opening => "sessions",
            Kind::Stream => "event streams",
            Kind::Minting => "instances",
            Kind::Task => "running tasks",
        },
        limit,
        holder: holder.to_string(),
        retry_after: match kind {
            // Instances go only when their holder finishes or deletes them.
            Kind::Minting => None,
            Kind::Opening | Kind::Stream => Some(Duration::from_secs(5)),
            // A task goes when it ends: its client can follow them.
            Kind::Task => Some(Duration::from_secs(1)),
        },
    }
}

/// How many records `owner` holds, counted again before a count at `limit` refuses: whether
/// every place counted is still an instance ([`StateStore::recount_owned`]).
async fn held_now(store: &dyn StateStore, owner: &str, limit: u64) -> Result<u64, StoreError> {
    let held = store.count_owned(owner).await?;
    if held < limit {
        return Ok(held);
    }
    store.recount_owned(owner).await
}

/// Whether `owner`'s records and its `places` held (its mint's included) stay within `limit`.
async fn held_within(
    store: &dyn StateStore,
    owner: &str,
    places: u64,
    limit: u64,
) -> Result<bool, StoreError> {
    // The room the other mints in flight leave; this one needs a place in it beside the
    // records.
    let others = places.saturating_sub(1);
    let Some(room) = limit.checked_sub(others).filter(|room| *room > 0) else {
        return Ok(false);
    };
    Ok(held_now(store, owner, room).await? < room)
}

/// A place under a per-principal limit, held until what it was taken for ends (a mint settles,
/// a task ends).
pub enum QuotaPlace {
    /// Counted by this server ([`Quotas`]).
    Here(Place),
    /// Held in the shared store, counted by every server sharing it.
    Store(StorePlace),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Holder {
        Holder::Principal("token:alice".into())
    }

    /// Mints in flight count as held: concurrent mints cannot all see room for one more.
    #[tokio::test]
    async fn mints_in_flight_count_against_the_instance_limit() {
        let quotas = Quotas::new(QuotaLimits {
            instances: Some(2),
            ..QuotaLimits::default()
        });
        let store: Arc<dyn StateStore> = Arc::new(crate::store::MemoryStore::default());
        let (tenant, holder) = (Tenant::of("alice"), alice());
        let reserve = || quotas.reserve_instance(&store, &tenant, &holder);
        let first = reserve().await.unwrap().unwrap();
        let _second = reserve().await.unwrap().unwrap();
        let refused = reserve().await.unwrap().err().expect("two in flight");
        assert_eq!((refused.what, refused.retry_after), ("instances", None));
        drop(first);
        assert!(reserve().await.unwrap().is_ok());
    }

    /// With places held in a shared store, a mint goes on only if the owner's records and
    /// every place held (its own included) stay within the limit.
    #[tokio::test]
    async fn places_held_elsewhere_count_with_the_records() {
        let store = crate::store::MemoryStore::default();
        let record =
            crate::store::InstanceRecord::new("w", serde_json::json!({"value": "x"}), 1, 0);
        store.save("handle/a-1@alice", &record, 0).await.unwrap();
        let within = async |places| held_within(&store, "alice", places, 3).await.unwrap();
        // One record: this mint's place and one more fit; a third place does not.
        assert!(within(1).await);
        assert!(within(2).await);
        assert!(!within(3).await);
        assert!(!within(4).await, "more places than the limit");
        store.save("handle/a-2@alice", &record, 0).await.unwrap();
        assert!(within(1).await);
        assert!(!within(2).await);
    }

    #[test]
    fn streams_past_the_limit_are_refused_until_one_closes() {
        let quotas = Quotas::new(QuotaLimits {
            streams: Some(2),
            ..QuotaLimits::default()
        });
        let first = quotas.admit_stream(&alice()).unwrap();
        let _second = quotas.admit_stream(&alice()).unwrap();
        let refused = quotas.admit_stream(&alice()).err().expect("over the limit");
        assert_eq!(refused.what, "event streams");
        // Another holder has its own count.
        let bob = Holder::Address("192.0.2.7".parse().unwrap());
        assert!(quotas.admit_stream(&bob).is_ok());
        drop(first);
        assert!(quotas.admit_stream(&alice()).is_ok());
    }

    #[test]
    fn mints_follow_the_bucket() {
        let quotas = Quotas::new(QuotaLimits {
            mint_rate: Some(10.0),
            mint_burst: 3.0,
            ..QuotaLimits::default()
        });
        for _ in 0..3 {
            assert!(quotas.take_mint(&alice()).is_ok());
        }
        let refused = quotas.take_mint(&alice()).expect_err("the burst is spent");
        assert!(
            refused
                .retry_after
                .is_some_and(|wait| wait <= Duration::from_millis(100)),
            "{refused:?}"
        );
        std::thread::sleep(Duration::from_millis(120));
        assert!(quotas.take_mint(&alice()).is_ok());
    }

    #[test]
    fn without_limits_nothing_is_counted() {
        let quotas = Quotas::new(QuotaLimits::default());
        assert!(quotas.admit_stream(&alice()).unwrap().is_none());
        for _ in 0..1000 {
            quotas.take_mint(&alice()).unwrap();
        }
        assert!(quotas.buckets.is_empty() && quotas.streams.is_empty());
    }
}
