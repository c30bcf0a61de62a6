//! Hand-written differential cases: one or more per construct the engine supports.

use serde_json::{Value, json};

use super::Case;

fn case(name: &str, machine: Value, events: Value) -> Case {
    Case {
        name: name.to_string(),
        machine,
        context: None,
        events: events.as_array().cloned().unwrap_or_default(),
    }
}

/// A case whose instance starts with `context` instead of the machine's own.
fn case_with_context(name: &str, machine: Value, context: Value, events: Value) -> Case {
    Case {
        context: Some(context),
        ..case(name, machine, events)
    }
}

fn assign(params: Value) -> Value {
    json!({"type": "xstate.assign", "params": params})
}

fn logic(rule: Value) -> Value {
    json!({"type": "jsonLogic", "params": {"rule": rule}})
}

pub fn all() -> Vec<Case> {
    let mut cases = classic();
    cases.extend(guards_and_context());
    cases.extend(timers_and_loops());
    cases
}

/// Guards over the event and context, combinators, and assignments in XState's order.
fn guards_and_context() -> Vec<Case> {
    let big = logic(json!({">": [{"var": ["event.input.amount", 0]}, 10000]}));
    vec![
        case(
            "second approval above an amount (jsonLogic over event.input)",
            json!({"id":"inv","initial":"draft","context":{"approvals":0},"states":{
                "draft":{"on":{"SUBMIT":[{"target":"review2","guard":big},{"target":"review"}]}},
                "review2":{"on":{"APPROVE":{"target":"review","actions":assign(json!({"approvals":{"+":[{"var":"context.approvals"},1]}}))}}},
                "review":{"on":{"APPROVE":{"target":"approved","actions":assign(json!({"approvals":{"+":[{"var":"context.approvals"},1]}}))}}},
                "approved":{"type":"final"}}}),
            json!([
                {"type":"SUBMIT","input":{"amount":20000}}, "APPROVE", "APPROVE",
            ]),
        ),
        case(
            "small invoice takes one approval; guards read event.output",
            json!({"id":"inv","initial":"draft","context":{"approvals":0},"states":{
                "draft":{"on":{"SUBMIT":[{"target":"review2","guard":big},{"target":"review"}]}},
                "review2":{"on":{"APPROVE":"review"}},
                "review":{"on":{"APPROVE":[
                    {"target":"approved","guard":logic(json!({"==":[{"var":"event.output.ok"},true]}))},
                    {"target":"draft"}]}},
                "approved":{"type":"final"}}}),
            json!([
                {"type":"SUBMIT","input":{"amount":200}},
                {"type":"APPROVE","output":{"ok":false}},
                {"type":"SUBMIT","input":{"amount":200},"output":{}},
                {"type":"APPROVE","input":{},"output":{"ok":true}},
            ]),
        ),
        case(
            "xstate.and / or / not, nested, with params",
            json!({"initial":"a","context":{"n":2},"states":{
                "a":{"on":{"GO":[
                    {"target":"both","guard":{"type":"xstate.and","guards":[
                        logic(json!({">":[{"var":"context.n"},1]})),
                        {"type":"xstate.not","guards":["payloadFlag"]}]}},
                    {"target":"either","guard":{"type":"xstate.or","guards":[
                        "isFalse",
                        {"type":"jsonLogic","params":{"rule":{"===":[{"var":"params.want"},{"var":"event.kind"}]},"want":"k1"}}]}},
                    {"target":"none","guard":{"type":"xstate.or","guards":[]}},
                    {"target":"all","guard":{"type":"xstate.and","guards":[]}}]}},
                "both":{"on":{"BACK":"a"}},"either":{"on":{"BACK":"a"}},
                "none":{},"all":{"on":{"BACK":"a"}}}}),
            json!([
                "GO", "BACK", {"type":"GO","flag":true}, "BACK",
                {"type":"GO","flag":true,"kind":"k1"}, "BACK",
            ]),
        ),
        case(
            "assignment order: exit, transition, entry; each sees the last",
            json!({"initial":"a","context":{"log":"","n":0},"states":{
                "a":{"initial":"a1","exit":assign(json!({"log":{"cat":[{"var":"context.log"},"xa "]}})),
                    "states":{"a1":{"exit":[assign(json!({"log":{"cat":[{"var":"context.log"},"xa1 "]}})),
                                            assign(json!({"n":{"+":[{"var":"context.n"},1]}}))]}},
                    "on":{"GO":{"target":"b","actions":[
                        assign(json!({"log":{"cat":[{"var":"context.log"},"t"]},"n":{"*":[{"var":"context.n"},10]}})),
                        assign(json!({"log":{"cat":[{"var":"context.log"}," ",{"var":"event.input.tag"}," "]}}))]}}},
                "b":{"entry":assign(json!({"log":{"cat":[{"var":"context.log"},"eb"]},"n":{"+":[{"var":"context.n"},2]}})),
                    "on":{"STAY":{"actions":assign(json!({"n":{"-":[{"var":"context.n"},1]}}))},
                          "DONE":"end"}},
                "end":{"type":"final","entry":assign(json!({"log":{"cat":[{"var":"context.log"}," end"]}}))}},
                "exit":assign(json!({"log":{"cat":[{"var":"context.log"}," bye"]}}))}),
            json!([{"type":"GO","input":{"tag":"x"}}, "STAY", "STAY", "DONE", "STAY"]),
        ),
        case_with_context(
            "a given context replaces the machine's; entry assignments run over it",
            json!({"initial":"a","context":{"n":1},"states":{
                "a":{"entry":assign(json!({"n":{"+":[{"var":"context.n"},100]}})),
                    "always":{"target":"big","guard":logic(json!({">":[{"var":"context.n"},150]}))}},
                "big":{}}}),
            json!({"n": 60, "extra": [1, {"k": "v"}]}),
            json!(["X"]),
        ),
        case(
            "guards see the context as assigned by earlier microsteps",
            json!({"initial":"count","context":{"n":0},"states":{
                "count":{"always":[
                    {"target":"done","guard":logic(json!({">=":[{"var":"context.n"},5]}))},
                    {"actions":assign(json!({"n":{"+":[{"var":"context.n"},1]}})),
                     "guard":logic(json!({"var":"context.go"}))}],
                    "on":{"START":{"actions":assign(json!({"go":true}))}}},
                "done":{"on":{"AGAIN":{"target":"count","actions":assign(json!({"n":0}))}}}}}),
            json!(["START", "AGAIN", "NOTHING"]),
        ),
    ]
}

/// `after` timers on the simulated clock, and eventless loops stopped at the bound.
fn timers_and_loops() -> Vec<Case> {
    vec![
        case(
            "review deadline: back to draft after a delay, restarted on re-entry",
            json!({"id":"r","initial":"draft","states":{
                "draft":{"on":{"SUBMIT":"review"}},
                "review":{"after":{"100":"draft"},"on":{"APPROVE":"approved","POKE":{"target":"review","reenter":true},"NOTE":{}}},
                "approved":{"type":"final"}}}),
            json!([
                {"advance":1000}, "SUBMIT", {"advance":60}, "POKE", {"advance":60}, "NOTE",
                {"advance":40}, {"advance":5}, "SUBMIT", {"advance":99}, "APPROVE", {"advance":500},
            ]),
        ),
        case(
            "chained timers count from the firing deadline; ties fire in start order",
            json!({"id":"c","delays":{"short":10,"long":35},"initial":"p","states":{
                "p":{"type":"parallel","states":{
                    "x":{"initial":"x1","states":{
                        "x1":{"after":{"short":"x2"}},"x2":{"after":{"short":"x3"}},
                        "x3":{"after":{"15":"x1"}}}},
                    "y":{"initial":"y1","states":{
                        "y1":{"after":{"20":"y2","long":"y3"}},"y2":{"after":{"10":"y1"}},"y3":{}}}}}}}),
            json!([{"advance":25}, {"advance":9}, {"advance":1}, {"advance":100}, {"advance":3}]),
        ),
        case(
            "leaving a state cancels its timers; wildcards see timer events",
            json!({"id":"w","initial":"a","states":{
                "a":{"initial":"a1","after":{"50":"b"},"states":{
                    "a1":{"after":{"20":"a2"}},"a2":{"on":{"*":{"target":"a1"}}}}},
                "b":{"after":{"0":"a"},"on":{"STOP":"c"}},
                "c":{}}}),
            json!([{"advance":20}, {"advance":19}, {"advance":11}, {"advance":0}, "GO", {"advance":30}, {"advance":20}]),
        ),
        case(
            "guarded timer transitions and timers with assignments",
            json!({"id":"g","initial":"wait","context":{"ticks":0},"states":{
                "wait":{"after":{"10":[
                    {"target":"over","guard":logic(json!({">=":[{"var":"context.ticks"},3]}))},
                    {"target":"wait","reenter":true,"actions":assign(json!({"ticks":{"+":[{"var":"context.ticks"},1]}}))}]}},
                "over":{"type":"final"}}}),
            json!([{"advance":25}, {"advance":100}]),
        ),
        case(
            "an eventless loop that settles under the bound",
            json!({"initial":"a","context":{"n":0},"states":{
                "a":{"on":{"GO":"spin"}},
                "spin":{"always":[{"target":"a","guard":logic(json!({">=":[{"var":"context.n"},900]}))},
                    {"target":"spin2","actions":assign(json!({"n":{"+":[{"var":"context.n"},1]}}))}]},
                "spin2":{"always":"spin"}}}),
            json!(["GO"]),
        ),
        case(
            "an eventless loop past the bound is stopped",
            json!({"initial":"a","context":{"n":0},"states":{
                "a":{"on":{"GO":"spin","SAFE":"b"}},
                "b":{},
                "spin":{"always":{"actions":assign(json!({"n":{"+":[{"var":"context.n"},1]}}))}}}}),
            json!(["SAFE", "GO", "GO"]),
        ),
        case(
            "a cycle between states without assignments is stopped too",
            json!({"initial":"a","states":{"a":{"on":{"GO":"b"}},"b":{"always":"c"},"c":{"always":"b"}}}),
            json!(["GO"]),
        ),
        case(
            "a timer whose transition loops",
            json!({"initial":"a","states":{"a":{"after":{"5":"b"}},"b":{"always":"c"},"c":{"always":"b"}}}),
            json!([{"advance":4}, {"advance":1}]),
        ),
    ]
}

fn classic() -> Vec<Case> {
    vec![
        case(
            "invoice",
            json!({"id":"invoice","initial":"draft","states":{
                "draft":{"on":{"SUBMIT":"review"}},
                "review":{"on":{"APPROVE":"approved","REJECT":"draft"}},
                "approved":{"on":{"DISCHARGE":"discharged"}},
                "discharged":{"type":"final"}}}),
            json!([
                "APPROVE",
                "SUBMIT",
                "REJECT",
                "SUBMIT",
                "APPROVE",
                "DISCHARGE",
                "SUBMIT"
            ]),
        ),
        case(
            "targets: sibling, dot path, .child, #id, initial object",
            json!({"id":"m","initial":{"target":"a"},"on":{"TOP":".b.y","ROOT":"#m"},"states":{
                "a":{"initial":"x","on":{"GO":"b.y","SELF":".y"},"states":{
                    "x":{"on":{"N":"y","J":"#deep"}},"y":{}}},
                "b":{"initial":"x","states":{"x":{},"y":{"id":"deep","on":{"BACK":"#m.a"}}}}}}),
            json!([
                "N", "SELF", "GO", "BACK", "J", "TOP", "ROOT", "SELF", "GO", "ROOT"
            ]),
        ),
        case(
            "parallel regions, conflicts and region order",
            json!({"id":"p","initial":"run","states":{
                "run":{"type":"parallel","on":{"STOP":"off"},"states":{
                    "left":{"initial":"l1","states":{"l1":{"on":{"E":"l2","OUT":"#p.off","BOTH":"#p.gone"}},"l2":{"on":{"E":"l1"}}}},
                    "right":{"initial":"r1","states":{"r1":{"on":{"E":"r2","OUT":"#p.gone","BOTH":"#p.off"}},"r2":{"on":{"STOP":{}}}}}}},
                "off":{"on":{"ON":"run"}},"gone":{"on":{"ON":"run.right.r2"}}}}),
            json!([
                "E", "E", "E", "STOP", "OUT", "ON", "BOTH", "ON", "E", "OUT", "ON", "STOP"
            ]),
        ),
        case(
            "final states, onDone on compound and parallel, machine done",
            json!({"id":"f","initial":"job","states":{
                "job":{"type":"parallel","onDone":"review","states":{
                    "a":{"initial":"a1","states":{"a1":{"on":{"A":"a2"}},"a2":{"type":"final"}}},
                    "b":{"initial":"b1","states":{"b1":{"on":{"B":"b2"}},"b2":{"type":"final"}}}}},
                "review":{"initial":"r","onDone":"end","states":{"r":{"on":{"OK":"ok"}},"ok":{"type":"final"}}},
                "end":{"type":"final"}}}),
            json!(["A", "A", "B", "OK", "A"]),
        ),
        case(
            "root parallel finishes when every region is final",
            json!({"type":"parallel","states":{
                "a":{"initial":"a1","states":{"a1":{"on":{"A":"a2"}},"a2":{"type":"final"}}},
                "b":{"type":"final"}}}),
            json!(["B", "A", "A"]),
        ),
        case(
            "always with guards seeing the event",
            json!({"initial":"idle","states":{
                "idle":{"on":{"GO":"check"},"always":{"target":"flagged","guard":"payloadFlag"}},
                "check":{"always":[{"target":"big","guard":"payloadFlag"},{"target":"small"}]},
                "big":{"on":{"GO":"idle"}},"small":{"on":{"GO":"idle"}},
                "flagged":{"type":"final"}}}),
            json!([{"type":"GO","flag":true},"GO","GO","NOTHING",{"type":"NOTHING","flag":true}]),
        ),
        case(
            "wildcards: exact first, longest prefix, prefix matches itself, done events",
            json!({"initial":"w","states":{
                "w":{"on":{"*":"star","x.*":"xs","x.y.*":"xys","x.y":"exact"}},
                "star":{"on":{"*":"w"}},"xs":{"on":{"*":"w"}},"xys":{"on":{"*":"w"}},"exact":{"on":{"*":"w"}},
                "n":{"initial":"n1","on":{"*":"w"},"states":{"n1":{"type":"final"}}}}}),
            json!([
                "x.y", "R", "x.y.z", "R", "x", "R", "x.q", "R", "other", "x.y.z.w"
            ]),
        ),
        case(
            "wildcard on parent catches child done event",
            json!({"initial":"n","states":{
                "n":{"initial":"n1","on":{"xstate.done.state.*":"after","GO":".n2"},"states":{"n1":{"on":{"F":"n3"}},"n2":{},"n3":{"type":"final"}}},
                "after":{}}}),
            json!(["GO", "F"]),
        ),
        case(
            "self transitions: reenter resets children, plain does not",
            json!({"initial":"s","states":{
                "s":{"initial":"a","on":{"RESET":{"target":"s","reenter":true},"SAME":"s","IN":".b","INR":{"target":".a","reenter":true}},
                     "states":{"a":{"on":{"N":"b"}},"b":{}}}}}),
            json!(["N", "SAME", "RESET", "N", "INR", "IN", "SAME"]),
        ),
        case(
            "targetless transitions forbid parent handlers and count as changed",
            json!({"initial":"p","states":{
                "p":{"initial":"c","on":{"E":"q","F":"q"},"states":{"c":{"on":{"E":{},"G":[{"guard":"isFalse","target":"d"},{}]}},"d":{}}},
                "q":{}}}),
            json!(["E", "G", "F"]),
        ),
        case(
            "guards: candidate arrays, params, isTrue/isFalse",
            json!({"initial":"a","states":{
                "a":{"on":{"GO":[
                    {"target":"f","guard":"isFalse"},
                    {"target":"k","guard":{"type":"paramIs","params":{"kind":"k1"}}},
                    {"target":"t","guard":"payloadFlag"},
                    {"target":"d"}]}},
                "f":{},"k":{"on":{"B":"a"}},"t":{"on":{"B":"a"}},"d":{"on":{"B":{"target":"a","guard":"isTrue"}}}}}),
            json!(["GO","B",{"type":"GO","kind":"k1"},"B",{"type":"GO","flag":true},"B"]),
        ),
        case(
            "shallow and deep history",
            json!({"initial":"work","states":{
                "work":{"initial":"one","on":{"PAUSE":"paused"},"states":{
                    "one":{"initial":"i","on":{"NEXT":"two"},"states":{"i":{"on":{"IN":"j"}},"j":{}}},
                    "two":{"on":{"NEXT":"one"}},
                    "hs":{"type":"history"},
                    "hd":{"type":"history","history":"deep"}}},
                "paused":{"on":{"SHALLOW":"work.hs","DEEP":"work.hd"}}}}),
            json!([
                "IN", "PAUSE", "SHALLOW", "IN", "PAUSE", "DEEP", "NEXT", "PAUSE", "DEEP", "NEXT",
                "PAUSE", "SHALLOW"
            ]),
        ),
        case(
            "history default target and history in parallel",
            json!({"initial":"off","states":{
                "off":{"on":{"H":"par.hist","D":"c.h"}},
                "c":{"initial":"c1","on":{"OFF":"off"},"states":{"c1":{},"c2":{},"h":{"type":"history","target":"c2"}}},
                "par":{"type":"parallel","on":{"OFF":"off"},"states":{
                    "x":{"initial":"x1","states":{"x1":{"on":{"X":"x2"}},"x2":{}}},
                    "y":{"initial":"y1","states":{"y1":{"on":{"Y":"y2"}},"y2":{}}},
                    "hist":{"type":"history","history":"deep"}}}}}),
            json!(["H", "X", "OFF", "H", "Y", "OFF", "D", "OFF", "H"]),
        ),
        case(
            "multiple targets into parallel regions",
            json!({"id":"mt","initial":"a","states":{
                "a":{"on":{"GO":{"target":["#mt.p.x.x2","#mt.p.y.y2"]}}},
                "p":{"type":"parallel","on":{"BACK":"a"},"states":{
                    "x":{"initial":"x1","states":{"x1":{},"x2":{}}},
                    "y":{"initial":"y1","states":{"y1":{},"y2":{}}}}}}}),
            json!(["GO", "BACK", "GO"]),
        ),
        case(
            "deep nesting: transitions out of nested parallel to outer states",
            json!({"id":"d","initial":"l1","states":{
                "l1":{"initial":"l2","on":{"UP":"top"},"states":{
                    "l2":{"type":"parallel","states":{
                        "r1":{"initial":"a","states":{"a":{"on":{"E":"b","OUT":"#d.top"}},"b":{"on":{"E":"#d.l1"}}}},
                        "r2":{"initial":"c","states":{"c":{"on":{"E":"d"}},"d":{"type":"final"}}}}}}},
                "top":{"on":{"DOWN":"l1.l2.r2.d"}}}}),
            json!(["E", "E", "E", "OUT", "DOWN", "UP", "DOWN", "E"]),
        ),
        case(
            "eventless chain through siblings settles in one macrostep",
            json!({"initial":"a","states":{
                "a":{"on":{"GO":"b"}},
                "b":{"always":"c"},
                "c":{"always":{"target":"d","guard":"isTrue"}},
                "d":{"type":"final"}}}),
            json!(["GO", "GO"]),
        ),
        case(
            "parent always to own child stops after one firing",
            json!({"initial":"p","states":{
                "p":{"initial":"a","always":{"target":".b"},"on":{"A":".a"},"states":{"a":{},"b":{}}}}}),
            json!(["A", "A"]),
        ),
        case(
            "onDone targetless and done inside nested compound does not finish machine",
            json!({"initial":"o","states":{
                "o":{"initial":"i","onDone":{},"states":{"i":{"initial":"a","states":{"a":{"on":{"F":"z"}},"z":{"type":"final"}}}}}}}),
            json!(["F", "F"]),
        ),
        case(
            "initial is a history state; deep history target as a dot path",
            json!({"initial":"w","states":{
                "w":{"initial":"h","on":{"OUT":"o"},"states":{
                    "h":{"type":"history","history":"deep","target":"b.b2"},
                    "a":{},
                    "b":{"initial":"b1","states":{"b1":{"on":{"N":"b2"}},"b2":{"on":{"N":"b1"}}}}}},
                "o":{"on":{"IN":"w","HIST":"w.h"}}}}),
            json!(["N", "OUT", "IN", "N", "OUT", "HIST", "OUT", "IN"]),
        ),
        case(
            "explicit done-event key, replaced by onDone; transitions on a final child",
            json!({"id":"e","initial":"c","states":{
                "c":{"initial":"x","on":{"xstate.done.state.e.c":"viaOn"},"onDone":"viaOnDone",
                     "states":{"x":{"on":{"F":"f"}},"f":{"type":"final","on":{"BACK":"x"}}}},
                "d":{"initial":"x","on":{"xstate.done.state.e.d":"viaOn"},
                     "states":{"x":{"on":{"F":"f"}},"f":{"type":"final"}}},
                "viaOn":{"on":{"D":"d"}},"viaOnDone":{"on":{"D":"d"}}}}),
            json!(["F", "D", "F", "BACK"]),
        ),
        case(
            "done event bubbles: nested finals, parallel completion inside compound",
            json!({"id":"b","initial":"outer","states":{
                "outer":{"initial":"par","onDone":"finished","states":{
                    "par":{"type":"parallel","onDone":"last","states":{
                        "r1":{"initial":"a","states":{"a":{"on":{"GO":"z"}},"z":{"type":"final"}}},
                        "r2":{"initial":"a","states":{"a":{"on":{"GO2":"z"}},"z":{"type":"final"}}}}},
                    "last":{"type":"final"}}},
                "finished":{"on":{"*":"outer"}}}}),
            json!(["GO", "GO2", "again", "GO2", "GO", "x"]),
        ),
        case(
            "root-level handlers and root re-entry",
            json!({"id":"r","initial":"a","on":{"RESET":{"target":"#r","reenter":true},"TO_B":".b","SOFT":"#r"},
                "states":{"a":{"on":{"N":"b"}},"b":{"initial":"b1","states":{"b1":{"on":{"N":"b2"}},"b2":{}}}}}),
            json!(["N", "N", "RESET", "TO_B", "N", "SOFT", "TO_B", "N", "RESET"]),
        ),
        case(
            "array-index state keys come first, as in JavaScript objects",
            json!({"initial":"p","states":{
                "p":{"type":"parallel","on":{"BACK":"p"},"states":{
                    "b":{"initial":"x","states":{"x":{"on":{"GO":"#top"}}}},
                    "1":{"initial":"y","states":{"y":{"on":{"GO":"#other"}}}}}},
                "top":{"id":"top","on":{"BACK":"p"}},"other":{"id":"other","on":{"BACK":"p"}}}}),
            json!(["GO", "BACK", "GO"]),
        ),
    ]
}
