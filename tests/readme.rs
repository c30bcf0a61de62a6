//! What README.md tells a newcomer to run works as it says: `cargo install --path host` gives a
//! `turnstile` that serves the plugins `cargo build` left in the target directory, and the curl
//! tour of a running server (`host/examples/tour.sh`) shows the menu, the change a call makes to
//! it, and a refusal.

mod common;

use std::{path::Path, process::Command};

use common::{PluginDir, Server};

/// README's "Install the binary": `cargo install --path host` installs the binary only; the
/// plugins stay where `cargo build` put them, and `--plugins` names that directory.
#[test]
fn cargo_install_gives_a_binary_that_serves_the_built_plugins() {
    let root = tempfile::tempdir().expect("temp dir");
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `--debug` in the suite's own target directory reuses what the suite built: the install is
    // tested, not a release build of the whole host. In a user's environment, not the one
    // `cargo test` gives a test (`OUT_DIR`, `CARGO_PKG_*`, `LD_LIBRARY_PATH`...): with those,
    // cargo takes what it built for stale and builds the host and half its dependencies again.
    let kept = [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "TMPDIR",
    ];
    let installed = Command::new(env!("CARGO"))
        .env_clear()
        .envs(
            kept.iter()
                .filter_map(|name| Some((name, std::env::var_os(name)?))),
        )
        .args(["install", "--debug", "--locked", "--offline", "--path"])
        .arg(host)
        .arg("--root")
        .arg(root.path())
        .env("CARGO_TARGET_DIR", common::target_dir())
        .output()
        .expect("cargo runs");
    assert!(
        installed.status.success(),
        "{}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let binary = root.path().join("bin/turnstile");
    let bin_dir = std::fs::read_dir(root.path().join("bin"))
        .expect("cargo install made bin/")
        .map(|entry| entry.unwrap().file_name())
        .collect::<Vec<_>>();
    assert_eq!(bin_dir, ["turnstile"], "the binary only, no plugin");

    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--http".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--data-dir".as_ref(),
        data.path().as_os_str(),
    ];
    let server = Server::serve_binary(&binary, &args, &[]);
    let tour = tour(&server.url);
    let stdout = String::from_utf8_lossy(&tour.stdout);
    assert!(tour.status.success(), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("menu now:") && line.contains("invoice.approve")),
        "the installed binary gates: {stdout}"
    );
}

/// Runs the README's curl tour against `url`.
fn tour(url: &str) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tour.sh");
    Command::new("sh")
        .arg(&script)
        .arg(url)
        .output()
        .expect("sh runs")
}

#[test]
fn the_curl_tour_shows_the_menu_change_and_a_refusal() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = Server::http(plugins.path(), &["--store", "memory:"]);
    let output = tour(&server.url);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |label: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .unwrap_or_else(|| panic!("no `{label}` line in:\n{stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(line("menu:"), ["invoice.submit", "invoice.status"]);
    assert_eq!(line("told:"), ["notifications/tools/list_changed"]);
    assert_eq!(
        line("menu now:"),
        ["invoice.approve", "invoice.reject", "invoice.status"]
    );
    assert_eq!(line("refused:"), ["\"code\":\"FORBIDDEN\""]);
}

#[test]
fn the_tour_says_so_when_nothing_serves_the_url() {
    assert!(!tour("http://127.0.0.1:9/mcp").status.success());
}
