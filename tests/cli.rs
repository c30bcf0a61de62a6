//! The operator commands: `turnstile check` and `turnstile machine run`.

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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("invoice.json");
    std::fs::write(&file, INVOICE).unwrap();
    let (code, stdout, stderr) = run(
        &["machine", "run", file.to_str().unwrap()],
        "\"SUBMIT\"\n{\"type\":\"APPROVE\"}\n\"SUBMIT\"\n\"DISCHARGE\"\n",
    );
    assert_eq!(code, 0, "stderr: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            json!({"value": "draft", "status": "active"}),
            json!({"event": "SUBMIT", "value": "review", "status": "active", "changed": true}),
            json!({"event": "APPROVE", "value": "approved", "status": "active", "changed": true}),
            json!({"event": "SUBMIT", "value": "approved", "status": "active", "changed": false}),
            json!({"event": "DISCHARGE", "value": "discharged", "status": "done", "changed": true}),
        ]
    );
}

#[test]
fn machine_run_refuses_a_bad_machine_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.json");
    std::fs::write(
        &file,
        INVOICE.replace("\"APPROVE\":\"approved\"", "\"APPROVE\":\"aproved\""),
    )
    .unwrap();
    let (code, stdout, stderr) = run(&["machine", "run", file.to_str().unwrap()], "");
    assert_ne!(code, 0);
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    assert!(stderr.contains("typo.json"), "names the file: {stderr}");
    assert!(
        stderr.contains("states.review.on.APPROVE"),
        "names the path: {stderr}"
    );
    assert!(stderr.contains("aproved"), "names the bad target: {stderr}");
}
