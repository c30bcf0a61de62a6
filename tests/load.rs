//! `turnstile load` end to end: the real binary loading real servers, read through its `--json`
//! report and exit code, as a user's CI would. Against Turnstile (session mode, handle mode on
//! both protocol lines, a race, a scenario, over stdio) and against an independent server written with the
//! Python SDK (`tests/python/ticket_server.py`) it completes with a report and no violation;
//! against that server in a mode that breaks the gating contract it names the violation and
//! exits 1; in open loop (`--rate`) its latencies include the time calls waited to start.
//! Fan-out (`--fanout`): every session watching one instance hears each transition exactly once
//! on Turnstile and on the Python server, and a server that skips a session or notifies one
//! twice is caught. Minting (`--mint`): exactly COUNT instances end up in Turnstile's store.

mod common;

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::python::{Sdk, python, python_file};
use common::{PluginDir, Server, eventually_blocking, turnstile_bin};
use serde_json::Value;

/// What one `turnstile load … --json` run left.
struct Run {
    code: i32,
    report: Value,
    stderr: String,
}

impl Run {
    /// The (first) target's results.
    fn first(&self) -> &Value {
        &self.report["runs"][0]
    }

    fn violations(&self) -> &Value {
        &self.first()["violations"]
    }
}

/// Runs `turnstile load URL ARGS… --json` to completion.
fn load(url: &str, args: &[&str]) -> Run {
    let output = Command::new(turnstile_bin())
        .arg("load")
        .arg(url)
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run turnstile load");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("no JSON report ({error}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")
    });
    Run {
        code: output.status.code().expect("exited"),
        report,
        stderr,
    }
}

/// Asserts a clean run: exit 0, calls made and answered, no violation, no error.
fn assert_clean(run: &Run) {
    let first = run.first();
    assert_eq!(run.code, 0, "{:#}\n{}", run.report, run.stderr);
    assert_eq!(run.report["schema"], "turnstile.load/v1");
    assert_eq!(run.report["exit_code"], 0);
    assert!(first["calls"].as_u64().unwrap() > 0, "{first:#}");
    assert!(first["transitions"].as_u64().unwrap() > 0, "{first:#}");
    assert_eq!(first["violations"], serde_json::json!({}), "{first:#}");
    assert_eq!(first["errors"], serde_json::json!({}), "{first:#}");
    assert_eq!(
        first["call_latency_ms"]["count"], first["calls"],
        "every counted call is in the histogram"
    );
}

fn invoice_server(extra: &[&str]) -> (PluginDir, Server) {
    let plugins = PluginDir::with(&["invoice"]);
    let mut args = vec!["--store", "memory:"];
    args.extend_from_slice(extra);
    let server = Server::http(plugins.path(), &args);
    (plugins, server)
}

#[test]
fn walks_turnstile_in_session_mode_and_reports_no_violation() {
    let (_plugins, server) = invoice_server(&[]);
    let pid = server.pid().to_string();
    let run = load(
        &server.url,
        &[
            "--sessions",
            "4",
            "--duration",
            "2",
            "--warmup",
            "0",
            "--server-pid",
            &pid,
        ],
    );
    assert_clean(&run);
    let first = run.first();
    assert_eq!(first["mode"], "walk");
    assert_eq!(first["protocol"], "2025-11-25");
    // Walks end in the final state, so sessions were opened and their setup timed.
    assert!(first["iterations"].as_u64().unwrap() > 0, "{first:#}");
    assert!(
        first["setup_ms"]["count"].as_u64().unwrap() > 0,
        "{first:#}"
    );
    // Every transition's list_changed was waited for and arrived.
    assert_eq!(
        first["notification_delay_ms"]["count"],
        first["transitions"]
    );
    assert!(
        first["server_cpu_ms_per_call"].as_f64().unwrap() > 0.0,
        "{first:#}"
    );
    // Probes of tools listed earlier in a walk were made, and refused.
    assert!(
        first["outcomes"]["refused (FORBIDDEN)"].as_u64().unwrap() > 0,
        "{first:#}"
    );
}

#[test]
fn walks_turnstile_in_handle_mode_on_both_protocol_lines() {
    let (_plugins, server) = invoice_server(&["--state-handle-key"]);
    for protocol in ["2025-11-25", "2026-07-28"] {
        let run = load(
            &server.url,
            &[
                "--sessions",
                "4",
                "--iterations",
                "5",
                "--warmup",
                "0",
                "--handle-key",
                "handle",
                "--protocol",
                protocol,
                "--invalid-rate",
                "0.2",
            ],
        );
        assert_clean(&run);
        let first = run.first();
        assert_eq!(first["protocol"], protocol);
        assert_eq!(first["iterations"], 20, "{first:#}");
        // Invalid arguments were sent, and answered as errors, never as refusals by gating.
        let outcomes = first["outcomes"].as_object().unwrap();
        assert!(
            outcomes.keys().any(|kind| kind.contains("INVALID")),
            "{outcomes:?}"
        );
    }
}

#[test]
fn a_race_on_one_turnstile_instance_has_one_winner_each_time() {
    let (_plugins, server) = invoice_server(&["--state-handle-key"]);
    let run = load(
        &server.url,
        &[
            "--race",
            "--sessions",
            "6",
            "--iterations",
            "12",
            "--warmup",
            "0",
            "--handle-key",
            "handle",
        ],
    );
    assert_clean(&run);
    let first = run.first();
    assert_eq!(first["iterations"], 12);
    // Six racers a race: one won, five were refused; every racer heard each transition.
    let outcomes = &first["outcomes"];
    assert!(
        outcomes["refused (FORBIDDEN)"].as_u64().unwrap() >= 12 * 5,
        "{first:#}"
    );
    assert!(
        first["notification_delay_ms"]["count"].as_u64().unwrap() >= 12 * 6,
        "{first:#}"
    );
}

#[test]
fn walks_a_stdio_server_one_process_per_session() {
    let plugins = PluginDir::with(&["invoice"]);
    let output = Command::new(turnstile_bin())
        .args([
            "load",
            "--stdio",
            "--sessions",
            "2",
            "--iterations",
            "3",
            "--warmup",
            "0",
        ])
        .arg("--json")
        .arg("--")
        .arg(turnstile_bin())
        .args(["serve", "--stdio", "--plugins"])
        .arg(plugins.path())
        .output()
        .expect("run turnstile load --stdio");
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    let run = Run {
        code: output.status.code().unwrap(),
        report,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert_clean(&run);
    // Session mode: every walk ends the instance, so every walk had a process of its own.
    assert_eq!(run.first()["iterations"], 6);
    assert_eq!(run.first()["setup_ms"]["count"], 6);
}

fn scenario_file(dir: &Path, text: &str) -> String {
    let path = dir.join("scenario.json");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_scenario_runs_exactly_and_a_wrong_expectation_is_a_violation() {
    let (plugins, server) = invoice_server(&["--state-handle-key"]);
    let good = scenario_file(
        plugins.path(),
        r#"{"version": 1,
            "start": [{"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": true}],
            "repeat": [
              {"tool": "invoice.reject", "arguments": {"reason": "load"}, "transition": true},
              {"tool": "invoice.discharge", "arguments": {"reference": "r"}, "expect": "refused"},
              {"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": true}]}"#,
    );
    let args = [
        "--sessions",
        "3",
        "--iterations",
        "10",
        "--warmup",
        "0",
        "--handle-key",
        "handle",
    ];
    let run = load(&server.url, &[&args[..], &["--scenario", &good]].concat());
    assert_clean(&run);
    let first = run.first();
    assert_eq!(first["mode"], "scenario");
    assert_eq!(first["outcomes"]["refused (FORBIDDEN)"], 30, "{first:#}");
    assert_eq!(first["outcomes"]["ok"], 3 + 60, "{first:#}");

    let wrong = scenario_file(
        plugins.path(),
        r#"{"version": 1,
            "start": [{"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": true}],
            "repeat": [{"tool": "invoice.discharge", "arguments": {"reference": "r"}}]}"#,
    );
    let run = load(&server.url, &[&args[..], &["--scenario", &wrong]].concat());
    assert_eq!(run.code, 1, "{:#}", run.report);
    assert_eq!(run.violations()["unexpected_outcome"]["count"], 30);
    let sample = run.violations()["unexpected_outcome"]["samples"][0]
        .as_str()
        .unwrap();
    assert!(
        sample.contains("invoice.discharge") && sample.contains("FORBIDDEN"),
        "{sample}"
    );
}

#[test]
fn open_loop_latency_counts_the_time_calls_waited_to_start() {
    let (plugins, server) = common::start(&["testkit"], &["--store", "memory:"]);
    let slow = scenario_file(
        plugins.path(),
        r#"{"version": 1, "repeat": [{"tool": "testkit.slow", "arguments": {"ms": 100}}]}"#,
    );
    // One client, a call due every 20 ms, each taking at least 100 ms: call k (from 0) is due
    // at 20·k ms but cannot end before 100·(k+1) ms, so its latency is at least 100 + 80·k ms.
    // Measured from when it actually started, every one would be about 100 ms.
    let run = load(
        &server.url,
        &[
            "--scenario",
            &slow,
            "--sessions",
            "1",
            "--iterations",
            "10",
            "--warmup",
            "0",
            "--rate",
            "50",
        ],
    );
    assert_eq!(run.code, 0, "{:#}\n{}", run.report, run.stderr);
    let latency = &run.first()["call_latency_ms"];
    assert_eq!(latency["count"], 10);
    assert_eq!(run.first()["rate"], 50.0);
    // The 5th of 10 (k = 4) and the last (k = 9); less 1 % for the histogram's precision.
    assert!(
        latency["p50"].as_f64().unwrap() >= 420.0 * 0.99,
        "{latency:#}"
    );
    assert!(
        latency["max"].as_f64().unwrap() >= 820.0 * 0.99,
        "{latency:#}"
    );
}

#[test]
fn compare_runs_both_targets_and_prints_ratios() {
    let (_plugins, memory) = invoice_server(&[]);
    let plugins = PluginDir::with(&["invoice"]);
    let embedded = Server::http(plugins.path(), &[]);
    let run = load(
        &memory.url,
        &[
            "--compare",
            &embedded.url,
            "--sessions",
            "2",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--rounds",
            "2",
        ],
    );
    assert_eq!(run.code, 0, "{:#}", run.report);
    let runs = run.report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["target"], embedded.url.as_str());
    assert!(run.report["ratios"]["calls_per_second"].as_f64().unwrap() > 0.0);
}

#[test]
fn usage_and_connection_problems_exit_2() {
    // Nothing listens there (the port of a server that has just been stopped).
    let (_plugins, mut server) = invoice_server(&[]);
    let url = server.url.clone();
    server.kill9();
    let output = Command::new(turnstile_bin())
        .args(["load", &url, "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&url), "the target is named: {stderr}");

    let output = Command::new(turnstile_bin())
        .args(["load", "http://127.0.0.1:9/mcp", "--race"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--handle-key"));
}

/// Every fan-out round: every one of `sessions` sessions heard the transition once, and the
/// delays are in order.
fn assert_every_round_heard_once(run: &Run, sessions: u64, rounds: u64) {
    let first = run.first();
    let measured = first["fanout"]["rounds"]
        .as_array()
        .expect("fan-out rounds");
    assert_eq!(measured.len() as u64, rounds, "{first:#}");
    for round in measured {
        assert_eq!(round["sessions"], sessions, "{round:#}");
        assert_eq!(round["heard_once"], sessions, "{round:#}");
        assert_eq!(round["missing"], 0, "{round:#}");
        assert_eq!(round["extra"], 0, "{round:#}");
        let at = |key: &str| {
            round[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {round:#}"))
        };
        assert!(at("first_ms") <= at("median_ms"), "{round:#}");
        assert!(at("median_ms") <= at("p99_ms"), "{round:#}");
        assert!(at("p99_ms") <= at("last_ms"), "{round:#}");
        assert!(at("result_ms") > 0.0, "{round:#}");
    }
    assert_eq!(first["iterations"], rounds, "{first:#}");
    assert_eq!(first["transitions"], rounds, "{first:#}");
    assert_eq!(
        first["notification_delay_ms"]["count"],
        rounds * sessions,
        "{first:#}"
    );
}

const FANOUT: [&str; 9] = [
    "--fanout",
    "--sessions",
    "5",
    "--iterations",
    "6",
    "--warmup",
    "0",
    "--handle-key",
    "handle",
];

#[test]
fn fans_each_turnstile_transition_out_to_every_session_once() {
    let (_plugins, server) = invoice_server(&["--state-handle-key"]);
    let run = load(&server.url, &FANOUT);
    assert_clean(&run);
    assert_eq!(run.first()["mode"], "fanout");
    assert_every_round_heard_once(&run, 5, 6);
}

#[test]
fn mints_exactly_count_instances_into_turnstiles_store() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::http_in(
        plugins.path(),
        data.path(),
        &["--state-handle-key", "--idle-after", "1"],
    );
    let pid = server.pid().to_string();
    let run = load(
        &server.url,
        &[
            "--mint",
            "150",
            "--sessions",
            "4",
            "--handle-key",
            "handle",
            "--server-pid",
            &pid,
            "--after-mint-wait",
            "30",
        ],
    );
    assert_eq!(run.code, 0, "{:#}\n{}", run.report, run.stderr);
    let first = run.first();
    assert_eq!(first["mode"], "mint");
    let mint = &first["mint"];
    assert_eq!(mint["requested"], 150, "{mint:#}");
    assert_eq!(mint["minted"], 150, "{mint:#}");
    assert_eq!(first["outcomes"]["ok"], 150, "{first:#}");
    assert!(mint["mints_per_second"].as_f64().unwrap() > 0.0, "{mint:#}");
    let memory = &mint["memory"];
    let kib = |key: &str| {
        memory[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {mint:#}"))
    };
    assert!(
        kib("before_kib") > 0 && kib("peak_kib") >= kib("after_mint_kib"),
        "{mint:#}"
    );
    assert!(memory["after_wait_kib"].as_u64().is_some(), "{mint:#}");
    // Turnstile's /stats was read: every instance passivated, and the 1st and 101st came back
    // from the store with the menu they were minted with.
    assert_eq!(mint["passivated"], true, "{mint:#}");
    assert_eq!(mint["sampled"], 2, "{mint:#}");
    assert_eq!(mint["sampled_unchanged"], 2, "{mint:#}");

    // The store holds them: 150 invoices in review, and nothing else.
    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_code_within(Duration::from_secs(10)), Some(0));
    let output = Command::new(turnstile_bin())
        .args(["instances", "--json", "--data-dir"])
        .arg(data.path())
        .args(["list", "--limit", "10000"])
        .output()
        .expect("run turnstile instances list");
    assert!(output.status.success(), "{output:?}");
    let listed: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(listed.len(), 150);
    assert!(
        listed
            .iter()
            .all(|instance| instance["workflow"] == "invoice"),
        "{listed:#?}"
    );
}

/// `tests/python/ticket_server.py MODE`, an MCP server written with the Python SDK; killed on
/// drop.
struct TicketServer {
    child: Child,
    url: String,
}

impl TicketServer {
    fn start(mode: &str) -> TicketServer {
        let mut child = Command::new(python(Sdk::Mcp1))
            .arg(python_file("ticket_server.py"))
            .arg(mode)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start ticket_server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("ticket_server.py prints its endpoint");
        assert!(
            line.starts_with("http://"),
            "ticket_server.py printed {line:?}"
        );
        let server = TicketServer {
            child,
            url: line.trim().to_string(),
        };
        server.wait_until_listening();
        server
    }

    /// The endpoint is printed just before uvicorn starts serving the socket.
    fn wait_until_listening(&self) {
        let address = self.url["http://".len()..]
            .split('/')
            .next()
            .unwrap()
            .to_string();
        eventually_blocking(
            &format!("ticket_server.py never listened on {address}"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || std::net::TcpStream::connect(&address).is_ok(),
        );
    }
}

impl Drop for TicketServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PYTHON_LOAD: [&str; 6] = ["--sessions", "4", "--iterations", "4", "--warmup", "0"];

#[test]
fn walks_an_independent_python_sdk_server_and_reports_no_violation() {
    let server = TicketServer::start("good");
    let run = load(
        &server.url,
        &[&PYTHON_LOAD[..], &["--invalid-rate", "0.2"]].concat(),
    );
    assert_clean(&run);
    // Each walk is start, then log_work until finish: at least two transitions a walk.
    let first = run.first();
    assert_eq!(first["iterations"], 16, "{first:#}");
    assert!(first["transitions"].as_u64().unwrap() >= 32, "{first:#}");
}

#[test]
fn a_server_that_refuses_a_listed_tool_is_caught() {
    let server = TicketServer::start("forbid-listed");
    let run = load(&server.url, &PYTHON_LOAD);
    assert_eq!(run.code, 1, "{:#}", run.report);
    assert_eq!(run.report["exit_code"], 1);
    let refused = &run.violations()["listed_refused"];
    assert!(refused["count"].as_u64().unwrap() > 0, "{:#}", run.report);
    assert!(
        refused["samples"][0]
            .as_str()
            .unwrap()
            .contains("ticket.finish"),
        "{refused:#}"
    );
}

#[test]
fn fans_out_on_an_independent_python_sdk_server() {
    let server = TicketServer::start("handles");
    let run = load(&server.url, &FANOUT);
    assert_clean(&run);
    assert_every_round_heard_once(&run, 5, 6);
}

#[test]
fn a_fan_out_that_skips_a_session_or_notifies_one_twice_is_caught() {
    for (mode, violation, column) in [
        ("handles-skip-one", "missing_list_changed", "missing"),
        ("handles-twice", "extra_list_changed", "extra"),
    ] {
        let server = TicketServer::start(mode);
        let run = load(
            &server.url,
            &[&FANOUT[..], &["--notify-timeout", "0.5"]].concat(),
        );
        assert_eq!(run.code, 1, "{mode}: {:#}", run.report);
        assert_eq!(run.report["exit_code"], 1);
        // One session a round, every round, and nothing else.
        let violations = run.violations().as_object().unwrap();
        assert_eq!(violations.len(), 1, "{mode}: {violations:#?}");
        assert_eq!(violations[violation]["count"], 6, "{mode}: {violations:#?}");
        let sample = violations[violation]["samples"][0].as_str().unwrap();
        assert!(sample.starts_with("fan-out round 1 "), "{sample}");
        for round in run.first()["fanout"]["rounds"].as_array().unwrap() {
            assert_eq!(round[column], 1, "{mode}: {round:#}");
            assert_eq!(round["heard_once"], 4, "{mode}: {round:#}");
        }
    }
}

#[test]
fn a_server_that_notifies_the_wrong_session_is_caught() {
    let server = TicketServer::start("wrong-session");
    let run = load(
        &server.url,
        &[&PYTHON_LOAD[..], &["--notify-timeout", "0.5"]].concat(),
    );
    assert_eq!(run.code, 1, "{:#}", run.report);
    // The sessions that moved their ticket on did not hear it.
    let missing = &run.violations()["missing_list_changed"];
    assert!(missing["count"].as_u64().unwrap() > 0, "{:#}", run.report);
}
