//! The statechart engine: XState v5 machines (in their JSON form) parsed, validated and stepped,
//! with XState's exact semantics.
//!
//! **What it owns:** the meaning of a workflow definition. Given a machine and a snapshot, it
//! says which snapshot an event leads to ([`Machine::step`]), which timers fall due
//! ([`Machine::fire_due`]), whether an event could take a transition before all of it is known
//! ([`Machine::may_take`]), whether a state is active ([`Snapshot::matches`]), and refuses at
//! load ([`Machine::from_json`]) any machine it could not run exactly as XState would. It also
//! renders machines as diagrams ([`diagram`]) and finds graph problems ([`lint`]).
//!
//! **What it must not do:** I/O, async, locking, actors, clocks, or logging. Everything here is
//! pure and deterministic; a step never panics and always returns. Time comes in as a `now`
//! argument; persistence, concurrency, waking instances and notifications belong to the caller.
//!
//! **Why a crate of its own.** Two readers need to know what a machine means: the host, which
//! runs it (it re-exports this crate as `turnstile::statechart`), and the plugin SDK
//! (`turnstile-plugin`), whose `Toolkit::build` checks a plugin's bindings in the plugin's own
//! unit tests. One reader for both means a binding the SDK accepts is one the host accepts; the
//! SDK used to carry a second, looser outline of the JSON, which could disagree. It depends on
//! no crate of this workspace (the host's `tests/architecture.rs` checks that), so it sits at
//! `plugin-api/statechart/`, beside the ABI and SDK crates plugins build on.
//!
//! **What a plugin carries with it.** A Rust plugin now compiles the whole engine: the stepping
//! it never calls, [`diagram`] and [`lint`] (the host's `turnstile graph` and `turnstile check`),
//! and JSON Logic on `datalogic-rs`. That is the least bad option, and chosen on purpose: the
//! checks need the parser, the parser needs JSON Logic (a guard with an operator XState lacks is
//! refused at load, so the SDK must refuse it too), and the rest adds no dependency, only compile
//! time, while the linker drops from the plugin's library what nothing calls. Features to leave
//! `diagram` and `lint` out would save seconds of a plugin's first build and cost a second
//! configuration of this crate to build and test; a plugin must never carry the host's runtime
//! (actors, stores, transports), and this crate has none.
//!
//! # Layout
//! - `tree`: the parsed node tree (flat vectors, document-order indices).
//! - `parse`: JSON → tree, with every refusal; `logic`: JSON Logic rules; `guards`: guard
//!   evaluation, complete or with part of the event known.
//! - `engine`, `entry_exit`: the step algorithm, a port of XState's `stateUtils` (read it
//!   beside XState); `config`: the runtime configuration and XState's helpers around it.
//! - `snapshot`: [`Snapshot`], state values, persistence; `event`, `error`.
//! - `diagram`: Mermaid, Graphviz and SVG rendering; `lint` and `cycles`: `turnstile check`
//!   warnings.
//!
//! # Semantics
//! Supported exactly as XState v5 (checked by `tests/xstate_differential.rs` against the npm
//! package pinned in `tests/xstate/package.json`): `id`, `initial` (string or `{target}`),
//! `states`, `on` (string, `{target, reenter, guard, actions, description}`, or an array of
//! candidates, first enabled wins), compound, parallel and `final` states, `onDone` and
//! `xstate.done.state.*` events, targets as sibling paths, `.child` paths, `#id` (and
//! `#id.path`), multiple targets into parallel regions, `always`, wildcards (`*`, `prefix.*` —
//! which, as in XState, also match `prefix` itself, internal done events and timer events),
//! self-transitions and `reenter`, targetless transitions, shallow and deep history (with
//! default `target`). Transition selection, conflict resolution between parallel regions
//! (including XState's region order, which follows the order states were entered) and the
//! eventless loop are ported line by line.
//!
//! **Context.** `context` (a JSON object; `{}` when absent) is part of the snapshot. An instance
//! may start with another one ([`Machine::initial_snapshot_with`]).
//!
//! **Events** carry what guards and assignments read: a tool call fires
//! `{"type", "input", "output"}` ([`Event::with_call`]); an event given as a JSON object is seen
//! whole, as in XState.
//!
//! **Actions.** `{"type": "xstate.assign", "params": {"<key>": <JSON Logic>, ...}}` on
//! transitions (`actions`), `entry` and `exit`, one or a list: each rule is evaluated over
//! `{context, event}` as they were before the action, then the keys are set (XState's
//! `assign({key: ({context, event}) => ...})`). Actions run in XState's order: exits (deepest
//! first), transition actions, entries (document order); each sees what the previous left. When
//! the machine reaches a top-level final state, every active state's `exit` runs too, as in
//! XState. Other actions are refused: tools carry the effects.
//!
//! **Guards**: a name (`"isLarge"` or `{type, params}`) implemented by [`Guards`]; the built-in
//! `{"type": "jsonLogic", "params": {"rule": <JSON Logic>}}` over `{context, event, params}`
//! (JavaScript truthiness, as XState reads a guard's result); and
//! `{"type": "xstate.and" | "xstate.or", "guards": [...]}`, `{"type": "xstate.not", "guards":
//! [g]}`. Other `xstate.` names are reserved.
//!
//! **Timers.** `after: {"1000": ..., "<name>": ...}` with whole milliseconds or names from the
//! machine-level `delays` map. As in XState, entering a state starts its timers (event
//! `xstate.after.<delay>.<state id>`), leaving cancels them, re-entering restarts them; a state
//! entered again without being left (a history target) starts a second timer and the first can
//! no longer be cancelled, as XState's scheduler does. A snapshot holds its running timers as
//! absolute deadlines: [`Machine::step`] takes the `now` new timers count from,
//! [`Snapshot::next_deadline`] says when to wake, [`Machine::fire_due`] fires what is due, each
//! once, in deadline order, each at its own deadline.
//!
//! **Eventless loops** are not refused at load (XState runs them; a guard or an unchanged
//! snapshot usually ends them). A macrostep of more than [`MAX_MICROSTEPS`] microsteps is stopped
//! with [`TransitionLoop`] and the instance keeps its state, as XState's actor fails with
//! `maxIterations: 1000`. An initial state that loops is refused at load. `turnstile check` warns
//! about cycles no guard can break ([`lint`]).
//!
//! Once a machine is `done`, events change nothing (an XState actor stops and drops them).
//! Events named `xstate.init`, `xstate.stop` or `xstate.error*` are XState control events; sent
//! from outside they change nothing here.
//!
//! Persisted form ([`Snapshot::to_persisted`]): `{"format", "value", "status", "historyValue",
//! "nodes", "context", "timers"}`, versioned by [`PERSISTED_FORMAT`]; records written before
//! context and timers (no `format`) still restore ([`Machine::restore_at`]).
//!
//! `changed` in [`Step`]: true when at least one transition (targetless ones included) was
//! enabled and taken while processing the event, counting the eventless and done-event
//! transitions it triggered. The value or status can only change through such a transition, so a
//! changed value or status always implies `changed`, and `changed` is false whenever no
//! transition was enabled. A targetless or self transition counts even though the value stays.
//!
//! # Refused at load (each with its JSON path)
//! - Unknown targets, initial states, history targets or delays; `initial` on a state without
//!   children.
//! - Compound states without `initial`: XState v5 throws on them too (it does not default to
//!   the first child), so Turnstile matches it.
//! - Named guards with no implementation (see [`Guards`]); JSON Logic with an operator
//!   json-logic-js does not have.
//! - What Turnstile cannot run: `invoke`, actions other than `xstate.assign`, a non-object
//!   `context`. `description`, `meta`, `tags`, `output` and the root's `version` are accepted and
//!   ignored.
//! - XState v4 leftovers: `cond`, `internal`, `in`, `""` event keys, `null` transitions,
//!   `onEntry`/`onExit`, `activities`, `strict`, ...
//!
//! # Where Turnstile is stricter than XState, or differs
//! - Unknown keys are refused (XState ignores them, so a typo like `intial` would go unnoticed).
//! - State keys must be non-empty without `.` or a leading `#`; ids must be unique (XState lets a
//!   later duplicate win); a history default `target` must lie inside the history's parent;
//!   multiple targets must lie in distinct regions of a parallel state; parallel states need a
//!   region. XState accepts these and then behaves in ways no workflow wants.
//! - A bare string inside an `after` array is refused (XState reads it as a transition with no
//!   target).
//! - State keys that look like array indices (`"0"`, `"1"`) are ordered first by JavaScript
//!   objects; Turnstile keeps document order for every key.
//! - After `done`, and for `xstate.init`/`xstate.stop`/`xstate.error*` events, nothing changes.
//! - JSON Logic runs on `datalogic-rs`, which differs from json-logic-js on `null` in `==` and
//!   arithmetic (see `logic`): give fields that may be missing a default.
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
pub mod lint;
mod logic;
mod parse;
mod snapshot;
mod tree;

use std::{collections::VecDeque, fmt, sync::Arc};

use serde_json::Value;

use self::{
    config::{Config, Context},
    engine::Engine,
    tree::{ROOT, Tree, matches_descriptor},
};
pub use self::{
    error::MAX_MICROSTEPS,
    error::{EventError, MachineError, TransitionLoop},
    event::Event,
    guards::{Guards, Known, NoGuards},
    logic::{Condition, EventReads},
    snapshot::{PERSISTED_FORMAT, Snapshot, Status},
};

/// A parsed and validated machine. Immutable, `Send + Sync`, cheap to share in an `Arc`.
#[derive(Clone)]
pub struct Machine {
    tree: Arc<Tree>,
    guards: Arc<dyn Guards + Send + Sync>,
    /// The initial configuration, computed at load with the clock at 0.
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

/// The result of [`Machine::transition`] and [`Machine::step`].
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The state after the event (the same state when nothing was enabled).
    pub snapshot: Snapshot,
    /// See "`changed`" in the module doc.
    pub changed: bool,
}

/// Most timers [`Machine::fire_due`] fires in one call.
pub const MAX_TIMERS_PER_CALL: usize = 1000;

/// One timer fired by [`Machine::fire_due`].
#[derive(Clone, Debug, PartialEq)]
pub struct FiredTimer {
    /// The timer's event (`xstate.after.<delay>.<state id>`).
    pub event: String,
    /// When it fell due; the step ran with this as its `now`.
    pub deadline: u64,
    /// Whether a transition was taken, or the eventless loop that stopped the step (the
    /// instance then stays as it was before this timer, which is dropped).
    pub outcome: Result<bool, TransitionLoop>,
}

/// The result of [`Machine::fire_due`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fired {
    pub snapshot: Snapshot,
    /// The timers that fell due, in the order they fired.
    pub timers: Vec<FiredTimer>,
}

impl Fired {
    /// Whether any fired timer took a transition.
    pub fn changed(&self) -> bool {
        self.timers.iter().any(|t| t.outcome == Ok(true))
    }
}

/// For `host/fuzz`: `bytes` as a machine definition (or `{"machine": …, "events": […]}`),
/// parsed as a plugin's would be, then run from its initial state through the events.
#[doc(hidden)]
pub fn fuzz_machine(bytes: &[u8]) {
    let Ok(input) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    let (definition, events) = match input.get("machine") {
        Some(machine) => (machine, input.get("events").and_then(Value::as_array)),
        None => (&input, None),
    };
    let Ok(machine) = Machine::from_json(definition) else {
        return;
    };
    let mut snapshot = machine.initial_snapshot();
    for event in events.into_iter().flatten() {
        if let Ok(event) = Event::from_json(event) {
            snapshot = machine.transition(&snapshot, &event).snapshot;
        }
    }
    let _ = snapshot.to_persisted();
}

/// For `host/fuzz`: `bytes` as `[rule, data]`: a JSON Logic rule compiled as a machine's guards
/// and assignments are, then evaluated over `data`.
#[doc(hidden)]
pub fn fuzz_logic(bytes: &[u8]) {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if let [rule, data] = pair.as_slice()
        && let Ok(rule) = logic::Rule::compile(rule)
    {
        let _ = rule.eval(data);
    }
}

impl Machine {
    /// Parses a machine that uses no named guards (built-in guards need no implementation).
    pub fn from_json(def: &Value) -> Result<Machine, MachineError> {
        Machine::from_json_with_guards(def, Arc::new(NoGuards))
    }

    /// Parses a machine whose named guards are implemented by `guards`.
    pub fn from_json_with_guards(
        def: &Value,
        guards: Arc<dyn Guards + Send + Sync>,
    ) -> Result<Machine, MachineError> {
        let tree = parse::parse(def, &*guards)?;
        let initial = start(&tree, &*guards, Context::new(tree.context.clone()))?;
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

    /// The state a new instance starts in (computed once, at load), its timers counted from
    /// time 0: use [`Machine::initial_snapshot_at`] for a machine with `after`.
    pub fn initial_snapshot(&self) -> Snapshot {
        self.snapshot(self.initial.clone())
    }

    /// The state a new instance created at `now` starts in.
    pub fn initial_snapshot_at(&self, now: u64) -> Snapshot {
        let mut cfg = self.initial.clone();
        for p in &mut cfg.timers {
            p.deadline = p.deadline.saturating_add(now);
        }
        self.snapshot(cfg)
    }

    /// The initial state with `context` in place of the machine's own (entry assignments of the
    /// initial states then run over it), created at `now`.
    pub fn initial_snapshot_with(
        &self,
        context: Value,
        now: u64,
    ) -> Result<Snapshot, MachineError> {
        if !context.is_object() {
            return Err(MachineError::new(
                "context",
                "the context must be a JSON object",
            ));
        }
        let mut cfg = start(&self.tree, &*self.guards, Context::new(context))?;
        for p in &mut cfg.timers {
            p.deadline = p.deadline.saturating_add(now);
        }
        Ok(self.snapshot(cfg))
    }

    fn snapshot(&self, cfg: Config) -> Snapshot {
        Snapshot {
            tree: Arc::clone(&self.tree),
            cfg,
        }
    }

    /// `from`'s configuration for this machine: borrowed when it was made by this machine,
    /// otherwise carried over through its persisted form (`None` if it does not fit).
    fn config_of<'s>(&self, from: &'s Snapshot) -> Option<std::borrow::Cow<'s, Config>> {
        if Arc::ptr_eq(&from.tree, &self.tree) {
            return Some(std::borrow::Cow::Borrowed(&from.cfg));
        }
        snapshot::restore_config(&self.tree, &from.to_persisted(), &self.initial.context, 0)
            .ok()
            .map(std::borrow::Cow::Owned)
    }

    /// XState's macrostep for one external event, with timers started by it counted from time
    /// 0 and an eventless loop answered by the unchanged snapshot. Kept for callers of machines
    /// without `after`; [`Machine::step`] says more. Pure; never panics.
    pub fn transition(&self, from: &Snapshot, event: &Event) -> Step {
        self.step(from, event, 0).unwrap_or_else(|_| Step {
            snapshot: from.clone(),
            changed: false,
        })
    }

    /// XState's macrostep for one external event at time `now` (unix ms, or any clock the
    /// caller keeps to): timers of states it enters fall due `delay` after `now`. A snapshot made
    /// by another `Machine` value is carried over through its persisted form (unchanged if it
    /// does not fit). Pure; never panics.
    ///
    /// A macrostep of more than [`MAX_MICROSTEPS`] microsteps is stopped: the error, and the
    /// instance keeps `from` (XState's actor fails the same way with this `maxIterations`).
    pub fn step(&self, from: &Snapshot, event: &Event, now: u64) -> Result<Step, TransitionLoop> {
        let unchanged = || Step {
            snapshot: from.clone(),
            changed: false,
        };
        let Some(cfg) = self.config_of(from) else {
            return Ok(unchanged());
        };
        if ignores(&cfg, event.event_type()) {
            return Ok(unchanged());
        }
        let engine = self.engine(now);
        let (next, changed) = engine
            .macrostep(cfg.into_owned(), event, VecDeque::new(), false)
            .map_err(|_| TransitionLoop)?;
        Ok(Step {
            snapshot: self.snapshot(next),
            changed,
        })
    }

    fn engine(&self, now: u64) -> Engine<'_> {
        Engine {
            tree: &self.tree,
            guards: &*self.guards,
            now,
        }
    }

    /// Fires every timer of `from` due at `now`, each once, in deadline order (ties: the one
    /// started first). Each fires as its own event, at its own deadline: a timer it starts counts
    /// from that deadline, and fires in the same call if that too is due. A timer whose step
    /// loops is dropped and the instance stays as it was before it.
    ///
    /// At most [`MAX_TIMERS_PER_CALL`] timers fire in one call, so that a state re-entering
    /// itself after 0 ms (which never lets time pass) cannot hang the caller; the rest stay due
    /// for the next call ([`Snapshot::next_deadline`] says so).
    pub fn fire_due(&self, from: &Snapshot, now: u64) -> Fired {
        let mut cfg = match self.config_of(from) {
            Some(c) => c.into_owned(),
            None => {
                return Fired {
                    snapshot: from.clone(),
                    timers: Vec::new(),
                };
            }
        };
        let mut timers = Vec::new();
        while timers.len() < MAX_TIMERS_PER_CALL
            && let Some(i) = cfg.next_timer().filter(|&i| cfg.timers[i].deadline <= now)
        {
            let due = cfg.timers.remove(i);
            cfg.detach(due.timer);
            let event = Event::new(self.tree.timer(due.timer).event.clone());
            // A detached timer may outlive its machine (XState's stopped actor drops its event).
            let outcome = if ignores(&cfg, event.event_type()) {
                Ok(false)
            } else {
                match self.engine(due.deadline).macrostep(
                    cfg.clone(),
                    &event,
                    VecDeque::new(),
                    false,
                ) {
                    Ok((next, changed)) => {
                        cfg = next;
                        Ok(changed)
                    }
                    Err(_) => Err(TransitionLoop),
                }
            };
            timers.push(FiredTimer {
                event: event.event_type().to_string(),
                deadline: due.deadline,
                outcome,
            });
        }
        Fired {
            snapshot: self.snapshot(cfg),
            timers,
        }
    }

    /// Whether an event of type `event_type` may take a transition from `snapshot`, knowing
    /// `known` of it: the question the server asks to list a tool (nothing known yet) and to
    /// refuse a call before its plugin runs (the input known).
    ///
    /// It follows XState's transition selection (every active state, deepest first, wildcards,
    /// candidate order): a guard that reads only what is known (`context`, `params`,
    /// `event.type`, and `event.input` when given) is evaluated; one that reads more (named
    /// guards see the whole event) counts as possibly true. So `false` means no transition can
    /// be taken whatever the rest of the event turns out to be. With [`Known::Everything`] this
    /// is exactly whether [`Machine::step`] would take a transition.
    pub fn may_take(&self, snapshot: &Snapshot, event_type: &str, known: Known<'_>) -> bool {
        let Some(cfg) = self.config_of(snapshot) else {
            return false;
        };
        if ignores(&cfg, event_type) {
            return false;
        }
        if let Known::Everything(event) = known {
            return !self.engine(0).select_transitions(&cfg, event).is_empty();
        }
        let all = config::all_state_nodes(&self.tree, &cfg.nodes);
        all.iter().any(|&n| {
            self.tree.candidates(n, event_type).any(|t| {
                self.tree.transition(t).guard.as_ref().is_none_or(|g| {
                    guards::decide(&*self.guards, g, cfg.context.get(), event_type, known)
                        != Some(false)
                })
            })
        })
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

    /// Whether an `event_type` event can do anything while `state` (a dot path or `#id`) is
    /// active: some state that may be active at the same time listens to it, exactly or by
    /// wildcard. Those are `state`, its ancestors and its descendants, and, inside a parallel
    /// state, everything under the outermost parallel ancestor (its other regions). Guards are
    /// not evaluated. For checking a binding (the plugin SDK refuses a tool whose event does
    /// nothing in a state it is visible in), not for stepping.
    pub fn accepts_event_in(&self, state: &str, event_type: &str) -> bool {
        let tree = &self.tree;
        let Some(node) = tree.lookup(state) else {
            return false;
        };
        let mut chain = vec![node];
        chain.extend(tree.proper_ancestors(node, None));
        let scope = chain
            .iter()
            .rev()
            .copied()
            .find(|&n| tree.node(n).kind == tree::Kind::Parallel)
            .unwrap_or(node);
        let listens = |n: tree::NodeId| {
            tree.node(n)
                .on
                .iter()
                .any(|(d, ts)| !ts.is_empty() && matches_descriptor(event_type, d))
        };
        chain.iter().copied().any(listens) || (scope..tree.node(scope).subtree_end).any(listens)
    }

    /// The states an `event_type` event may move an instance to from any of `states` (dot paths
    /// or `#id`s; their descendants and ancestors count, as they handle events there too), as
    /// dot paths in document order, each once. Guards are not evaluated: every target a
    /// transition names is one the event may reach. For describing a tool, not for stepping.
    pub fn targets_of(&self, states: &[String], event_type: &str) -> Vec<String> {
        let tree = &self.tree;
        let mut handlers: Vec<tree::NodeId> = Vec::new();
        for path in states {
            let Some(n) = tree.lookup(path) else { continue };
            handlers.extend(n..tree.node(n).subtree_end);
            handlers.extend(tree.proper_ancestors(n, None));
        }
        let mut targets: Vec<tree::NodeId> = Vec::new();
        for n in handlers {
            for (descriptor, transitions) in &tree.node(n).on {
                if !matches_descriptor(event_type, descriptor) {
                    continue;
                }
                for &t in transitions {
                    for &target in tree.transition(t).targets.iter().flatten() {
                        if !targets.contains(&target) {
                            targets.push(target);
                        }
                    }
                }
            }
        }
        targets.sort_unstable();
        targets
            .into_iter()
            .map(|n| tree.node(n).path.clone())
            .collect()
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
    /// A record from before context and timers (format 1) gets the initial context and the
    /// timers of its active states counted from time 0; [`Machine::restore_at`] counts them
    /// from the time of the restore instead.
    pub fn restore(&self, persisted: &Value) -> Result<Snapshot, MachineError> {
        self.restore_at(persisted, 0)
    }

    /// [`Machine::restore`], starting at `now` the timers a format-1 record does not have.
    pub fn restore_at(&self, persisted: &Value, now: u64) -> Result<Snapshot, MachineError> {
        snapshot::restore_config(&self.tree, persisted, &self.initial.context, now)
            .map(|cfg| self.snapshot(cfg))
    }
}

/// Runs the initial step; an initial state that loops is refused at load.
fn start(tree: &Tree, guards: &dyn Guards, context: Context) -> Result<Config, MachineError> {
    let engine = Engine {
        tree,
        guards,
        now: 0,
    };
    engine.initial(context).map_err(|_| {
        MachineError::new(
            "",
            format!(
                "the initial state does not settle: more than {MAX_MICROSTEPS} eventless \
                 microsteps"
            ),
        )
    })
}

/// Events that change nothing: any once the machine is done (an XState actor stops and drops
/// them), and XState's control events sent from outside.
fn ignores(cfg: &Config, event_type: &str) -> bool {
    cfg.done
        || event_type == "xstate.init"
        || event_type == "xstate.stop"
        || event_type.starts_with("xstate.error")
}

#[cfg(test)]
mod data_tests;
#[cfg(test)]
mod tests;
