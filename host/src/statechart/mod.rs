//! The statechart engine: XState v5 machines (in their JSON form) parsed, validated and stepped,
//! with XState's exact semantics.
//!
//! **What it owns:** the meaning of a workflow definition. Given a machine and a snapshot, it
//! says which snapshot an event leads to ([`Machine::transition`]), whether a state is active
//! ([`Snapshot::matches`]), and refuses at load ([`Machine::from_json`]) any machine it could not
//! run exactly as XState would. It also renders machines as diagrams ([`diagram`]).
//!
//! **What it must not do:** I/O, async, locking, actors, clocks, or logging. Everything here is
//! pure and deterministic; a step never panics and always returns. Persistence, concurrency and
//! notifications belong to the caller.
//!
//! # Layout
//! - `tree`: the parsed node tree (flat vectors, document-order indices).
//! - `parse`: JSON → tree, with every refusal; `cycles`: refusal of endless eventless loops.
//! - `engine`, `entry_exit`: the step algorithm, a port of XState's `stateUtils` (read it
//!   beside XState); `config`: the runtime configuration and XState's helpers around it.
//! - `snapshot`: [`Snapshot`], state values, persistence; `event`, `guards`, `error`.
//! - `diagram`: Mermaid / Graphviz rendering.
//!
//! # Semantics
//! Supported exactly as XState v5 (checked by `tests/xstate_differential.rs` against the npm
//! package pinned in `tests/xstate/package.json`): `id`, `initial` (string or `{target}`),
//! `states`, `on` (string, `{target, reenter, guard, description}`, or an array of candidates,
//! first enabled wins), compound, parallel and `final` states, `onDone` and
//! `xstate.done.state.*` events, targets as sibling paths, `.child` paths, `#id` (and
//! `#id.path`), multiple targets into parallel regions, `always`, wildcards (`*`, `prefix.*` —
//! which, as in XState, also match `prefix` itself and internal done events), self-transitions
//! and `reenter`, targetless transitions, shallow and deep history (with default `target`),
//! named guards. Transition selection, conflict resolution between parallel regions (including
//! XState's region order, which follows the order states were entered) and the eventless loop
//! are ported line by line.
//!
//! Once a machine is `done`, events change nothing (an XState actor stops and drops them).
//! Events named `xstate.init`, `xstate.stop` or `xstate.error*` are XState control events; sent
//! from outside they change nothing here.
//!
//! Persisted form ([`Snapshot::to_persisted`]): `{"value", "status", "historyValue", "nodes"}`,
//! where `historyValue` has XState's shape and `nodes` lists the active state ids in the order
//! XState keeps them (which decides region order). [`Machine::restore`] also accepts just
//! `{"value", "status"}`.
//!
//! `changed` in [`Step`]: true when at least one transition (targetless ones included) was
//! enabled and taken while processing the event, counting the eventless and done-event
//! transitions it triggered. The value or status can only change through such a transition, so a
//! changed value or status always implies `changed`, and `changed` is false whenever no
//! transition was enabled. A targetless or self transition counts even though the value stays.
//!
//! # Refused at load (each with its JSON path)
//! - Unknown targets, initial states or history targets; `initial` on a state without children.
//! - Compound states without `initial`: XState v5 throws on them too (it does not default to
//!   the first child), so Turnstile matches it.
//! - Guards with no implementation (see [`Guards`]).
//! - What Turnstile cannot run: `after` (no timers), `invoke`, non-empty `context`, and non-empty
//!   `entry`/`exit`/`actions`. Turnstile runs no actions; silently skipping one would make a
//!   pasted machine lie about what it does, so they are refused rather than ignored (empty ones,
//!   common in exports, are accepted). `description`, `meta`, `tags`, `output` and the root's
//!   `version` are accepted and ignored.
//! - XState v4 leftovers: `cond`, `internal`, `in`, `""` event keys, `null` transitions,
//!   `onEntry`/`onExit`, `activities`, `strict`, ...
//! - Eventless loops (`always` or done-event handlers that may cycle; see `cycles`),
//!   conservatively: even when guards would break the cycle. XState would hang on a real one.
//!
//! # Where Turnstile is stricter than XState, or differs
//! - Unknown keys are refused (XState ignores them, so a typo like `intial` would go unnoticed).
//! - State keys must be non-empty without `.` or a leading `#`; ids must be unique (XState lets a
//!   later duplicate win); a history default `target` must lie inside the history's parent;
//!   multiple targets must lie in distinct regions of a parallel state; parallel states need a
//!   region. XState accepts these and then behaves in ways no workflow wants.
//! - XState's `and`/`or`/`not` guards have no JSON form (see [`Guards`]).
//! - State keys that look like array indices (`"0"`, `"1"`) are ordered first by JavaScript
//!   objects; Turnstile keeps document order for every key.
//! - After `done`, and for `xstate.init`/`xstate.stop`/`xstate.error*` events, nothing changes.
//! - A guard's only inputs are the event and its params (there is no context).
//!
//! Document order matters (region order, candidate order), so the host must build
//! `serde_json` with its `preserve_order` feature; without it, object keys arrive sorted.
//! A unit test below fails when the feature is missing.

mod config;
mod cycles;
pub mod diagram;
mod engine;
mod entry_exit;
mod error;
mod event;
mod guards;
mod parse;
mod snapshot;
mod tree;

use std::{collections::VecDeque, fmt, sync::Arc};

use serde_json::Value;

use self::{
    config::Config,
    engine::Engine,
    tree::{ROOT, Tree, matches_descriptor},
};
pub use self::{
    error::{EventError, MachineError},
    event::Event,
    guards::{Guards, NoGuards},
    snapshot::{Snapshot, Status},
};

/// A parsed and validated machine. Immutable, `Send + Sync`, cheap to share in an `Arc`.
#[derive(Clone)]
pub struct Machine {
    tree: Arc<Tree>,
    guards: Arc<dyn Guards + Send + Sync>,
    initial: Config,
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("id", &self.tree.machine_id)
            .field("states", &self.tree.nodes.len())
            .finish()
    }
}

/// The result of [`Machine::transition`].
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The state after the event (the same state when nothing was enabled).
    pub snapshot: Snapshot,
    /// See "`changed`" in the module doc.
    pub changed: bool,
}

impl Machine {
    /// Parses a machine that uses no guards.
    pub fn from_json(def: &Value) -> Result<Machine, MachineError> {
        Machine::from_json_with_guards(def, Arc::new(NoGuards))
    }

    /// Parses a machine whose named guards are implemented by `guards`.
    pub fn from_json_with_guards(
        def: &Value,
        guards: Arc<dyn Guards + Send + Sync>,
    ) -> Result<Machine, MachineError> {
        let tree = parse::parse(def, &*guards)?;
        let engine = Engine {
            tree: &tree,
            guards: &*guards,
        };
        let initial = engine.initial().map_err(|_| {
            MachineError::new("", "the initial state does not settle (eventless loop)")
        })?;
        Ok(Machine {
            tree: Arc::new(tree),
            guards,
            initial,
        })
    }

    /// The machine's `id` (`"(machine)"` when the definition has none, as in XState).
    pub fn id(&self) -> &str {
        &self.tree.machine_id
    }

    /// The state a new instance starts in (computed once, at load).
    pub fn initial_snapshot(&self) -> Snapshot {
        self.snapshot(self.initial.clone())
    }

    fn snapshot(&self, cfg: Config) -> Snapshot {
        Snapshot {
            tree: Arc::clone(&self.tree),
            cfg,
        }
    }

    /// XState's macrostep for one external event. Pure; never panics. A snapshot made by another
    /// `Machine` value is carried over through its persisted form (unchanged if it does not fit).
    pub fn transition(&self, from: &Snapshot, event: &Event) -> Step {
        let unchanged = || Step {
            snapshot: from.clone(),
            changed: false,
        };
        let owned;
        let cfg = if Arc::ptr_eq(&from.tree, &self.tree) {
            &from.cfg
        } else {
            match snapshot::restore_config(&self.tree, &from.to_persisted()) {
                Ok(c) => {
                    owned = c;
                    &owned
                }
                Err(_) => return unchanged(),
            }
        };
        let ty = event.event_type();
        if cfg.done || ty == "xstate.init" || ty == "xstate.stop" || ty.starts_with("xstate.error")
        {
            return unchanged();
        }
        let engine = Engine {
            tree: &self.tree,
            guards: &*self.guards,
        };
        match engine.macrostep(cfg.clone(), event, VecDeque::new(), false) {
            Ok((next, changed)) => Step {
                snapshot: self.snapshot(next),
                changed,
            },
            Err(_) => unchanged(),
        }
    }

    /// Whether `snapshot` has the same active states and status as [`Machine::initial_snapshot`].
    pub fn is_initial(&self, snapshot: &Snapshot) -> bool {
        let n = config::all_state_nodes(&self.tree, &snapshot.cfg.nodes);
        snapshot.cfg.done == self.initial.done && snapshot::same_set(&n, &self.initial.nodes)
    }

    /// Whether a state exists: a dot path from the root (`"review.pending"`) or `#id`.
    /// History pseudo-states are not states a tool can be bound to, so they are not found.
    pub fn has_state(&self, path: &str) -> bool {
        self.tree
            .lookup(path)
            .is_some_and(|n| n != ROOT && !self.tree.node(n).is_history())
    }

    /// Whether some `on` transition in the machine listens to this event type (exactly or by
    /// wildcard).
    pub fn accepts_event(&self, event_type: &str) -> bool {
        self.tree.nodes.iter().any(|n| {
            n.on.iter()
                .any(|(d, ts)| !ts.is_empty() && matches_descriptor(event_type, d))
        })
    }

    /// Every state as a dot path from the root, in document order (history states excluded).
    pub fn state_paths(&self) -> Vec<String> {
        self.tree
            .nodes
            .iter()
            .skip(1)
            .filter(|n| !n.is_history())
            .map(|n| n.path.clone())
            .collect()
    }

    /// Rebuilds a snapshot from [`Snapshot::to_persisted`], refusing states that do not exist.
    pub fn restore(&self, persisted: &Value) -> Result<Snapshot, MachineError> {
        snapshot::restore_config(&self.tree, persisted).map(|cfg| self.snapshot(cfg))
    }
}

#[cfg(test)]
mod tests;
