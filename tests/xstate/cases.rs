//! Hand-written differential cases: one or more per construct the engine supports.

use serde_json::{Value, json};

use super::Case;

fn case(name: &str, machine: Value, events: Value) -> Case {
    Case {
        name: name.to_string(),
        machine,
        events: events.as_array().cloned().unwrap_or_default(),
    }
}

pub fn all() -> Vec<Case> {
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
