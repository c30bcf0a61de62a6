//! The real `turnstile` binary driven by an independent client: the official Python `mcp` SDK,
//! the 1.x line (`mcp==1.30.0`, protocol 2025-11-25, sessions) and the 2.x line (`mcp==2.3.0`,
//! protocol 2026-07-28, no sessions). The scenarios live in `tests/python/`; each prints a JSON
//! summary, and fails with `FAILED: ...` on the first expectation a user would see broken.
//!
//! The first run creates `target/python/mcp1` and `target/python/mcp2` with
//! `tests/python/setup_venvs.sh` (needs python3 >= 3.10 and PyPI); without them these tests fail,
//! they never skip.

mod common;
mod python_support;

use common::{PluginDir, Server};
use python_support::{Sdk, is_invoice_handle, run_scenario};
use serde_json::{Value, json};

const HANDLE_MODE: &[&str] = &["--state-handle-key"];
const STATELESS: &[&str] = &["--stateless"];

fn invoice_server(flags: &[&str]) -> (PluginDir, Server) {
    let plugins = PluginDir::with(&["invoice"]);
    let server = Server::http(plugins.path(), flags);
    (plugins, server)
}

fn menu(names: &[&str]) -> Value {
    json!(names)
}

/// Scenario 1: No handle flags: the session is the instance. The draft menu, FORBIDDEN for a step
/// out of order, then submit → approve → discharge with a `list_changed` on the GET stream after
/// each.
#[test]
fn mcp1_session_mode_lifecycle_notifies_on_the_get_stream() {
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp1, "session-lifecycle", &mut server);
    assert_eq!(summary["protocol"], "2025-11-25");
    assert_eq!(summary["forbidden"]["code"], "FORBIDDEN");
    assert_eq!(summary["forbidden"]["state"], "draft");
    assert_eq!(summary["list_changed"], 3, "one per transition: {summary}");
    assert_eq!(
        summary["menus"]["draft"],
        menu(&["invoice.status", "invoice.submit"])
    );
    assert_eq!(summary["menus"]["discharged"], menu(&["invoice.status"]));
}

/// Scenario 2: `--state-handle-key`: `invoice.submit` without a handle mints one; reject, submit,
/// approve and discharge by handle; `tools/list` with `_meta.handle` shows that instance's menu;
/// `list_changed` arrives.
#[test]
fn mcp1_handle_mode_mints_and_follows_the_handle() {
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp1, "handle-lifecycle", &mut server);
    assert!(is_invoice_handle(&summary["handle"]), "{summary}");
    assert_eq!(
        summary["menus"]["review"],
        menu(&["invoice.approve", "invoice.reject", "invoice.status"])
    );
    assert_eq!(
        summary["menus"]["approved"],
        menu(&["invoice.discharge", "invoice.status"])
    );
    // The mint (draft → review), then reject, submit, approve and discharge by handle.
    assert_eq!(summary["list_changed"], 5, "{summary}");
    assert_eq!(
        summary["menus"]["draft"],
        menu(&["invoice.status", "invoice.submit"])
    );
}

/// Scenario 3: 2026-07-28 through `mcp.Client`: the same by handle, plus `subscriptions/listen`
/// streams naming the handle in `_meta` (alone, and in a list) that receive `list_changed` on each
/// transition, while one naming another handle hears nothing; `tools/list` is sent `ttlMs: 0`.
#[test]
fn mcp2_handle_mode_listen_by_handle() {
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp2, "handle-lifecycle", &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert!(is_invoice_handle(&summary["handle"]), "{summary}");
    assert_eq!(
        summary["listen_events"],
        json!({"handle": 2, "list": 2, "other": 0})
    );
    assert_eq!(
        summary["menus"]["no handle again"],
        menu(&["invoice.status", "invoice.submit"]),
        "a list without a handle must not be served another instance's menu"
    );
}

/// Scenario 3 against a server started without any handle flag: protocol 2026-07-28 has no
/// sessions, so the server names this client's instances by handle anyway, rather than handing
/// it a fresh throw-away instance on every request.
#[test]
fn mcp2_on_a_session_mode_server_keeps_state_by_handle() {
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp2, "handle-lifecycle", &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert!(is_invoice_handle(&summary["handle"]), "{summary}");
    assert_eq!(
        summary["listen_events"],
        json!({"handle": 2, "list": 2, "other": 0})
    );
}

/// Scenario 4: sessions touch one handle (Alice minted it, Bob listed it, Dave called a tool with
/// it): a transition by any of them notifies all three; Carol, who never touched it, hears nothing.
#[test]
fn mcp1_sessions_sharing_a_handle_are_all_notified() {
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp1, "shared-handle", &mut server);
    assert!(is_invoice_handle(&summary["handle"]), "{summary}");
    assert_eq!(summary["distinct_sessions"], 4);
    // Alice: the mint, approve, discharge; Bob and Dave: approve, discharge; Carol: nothing.
    assert_eq!(
        summary["list_changed"],
        json!({"alice": 3, "bob": 2, "dave": 2, "carol": 0})
    );
}

/// Scenario 5a: `--stateless` with 1.x clients: no `Mcp-Session-Id`, a new connection for every
/// request, and the lifecycle is kept by the handle; forged, malformed and missing handles are
/// refused.
#[test]
fn mcp1_stateless_lifecycle_over_separate_connections() {
    let (_plugins, mut server) = invoice_server(STATELESS);
    let summary = run_scenario(Sdk::Mcp1, "stateless", &mut server);
    assert_eq!(summary["states"], json!(["approved", "discharged"]));
    assert_eq!(
        summary["refusals"],
        json!({
            "forged": "UNKNOWN_HANDLE",
            "forged status": "UNKNOWN_HANDLE",
            "malformed": "INVALID_HANDLE",
            "other workflow": "INVALID_HANDLE",
            "missing": "HANDLE_REQUIRED",
        })
    );
}

/// Scenario 5b: `--stateless` with 2.x clients (`server/discover`, 2026-07-28), a new `mcp.Client`
/// for every request; six independent clients racing for one transition: exactly one wins.
#[test]
fn mcp2_stateless_lifecycle_over_separate_clients() {
    let (_plugins, mut server) = invoice_server(STATELESS);
    let summary = run_scenario(Sdk::Mcp2, "stateless", &mut server);
    assert_eq!(summary["states"], json!(["approved", "discharged"]));
    assert_eq!(
        summary["refusals"],
        json!({
            "forged": "UNKNOWN_HANDLE",
            "malformed": "INVALID_HANDLE",
            "missing": "HANDLE_REQUIRED",
        })
    );
    assert_eq!(summary["race"], json!({"FORBIDDEN": 5, "ok": 1}));
}
