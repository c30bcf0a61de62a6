//! Hot plugins (issue 12): libraries dropped into, replaced in and removed from a running
//! server's plugin directory, as real MCP clients see it.

mod common;

use std::{
    fs,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{Client, PluginDir, Server, built_plugin, compile_c_fixture, handle_of};
use serde_json::{Value, json};

/// Puts `library` into `dir` the safe way (docs/plugins.md): written elsewhere, then renamed in.
fn deploy(library: &Path, dir: &Path, name: &str) {
    let staging = tempfile::tempdir().expect("temp dir");
    let staged = staging.path().join(name);
    fs::copy(library, &staged).expect("stage the library");
    fs::rename(&staged, dir.join(name)).expect("rename into the plugin directory");
}

/// Whether `tools/list` offers `session` any tool of the payment plugin.
async fn offers_payment(session: &Client) -> bool {
    let names = session.tool_names().await;
    names.iter().any(|name| name.starts_with("payment."))
}

/// Builds pingpong with `defines` elsewhere and renames it over `library`, as a deploy does.
fn rebuild_pingpong(library: &Path, defines: &[&str]) {
    let staging = tempfile::tempdir().expect("temp dir");
    let rebuilt = staging.path().join("libpingpong.so");
    compile_c_fixture("pingpong", &rebuilt, defines);
    fs::rename(&rebuilt, library).expect("rename the rebuilt library in");
}

/// Two sessions of the pingpong plugin: `left` touched nothing, `right` moved its instance on.
async fn left_and_right(server: &Server) -> (Client, Client) {
    let (left, right) = (
        Client::http(&server.url).await,
        Client::http(&server.url).await,
    );
    assert_eq!(left.tool_names().await, ["pingpong.ping"]);
    let moved = right.call("pingpong.ping", json!({})).await;
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    right.changes.wait_for(1).await;
    (left, right)
}

#[tokio::test]
async fn a_plugin_dropped_in_is_listed_callable_and_announced_and_so_is_its_removal() {
    let (plugins, server, session) = common::serve_and_connect(&["invoice"], &[]).await;
    assert!(!offers_payment(&session).await, "payment is not there yet");
    let sessionless = Client::http_sessionless(&server.url).await;
    let listened = sessionless.listen().await;

    // A plain copy, written in place: loaded once it stops changing.
    let payment = built_plugin("payment");
    let name = payment.file_name().unwrap();
    fs::copy(&payment, plugins.path().join(name)).expect("copy payment in");
    session.changes.wait_for(1).await;
    listened.wait_for(1).await;
    // The payment plugin brings a prompt: every session is told its prompts changed too.
    session.notices.prompts.wait_for(1).await;
    let names = session.tool_names().await;
    for tool in ["payment.authorize", "payment.status"] {
        assert!(names.iter().any(|name| name == tool), "{tool} in {names:?}");
    }
    assert!(
        sessionless.offers("payment.authorize").await,
        "a 2026-07-28 client sees the tool that starts a payment"
    );
    let authorized = session
        .call(
            "payment.authorize",
            json!({"amount": 12.5, "currency": "EUR"}),
        )
        .await;
    assert_ne!(authorized.is_error, Some(true), "{authorized:?}");
    assert!(
        session.offers("payment.capture").await,
        "the payment moved on"
    );
    // The invoice plugin was not disturbed.
    assert_eq!(session.invoice_state().await, json!("draft"));

    fs::remove_file(plugins.path().join(name)).expect("remove payment");
    session.changes.wait_for(3).await; // the authorization's own change, then the removal
    listened.wait_for(2).await;
    // The authorization offered no other prompt; the removal took the refund policy away.
    session.notices.prompts.wait_for(2).await;
    assert!(!offers_payment(&session).await, "payment is gone");
    let gone = session.try_call("payment.status", json!({})).await;
    assert!(
        gone.as_ref()
            .is_err_and(|error| error.to_string().contains("-32602")
                || error.to_string().contains("payment.status")),
        "{gone:?}"
    );
    server.wait_for_log("plugin removed");
}

#[tokio::test]
async fn a_broken_library_is_refused_with_a_clear_log_line_and_nothing_else_changes() {
    let (plugins, server, session) = common::serve_and_connect(&["invoice"], &[]).await;
    let before = session.tool_names().await;

    let staging = tempfile::tempdir().expect("temp dir");
    let broken = staging.path().join("libunknown_state.so");
    compile_c_fixture("unknown_state", &broken, &[]);
    deploy(&broken, plugins.path(), "libunknown_state.so");
    let line = server.wait_for_log("libunknown_state.so");
    assert!(
        line.contains("plugin not loaded") && line.contains("has no state"),
        "{line}"
    );
    plugins.add_file("libnotes.so", b"these are notes, not a library");
    let line = server.wait_for_log("libnotes.so");
    assert!(
        line.contains("plugin not loaded") && line.contains("not a shared library"),
        "{line}"
    );

    session.changes.stays_at(0).await;
    assert_eq!(session.tool_names().await, before);
    assert_eq!(session.invoice_state().await, json!("draft"));
}

/// `pingpong.ping` and `pingpong.pong` alternate: each is callable only after the other fired,
/// so a run of alternating calls all succeed only if no transition was lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replacing_a_plugin_while_sixteen_sessions_call_it_fails_loses_and_doubles_nothing() {
    const SESSIONS: usize = 16;
    let plugins = PluginDir::with(&[]);
    let library = plugins.add_c_fixture("pingpong");
    let server = Server::http(plugins.path(), &[]);
    let staging = tempfile::tempdir().expect("temp dir");
    let rebuilt = staging.path().join("libpingpong.so");
    compile_c_fixture("pingpong", &rebuilt, &[r#"BUILD="v2""#]);

    let calls = Arc::new(AtomicUsize::new(0));
    let mut sessions = Vec::new();
    for session in 0..SESSIONS {
        let (url, calls) = (server.url.clone(), calls.clone());
        sessions.push(tokio::spawn(async move {
            let client = Client::http(&url).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut builds: Vec<String> = Vec::new();
            // Until the new build has answered several times in a row.
            while builds.iter().rev().take(10).filter(|b| *b == "v2").count() < 10 {
                let tool = ["pingpong.ping", "pingpong.pong"][builds.len() % 2];
                let result = client.call(tool, json!({})).await;
                assert_ne!(
                    result.is_error,
                    Some(true),
                    "session {session}, call {}: {result:?}",
                    builds.len()
                );
                let structured = result.structured_content.expect("structured output");
                builds.push(structured["build"].as_str().unwrap().to_string());
                calls.fetch_add(1, Ordering::SeqCst);
                assert!(Instant::now() < deadline, "the new build never answered");
            }
            builds
        }));
    }
    // Replace it while every session is calling.
    while calls.load(Ordering::SeqCst) < SESSIONS * 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fs::rename(&rebuilt, &library).expect("rename the rebuilt library in");
    for session in sessions {
        let builds = session.await.expect("a session's calls");
        let first_new = builds.iter().position(|b| b == "v2").unwrap();
        assert!(first_new > 0, "the old build answered first");
        assert!(
            builds[first_new..].iter().all(|b| b == "v2"),
            "once the new build answered, the old one never did again: {builds:?}"
        );
    }
    let line = server.wait_for_log("plugin replaced");
    assert!(line.contains("version=v2"), "{line}");
}

/// A new tool gated on a state is news only to the clients with an instance in that state.
#[tokio::test]
async fn a_change_to_a_gated_tool_is_announced_only_to_instances_in_its_state() {
    let plugins = PluginDir::with(&[]);
    let library = plugins.add_c_fixture("pingpong");
    let server = Server::http(plugins.path(), &[]);
    let (left, right) = left_and_right(&server).await;
    assert_eq!(right.tool_names().await, ["pingpong.pong"]);
    let sessionless = Client::http_sessionless(&server.url).await;
    let listened = sessionless.listen().await;

    rebuild_pingpong(&library, &["WITH_SERVE"]);

    right.changes.wait_for(2).await;
    assert_eq!(
        right.tool_names().await,
        ["pingpong.pong", "pingpong.serve"]
    );
    left.changes.stays_at(0).await;
    assert_eq!(
        listened.count(),
        0,
        "a listen naming no instance saw no change"
    );
    assert_eq!(left.tool_names().await, ["pingpong.ping"]);
    let served: Value = right
        .call("pingpong.serve", json!({}))
        .await
        .structured_content
        .expect("structured output")["build"]
        .clone();
    assert_eq!(served, json!("v1"));
}

/// The rule for machines that change (docs/plugins.md): an instance whose state the new machine has
/// continues on it; one whose state vanished keeps its version, with that version's tools (and
/// code), until it leaves that state. Nobody is stranded.
#[tokio::test]
async fn after_a_state_is_renamed_instances_in_it_finish_on_their_version() {
    let plugins = PluginDir::with(&[]);
    let library = plugins.add_c_fixture("pingpong");
    let server = Server::http(plugins.path(), &[]);
    let (left, right) = left_and_right(&server).await;

    rebuild_pingpong(&library, &[r#"BUILD="v2""#, r#"RIGHT="far""#]);
    left.changes.wait_for(1).await;
    right.changes.wait_for(2).await;

    let build = |result: rmcp::model::CallToolResult| {
        assert_ne!(result.is_error, Some(true), "{result:?}");
        result.structured_content.expect("structured output")["build"].clone()
    };
    // "right" is gone from the new machine: that instance keeps the old one and its tools.
    assert_eq!(right.tool_names().await, ["pingpong.pong"]);
    assert_eq!(build(right.call("pingpong.pong", json!({})).await), "v1");
    // Back in "left", which the new machine has: from now on it runs the new version.
    assert_eq!(build(right.call("pingpong.ping", json!({})).await), "v2");
    assert_eq!(right.tool_names().await, ["pingpong.pong"]);
    assert_eq!(build(right.call("pingpong.pong", json!({})).await), "v2");

    // "left" exists in both: that instance moved to the new version at once.
    assert_eq!(build(left.call("pingpong.ping", json!({})).await), "v2");
    assert_eq!(build(left.call("pingpong.pong", json!({})).await), "v2");
}

/// A call is checked against the tool its instance runs: an instance kept on the old machine
/// takes the old version's arguments, even when the catalog's tool of that name now wants
/// others; an instance on the new machine is held to the new schema.
#[tokio::test]
async fn a_kept_instance_checks_arguments_against_its_own_version_of_the_tool() {
    let plugins = PluginDir::with(&[]);
    let library = plugins.add_c_fixture("pingpong");
    let server = Server::http(plugins.path(), &[]);
    let (left, right) = left_and_right(&server).await;

    let spin = r#"PONG_INPUT="{\"type\":\"object\",\"required\":[\"spin\"]}""#;
    rebuild_pingpong(&library, &[r#"BUILD="v2""#, r#"RIGHT="far""#, spin]);
    left.changes.wait_for(1).await;
    right.changes.wait_for(2).await;

    // "right" kept the old machine, whose pong takes no arguments.
    let kept = right.call("pingpong.pong", json!({})).await;
    assert_ne!(kept.is_error, Some(true), "{kept:?}");
    assert_eq!(
        kept.structured_content.expect("structured output")["build"],
        "v1"
    );

    // "left" runs the new machine: its pong wants a spin, and says so.
    let moved = left.call("pingpong.ping", json!({})).await;
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    let unspun = left.call("pingpong.pong", json!({})).await;
    assert_eq!(unspun.is_error, Some(true), "{unspun:?}");
    let text = common::text_of(&unspun);
    assert!(text.contains("spin"), "names the missing argument: {text}");
    let spun = left.call("pingpong.pong", json!({"spin": "top"})).await;
    assert_ne!(spun.is_error, Some(true), "{spun:?}");
}

/// SIGHUP rescans the directory and tries again what was refused: here a library whose tools
/// clashed with one that has since been removed.
#[tokio::test]
async fn sighup_retries_a_library_refused_for_a_clash_that_is_gone() {
    let (plugins, server, session) = common::serve_and_connect(&["invoice"], &[]).await;
    let original = plugins.path().join("libturnstile_plugin_invoice.so");
    deploy(&original, plugins.path(), "libinvoice_copy.so");
    let line = server.wait_for_log("libinvoice_copy.so");
    assert!(line.contains("already"), "{line}");

    fs::remove_file(&original).expect("remove the original");
    session.changes.wait_for(1).await;
    assert!(session.tool_names().await.is_empty());
    server.signal(libc::SIGHUP);
    session.changes.wait_for(2).await;
    assert!(
        session.offers("invoice.submit").await,
        "the copy serves the invoice tools now"
    );
}

/// A pinned instance survives a restart after the library that brought its machine is gone:
/// the store kept the machine, so its state is still readable (its menu lists), calls on it say
/// `VERSION_UNAVAILABLE` and change nothing, and once a library bringing that machine is back
/// it carries on where it was.
#[tokio::test]
async fn a_pinned_instance_survives_a_restart_after_its_library_is_gone() {
    let plugins = PluginDir::with(&[]);
    let data = tempfile::tempdir().expect("temp dir");
    let library = plugins.add_c_fixture("pingpong");
    let server = Server::http_in(plugins.path(), data.path(), &["--state-handle-key"]);
    let client = Client::http(&server.url).await;
    let handle = handle_of(&client.call("pingpong.ping", json!({})).await);
    client.close().await;
    drop(server);

    // While the server is down, v1 is replaced by v2, whose machine has no state "right".
    rebuild_pingpong(&library, &[r#"BUILD="v2""#, r#"RIGHT="far""#]);
    let server = Server::http_in(plugins.path(), data.path(), &["--state-handle-key"]);
    let client = Client::http(&server.url).await;
    let meta = json!({ "handle": handle });
    assert_eq!(
        client.tool_names_with_meta(meta.clone()).await,
        Vec::<String>::new(),
        "the instance is readable, and no loaded tool is in its state"
    );
    let refused = client
        .call("pingpong.pong", json!({ "handle": handle }))
        .await;
    assert_eq!(common::error_code(&refused), "VERSION_UNAVAILABLE");

    // v1 is deployed again: the instance goes on from "right" on it.
    rebuild_pingpong(&library, &[]);
    client.changes.wait_for(1).await;
    assert_eq!(
        client.tool_names_with_meta(meta.clone()).await,
        ["pingpong.pong"]
    );
    let pong = client
        .call("pingpong.pong", json!({ "handle": handle }))
        .await;
    assert_ne!(pong.is_error, Some(true), "{pong:?}");
    assert_eq!(pong.structured_content.expect("structured")["build"], "v1");
}

/// `turnstile check --store` says in advance what serving a plugin directory would do to the
/// instances a store holds: here the pingpong machine renames its state `right` to `far`, so an
/// instance in `left` would move to the new machine and one in `right` would stay pinned to its
/// version; `--strict` makes that a failure.
#[tokio::test]
async fn check_says_what_a_replacement_would_do_to_the_instances_in_a_store() {
    let plugins = PluginDir::with(&[]);
    plugins.add_c_fixture("pingpong");
    let data = tempfile::tempdir().expect("temp dir");
    let mut server = Server::http_in(plugins.path(), data.path(), &["--state-handle-key"]);
    let client = Client::http(&server.url).await;
    handle_of(&client.call("pingpong.ping", json!({})).await);
    let back = handle_of(&client.call("pingpong.ping", json!({})).await);
    client.call("pingpong.pong", json!({"handle": back})).await;
    client.close().await;
    server.signal(libc::SIGTERM);
    assert_eq!(server.exit_code_within(Duration::from_secs(10)), Some(0));

    let renamed = PluginDir::with(&[]);
    compile_c_fixture(
        "pingpong",
        &renamed.path().join("libpingpong.so"),
        &[r#"RIGHT="far""#],
    );
    let store = format!("embedded:{}", data.path().join("state.redb").display());
    let check = |strict: bool| {
        let mut command = std::process::Command::new(common::turnstile_bin());
        command
            .args(["check", "--plugins"])
            .arg(renamed.path())
            .args(["--store", &store]);
        if strict {
            command.arg("--strict");
        }
        let output = command.output().expect("run turnstile check");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, stdout) = check(false);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("\"pingpong\": 1 instance(s) would move from machine version"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"pingpong\": 1 instance(s) would stay on machine version")
            && stdout.contains("their state \"right\" is not in the served machine"),
        "{stdout}"
    );
    let (code, _) = check(true);
    assert_eq!(code, Some(1), "--strict fails on a pinned instance");
}
