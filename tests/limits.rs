//! Limits that keep a long-running server answering (issue "A server you can leave running",
//! items 2 and 3): sockets that never send a request are closed after the header timeout while
//! normal clients are served, the connection cap makes clients wait rather than fail, and the
//! session cap refuses a new session with 503 and `Retry-After`. And (issue 50, items 2 and 3)
//! every response held open counts as a stream, request bodies have a deadline, and the probes
//! are answered whatever holds the connections.

mod common;

use std::time::{Duration, Instant};

use common::{
    Client, PluginDir, Server, TokenFile, begin_session, eventually, get_stream,
    initialize_message, initialize_request, open_session, post,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The server's address (`127.0.0.1:PORT`) from its MCP URL.
fn address(server: &Server) -> String {
    server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

#[tokio::test]
async fn slowloris_and_idle_sockets_are_closed_while_a_normal_client_is_served() {
    let (_plugins, server) = common::start(&["invoice"], &["--header-timeout", "2"]);
    let address = address(&server);
    let mut sockets = Vec::new();
    for n in 0..300 {
        let mut socket = TcpStream::connect(&address).await.expect("connect");
        if n % 2 == 0 {
            // Slowloris: a request line and a header, never the blank line that ends them.
            socket
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .unwrap();
        }
        sockets.push(socket);
    }
    // Meanwhile, a normal client is served.
    let client = Client::http(&server.url).await;
    let result = client.call("invoice.submit", json!({"amount": 10})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");

    // Every one of the 300 is closed by the server within the timeout (plus slack).
    let started = Instant::now();
    for mut socket in sockets {
        let mut buffer = [0u8; 512];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue, // a 408 before the close
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a socket was left open");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // And the server still serves.
    assert_eq!(client.invoice_state().await, "review");
}

#[tokio::test]
async fn at_the_connection_cap_a_client_waits_instead_of_failing() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--max-connections", "4", "--header-timeout", "1"],
    );
    let address = address(&server);
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(&address).await.expect("connect"));
    }
    // All four permits are held by sockets that send nothing; the header timeout frees them,
    // and the client, queued in the backlog meanwhile, is then served.
    let client = tokio::time::timeout(Duration::from_secs(15), Client::http(&server.url))
        .await
        .expect("served once the idle sockets were closed");
    let result = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    drop(idle);
}

#[tokio::test]
async fn past_the_session_cap_a_new_session_gets_503_with_retry_after() {
    let (_plugins, server) = common::start(&["invoice"], &["--max-sessions", "3"]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::http(&server.url).await);
    }
    let refused = initialize_request(&server.url, None).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.expect("a JSON-RPC error body");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum of 3 sessions"),
        "{body}"
    );
    // Every session counts, and the operator sees them.
    assert_eq!(server.stats().await["http_sessions"], 3);
    // The sessions that exist keep working.
    let result = clients[0]
        .call("invoice.submit", json!({"amount": 1}))
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    // One ends (DELETE): a new session is admitted.
    clients.pop().unwrap().close().await;
    let admitted = initialize_request(&server.url, None).await;
    assert_eq!(admitted.status(), 200);
}

/// A slow plugin saturates only its own call pool: its excess calls are answered BUSY (after a
/// short wait for a slot), and another plugin's tool answers meanwhile.
#[tokio::test]
async fn a_slow_plugin_saturates_only_its_own_pool() {
    let (_plugins, server) = common::start(&["testkit", "invoice"], &["--plugin-pool", "4"]);
    let client = std::sync::Arc::new(Client::http(&server.url).await);
    let slow: Vec<_> = (0..12)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call("testkit.slow", json!({"ms": 3000})).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another plugin is not held up: it answers while all four slots of testkit are taken.
    let status = client.call("invoice.status", json!({})).await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
    let mut busy = 0;
    let mut ran = 0;
    for call in slow {
        let result = call.await.unwrap();
        if result.is_error == Some(true) {
            let error = &result.structured_content.as_ref().unwrap()["error"];
            assert_eq!(error["code"], "BUSY", "{error}");
            assert!(error["retryAfterMs"].as_u64().is_some(), "{error}");
            busy += 1;
        } else {
            ran += 1;
        }
    }
    assert_eq!(
        (ran, busy),
        (4, 8),
        "the pool runs 4 at once and turns the rest away"
    );
}

/// A call that outlived its deadline keeps its instance locked until the plugin returns, so two
/// calls never overlap on one instance; afterwards the instance takes calls again.
#[tokio::test]
async fn an_instance_whose_call_timed_out_is_busy_until_its_plugin_returns() {
    let (_plugins, server, client) =
        common::serve_and_connect(&["testkit"], &["--tool-timeout", "1"]).await;
    client.call("testkit.go", json!({})).await;
    let late = client
        .call("testkit.reset", json!({"sleep_ms": 2500}))
        .await;
    let code = |result: &rmcp::model::CallToolResult| {
        result.structured_content.as_ref().unwrap()["error"]["code"].clone()
    };
    assert_eq!(code(&late), "TOOL_TIMEOUT");
    let overlapping = client.call("testkit.reset", json!({})).await;
    assert_eq!(code(&overlapping), "BUSY", "{overlapping:?}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = client.call("testkit.reset", json!({})).await;
    assert_ne!(after.is_error, Some(true), "{after:?}");
    // The operator sees the late call.
    let stats = server.stats().await;
    assert_eq!(
        stats["plugins"]["testkit"]["calls_past_deadline"], 1,
        "{stats}"
    );
}

/// A tool that declares itself quick runs on the request's thread, where it cannot be cut off.
/// A first overrun or two within a minute are forgiven (a shared machine can delay any call),
/// as are rare ones; a third in three calls takes the privilege away, with one warning, and from then on its plugin's calls run
/// on worker threads, where the tool deadline applies again.
#[tokio::test]
async fn a_quick_tool_that_keeps_overrunning_its_budget_loses_the_privilege_once() {
    let (_plugins, server, client) =
        common::serve_and_connect(&["testkit"], &["--tool-timeout", "1"]).await;
    let first = client.call("testkit.quick_slow", json!({"ms": 50})).await;
    assert_ne!(first.is_error, Some(true), "{first:?}");
    // Forgiven, so still on the request's thread: past the 1 s deadline, and not cut off.
    let second = client.call("testkit.quick_slow", json!({"ms": 1500})).await;
    assert_ne!(second.is_error, Some(true), "{second:?}");
    assert!(
        !server.stderr().contains("overrunning its budget"),
        "forgiven overruns warn nobody: {}",
        server.stderr()
    );
    let third = client.call("testkit.quick_slow", json!({"ms": 50})).await;
    assert_ne!(third.is_error, Some(true), "{third:?}");
    // A worker thread now: past the 1 s deadline the caller is answered TOOL_TIMEOUT.
    let cut_off = client.call("testkit.quick_slow", json!({"ms": 1500})).await;
    assert_eq!(common::error_code(&cut_off), "TOOL_TIMEOUT", "{cut_off:?}");
    let again = client.call("testkit.quick_slow", json!({"ms": 30})).await;
    assert_ne!(again.is_error, Some(true), "{again:?}");
    let log = server.stderr();
    assert_eq!(
        log.matches("a quick tool keeps overrunning its budget")
            .count(),
        1,
        "logged once: {log}"
    );
}

/// Reads from `socket` until the server closes it; `false` if it is still open after `within`.
async fn closed_within(socket: &mut TcpStream, within: Duration) -> bool {
    let mut buffer = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

/// `--keepalive-timeout`: a keep-alive connection with nothing in flight is closed after it
/// (not after the much longer header timeout), while a session's GET event stream on another
/// connection stays open and carries SSE comments.
#[tokio::test]
async fn idle_keepalive_connections_close_while_an_event_stream_stays_open() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--keepalive-timeout", "2", "--header-timeout", "60"],
    );
    let address = address(&server);
    // A GET stream of a session that finished its handshake.
    let session = open_session(&server.url).await;
    let mut stream = TcpStream::connect(&address).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\
                 Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A keep-alive connection that made one request and then sits idle.
    let mut idle = TcpStream::connect(&address).await.unwrap();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert!(
        closed_within(&mut idle, Duration::from_secs(20)).await,
        "the idle keep-alive connection was not closed (the header timeout is 60 s)"
    );
    // Meanwhile, and for a while after, the event stream is open and gets SSE comments.
    let mut received = String::new();
    let mut buffer = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        match tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => panic!("the event stream was closed: {received}"),
            Ok(Ok(read)) => received.push_str(&String::from_utf8_lossy(&buffer[..read])),
            Err(_) => panic!("nothing on the event stream for 3 s: {received}"),
        }
    }
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    let comments = received
        .split("\r\n")
        .flat_map(|chunk| chunk.lines())
        .filter(|line| line.starts_with(':'))
        .count();
    assert!(comments >= 2, "no SSE keep-alive comments: {received}");
}

/// `--handshake-timeout`: sessions that sent `initialize` but never `notifications/initialized`
/// are ended and stop counting against `--max-sessions`; a session that finished its handshake
/// is kept.
#[tokio::test]
async fn sessions_that_never_finish_their_handshake_stop_counting() {
    // 3 s, not 1: the client below must finish its handshake within it, and on a loaded CI
    // machine its session was once ended before its `notifications/initialized` arrived.
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--handshake-timeout", "3", "--max-sessions", "3"],
    );
    let client = Client::http(&server.url).await;
    begin_session(&server.url).await;
    begin_session(&server.url).await;
    let stats = server.stats().await;
    assert_eq!(stats["http_sessions"], 3, "{stats}");
    assert_eq!(stats["http_sessions_in_handshake"], 2, "{stats}");
    let refused = initialize_request(&server.url, None).await;
    assert_eq!(refused.status(), 503, "the cap counts unfinished sessions");

    let what = "the sessions that never finished their handshake were not ended";
    server
        .stats_until(what, Duration::from_secs(10), |stats| {
            stats["http_sessions"] == 1
        })
        .await;
    assert_eq!(server.stats().await["http_sessions_in_handshake"], 0);
    // Room again for new sessions; the one that finished its handshake still works.
    begin_session(&server.url).await;
    let result = client.call("invoice.submit", json!({"amount": 3})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
}

/// Issue 39, attack 3: an `initialize` opens a session whatever protocol header it carries, so
/// the cap holds for one sent with `MCP-Protocol-Version: 2026-07-28` too; and `initialize`s
/// racing for the last places take at most those places.
#[tokio::test]
async fn the_session_cap_holds_whatever_the_header_and_under_a_race() {
    // The racers never finish their handshake; a long handshake timeout keeps the one admitted
    // counted however slowly a loaded machine answers the others (at the default 10 s, a racer
    // answered after it was ended found its place free again).
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--max-sessions", "2", "--handshake-timeout", "600"],
    );
    let first = Client::http(&server.url).await;
    let initialize = |version: &str| initialize_message(1, version).to_string();
    let send = |body: String, header: Option<&'static str>| {
        let mut request = post(&server.url, body);
        if let Some(version) = header {
            request = request.header("MCP-Protocol-Version", version);
        }
        request.send()
    };
    // One place left: of 10 racing initializes, exactly one takes it.
    let racing = (0..10).map(|_| send(initialize("2025-11-25"), None));
    let statuses: Vec<u16> = futures_util::future::join_all(racing)
        .await
        .into_iter()
        .map(|answer| answer.expect("an answer").status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|status| **status == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(statuses.iter().all(|status| [200, 503].contains(status)));
    for _ in 0..10 {
        let answer = send(initialize("2026-07-28"), Some("2026-07-28"))
            .await
            .expect("an answer");
        assert_eq!(answer.status(), 503, "an initialize with a 2026 header");
    }
    assert_eq!(server.stats().await["http_sessions"], 2);
    // Sessionless 2026-07-28 requests are no sessions: they are served.
    let sessionless = Client::http_sessionless(&server.url).await;
    let result = sessionless
        .call("invoice.submit", json!({"amount": 3}))
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let status = first.call("invoice.status", json!({})).await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
}

/// Issue 39, attack 7: event streams take at most `--stream-share` of `--max-connections`; past
/// it a new stream gets 503 with `Retry-After`, and a new client still initializes, calls and
/// is probed. A stream that closes gives its place back.
#[tokio::test]
async fn event_streams_leave_connections_for_everything_else() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--max-connections", "10", "--stream-share", "30"],
    );
    let stream_of = |session: String| {
        let url = server.url.clone();
        async move { get_stream(&url, &session).send().await.expect("an answer") }
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let session = open_session(&server.url).await;
        let stream = stream_of(session).await;
        assert_eq!(stream.status(), 200, "a stream within the share");
        held.push(stream);
    }
    let session = open_session(&server.url).await;
    let refused = stream_of(session.clone()).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    // Everything else still finds a connection.
    let health = reqwest::get(format!("{}/healthz", server.base()))
        .await
        .expect("an answer");
    assert_eq!(health.status(), 200);
    let fresh = begin_session(&server.url).await;
    assert!(!fresh.is_empty());
    // A stream that ends gives its place back.
    drop(held.pop());
    eventually(
        "a place freed by a closed stream is taken again",
        Duration::from_millis(2500),
        Duration::from_millis(50),
        async || stream_of(session.clone()).await.status() == 200,
    )
    .await;
}

/// An `initialize` POST, as `bearer` when given; its status and `Retry-After`.
async fn initialize_as(server: &Server, bearer: Option<&str>) -> (u16, Option<String>) {
    let answer = initialize_request(&server.url, bearer).await;
    let retry_after = answer
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (answer.status().as_u16(), retry_after)
}

/// Issue 39, item 2: one principal holds at most `--max-sessions-per-principal` sessions (429
/// with `Retry-After` past it, racing or not), while another principal still opens its own;
/// without authentication the same limit holds per client address.
#[tokio::test]
async fn one_principal_holds_at_most_its_share_of_sessions() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("alice s3cret-alice\nbob s3cret-bob\n");
    let server = Server::http(
        plugins.path(),
        &[
            "--auth-token-file",
            file.arg(),
            "--max-sessions-per-principal",
            "3",
        ],
    );
    let racing = (0..8).map(|_| initialize_as(&server, Some("s3cret-alice")));
    let answers = futures_util::future::join_all(racing).await;
    let admitted = answers.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(admitted, 3, "{answers:?}");
    for (status, retry_after) in &answers {
        assert!(
            *status == 200 || (*status == 429 && retry_after.is_some()),
            "{answers:?}"
        );
    }
    assert_eq!(initialize_as(&server, Some("s3cret-bob")).await.0, 200);
    assert_eq!(initialize_as(&server, Some("s3cret-alice")).await.0, 429);

    let open = Server::http(plugins.path(), &["--max-sessions-per-principal", "2"]);
    let first = Client::http(&open.url).await;
    assert_eq!(initialize_as(&open, None).await.0, 200);
    let (status, retry_after) = initialize_as(&open, None).await;
    assert_eq!((status, retry_after.is_some()), (429, true));
    // The sessions it holds still work.
    let status = first.call("invoice.status", json!({})).await;
    assert_ne!(status.is_error, Some(true), "{status:?}");
}

/// Issue 39, item 2: one client keeps at most `--max-streams-per-principal` event streams open;
/// a stream that closes gives its place back.
#[tokio::test]
async fn one_client_keeps_at_most_its_share_of_event_streams() {
    let (_plugins, server) = common::start(&["invoice"], &["--max-streams-per-principal", "1"]);
    let stream = |session: String| get_stream(&server.url, &session).send();
    let (a, b) = (
        begin_session(&server.url).await,
        begin_session(&server.url).await,
    );
    let held = stream(a.clone()).await.unwrap();
    assert_eq!(held.status(), 200);
    let refused = stream(b.clone()).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    drop(held);
    eventually(
        "the closed stream's place never came back",
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let again = stream(b.clone()).await.unwrap();
            if again.status() != 200 {
                assert_eq!(again.status(), 429);
            }
            again.status() == 200
        },
    )
    .await;
}

/// Issue 39, item 2: `--mint-rate` bounds how fast one client starts instances: past its burst a
/// minting call is `QUOTA_EXCEEDED` with `retryAfterMs` and creates nothing, while calls on the
/// instances it has go on, and it may mint again after the wait.
#[tokio::test]
async fn minting_faster_than_the_rate_is_refused_and_creates_nothing() {
    let (_plugins, server, client) = common::serve_and_connect(
        &["invoice"],
        &[
            "--state-handle-key",
            "--mint-rate",
            "2",
            "--mint-burst",
            "3",
        ],
    )
    .await;
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(common::handle_of(
            &client.call("invoice.submit", json!({"amount": 1})).await,
        ));
    }
    let refused = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_eq!(common::error_code(&refused), "QUOTA_EXCEEDED");
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    let retry_after_ms = error["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!((1..=500).contains(&retry_after_ms), "{error}");
    assert_eq!(server.stats().await["registry"]["instances"], 3);
    let approved = client
        .call("invoice.approve", json!({"handle": handles[0]}))
        .await;
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    tokio::time::sleep(Duration::from_millis(retry_after_ms + 50)).await;
    let again = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_ne!(again.is_error, Some(true), "{again:?}");
}

/// Issue 39, item 2: `--max-instances-per-principal` bounds what one principal holds in the
/// store, counted across the servers sharing it: past the limit a minting call is
/// `QUOTA_EXCEEDED` (with no `retryAfterMs`, since waiting alone frees nothing) and creates
/// nothing, on any server; another principal mints as before; an instance that finishes and is
/// deleted by retention gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_holds_at_most_its_share_of_instances_on_every_server() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("alice s3cret-alice\nbob s3cret-bob\n");
    let namespace = format!("quota_{}", uuid::Uuid::new_v4().simple());
    let store = common::redis_url();
    let serve = || {
        Server::http(
            plugins.path(),
            &[
                "--auth-token-file",
                file.arg(),
                "--state-handle-key",
                "--store",
                &store,
                "--store-namespace",
                &namespace,
                "--retain-final",
                "1",
                "--max-instances-per-principal",
                "2",
            ],
        )
    };
    let (one, two) = (serve(), serve());
    let alice_on_one = Client::http_as(&one.url, "s3cret-alice").await;
    let alice_on_two = Client::http_as(&two.url, "s3cret-alice").await;
    let first = common::handle_of(
        &alice_on_one
            .call("invoice.submit", json!({"amount": 1}))
            .await,
    );
    common::handle_of(
        &alice_on_two
            .call("invoice.submit", json!({"amount": 2}))
            .await,
    );
    for alice in [&alice_on_one, &alice_on_two] {
        let refused = alice.call("invoice.submit", json!({"amount": 3})).await;
        assert_eq!(
            common::error_code(&refused),
            "QUOTA_EXCEEDED",
            "{refused:?}"
        );
        let error = &refused.structured_content.as_ref().unwrap()["error"];
        assert_eq!(error["quota"], "instances", "{error}");
        assert!(error.get("retryAfterMs").is_none(), "{error}");
    }
    let bob = Client::http_as(&two.url, "s3cret-bob").await;
    let minted = bob.call("invoice.submit", json!({"amount": 4})).await;
    assert_ne!(minted.is_error, Some(true), "{minted:?}");
    // Alice's instances still move; the first one finishes, and retention deletes it.
    for step in ["invoice.approve", "invoice.discharge"] {
        let moved = alice_on_one.call(step, json!({"handle": first})).await;
        assert_ne!(moved.is_error, Some(true), "{moved:?}");
    }
    eventually(
        "the finished instance never gave its place back",
        Duration::from_secs(20),
        Duration::from_millis(200),
        async || {
            let again = alice_on_two
                .call("invoice.submit", json!({"amount": 5}))
                .await;
            if again.is_error == Some(true) {
                assert_eq!(common::error_code(&again), "QUOTA_EXCEEDED", "{again:?}");
            }
            again.is_error != Some(true)
        },
    )
    .await;
}

/// `--max-instances-per-principal` holds for mints racing on several servers: sixteen mints
/// by one principal, half through each of two servers sharing `store`, each in flight for
/// 300 ms, make at most the limit of instances, the others refused with `QUOTA_EXCEEDED`; and
/// the refused ones' places are given back, so that mints one at a time then fill exactly the
/// room left. (Counted per server, each server let three through.)
async fn racing_mints_on_two_servers_stay_within_the_limit(store: &str) {
    const LIMIT: usize = 3;
    let plugins = PluginDir::with(&["testkit"]);
    let file = TokenFile::with("alice s3cret-alice\n");
    let namespace = format!("race_{}", uuid::Uuid::new_v4().simple());
    let limit = LIMIT.to_string();
    let flags = [
        "--auth-token-file",
        file.arg(),
        "--state-handle-key",
        "--max-instances-per-principal",
        &limit,
    ];
    let serve = || Server::sharing(plugins.path(), store, &namespace, &flags);
    let (one, two) = (serve(), serve());
    let alice = [
        Client::http_as(&one.url, "s3cret-alice").await,
        Client::http_as(&two.url, "s3cret-alice").await,
    ];
    let slow_mint = json!({"sleep_ms": 300});
    let racing = futures_util::future::join_all(
        (0..16).map(|n| alice[n % 2].call("testkit.go", slow_mint.clone())),
    )
    .await;
    let minted = racing.iter().filter(|r| r.is_error != Some(true)).count();
    for refused in racing.iter().filter(|r| r.is_error == Some(true)) {
        assert_eq!(common::error_code(refused), "QUOTA_EXCEEDED", "{refused:?}");
    }
    assert!(
        (1..=LIMIT).contains(&minted),
        "{minted} of 16 racing mints made instances, with a limit of {LIMIT}"
    );
    // The room left, and no more, one mint at a time, through either server.
    for n in minted..LIMIT {
        let made = alice[n % 2].call("testkit.go", json!({})).await;
        assert_ne!(
            made.is_error,
            Some(true),
            "mint {} of {LIMIT}: {made:?}",
            n + 1
        );
    }
    for client in &alice {
        let refused = client.call("testkit.go", json!({})).await;
        assert_eq!(
            common::error_code(&refused),
            "QUOTA_EXCEEDED",
            "{refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_mints_on_two_servers_stay_within_the_limit_on_redis() {
    racing_mints_on_two_servers_stay_within_the_limit(&common::reachable_redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_mints_on_two_servers_stay_within_the_limit_on_postgres() {
    racing_mints_on_two_servers_stay_within_the_limit(&common::reachable_postgres_url()).await;
}

/// Issue 39, item 3: `--max-record-bytes` bounds what one instance's record may hold. Arguments
/// that alone exceed it are refused before the plugin runs; a call whose result would put the
/// record over it (here: its output, remembered for an idempotency key) saves and fires nothing;
/// both say RECORD_TOO_LARGE with the size and the limit.
#[tokio::test]
async fn a_record_past_its_limit_is_refused_and_saves_nothing() {
    let (_plugins, server, client) = common::serve_and_connect(
        &["invoice"],
        &["--state-handle-key", "--max-record-bytes", "2000"],
    )
    .await;
    let huge = "x".repeat(2500);
    let refused = client
        .call("invoice.submit", json!({"amount": 1, "customer": huge}))
        .await;
    assert_eq!(common::error_code(&refused), "RECORD_TOO_LARGE");
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["limit"], 2000, "{error}");

    // Under the limit as arguments, over it once the output (which names the customer) is
    // remembered for the idempotency key beside the rest of the state.
    let long = "y".repeat(1950);
    let refused = client
        .call_with_meta(
            "invoice.submit",
            json!({"amount": 1, "customer": long}),
            json!({"idempotencyKey": "first"}),
        )
        .await;
    assert_eq!(common::error_code(&refused), "RECORD_TOO_LARGE");
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    assert!(error["size"].as_u64().unwrap() > 2000, "{error}");
    // Nothing was minted by either.
    assert_eq!(server.stats().await["registry"]["instances"], 0);
    let fine = client
        .call("invoice.submit", json!({"amount": 1, "customer": "ACME"}))
        .await;
    assert_ne!(fine.is_error, Some(true), "{fine:?}");
}

/// The params of a 2026-07-28 `subscriptions/listen` for `list_changed`.
fn listen_params() -> Value {
    json!({"notifications": {"toolsListChanged": true}})
}

/// A `subscriptions/listen` POST on a connection of its own (`bearer` when given): its answer,
/// whose body, an open stream when it is 200, is left unread for as long as the test keeps it.
async fn listen(server: &Server, bearer: Option<&str>) -> reqwest::Response {
    let mut request =
        common::post_sessionless(&server.url, 1, "subscriptions/listen", listen_params());
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    request
        .send()
        .await
        .expect("an answer to subscriptions/listen")
}

/// The status of `/healthz` and `/readyz`, each asked on a new connection, given up after 5 s.
async fn probes(server: &Server) -> Vec<u16> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut statuses = Vec::new();
    for probe in ["/healthz", "/readyz"] {
        let answer = client
            .get(format!("{}{probe}", server.base()))
            .send()
            .await
            .unwrap_or_else(|error| panic!("{probe} unanswered: {error}"));
        statuses.push(answer.status().as_u16());
    }
    statuses
}

/// Issue 50, item 2: a 2026-07-28 listen is held open like a GET event stream, and counts as
/// one: of 40 listens, each on its own connection, at `--max-connections 40`, the
/// `--stream-share` (80 %) gets its stream and the rest 503 with `Retry-After`; with every
/// connection held, `/healthz` and `/readyz` are answered; a closed listen gives its place back.
#[tokio::test]
async fn listens_take_their_share_of_connections_and_the_probes_are_answered() {
    let (_plugins, server) = common::start(&["invoice"], &["--max-connections", "40"]);
    let mut streams = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..40 {
        let answer = listen(&server, None).await;
        match answer.status().as_u16() {
            200 => {
                assert_eq!(answer.headers()["content-type"], "text/event-stream");
                streams.push(answer);
            }
            503 => {
                assert_eq!(answer.headers()["retry-after"], "5");
                refused.push(answer);
            }
            status => panic!("a listen answered {status}"),
        }
    }
    assert_eq!((streams.len(), refused.len()), (32, 8));
    // All 40 connections are held (the refused ones kept open too): the probes still answer.
    assert_eq!(probes(&server).await, [200, 200]);
    let body: Value = refused.pop().unwrap().json().await.expect("JSON-RPC");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--stream-share"),
        "{body}"
    );
    // A listen that closes gives its place back; the next one streams.
    drop(streams.pop());
    eventually(
        "the closed listen's place never came back",
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let again = listen(&server, None).await;
            if again.status() != 200 {
                assert_eq!(again.status(), 503);
                return false;
            }
            streams.push(again);
            true
        },
    )
    .await;
    drop(refused);
}

/// Issue 50, item 2: `--max-streams-per-principal` counts listens as it counts GET streams:
/// a principal holding two (a GET stream and a listen, or two listens) gets 429 with
/// `Retry-After` for a third of either kind, while another principal listens.
#[tokio::test]
async fn one_principal_keeps_at_most_its_share_of_listens_and_streams() {
    let plugins = PluginDir::with(&["invoice"]);
    let file = TokenFile::with("alice s3cret-alice\nbob s3cret-bob\n");
    let server = Server::http(
        plugins.path(),
        &[
            "--auth-token-file",
            file.arg(),
            "--max-streams-per-principal",
            "2",
        ],
    );
    let alice = Some("s3cret-alice");
    let first = listen(&server, alice).await;
    assert_eq!(first.status(), 200);
    let second = listen(&server, alice).await;
    assert_eq!(second.status(), 200);
    let third = listen(&server, alice).await;
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
    let body: Value = third.json().await.expect("JSON-RPC");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token:alice"),
        "{body}"
    );
    // A GET stream of one of her sessions counts against the same two.
    let session = common::session_id(&initialize_request(&server.url, alice).await);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = common::post_in_session(&server.url, &session, initialized.to_string())
        .bearer_auth("s3cret-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    let get = || {
        get_stream(&server.url, &session)
            .bearer_auth("s3cret-alice")
            .send()
    };
    assert_eq!(get().await.unwrap().status(), 429);
    // Another principal has its own count.
    let bob = listen(&server, Some("s3cret-bob")).await;
    assert_eq!(bob.status(), 200);
    // One of hers closes: her GET stream finds the place.
    drop(first);
    eventually(
        "the closed listen's place never came back",
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let stream = get().await.unwrap();
            if stream.status() != 200 {
                assert_eq!(stream.status(), 429);
            }
            stream.status() == 200
        },
    )
    .await;
    drop((second, bob));
}

/// Issue 50, item 3: request bodies have a deadline. 30 connections at `--max-connections 30`
/// send complete headers, then their body a byte a second: `/healthz` and `/readyz` are
/// answered within `--body-timeout` + 1 s all the same, each trickling connection is closed
/// without an answer, and the server goes on serving. Such a client is not a normal one, and is
/// logged at INFO, not WARN or ERROR.
#[tokio::test]
async fn trickled_bodies_are_cut_and_the_probes_answer_meanwhile() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--max-connections", "30", "--body-timeout", "2"],
    );
    let address = address(&server);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{"
    );
    let (mut readers, mut writers) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let socket = TcpStream::connect(&address).await.expect("connect");
        let (reader, mut writer) = socket.into_split();
        writer.write_all(head.as_bytes()).await.unwrap();
        readers.push(reader);
        writers.push(writer);
    }
    let trickling = Instant::now();
    let trickle = tokio::spawn(async move {
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for writer in &mut writers {
                // Refused once the server has closed the connection.
                let _ = writer.write_all(b" ").await;
            }
        }
    });
    assert_eq!(probes(&server).await, [200, 200]);
    let answered_after = trickling.elapsed();
    assert!(
        answered_after <= Duration::from_secs(3),
        "the probes took {answered_after:?}"
    );
    // Every trickling connection is closed, and none was answered.
    for mut reader in readers {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), reader.read_to_end(&mut answer))
            .await
            .expect("a trickling connection was left open");
        assert!(
            read.is_err() || answer.is_empty(),
            "a trickling client got {:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    trickle.abort();
    // The server still serves, and said what it did at INFO.
    let client = Client::http(&server.url).await;
    let result = client.call("invoice.submit", json!({"amount": 1})).await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    server.wait_for_log("did not arrive within --body-timeout");
    let log = server.stderr();
    let complaints: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(" ERROR ") || line.contains(" WARN "))
        .filter(|line| !line.contains("connection limit reached"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
}
