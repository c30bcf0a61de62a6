//! The operator commands: `turnstile check`, `turnstile machine run` and `turnstile graph`.

mod common;

use std::{
    io::Write,
    process::{Command, Stdio},
};

use common::{PluginDir, turnstile_bin};
use serde_json::{Value, json};

fn run(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(turnstile_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run turnstile");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A plugin directory holding only `tests/fixtures/<fixture>.c`, built.
fn fixture_dir(fixture: &str) -> PluginDir {
    let plugins = PluginDir::with(&[]);
    plugins.add_c_fixture(fixture);
    plugins
}

/// A machine definition written to a file `name` in a directory of its own: the directory
/// (removed when dropped) and the file's path.
fn machine_file(name: &str, definition: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, definition).unwrap();
    let file = file.to_str().unwrap().to_owned();
    (dir, file)
}

/// `machine run`'s output: one JSON value per line.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn check_accepts_good_plugins_and_names_each_bad_file() {
    let plugins = PluginDir::with(&["invoice"]);
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, _) = run(&["check", "--plugins", dir], "");
    assert_eq!(code, 0, "stdout: {stdout}");
    assert!(stdout.contains("invoice"), "stdout: {stdout}");

    plugins.add_file("notes.so", b"this is not a shared library");
    let (code, stdout, _) = run(&["check", "--plugins", dir], "");
    assert_eq!(code, 1);
    assert!(stdout.contains("notes.so"), "names the bad file: {stdout}");
    assert!(
        stdout.contains("ok"),
        "still reports the good plugin: {stdout}"
    );
}

const INVOICE: &str = r#"{"id":"invoice","initial":"draft","states":{
  "draft":{"on":{"SUBMIT":"review"}},
  "review":{"on":{"APPROVE":"approved","REJECT":"draft"}},
  "approved":{"on":{"DISCHARGE":"discharged"}},
  "discharged":{"type":"final"}}}"#;

#[test]
fn machine_run_prints_one_json_line_per_event() {
    let (_dir, file) = machine_file("invoice.json", INVOICE);
    let (code, stdout, stderr) = run(
        &["machine", "run", &file],
        "\"SUBMIT\"\n{\"type\":\"APPROVE\"}\n\"SUBMIT\"\n\"DISCHARGE\"\n",
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines = json_lines(&stdout);
    assert_eq!(
        lines,
        vec![
            json!({"value": "draft", "status": "active", "context": {}}),
            json!({"event": "SUBMIT", "value": "review", "status": "active", "context": {},
                "changed": true}),
            json!({"event": "APPROVE", "value": "approved", "status": "active", "context": {},
                "changed": true}),
            json!({"event": "SUBMIT", "value": "approved", "status": "active", "context": {},
                "changed": false}),
            json!({"event": "DISCHARGE", "value": "discharged", "status": "done", "context": {},
                "changed": true}),
        ]
    );
}

#[test]
fn machine_run_refuses_a_bad_machine_naming_the_path() {
    let typo = INVOICE.replace("\"APPROVE\":\"approved\"", "\"APPROVE\":\"aproved\"");
    let (_dir, file) = machine_file("typo.json", &typo);
    let (code, stdout, stderr) = run(&["machine", "run", &file], "");
    assert_ne!(code, 0);
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    assert!(stderr.contains("typo.json"), "names the file: {stderr}");
    assert!(
        stderr.contains("states.review.on.APPROVE"),
        "names the path: {stderr}"
    );
    assert!(stderr.contains("aproved"), "names the bad target: {stderr}");
}

#[test]
fn check_reports_nothing_for_the_example_plugins() {
    let plugins = PluginDir::with(&["invoice", "payment", "migration"]);
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, stderr) = run(&["check", "--strict", "--plugins", dir], "");
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stdout.contains("warn"), "stdout: {stdout}");
    assert!(!stdout.contains("error"), "stdout: {stdout}");
}

#[test]
fn check_warns_about_each_graph_problem_and_fails_with_strict() {
    let plugins = fixture_dir("graph_problems");
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, _) = run(&["check", "--plugins", dir], "");
    assert_eq!(code, 0, "warnings alone pass: {stdout}");
    for expected in [
        "warn  workflow \"flow\": state \"island\" is unreachable from the initial state",
        "warn  workflow \"flow\": no final state can be reached from state \"middle\"",
        "warn  workflow \"flow\": no final state can be reached from state \"loop\"",
        "warn  workflow \"flow\": state \"parked\" lists no tool and no timer or eventless \
         transition leaves it (an agent there is stuck)",
        "warn  workflow \"flow\": tool \"flow.ghost\" is never listed (its states are \
         unreachable)",
        "warn  workflow \"flow\": event \"LOST\" is fired by no tool and no timer",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(!stdout.contains("\"start\""), "start is fine: {stdout}");
    let (code, stdout, _) = run(&["check", "--strict", "--plugins", dir], "");
    assert_eq!(code, 1, "--strict makes them errors: {stdout}");
    assert!(
        stdout.contains("error workflow \"flow\": state \"island\""),
        "{stdout}"
    );
}

#[test]
fn check_refuses_bad_json_logic_naming_its_path() {
    let plugins = fixture_dir("bad_guard");
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, _) = run(&["check", "--plugins", dir], "");
    assert_eq!(code, 1, "stdout: {stdout}");
    assert!(
        stdout.contains(
            "states.open.on.CLOSE.guard.params.rule: bad JSON Logic: unknown operator \"bogus\""
        ),
        "names the path and the problem: {stdout}"
    );
}

#[test]
fn check_refuses_a_guard_the_plugin_does_not_implement() {
    let plugins = fixture_dir("unknown_guard");
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, _) = run(&["check", "--plugins", dir], "");
    assert_eq!(code, 1, "stdout: {stdout}");
    assert!(
        stdout.contains("states.open.on.CLOSE.guard: guard \"gate.isOpen\" has no implementation"),
        "names the path and the guard: {stdout}"
    );
}

/// The invoice of issue 13, with context, a guard over the call's input, an assignment and a
/// review deadline.
const GUARDED: &str = r#"{"id":"invoice","initial":"draft","context":{"amount":0},
  "delays":{"deadline":100},
  "states":{
    "draft":{"on":{"SUBMIT":{"target":"review","actions":{"type":"xstate.assign",
      "params":{"amount":{"var":["event.input.amount",0]}}}}}},
    "review":{"after":{"deadline":"draft"},"on":{"APPROVE":[
      {"target":"second","guard":{"type":"jsonLogic","params":{"rule":{">":[{"var":"context.amount"},10000]}}}},
      {"target":"approved"}]}},
    "second":{"on":{"APPROVE":"approved"}},
    "approved":{"type":"final"},
    "spin":{"always":{"actions":{"type":"xstate.assign","params":{"n":1}}}}},
  "on":{"SPIN":".spin"}}"#;

#[test]
fn machine_run_shows_context_guards_timers_and_loops() {
    let (_dir, file) = machine_file("guarded.json", GUARDED);
    let input = [
        r#"{"type":"SUBMIT","input":{"amount":20000}}"#,
        r#"{"advance":60}"#,
        r#"{"advance":40}"#,
        r#"{"type":"SUBMIT","input":{"amount":20000}}"#,
        r#""APPROVE""#,
        r#"not json"#,
        r#""SPIN""#,
    ]
    .join("\n");
    let (code, stdout, stderr) = run(
        &[
            "machine",
            "run",
            "--context",
            r#"{"amount":5,"note":"x"}"#,
            &file,
        ],
        &input,
    );
    assert_eq!(
        code, 1,
        "a bad line makes the exit status 1; stderr: {stderr}"
    );
    let lines = json_lines(&stdout);
    assert_eq!(
        lines.len(),
        8,
        "the initial line and one per input line: {stdout}"
    );
    assert_eq!(
        lines[0],
        json!({"value": "draft", "status": "active",
        "context": {"amount": 5, "note": "x"}})
    );
    assert_eq!(
        lines[1],
        json!({"event": "SUBMIT", "value": "review", "status": "active",
        "context": {"amount": 20000, "note": "x"},
        "timers": [{"event": "xstate.after.deadline.invoice.review", "deadline": 100}],
        "changed": true})
    );
    assert_eq!(lines[2]["fired"], json!([]));
    assert_eq!(lines[2]["value"], json!("review"));
    assert_eq!(
        lines[3],
        json!({"advance": 40, "now": 100,
        "fired": ["xstate.after.deadline.invoice.review"], "value": "draft", "status": "active",
        "context": {"amount": 20000, "note": "x"}, "changed": true})
    );
    assert_eq!(
        lines[5]["value"],
        json!("second"),
        "over 10,000 needs a second approval"
    );
    assert_eq!(lines[6]["line"], json!(6), "numbered from 1");
    assert!(
        lines[6]["error"].as_str().unwrap().contains("not JSON"),
        "{}",
        lines[6]
    );
    assert_eq!(lines[7]["event"], json!("SPIN"));
    assert!(
        lines[7]["error"].as_str().unwrap().contains("looped"),
        "the loop is refused: {}",
        lines[7]
    );
    assert_eq!(lines[7]["value"], json!("second"), "and changes nothing");
    assert_eq!(lines[7]["changed"], json!(false));
}

#[test]
fn graph_draws_one_workflow_as_svg_with_its_state_highlighted() {
    let plugins = PluginDir::with(&["invoice", "payment"]);
    let dir = plugins.path().to_str().unwrap();
    let (code, stdout, stderr) = run(
        &[
            "graph",
            "--plugins",
            dir,
            "invoice",
            "--format",
            "svg",
            "--highlight",
            "review",
        ],
        "",
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let doc = roxmltree::Document::parse(&stdout).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let states: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("data-state").is_some() && n.has_tag_name("g"))
        .collect();
    let classes = |n: &roxmltree::Node<'_, '_>| {
        let class = n.attribute("class").unwrap_or_default();
        class.split(' ').map(str::to_owned).collect::<Vec<_>>()
    };
    let active: Vec<&str> = states
        .iter()
        .filter(|n| classes(n).iter().any(|c| c == "active"))
        .filter_map(|n| n.attribute("data-state"))
        .collect();
    assert_eq!(active, ["review"]);
    let drawn: Vec<&str> = states
        .iter()
        .filter_map(|n| n.attribute("data-state"))
        .collect();
    assert_eq!(
        drawn,
        [
            "draft",
            "review",
            "second_approval",
            "approved",
            "discharged"
        ]
    );
    // The review state lists its tools; the review deadline is on an edge.
    let review = states[1];
    let texts: Vec<&str> = review.children().filter_map(|c| c.text()).collect();
    assert!(
        texts.iter().any(|t| t.contains("invoice.approve")),
        "{texts:?}"
    );
    assert!(
        stdout.contains(">after reviewDeadline ("),
        "the timer is labelled: {stdout}"
    );

    // Two workflows: an SVG needs the one to draw named; Mermaid titles each.
    let (code, _, stderr) = run(&["graph", "--plugins", dir, "--format", "svg"], "");
    assert_ne!(code, 0);
    assert!(stderr.contains("invoice, payment"), "stderr: {stderr}");
    let (code, stdout, stderr) = run(&["graph", "--plugins", dir], "");
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stdout.starts_with("---\ntitle: \"invoice\"\n---\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n---\ntitle: \"payment\"\n---\n"),
        "{stdout}"
    );
    let (code, stdout, _) = run(
        &["graph", "--plugins", dir, "payment", "--format", "dot"],
        "",
    );
    assert_eq!(code, 0);
    assert!(stdout.starts_with("digraph \"payment\" {"), "{stdout}");
    assert_eq!(stdout.matches("digraph").count(), 1);
}

/// The states lit (`active`) and tinted (`contains-active`) in an SVG, in document order.
fn lit(svg: &str) -> (Vec<String>, Vec<String>) {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    let with = |class: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("g") && n.attribute("data-state").is_some())
            .filter(|n| {
                n.attribute("class")
                    .is_some_and(|c| c.split(' ').any(|t| t == class))
            })
            .map(|n| n.attribute("data-state").unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    (with("active"), with("contains-active"))
}

/// An order in its parallel `work` state is in one state of each region: `--highlight` given
/// once per state, or given the instance's whole state value, lights both.
#[test]
fn graph_lights_every_region_of_a_parallel_state() {
    let plugins = fixture_dir("order");
    let dir = plugins.path().to_str().unwrap();
    let graph = |highlight: &[&str]| {
        let mut args = vec!["graph", "--plugins", dir, "order", "--format", "svg"];
        for state in highlight {
            args.extend(["--highlight", state]);
        }
        let (code, stdout, stderr) = run(&args, "");
        assert_eq!(code, 0, "{highlight:?}: {stderr}");
        lit(&stdout)
    };
    let both = (
        vec![
            "work.shipping.packing".to_owned(),
            "work.billing.unpaid".to_owned(),
        ],
        vec![
            "work".to_owned(),
            "work.shipping".to_owned(),
            "work.billing".to_owned(),
        ],
    );
    assert_eq!(
        graph(&["work.shipping.packing", "work.billing.unpaid"]),
        both
    );
    // As `turnstile instances show` prints the state.
    assert_eq!(
        graph(&[r#"{"work":{"shipping":"packing","billing":"unpaid"}}"#]),
        both
    );
    // One state is still one box.
    assert_eq!(graph(&["open"]).0, ["open"]);
    // A value naming a state the machine lacks is refused, naming it.
    let (code, _, stderr) = run(
        &[
            "graph",
            "--plugins",
            dir,
            "order",
            "--format",
            "svg",
            "--highlight",
            r#"{"work":{"shipping":"packing","billing":"overdue"}}"#,
        ],
        "",
    );
    assert_ne!(code, 0);
    assert!(
        stderr.contains("no state `work.billing.overdue`"),
        "{stderr}"
    );
}

#[test]
fn graph_names_an_unknown_workflow_or_state() {
    let plugins = PluginDir::with(&["invoice", "payment"]);
    let dir = plugins.path().to_str().unwrap();
    // Each refusal: a failure exit, nothing on stdout, stderr saying why.
    let refused = |args: &[&str]| {
        let (code, stdout, stderr) = run(&[&["graph", "--plugins", dir], args].concat(), "");
        assert_ne!(code, 0, "stderr: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        stderr
    };
    let stderr = refused(&["invoce"]);
    assert!(stderr.contains("no workflow `invoce`"), "stderr: {stderr}");
    assert!(
        stderr.contains("invoice, payment"),
        "lists the known: {stderr}"
    );

    let stderr = refused(&["invoice", "--format", "svg", "--highlight", "reveiw"]);
    assert!(stderr.contains("no state `reveiw`"), "stderr: {stderr}");
    assert!(
        stderr.contains("draft, review"),
        "lists the states: {stderr}"
    );

    let (code, _, stderr) = run(
        &[
            "graph",
            "--plugins",
            dir,
            "invoice",
            "--highlight",
            "review",
        ],
        "",
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("--format svg"), "stderr: {stderr}");
}

/// A program that runs Turnstile inside itself (`host/examples/embedding.rs`, built by
/// `cargo test`) serves from the store it opened and handed over, with the plugin directory it
/// chose; once SIGTERM stops the server, the program reads the instance a client made from its
/// own handle on the store.
#[tokio::test]
async fn a_program_runs_turnstile_inside_itself_on_a_store_it_opened() {
    let example = turnstile_bin()
        .parent()
        .expect("the binary lives in a directory")
        .join("examples/embedding");
    assert!(
        example.exists(),
        "{} is missing: `cargo test` builds the host's examples (or `cargo build --example embedding`)",
        example.display()
    );
    let plugins = PluginDir::with(&["invoice"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.redb");
    let args: [&std::ffi::OsStr; 7] = [
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--http".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--data-dir".as_ref(),
        dir.path().as_os_str(),
        "--allow-test-plugins".as_ref(),
    ];
    let mut server = common::Server::serve_binary(
        &example,
        &args,
        &[("APP_STORE_FILE", file.to_str().unwrap())],
    );
    server.wait_for_log("state store open");
    let client = common::Client::http(&server.url).await;
    let submitted = client.call("invoice.submit", json!({"amount": 120})).await;
    assert_ne!(submitted.is_error, Some(true), "{submitted:?}");
    drop(client);
    server.stop();
    let line = server.wait_for_log("the store holds");
    let held: u64 = line
        .split("the store holds ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"));
    assert!(
        held >= 1,
        "the submitted invoice is in the program's store: {line}"
    );
}
