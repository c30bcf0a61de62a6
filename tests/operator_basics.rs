//! What an operator needs to leave the server running (issue 11, items 4, 8, 9, 10): the health
//! probes, the `Host` check on every other route, bounded results and echoes, private files.

mod common;

use std::{os::unix::fs::PermissionsExt, path::Path, time::Duration};

use common::{Client, PluginDir, Server};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// `GET base+path` with `Host: host`: the status and the body as JSON.
async fn get_as(server: &Server, path: &str, host: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{}{path}", server.base()))
        .header("Host", host)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {path}: {error}"));
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("GET {path} is not JSON ({error}): {text}"));
    (status, body)
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The probes answer whatever the `Host` (a probe sends the pod's address); `/stats` answers
/// only a host it serves.
#[tokio::test]
async fn probes_answer_any_host_and_stats_only_allowed_ones() {
    let (_plugins, server) = common::start(&["testkit"], &["--allowed-host", "mcp.example.com"]);
    for host in ["10.1.2.3:8080", "localhost"] {
        let (status, body) = get_as(&server, "/healthz", host).await;
        assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
        let (status, body) = get_as(&server, "/readyz", host).await;
        assert_eq!((status, body), (StatusCode::OK, json!({"status": "ready"})));
    }
    let (status, body) = get_as(&server, "/stats", "10.1.2.3:8080").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.to_string().len() < 200, "a short body: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("Host"));
    for host in ["localhost", "127.0.0.1:1234", "mcp.example.com"] {
        let (status, body) = get_as(&server, "/stats", host).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
        assert!(body.get("registry").is_some(), "{body}");
    }
}

/// Without a plugin the server cannot serve a call: not ready, and it says why.
#[tokio::test]
async fn without_plugins_it_is_alive_but_not_ready() {
    let (_plugins, server) = common::start(&[], &[]);
    let (status, _) = get_as(&server, "/healthz", "10.1.2.3").await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = get_as(&server, "/readyz", "10.1.2.3").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body["not_ready"]["plugins"], "no plugin is loaded",
        "{body}"
    );
    assert!(body["not_ready"].get("store").is_none(), "{body}");
}

/// A megabyte of tool name is neither echoed in full nor logged in full.
#[tokio::test]
async fn a_huge_tool_name_is_clipped_in_the_error_and_the_log() {
    let (_plugins, server, client) = common::serve_and_connect(&["testkit"], &[]).await;
    let name = "n".repeat(1 << 20);
    let error = client
        .try_call(&name, json!({}))
        .await
        .expect_err("an unknown tool is a JSON-RPC error");
    let text = error.to_string();
    assert!(text.len() < 1024, "the error is {} bytes", text.len());
    assert!(
        text.contains("unknown tool: nnnn") && text.contains('…'),
        "{text}"
    );
    // Still serving, and nothing it logged about the call is long.
    assert!(client.offers("testkit.echo").await);
    let log = server.stderr();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a log line of {longest} bytes");
}

/// A result over `--max-result-bytes` is a tool error that names its size and the limit.
#[tokio::test]
async fn a_result_over_the_limit_is_a_clear_tool_error() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["testkit"], &["--max-result-bytes", "1000"]).await;
    let small = client.call("testkit.echo", json!({"text": "hi"})).await;
    assert_ne!(small.is_error, Some(true), "{small:?}");
    let big = client
        .call("testkit.echo", json!({"text": "x".repeat(5000)}))
        .await;
    assert_eq!(big.is_error, Some(true), "{big:?}");
    let error = &big.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["code"], "RESULT_TOO_LARGE", "{error}");
    assert_eq!(error["limit"], 1000);
    assert!(error["size"].as_u64().unwrap() > 5000, "{error}");
    let text = serde_json::to_string(&big.content).unwrap();
    assert!(text.contains("1000") && text.len() < 1024, "{text}");
}

/// A gated call whose result is too large fires nothing: the instance stays where it was.
#[tokio::test]
async fn a_too_large_result_fires_no_transition() {
    let (_plugins, _server, client) =
        common::serve_and_connect(&["testkit"], &["--max-result-bytes", "10"]).await;
    let result = client.call("testkit.go", json!({})).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(
        result.structured_content.as_ref().unwrap()["error"]["code"],
        "RESULT_TOO_LARGE"
    );
    let names = client.tool_names().await;
    assert!(names.contains(&"testkit.go".to_string()), "{names:?}");
    assert!(!names.contains(&"testkit.reset".to_string()), "{names:?}");
}

/// The data directory a server creates is 0700 and its store file 0600; an existing directory
/// and file with wider permissions are tightened on the next start.
#[tokio::test]
async fn the_data_directory_and_store_file_are_private() {
    let plugins = PluginDir::with(&["testkit"]);
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    {
        let _server = Server::http_in(plugins.path(), &data, &[]);
        assert_eq!(mode_of(&data), 0o700);
        assert_eq!(mode_of(&data.join("state.redb")), 0o600);
    }
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("state.redb"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let server = Server::http_in(plugins.path(), &data, &[]);
    assert_eq!(mode_of(&data), 0o700);
    assert_eq!(mode_of(&data.join("state.redb")), 0o600);
    let log = server.stderr();
    assert!(
        log.lines()
            .filter(|line| line.contains("tightened permissions"))
            .count()
            == 2,
        "{log}"
    );
}

/// The test fixtures a `cargo build --workspace` leaves beside the example plugins (`testkit`,
/// whose `testkit.abort` ends the process, and `conformance`) are not served by a server started
/// as the README says: they are skipped with an INFO line, and their tools are unknown. With
/// `--allow-test-plugins` (as the test suite runs) they are served.
#[tokio::test]
async fn test_fixtures_are_served_only_when_allowed() {
    let plugins = PluginDir::with(&["invoice", "testkit", "conformance"]);
    let data = tempfile::tempdir().unwrap();
    let args: Vec<std::ffi::OsString> = vec![
        "--http".into(),
        "127.0.0.1:0".into(),
        "--plugins".into(),
        plugins.path().into(),
        "--data-dir".into(),
        data.path().into(),
    ];
    let as_deployed: Vec<&std::ffi::OsStr> = args.iter().map(|arg| arg.as_os_str()).collect();
    let server = Server::serve_with(&as_deployed, &[]);
    let log = server.wait_for_log("is a test fixture");
    assert!(
        log.lines()
            .filter(|line| line.contains("test fixture"))
            .all(|line| line.contains(" INFO ")),
        "{log}"
    );
    let client = Client::http(&server.url).await;
    let names = client.tool_names().await;
    assert!(
        names.iter().any(|name| name == "invoice.submit"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|name| name.starts_with("testkit.") || name.starts_with("test_")),
        "{names:?}"
    );
    let abort = client.try_call("testkit.abort", json!({})).await;
    assert!(abort.is_err(), "testkit.abort is no tool here: {abort:?}");
    assert!(
        server
            .stderr()
            .lines()
            .all(|line| !line.contains(" ERROR "))
    );

    let allowed = Server::http(plugins.path(), &[]);
    let names = Client::http(&allowed.url).await.tool_names().await;
    assert!(
        names.iter().any(|name| name == "testkit.abort"),
        "{names:?}"
    );
}
