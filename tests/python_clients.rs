//! The real `turnstile` binary driven by an independent client: the official Python `mcp` SDK,
//! the 1.x line (`mcp==1.30.0`, protocol 2025-11-25, sessions) and the 2.x line (`mcp==2.3.0`,
//! protocol 2026-07-28, no sessions). The scenarios live in `tests/python/`; each prints a JSON
//! summary, and fails with `FAILED: ...` on the first expectation a user would see broken.
//!
//! Every test also asserts that the SDK printed no warning (the scripts report their stderr in
//! the summary, log records with their level first): a user would see it, e.g. mcp 1.x/2.x log
//! "Session termination failed: 202" on close when `DELETE` is not answered 200 or 204.
//!
//! Scenarios 8 show prompts and resources (issue 15) as the SDK sees them, over Streamable HTTP
//! and over stdio (the SDK starting `turnstile serve --stdio` itself).
//!
//! The first run creates `target/python/mcp1` and `target/python/mcp2` with
//! `tests/python/setup_venvs.sh` (needs python3 >= 3.10 and PyPI); without them these tests fail,
//! they never skip.

mod common;

use common::python::{Sdk, is_invoice_handle, run_scenario, run_scenario_over_stdio};
use common::{PluginDir, Server, TokenFile};
use serde_json::{Value, json};
use std::time::Duration;

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

/// The lines of the SDK's stderr (from the summary) a user would read as a warning or a failure.
fn warnings(summary: &Value) -> Vec<String> {
    let lines = summary["stderr"]
        .as_array()
        .unwrap_or_else(|| panic!("the summary reports no stderr: {summary}"));
    lines
        .iter()
        .filter_map(Value::as_str)
        .filter(|line| {
            let lower = line.to_lowercase();
            lower.contains("warning") || lower.contains("failed") || lower.contains("error")
        })
        .map(str::to_string)
        .collect()
}

/// Asserts the SDK printed nothing a user would read as a warning, on close or before.
fn assert_no_sdk_warnings(summary: &Value) {
    let warnings = warnings(summary);
    assert!(
        warnings.is_empty(),
        "the SDK printed warnings: {warnings:#?}\nall of its stderr: {:#?}",
        summary["stderr"]
    );
}

/// Finding, not a server fault: both SDKs validate a tool result against the output schema from
/// their last `tools/list`, and when the called tool is not on it they list again, without
/// `_meta`, and log "Tool <name> not listed by server, cannot validate any structured content"
/// (2.x also forgets every tool a complete listing left out). In handle mode a plain list shows
/// only the starting tools, so a client that calls a tool by handle without first listing that
/// handle's menu sees this warning, and its result goes unchecked. Scenarios that do so
/// deliberately (a new connection per request) may print exactly this; nothing else, and never
/// a warning on close.
fn assert_only_unlisted_tool_warnings(summary: &Value) {
    let unexpected: Vec<String> = warnings(summary)
        .into_iter()
        .filter(|line| {
            // `WARNING <logger>: <message>`, as the scripts' logging writes it.
            let message = line
                .split_once(": ")
                .map_or(line.as_str(), |(_, message)| message);
            !(line.starts_with("WARNING ")
                && message.starts_with("Tool invoice.")
                && message
                    .ends_with(" not listed by server, cannot validate any structured content"))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "the SDK printed warnings: {unexpected:#?}\nall of its stderr: {:#?}",
        summary["stderr"]
    );
}

/// The server's WARN and ERROR log lines.
fn server_problems(server: &Server) -> Vec<String> {
    problems_in(&server.stderr())
}

/// The WARN and ERROR lines of a server's log.
fn problems_in(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|level| level == "WARN" || level == "ERROR")
        })
        .map(str::to_string)
        .collect()
}

/// Asserts the server logged no WARN or ERROR line, after giving it a moment to log what the
/// client's last hang-up caused.
fn assert_quiet_server_log(server: &Server) {
    std::thread::sleep(Duration::from_millis(300));
    let problems = server_problems(server);
    assert!(
        problems.is_empty(),
        "the server logged problems: {problems:#?}"
    );
}

/// The steps a model-style agent took: `(invoice, tool, arguments)` with handles as `<A>`, `<B>`.
fn model_steps(summary: &Value) -> Vec<(String, String, Value)> {
    summary["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps: {summary}"))
        .iter()
        .map(|step| {
            (
                step["invoice"].as_str().unwrap_or_default().to_string(),
                step["tool"].as_str().unwrap_or_default().to_string(),
                step["arguments"].clone(),
            )
        })
        .collect()
}

/// `field` of each of the summary's `steps`, in order.
fn step_field<'a>(summary: &'a Value, field: &str) -> Vec<&'a Value> {
    let steps = summary["steps"].as_array().expect("the summary's steps");
    steps.iter().map(|step| &step[field]).collect()
}

/// What the model-style agent must have sent, built from the listed schemas alone: the handle it
/// holds (none before the mint), `amount`, a placeholder for the required `reason`, and nothing
/// the schema does not declare (`customer`, `note` and `reference` are optional: left out).
fn assert_model_lifecycle(summary: &Value) {
    let placeholder = "as discussed with the customer";
    let expected = [
        ("A", "invoice.submit", json!({"amount": 120.5})),
        ("B", "invoice.submit", json!({"amount": 80})),
        ("A", "invoice.approve", json!({"handle": "<A>"})),
        (
            "B",
            "invoice.reject",
            json!({"handle": "<B>", "reason": placeholder}),
        ),
        (
            "B",
            "invoice.submit",
            json!({"amount": 80, "handle": "<B>"}),
        ),
        ("B", "invoice.approve", json!({"handle": "<B>"})),
        ("A", "invoice.discharge", json!({"handle": "<A>"})),
        ("B", "invoice.discharge", json!({"handle": "<B>"})),
    ]
    .map(|(invoice, tool, arguments)| (invoice.to_string(), tool.to_string(), arguments));
    assert_eq!(model_steps(summary), expected, "{summary}");
    let states: Vec<&Value> = summary["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| &step["state"])
        .collect();
    assert_eq!(
        json!(states),
        json!([
            "review",
            "review",
            "approved",
            "draft",
            "review",
            "approved",
            "discharged",
            "discharged"
        ])
    );
    assert_eq!(
        summary["final"],
        json!({"A": "discharged", "B": "discharged"})
    );
    let handles = &summary["handles"];
    assert!(is_invoice_handle(&handles["A"]), "{summary}");
    assert!(is_invoice_handle(&handles["B"]), "{summary}");
    assert_ne!(handles["A"], handles["B"]);
    // The property the agent recognised by its description ("... workflow instance ...") is the
    // default key, and every listed tool declares it: required except on the starting tool.
    assert_eq!(summary["handle_property"], "handle");
    assert_eq!(
        summary["schemas"],
        json!({
            "invoice.approve": "required",
            "invoice.discharge": "required",
            "invoice.reject": "required",
            "invoice.status": "required",
            "invoice.submit": "optional",
        })
    );
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
    assert_no_sdk_warnings(&summary);
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
    assert_no_sdk_warnings(&summary);
}

/// Scenario 3: 2026-07-28 through `mcp.Client`: the same by handle, plus `subscriptions/listen`
/// streams naming the handle in `_meta` (alone, and in a list) that receive `list_changed` on each
/// transition, while one naming another handle hears nothing; `tools/list` is sent `ttlMs: 0`.
#[test]
fn mcp2_handle_mode_listen_by_handle() {
    // Deliberately parallel to `mcp1_handle_mode_mints_and_follows_the_handle`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
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
    // It calls `invoice.approve` right after a list without a handle: see the finding.
    assert_only_unlisted_tool_warnings(&summary);
}

/// Scenario 3 against a server started without any handle flag: protocol 2026-07-28 has no
/// sessions, so the server names this client's instances by handle anyway, rather than handing
/// it a fresh throw-away instance on every request.
#[test]
fn mcp2_on_a_session_mode_server_keeps_state_by_handle() {
    // Deliberately parallel to `mcp2_handle_mode_listen_by_handle`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp2, "handle-lifecycle", &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert!(is_invoice_handle(&summary["handle"]), "{summary}");
    assert_eq!(
        summary["listen_events"],
        json!({"handle": 2, "list": 2, "other": 0})
    );
    assert_only_unlisted_tool_warnings(&summary);
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
    // Erin's session ended with a DELETE: no "Session termination failed".
    assert_no_sdk_warnings(&summary);
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
    // Each call is made on a new connection that never listed the handle: see the finding.
    assert_only_unlisted_tool_warnings(&summary);
}

/// Scenario 5b: `--stateless` with 2.x clients (`server/discover`, 2026-07-28), a new `mcp.Client`
/// for every request; six independent clients racing for one transition: exactly one wins.
#[test]
fn mcp2_stateless_lifecycle_over_separate_clients() {
    // Deliberately parallel to `mcp1_stateless_lifecycle_over_separate_connections`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
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
    // Each call is made by a new client that never listed the handle: see the finding.
    assert_only_unlisted_tool_warnings(&summary);
}

/// Scenario 6a: a model-style agent on 2025-11-25 (one session, `_meta` never sent). Every call is
/// built from the `tools/list` schemas alone; two invoices go through their lifecycles
/// interleaved (submit A, submit B, approve A, reject B, submit B, approve B, discharge A,
/// discharge B). A plain list shows the union of the menus of the session's instances plus the
/// starting tools; each transition of either invoice is announced on the GET stream.
#[test]
fn mcp1_model_client_drives_two_invoices_from_the_schemas_alone() {
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp1, "model-client", &mut server);
    assert_eq!(summary["protocol"], "2025-11-25");
    assert_model_lifecycle(&summary);
    let menus = step_field(&summary, "menu");
    let all_but_status = [
        "invoice.approve",
        "invoice.discharge",
        "invoice.reject",
        "invoice.status",
        "invoice.submit",
    ];
    let review = [
        "invoice.approve",
        "invoice.reject",
        "invoice.status",
        "invoice.submit",
    ];
    let approved = ["invoice.discharge", "invoice.status", "invoice.submit"];
    assert_eq!(
        json!(menus),
        json!([
            review,                               // A review
            review,                               // A, B review
            all_but_status,                       // A approved, B review
            approved,                             // A approved, B draft
            all_but_status,                       // A approved, B review
            approved,                             // A, B approved
            approved,                             // A discharged, B approved
            ["invoice.status", "invoice.submit"], // both discharged: the starting tools
        ]),
        "the plain tools/list after each step"
    );
    assert_eq!(summary["list_changed"], 8, "one per transition: {summary}");
    assert_no_sdk_warnings(&summary);
    assert_quiet_server_log(&server);
}

/// Scenario 6b: the same agent on 2026-07-28 (`mcp.Client`, no session): it names the handle of
/// the invoice it acts on in `_meta` of `tools/list` (none before the mint: the starting tools)
/// and passes it in the arguments, as the schema says. A list naming both handles shows the
/// union of their menus, without the starting tools.
#[test]
fn mcp2_model_client_names_its_handles_in_meta() {
    // Deliberately parallel to `mcp1_model_client_drives_two_invoices_from_the_schemas_alone`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp2, "model-client", &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert_model_lifecycle(&summary);
    let menus = step_field(&summary, "menu of all handles");
    let review = ["invoice.approve", "invoice.reject", "invoice.status"];
    let approved_review = [
        "invoice.approve",
        "invoice.discharge",
        "invoice.reject",
        "invoice.status",
    ];
    let approved = ["invoice.discharge", "invoice.status"];
    assert_eq!(
        json!(menus),
        json!([
            review,                                                    // A review (B not held yet)
            review,                                                    // A, B review
            approved_review,                                           // A approved, B review
            ["invoice.discharge", "invoice.status", "invoice.submit"], // A approved, B draft
            approved_review,                                           // A approved, B review
            approved,                                                  // A, B approved
            approved,                                                  // A discharged, B approved
            ["invoice.status"],                                        // both discharged
        ]),
        "tools/list with _meta naming every handle held, after each step"
    );
    assert_no_sdk_warnings(&summary);
    assert_quiet_server_log(&server);
}

/// Scenario 7: `Client.listen(tools_list_changed=True)` without a handle stays open 30 s: the
/// server neither ends it nor drops it, the client can still make requests beside it, and when
/// the client closes it, neither side complains. No `list_changed` arrives: without a handle the
/// listen covers the catalog, and nothing changes the plugin directory during this test
/// (`hot_plugins.rs` shows such a listen hearing of a plugin dropped in).
#[test]
fn mcp2_listen_without_a_handle_stays_open_until_the_client_closes_it() {
    const SECONDS: u32 = 30;
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp2, &format!("listen-idle:{SECONDS}"), &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert_eq!(summary["ended_by_server"], Value::Null, "{summary}");
    assert!(
        summary["open_seconds"]
            .as_f64()
            .is_some_and(|open| open >= f64::from(SECONDS)),
        "{summary}"
    );
    assert_eq!(summary["events"], 0);
    assert_no_sdk_warnings(&summary);
    assert_quiet_server_log(&server);
}

// --- Prompts and resources (issue 15), as the official SDK sees them ---------------------------

const CHECKLIST: &str = "invoice.review_checklist";
const INVOICE_TEMPLATE: &str = "invoice://{handle}";

/// The three lists a client reads for prompts and resources, as a scenario reports them.
/// What one invoice is offered of prompts, resources and templates; the host's template of
/// invoice instances is offered in every state, beside the plugin's `templates`.
fn offer(prompts: &[&str], resources: &[&str], templates: &[&str]) -> Value {
    let mut templates = templates.to_vec();
    templates.push(HOST_TEMPLATE);
    templates.sort();
    json!({"prompts": prompts, "resources": resources, "templates": templates})
}

/// The host's own resource template of invoice instances (issue 37).
const HOST_TEMPLATE: &str = "turnstile://invoice/{handle}";

/// The `data` of a `prompts/get` or `resources/read` refused out of its state (always with
/// JSON-RPC -32602, which the scenarios check): nothing of that kind is available in the states
/// the invoice is refused in.
fn forbidden(kind: &str, name: &str, state: &str) -> Value {
    json!({"code": "FORBIDDEN", "kind": kind, "name": name, "workflow": "invoice",
        "state": state, "available": []})
}

/// What a get of the checklist and a read of the invoice (`uri`) answered in `state`.
fn served(state: &str, uri: &str) -> Value {
    let prompt = if state == "review" {
        json!("served")
    } else {
        forbidden("prompt", CHECKLIST, state)
    };
    let resource = if state == "draft" {
        forbidden("resource", uri, state)
    } else {
        json!(state)
    };
    json!({"state": state, "prompt": prompt, "resource": resource})
}

/// The notifications a session had received after each step, per kind.
fn notices(counts: &[[u64; 4]]) -> Value {
    json!(
        counts
            .iter()
            .map(
                |[tools, prompts, resources, updated]| json!({"tools": tools, "prompts": prompts,
                "resources": resources, "updated": updated})
            )
            .collect::<Vec<_>>()
    )
}

/// The session-mode scenario's summary, over HTTP or stdio: Alice's invoice goes submit, reject,
/// submit, approve, discharge; Bob's stays a draft.
fn assert_session_primitives(summary: &Value) {
    let uri = "invoice://session";
    let nothing = offer(&[], &[], &[]);
    assert_eq!(summary["protocol"], "2025-11-25");
    assert_eq!(
        summary["views"],
        json!({
            "draft": nothing,
            "review": offer(&[CHECKLIST], &[uri], &[INVOICE_TEMPLATE]),
            "approved": offer(&[], &[uri], &[INVOICE_TEMPLATE]),
            "discharged": offer(&[], &[uri], &[INVOICE_TEMPLATE]),
        })
    );
    let draft_refusals = json!({
        "prompt in draft": forbidden("prompt", CHECKLIST, "draft"),
        "resource in draft": forbidden("resource", uri, "draft"),
        "bob's prompt": forbidden("prompt", CHECKLIST, "draft"),
        "bob's resource": forbidden("resource", uri, "draft"),
    });
    assert_eq!(summary["refusals"], draft_refusals);
    let states = ["review", "draft", "review", "approved", "discharged"];
    assert_eq!(
        summary["served"],
        json!(states.map(|state| served(state, uri))),
        "the checklist and the invoice after each step"
    );
    // tools, prompts, resources list_changed, resources/updated: each list's notification comes
    // exactly when a transition changed that list (approve keeps the invoice, drops the
    // checklist; discharge changes neither).
    assert_eq!(
        summary["notices"],
        notices(&[
            [1, 1, 1, 0],
            [2, 2, 2, 0],
            [3, 3, 3, 0],
            [4, 4, 3, 0],
            [5, 4, 3, 0]
        ]),
        "notifications after submit, reject, submit, approve, discharge"
    );
    assert_eq!(
        summary["bob"],
        json!({"tools": 0, "prompts": 0, "resources": 0, "updated": 0}),
        "the session whose invoice never moved hears nothing"
    );
    assert_no_sdk_warnings(summary);
}

/// Asserts a scenario started `servers` servers over stdio, whose logs it captured, and that
/// none logged a WARN or ERROR line.
fn assert_quiet_stdio_servers(summary: &Value, servers: usize) {
    let logs = summary["server_logs"]
        .as_array()
        .unwrap_or_else(|| panic!("no server logs: {summary}"));
    assert_eq!(logs.len(), servers, "servers started over stdio");
    for log in logs {
        let log = log.as_str().unwrap_or_default();
        // The log was captured, so that no problems in it means something.
        assert!(log.contains("plugin loaded"), "{log}");
        let problems = problems_in(log);
        assert!(
            problems.is_empty(),
            "a stdio server logged problems: {problems:#?}"
        );
    }
}

/// The arguments of `turnstile serve --stdio` for the invoice plugin in `plugins`.
fn stdio_server<'a>(plugins: &'a PluginDir, extra: &[&'a str]) -> Vec<&'a str> {
    let directory = plugins.path().to_str().expect("a UTF-8 temporary path");
    let mut args = common::STDIO_SERVE.to_vec();
    args.push(directory);
    args.extend_from_slice(extra);
    args
}

/// Scenario 8a: session mode, 2025-11-25 over Streamable HTTP. `prompts/list`, `resources/list`
/// and `resources/templates/list` show exactly what the session's invoice is offered in each
/// state; `prompts/get` and `resources/read` out of state are JSON-RPC -32602 with FORBIDDEN,
/// the state and what is available, and in state return the checklist (with the submitted
/// amount) and the invoice; each `prompts/` and `resources/list_changed` arrives on the GET
/// stream exactly when a transition changed that list, and never to another session.
#[test]
fn mcp1_session_mode_prompts_and_resources_follow_the_state() {
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp1, "primitives-session", &mut server);
    assert_session_primitives(&summary);
    assert_eq!(
        summary["server_logs"],
        json!([]),
        "no server started over stdio"
    );
    assert_quiet_server_log(&server);
}

/// Scenario 8a over stdio: the SDK's stdio client starts `turnstile serve --stdio` itself (one
/// server per connection, so Bob's is his own); the process is the session.
#[test]
fn mcp1_over_stdio_prompts_and_resources_follow_the_state() {
    // Deliberately parallel to `mcp1_session_mode_prompts_and_resources_follow_the_state`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
    let plugins = PluginDir::with(&["invoice"]);
    let args = stdio_server(&plugins, &[]);
    let summary = run_scenario_over_stdio(Sdk::Mcp1, "primitives-session", &args);
    assert_session_primitives(&summary);
    assert_quiet_stdio_servers(&summary, 2);
}

/// Scenario 8b: handle mode with authentication, 2025-11-25. Alice's session, which minted the
/// invoice, is offered `invoice://<handle>` and the checklist, with `_meta.handle` and without;
/// `resources/subscribe` on the invoice delivers `resources/updated` naming it once per
/// transition. Carol, another principal, is offered what a new invoice is (nothing), is refused
/// the checklist in `draft`, hears nothing, and naming Alice's handle gets exactly the answers a
/// handle nobody minted gets.
#[test]
fn mcp1_handle_mode_instance_resource_is_listed_read_and_updated_by_its_owner_only() {
    let plugins = PluginDir::with(&["invoice"]);
    let tokens = TokenFile::with("alice tok-alice\ncarol tok-carol\n");
    let mut server = Server::http(
        plugins.path(),
        &["--auth-token-file", tokens.arg(), "--state-handle-key"],
    );
    let summary = run_scenario(
        Sdk::Mcp1,
        "primitives-handles:tok-alice,tok-carol",
        &mut server,
    );
    let handle = summary["handle"].clone();
    assert!(is_invoice_handle(&handle), "{summary}");
    let uri = format!("invoice://{}", handle.as_str().unwrap());
    let uri = uri.as_str();
    let nothing = offer(&[], &[], &[]);
    let review = offer(&[CHECKLIST], &[uri], &[INVOICE_TEMPLATE]);
    let later = offer(&[], &[uri], &[INVOICE_TEMPLATE]);
    assert_eq!(
        summary["views"],
        json!({
            "carol before": nothing,
            "review by handle": review,
            "review, touched": review,
            "approved": later,
            "discharged": later,
            "carol after": nothing,
        })
    );
    assert_eq!(
        summary["served"],
        json!({"prompt by handle": "served", "resource": "review",
            "approved": "approved", "discharged": "discharged"})
    );
    let refusals = &summary["refusals"];
    assert_eq!(
        refusals["carol's prompt"],
        forbidden("prompt", CHECKLIST, "draft")
    );
    // Carol naming Alice's handle: MCP's "resource not found" for the resource (naming the URI
    // she asked for), invalid params for a listing or a get by `_meta`; and in every case exactly
    // what a handle nobody minted gets, so she cannot tell that Alice's exists.
    let not_found = json!({"code": -32002, "uri": "<the uri>"});
    assert_eq!(refusals["read alice's"], not_found);
    assert_eq!(refusals["subscribe alice's"], not_found);
    assert_eq!(refusals["list prompts alice's"]["code"], -32602);
    assert_eq!(refusals["get prompt alice's"]["code"], -32602);
    for what in ["read", "subscribe", "list prompts", "get prompt"] {
        assert_eq!(
            refusals[format!("{what} alice's")],
            refusals[format!("{what} never minted")],
            "{what}: another principal's handle is answered as one nobody minted"
        );
    }
    assert_eq!(
        summary["notices"],
        notices(&[[1, 1, 1, 0], [2, 2, 1, 1], [3, 2, 1, 2]]),
        "notifications after the mint, approve and discharge"
    );
    assert_eq!(
        summary["carol"],
        json!({"tools": 0, "prompts": 0, "resources": 0, "updated": 0})
    );
    assert_no_sdk_warnings(&summary);
    assert_quiet_server_log(&server);
}

/// Scenario 8c: 2026-07-28 through `mcp.Client` (no sessions, handle mode). Without a handle the
/// client is offered what a new invoice is; with `_meta.handle` the three lists, the checklist
/// and `invoice://<handle>` follow the invoice through reject, submit, approve and discharge
/// (a plain list after one naming the handle is not served from the SDK's cache); a
/// `subscriptions/listen` naming the handle hears each list's `list_changed` exactly when a
/// transition changed it, one naming another handle hears nothing.
#[test]
fn mcp2_prompts_and_resources_follow_the_handle() {
    // Deliberately parallel to `mcp1_handle_mode_instance_resource_is_listed_read_and_updated_by_its_owner_only`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp2, "primitives", &mut server);
    assert_handle_primitives(&summary, Transport::Http);
    assert_eq!(
        summary["server_logs"],
        json!([]),
        "no server started over stdio"
    );
    assert_quiet_server_log(&server);
}

/// Scenario 8c over stdio: `mcp.Client` starts `turnstile serve --stdio --state-handle-key`
/// itself (one server per client, so the other client's is its own).
#[test]
fn mcp2_over_stdio_prompts_and_resources_follow_the_handle() {
    // Deliberately parallel to `mcp2_prompts_and_resources_follow_the_handle`: each SDK line and transport is asserted
    // as its own user sees it, in its own words.
    let plugins = PluginDir::with(&["invoice"]);
    let args = stdio_server(&plugins, HANDLE_MODE);
    let summary = run_scenario_over_stdio(Sdk::Mcp2, "primitives", &args);
    assert_handle_primitives(&summary, Transport::Stdio);
    assert_quiet_stdio_servers(&summary, 2);
}

/// How a scenario reached the server.
#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Http,
    Stdio,
}

/// The 2026-07-28 scenario's summary, over HTTP or stdio: the invoice goes reject, submit,
/// approve, discharge by handle. A list without a handle after the mint is about a new invoice
/// over HTTP (no session); over stdio the process is a session, which touched the invoice.
fn assert_handle_primitives(summary: &Value, transport: Transport) {
    assert_eq!(summary["protocol"], "2026-07-28");
    let handle = summary["handle"].clone();
    assert!(is_invoice_handle(&handle), "{summary}");
    let uri = format!("invoice://{}", handle.as_str().unwrap());
    let uri = uri.as_str();
    let nothing = offer(&[], &[], &[]);
    let review = offer(&[CHECKLIST], &[uri], &[INVOICE_TEMPLATE]);
    let later = offer(&[], &[uri], &[INVOICE_TEMPLATE]);
    let no_handle_again = match transport {
        Transport::Http => &nothing,
        Transport::Stdio => &review,
    };
    assert_eq!(
        summary["views"],
        json!({
            "no handle": nothing,
            "review": review,
            "no handle again": no_handle_again,
            "draft": nothing,
            "approved": later,
            "discharged": later,
        })
    );
    assert_eq!(
        summary["refusals"],
        json!({"prompt without a handle": forbidden("prompt", CHECKLIST, "draft")})
    );
    let states = ["review", "draft", "review", "approved", "discharged"];
    assert_eq!(
        summary["served"],
        json!(states.map(|state| served(state, uri))),
        "the checklist and the invoice in review, then after each step"
    );
    let listened = |counts: &[[u64; 3]]| {
        json!(
            counts
                .iter()
                .map(
                    |[tools, prompts, resources]| json!({"tools": tools, "prompts": prompts,
                    "resources": resources})
                )
                .collect::<Vec<_>>()
        )
    };
    assert_eq!(
        summary["notices"],
        listened(&[[1, 1, 1], [2, 2, 2], [3, 3, 2], [4, 3, 2]]),
        "list_changed events on the listen after reject, submit, approve, discharge"
    );
    assert_eq!(
        summary["other"],
        json!({"tools": 0, "prompts": 0, "resources": 0})
    );
    assert_no_sdk_warnings(summary);
}

/// Scenario 9: a plugin's log lines, as the SDK 1.x hands them to its user. Every line a call's
/// plugin wrote has arrived, in the order written, by the time the SDK returns the call's result
/// (they travel on the call's own response stream), twenty calls in a row; lines below the
/// session's level never come. Over stdio, the one stream keeps that order too.
#[test]
fn mcp1_hears_a_calls_log_lines_before_its_result() {
    let (plugins, mut server) = common::start(&["testkit"], &["--store", "memory:"]);
    let summary = run_scenario(Sdk::Mcp1, "plugin-logs", &mut server);
    assert_eq!(summary["rounds"], 20, "{summary}");
    assert_no_sdk_warnings(&summary);
    assert_quiet_server_log(&server);
    let args = stdio_server(&plugins, &[]);
    let summary = run_scenario_over_stdio(Sdk::Mcp1, "plugin-logs", &args);
    assert_eq!(summary["rounds"], 20, "{summary}");
    assert_quiet_stdio_servers(&summary, 1);
}

/// Issue 37: a 2026-07-28 client that does not declare the gated-lists extension lists once, and
/// the list is the catalog (cacheable); it drives two interleaved invoices to `discharged`
/// choosing each call from the previous result's next step alone, and an out-of-order call is
/// refused FORBIDDEN. The SDK has nothing to warn about: every tool it calls was listed.
#[test]
fn mcp2_drives_invoices_from_the_stable_list_and_the_next_step() {
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp2, "by-the-book", &mut server);
    assert_eq!(summary["protocol"], "2026-07-28");
    assert_eq!(
        summary["final"],
        json!({"A": "discharged", "B": "discharged"}),
        "{summary}"
    );
    let trail = summary["trail"].as_array().expect("a trail");
    assert_eq!(trail.len(), 8, "two mints and six steps: {summary}");
    assert_eq!(trail.last().unwrap()["next"], json!([]), "{summary}");
    assert_no_sdk_warnings(&summary);
}

/// Issue 37: a 2025 session client that never re-reads its first list (as the most-used clients
/// behave) completes the lifecycle from each result's next step.
#[test]
fn mcp1_that_never_relists_completes_the_lifecycle_from_the_next_step() {
    let (_plugins, mut server) = invoice_server(&[]);
    let summary = run_scenario(Sdk::Mcp1, "never-relists", &mut server);
    assert_eq!(
        summary["first_list"],
        json!(["invoice.status", "invoice.submit"])
    );
    let trail: Vec<&str> = summary["trail"]
        .as_array()
        .expect("a trail")
        .iter()
        .map(|sentence| sentence.as_str().unwrap())
        .collect();
    assert_eq!(
        trail,
        [
            "Invoice is now in review. Next: invoice.approve, invoice.reject, invoice.status.",
            "Invoice is now in approved. Next: invoice.discharge, invoice.status.",
            "Invoice is now in discharged, a final state: there is no next step.",
        ]
    );
    // The SDK validates a result against a list it takes after the call, when the called tool
    // was not on its first one: by then `invoice.approve` has left the session's menu (see the
    // finding above). Nothing else is printed.
    assert_only_unlisted_tool_warnings(&summary);
}

/// Issue 40: the Python SDK 1.x with an elicitation callback, in front of a payout over the
/// confirmation threshold: a decline moves nothing (DECLINED), an accept pays out with the
/// person's reference in the audit trail; a payout made by another session while the person
/// thinks wins, and the confirmed one is refused FORBIDDEN with one payout recorded.
#[test]
fn mcp1_a_person_confirms_the_payout_and_a_race_is_won_cleanly() {
    let (_plugins, mut server) = invoice_server(HANDLE_MODE);
    let summary = run_scenario(Sdk::Mcp1, "confirm-discharge", &mut server);
    let asked = &summary["asked"];
    assert!(
        asked["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("Pay out this invoice?")),
        "{asked}"
    );
    assert_eq!(asked["schema"]["properties"]["reference"]["type"], "string");
    assert_no_sdk_warnings(&summary);
    let log = server.stderr();
    assert!(
        !log.contains(" WARN ") && !log.contains(" ERROR "),
        "the server warned about normal client behaviour:\n{log}"
    );
}

/// Issue 40: the Python SDK 2.x (protocol 2026-07-28) pays out an invoice over the confirmation
/// threshold through the input-required loop (its elicitation callback answers, it retries with
/// `inputResponses` and `requestState`); a state one server sealed is completed by a second
/// server sharing the key file and the Redis store, and a tampered one is refused.
#[test]
fn mcp2_input_required_confirmation_completes_on_another_server() {
    let plugins = PluginDir::with(&["invoice"]);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("request-state.key");
    std::fs::write(&key_file, "k".repeat(48)).unwrap();
    let namespace = format!("confirm_{}", uuid::Uuid::new_v4().simple());
    let store = common::redis_url();
    let flags = [
        "--state-handle-key",
        "--store",
        &store,
        "--store-namespace",
        &namespace,
        "--request-state-key-file",
        key_file.to_str().unwrap(),
    ];
    let mut one = Server::http(plugins.path(), &flags);
    let two = Server::http(plugins.path(), &flags);
    let scenario = format!("confirm-across-servers:{}", two.url);
    let summary = run_scenario(Sdk::Mcp2, &scenario, &mut one);
    assert_eq!(summary["keys"], json!(["turnstile.confirm"]));
    assert_eq!(summary["protocol"], "2026-07-28");
    assert_no_sdk_warnings(&summary);
}
