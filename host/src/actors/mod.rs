//! The actors that own workflow state, and [`Runtime`], the typed handle the rest of the host
//! uses to reach them.
//!
//! - `system.rs`: starts the actix system on its own threads (actix actors cannot be started
//!   from a plain tokio task) and hands back a [`Runtime`].
//! - `registry.rs`: [`registry::Registry`] finds or starts the instance actor for a key.
//! - `routes.rs`: the registry's table of live instance actors, which callers read directly.
//! - `instance/`: [`instance::InstanceActor`], one per workflow instance; owns its snapshot and
//!   serializes every call on it through its mailbox.
//! - `notifier.rs`: [`notifier::Notifier`] knows which session watches which instance and tells
//!   exactly those sessions when an instance's menu changes.
//! - `operator.rs`: an operator's reset or delete of an instance, done by its actor.
//! - `relay.rs`: with a store other servers share, their changes of the instances watched here,
//!   told to the watchers as this server's own are.
//! - `tenure.rs`: [`Tenure`](tenure::Tenure), an instance actor's lease on its record in a store
//!   other servers share, so a handler runs on one server only and a lapsed lease cannot commit.
//! - `instance/wake.rs`: the instance actor's timers and retention ([`Woke`]): due timers fired before
//!   every call and view, and on the timer task's `Wake`.
//! - `idempotency.rs`: what a call retried with the same idempotency key gets (pure decisions).
//! - `workers.rs`: [`Workers`], the threads instance actors run on, which serve the HTTP
//!   connections too, so a session's calls reach its instances without leaving their thread.
//! - `watching.rs`: which instances each session watches, the notifier's table that callers
//!   read to skip a subscription already made.
//! - `tables.rs`: gives the actors' tables their capacity back after a burst.
//!
//! **Architecture Invariant:** nothing outside this module names an actix type; callers use
//! [`Runtime`]'s async methods. Nothing inside it names an rmcp type: sessions are reached
//! through the [`notifier::Listener`] trait.

mod idempotency;
mod instance;
mod key;
mod notifier;
mod operator;
mod registry;
mod relay;
mod routes;
mod runtime;
mod system;
mod tables;
mod tenant_moves;
mod tenure;
#[cfg(test)]
mod tests;
mod watching;
mod workers;

pub use self::{
    idempotency::digest as arguments_digest,
    instance::wake::Woke,
    instance::{Call, CallOutcome, InstanceError, InstanceView, Revision, TaskRun},
    key::{InstanceKey, MalformedHandle, Owner, SESSION_PREFIX, SessionId, Tenant, sha256_hex16},
    notifier::{
        Listener, Notice, NotifierStats, Sending, Subscribe, WatchEvent, WatchEvents,
        notices_of_move,
    },
    operator::Operated,
    registry::RegistryStats,
    relay::relay_changes_from_other_servers,
    runtime::Runtime,
    system::{ActorOptions, start},
    tenant_moves::move_tenants,
    tenure::LeaseSettings,
    workers::Workers,
};
