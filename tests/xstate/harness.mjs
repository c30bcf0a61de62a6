// Differential harness: runs statechart cases through real XState v5 and prints what happened,
// for tests/xstate_differential.rs to compare with Turnstile's engine.
//
// stdin:  [{"machine": {...}, "context"?: {...}, "events": ["A", {"type": "B", ...},
//           {"advance": 25}, ...]}, ...]
// stdout: [{"initial": {"value", "status", "context"},
//           "steps": [{"value", "status", "context", "changed"[, "fired"]} | {"loop": true}]}
//          | {"error": "<message>"}, ...]
//
// `changed` is true when at least one transition was enabled while XState processed the event
// (any `@xstate.microstep` inspection event with a non-empty `_transitions` list), which is the
// definition in host/src/statechart/mod.rs. Events go to a real actor, so what happens after the
// machine is done is the actor's behaviour (it stops and drops events).
//
// Time: the actor runs on XState's SimulatedClock, starting at 0. `{"advance": MS}` moves it
// forward, stopping at every timer's deadline on the way, so that a timer started while another
// fires counts from that deadline, as with a real clock (`SimulatedClock.increment` would count
// it from the end of the increment). `fired` lists the `xstate.after.*` events delivered.
//
// Eventless loops: the machine gets `maxIterations: 1000`, Turnstile's bound. When XState stops
// a step for it, the actor fails; the step is `{"loop": true}` and the case ends there.
//
// Guards: the fixed set the Rust side implements identically (TestGuards), the built-in
// `jsonLogic` guard evaluated with json-logic-js over {context, event, params}, and the JSON form
// of XState's combinators, {"type": "xstate.and" | "xstate.or" | "xstate.not", "guards": [...]},
// turned into XState's `and`/`or`/`not`. Actions: `xstate.assign` with params
// {"<key>": <JSON Logic over {context, event}>}. Delays: the machine's `delays` map.
import { readFileSync } from 'node:fs';
import jsonLogic from 'json-logic-js';
import { SimulatedClock, and, assign, createActor, not, or, setup } from 'xstate';

const MAX_ITERATIONS = 1000;

const guards = {
  isTrue: () => true,
  isFalse: () => false,
  payloadFlag: ({ event }) => event.flag === true,
  paramIs: ({ event }, params) => event.kind === params?.kind,
  jsonLogic: ({ context, event }, params) => jsonLogic.apply(params.rule, { context, event, params }),
};

const actions = {
  'xstate.assign': assign(({ context, event }, params) => {
    const update = {};
    for (const [key, rule] of Object.entries(params)) {
      const v = jsonLogic.apply(rule, { context, event });
      update[key] = v === undefined ? null : v;
    }
    return update;
  }),
};

// The JSON combinators as XState's functions, recursively.
function toGuard(g) {
  if (g && typeof g === 'object') {
    const inner = (g.guards ?? []).map(toGuard);
    if (g.type === 'xstate.and') return and(inner);
    if (g.type === 'xstate.or') return or(inner);
    if (g.type === 'xstate.not') return not(inner[0]);
  }
  return g;
}

// Every `guard` in a machine definition, converted.
function convert(node) {
  if (Array.isArray(node)) return node.map(convert);
  if (!node || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    out[k] = k === 'guard' ? toGuard(v) : convert(v);
  }
  return out;
}

function nextDeadline(clock) {
  let next = Infinity;
  for (const t of clock.timeouts.values()) next = Math.min(next, t.start + t.timeout);
  return next;
}

function runCase({ machine, context, events }) {
  let logic;
  try {
    const { delays = {}, ...config } = machine;
    const def = convert(config);
    if (context !== undefined) def.context = context;
    logic = setup({ guards, actions, delays }).createMachine({
      ...def,
      options: { maxIterations: MAX_ITERATIONS },
    });
  } catch (e) {
    return { error: String(e && e.message) };
  }
  const clock = new SimulatedClock();
  let taken = 0;
  let fired = [];
  const actor = createActor(logic, {
    clock,
    inspect: (ev) => {
      if (ev.type === '@xstate.microstep' && ev._transitions.length > 0) taken += 1;
      if (ev.type === '@xstate.event' && ev.event.type.startsWith('xstate.after.')) {
        fired.push(ev.event.type);
      }
    },
  });
  actor.subscribe({ error: () => {} });
  actor.start();
  const view = () => {
    const s = actor.getSnapshot();
    return { value: s.value, status: s.status, context: s.context };
  };
  if (actor.getSnapshot().status === 'error') return { error: 'the initial state loops' };
  const initial = view();
  const steps = [];
  for (const ev of events) {
    taken = 0;
    fired = [];
    const isAdvance = ev && typeof ev === 'object' && 'advance' in ev;
    if (isAdvance) {
      const target = clock.now() + ev.advance;
      for (let next = nextDeadline(clock); next <= target; next = nextDeadline(clock)) {
        clock.set(next);
        if (actor.getSnapshot().status === 'error') break;
      }
      if (actor.getSnapshot().status !== 'error') clock.set(target);
    } else {
      actor.send(typeof ev === 'string' ? { type: ev } : ev);
    }
    if (actor.getSnapshot().status === 'error') {
      steps.push({ loop: true });
      break;
    }
    const step = { ...view(), changed: taken > 0 };
    if (isAdvance) step.fired = fired;
    steps.push(step);
  }
  actor.stop();
  return { initial, steps };
}

const cases = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(cases.map(runCase)));
