// Differential harness: runs statechart cases through real XState v5 and prints what happened,
// for tests/xstate_differential.rs to compare with Turnstile's engine.
//
// stdin:  [{"machine": {...}, "events": ["A", {"type": "B", "flag": true}, ...]}, ...]
// stdout: [{"initial": {"value", "status"}, "steps": [{"value", "status", "changed"}]}
//          | {"error": "<message>"}, ...]
//
// `changed` is true when at least one transition was enabled while XState processed the event
// (any `@xstate.microstep` inspection event with a non-empty `_transitions` list), which is the
// definition in host/src/statechart/mod.rs. Events go to a real actor, so what happens after the
// machine is done is the actor's behaviour (it stops and drops events).
//
// The guards are the fixed set the Rust side implements identically (TestGuards).
import { readFileSync } from 'node:fs';
import { createActor, setup } from 'xstate';

const guards = {
  isTrue: () => true,
  isFalse: () => false,
  payloadFlag: ({ event }) => event.flag === true,
  paramIs: ({ event }, params) => event.kind === params?.kind,
};

function runCase({ machine, events }) {
  let logic;
  try {
    // maxIterations turns a missed eventless loop into an error instead of a hang.
    logic = setup({ guards }).createMachine({ ...machine, options: { maxIterations: 5000 } });
  } catch (e) {
    return { error: String(e && e.message) };
  }
  let taken = 0;
  const actor = createActor(logic, {
    inspect: (ev) => {
      if (ev.type === '@xstate.microstep' && ev._transitions.length > 0) taken += 1;
    },
  });
  actor.subscribe({ error: () => {} });
  actor.start();
  const view = () => {
    const s = actor.getSnapshot();
    return { value: s.value, status: s.status };
  };
  const initial = view();
  const steps = [];
  for (const ev of events) {
    taken = 0;
    actor.send(typeof ev === 'string' ? { type: ev } : ev);
    steps.push({ ...view(), changed: taken > 0 });
  }
  actor.stop();
  return { initial, steps };
}

const cases = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(cases.map(runCase)));
