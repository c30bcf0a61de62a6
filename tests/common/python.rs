//! Runs the Python client scenarios in `tests/python/` (the official `mcp` SDK, 1.x and 2.x)
//! against a running `turnstile` and returns their JSON summaries.
//!
//! The virtual environments are made once per machine by `tests/python/setup_venvs.sh` under
//! `<target>/python/`; the first test to need them creates them (serialized in-process by a
//! `OnceLock`, across processes by a file lock), later runs reuse them. Nothing here skips: a
//! missing Python or an unreachable PyPI fails the test with the script's own explanation.

use std::{
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use serde_json::Value;

use super::{Server, poll_blocking, target_dir, turnstile_bin};

/// How long one scenario may run before it is killed and the test fails.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);
/// How long creating both virtual environments may take (two `pip install`s).
const SETUP_TIMEOUT: Duration = Duration::from_secs(600);

/// Which line of the Python `mcp` SDK drives the server.
#[derive(Clone, Copy, Debug)]
pub enum Sdk {
    /// `mcp==1.30.0`: protocol 2025-11-25, `initialize`, sessions and the GET event stream.
    Mcp1,
    /// `mcp==2.3.0`: protocol 2026-07-28, `server/discover`, no sessions, `subscriptions/listen`.
    Mcp2,
}

impl Sdk {
    fn venv(self) -> &'static str {
        match self {
            Sdk::Mcp1 => "mcp1",
            Sdk::Mcp2 => "mcp2",
        }
    }

    fn script(self) -> &'static str {
        match self {
            Sdk::Mcp1 => "mcp1_client.py",
            Sdk::Mcp2 => "mcp2_client.py",
        }
    }

    /// The `sdk` field a summary from this line reports: `mcp <the version pinned in
    /// tests/python/requirements-<venv>.txt>`.
    pub fn reported(self) -> String {
        let path = python_dir().join(format!("requirements-{}.txt", self.venv()));
        let requirements = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let pinned = requirements
            .lines()
            .find_map(|line| line.trim().strip_prefix("mcp=="))
            .unwrap_or_else(|| panic!("{} pins no `mcp==VERSION`", path.display()));
        format!("mcp {pinned}")
    }
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python")
}

/// Creates the virtual environments if needed; returns the directory that holds them.
fn venvs() -> &'static Path {
    static VENVS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let result = VENVS.get_or_init(|| {
        let target = target_dir();
        let root = target.join("python");
        std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
        // Another test process (a parallel `cargo test`) may be creating them right now.
        let lock_path = root.join(".setup.lock");
        let lock =
            File::create(&lock_path).map_err(|e| format!("create {}: {e}", lock_path.display()))?;
        lock.lock()
            .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;
        let mut command = Command::new("bash");
        command
            .arg(python_dir().join("setup_venvs.sh"))
            .arg(&target);
        let output = run_with_timeout(command, SETUP_TIMEOUT)?;
        drop(lock);
        if output.status != Some(0) {
            return Err(format!(
                "tests/python/setup_venvs.sh {} failed ({}): the Python client tests need python3 \
                 (>= 3.10, with venv) and PyPI to install mcp==1.30.0 and mcp==2.3.0.\n\
                 --- stdout ---\n{}\n--- stderr ---\n{}",
                target.display(),
                output.describe_status(),
                output.stdout,
                output.stderr
            ));
        }
        Ok(root)
    });
    match result {
        Ok(root) => root,
        Err(message) => panic!("{message}"),
    }
}

/// The Python interpreter of the SDK's virtual environment (made first if needed), and the path
/// of a file in `tests/python/`: for tests that run Python programs other than the client
/// scenarios (such as `ticket_server.py`, an independent MCP server).
pub fn python(sdk: Sdk) -> PathBuf {
    venvs().join(sdk.venv()).join("bin/python")
}

pub fn python_file(name: &str) -> PathBuf {
    python_dir().join(name)
}

/// Runs `tests/python/<script> SCENARIO URL` with the SDK's virtual environment against
/// `server`, and returns the JSON summary it printed. Panics, with the script's stderr and the
/// server's log, if the script fails an expectation, crashes or times out, or if the server is
/// no longer running afterwards.
pub fn run_scenario(sdk: Sdk, scenario: &str, server: &mut Server) -> Value {
    let url = server.url.clone();
    run(sdk, scenario, &url, Some(server))
}

/// Runs a scenario over stdio: the script's SDK starts `turnstile ARGS...` itself, as its child,
/// for each connection it opens (the target is `stdio:` and the command line as a JSON list).
/// Such a server's log is the scenario's to report (`server_logs` in the summary).
pub fn run_scenario_over_stdio(sdk: Sdk, scenario: &str, args: &[&str]) -> Value {
    let mut command = vec![turnstile_bin().to_string_lossy().into_owned()];
    command.extend(args.iter().map(|arg| (*arg).to_owned()));
    let target = format!("stdio:{}", serde_json::json!(command));
    run(sdk, scenario, &target, None)
}

fn run(sdk: Sdk, scenario: &str, target: &str, mut server: Option<&mut Server>) -> Value {
    let python = venvs().join(sdk.venv()).join("bin/python");
    let mut command = Command::new(&python);
    command
        .arg(python_dir().join(sdk.script()))
        .arg(scenario)
        .arg(target)
        // Unbuffered, so a killed script still shows how far it got.
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let output = match run_with_timeout(command, SCENARIO_TIMEOUT) {
        Ok(output) => output,
        Err(message) => panic!("{message}"),
    };
    let server_running = server.as_mut().is_none_or(|server| server.is_running());
    let server_log = server
        .as_ref()
        .map(|server| tail(&server.stderr(), 80))
        .unwrap_or_else(|| "(over stdio: the scenario's own)".to_owned());
    let failure = |why: &str| -> String {
        format!(
            "{} {} {scenario} {target}: {why}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server \
             log (last 80 lines) ---\n{server_log}",
            python.display(),
            sdk.script(),
            output.stdout,
            output.stderr,
        )
    };
    if output.status != Some(0) {
        let why = output
            .stderr
            .lines()
            .rev()
            .find(|line| line.starts_with("FAILED:"))
            .map(str::to_string)
            .unwrap_or_else(|| format!("the script {}", output.describe_status()));
        panic!("{}", failure(&why));
    }
    let Some(line) = output.stdout.lines().rev().find(|l| !l.trim().is_empty()) else {
        panic!("{}", failure("the script printed no JSON summary"));
    };
    let summary: Value = match serde_json::from_str(line) {
        Ok(summary) => summary,
        Err(error) => panic!("{}", failure(&format!("its summary is not JSON: {error}"))),
    };
    assert_eq!(
        summary["ok"],
        true,
        "{}",
        failure("summary without ok: true")
    );
    assert!(
        server_running,
        "{}",
        failure("the server exited during the scenario")
    );
    assert_eq!(summary["scenario"], scenario, "summary of another scenario");
    assert_eq!(
        summary["sdk"],
        sdk.reported().as_str(),
        "the venv has another SDK version"
    );
    summary
}

/// What a finished (or killed) child process left.
pub struct Output {
    /// The exit code; `None` if killed by a signal or by the timeout.
    pub status: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn describe_status(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "timed out and was killed".to_string(),
            (false, Some(code)) => format!("exited with code {code}"),
            (false, None) => "was killed by a signal".to_string(),
        }
    }
}

/// Runs a command to completion, killing it after `timeout`; stdout and stderr are collected.
pub fn run_with_timeout(mut command: Command, timeout: Duration) -> Result<Output, String> {
    let program = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let finished = poll_blocking(timeout, Duration::from_millis(20), || {
        child.try_wait().transpose()
    });
    let timed_out = finished.is_err();
    let status = match finished {
        Ok(status) => status,
        Err(_) => {
            let _ = child.kill();
            child.wait()
        }
    }
    .map_err(|e| format!("wait {program}: {e}"))?;
    Ok(Output {
        status: if timed_out { None } else { status.code() },
        timed_out,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether `value` is a handle as the server mints them: `invoice-` and 32 lowercase hex digits.
pub fn is_invoice_handle(value: &Value) -> bool {
    value.as_str().is_some_and(|s| {
        s.strip_prefix("invoice-").is_some_and(|hex| {
            hex.len() == 32
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
    })
}
