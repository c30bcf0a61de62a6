//! What README.md tells a newcomer to run works as it says: the curl tour of a running server
//! (`host/examples/tour.sh`) shows the menu, the change a call makes to it, and a refusal.

mod common;

use std::{path::Path, process::Command};

use common::{PluginDir, Server};

#[test]
fn the_curl_tour_shows_the_menu_change_and_a_refusal() {
    let plugins = PluginDir::with(&["invoice"]);
    let server = Server::http(plugins.path(), &["--store", "memory:"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tour.sh");
    let output = Command::new("sh")
        .arg(&script)
        .arg(&server.url)
        .output()
        .expect("sh runs");
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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tour.sh");
    let output = Command::new("sh")
        .arg(&script)
        .arg("http://127.0.0.1:9/mcp")
        .output()
        .expect("sh runs");
    assert!(!output.status.success());
}
