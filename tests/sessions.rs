//! Issue 4 (DESIGN behaviour 7): sessions that end leave nothing behind, and a transition reaches
//! every session that touched the instance.
//!
//! The leak tests speak Streamable HTTP by hand (one POST per message, no GET stream) so that
//! thousands of sessions stay cheap; `/stats` shows what the server still holds for them. The
//! fan-out test uses rmcp's client, which opens the GET stream a real client listens on.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{
    Client, PluginDir, SESSION_PROTOCOL, Server, eventually, http, initialize_message, messages,
    post_with, result_of,
};
use reqwest::{StatusCode, header::CONTENT_TYPE};
use serde_json::{Value, json};
use turnstile::{
    actors::SESSION_PREFIX,
    store::{self, StoreOptions},
};

/// The session-based revision the raw client speaks.
const PROTOCOL: &str = SESSION_PROTOCOL;
/// Concurrent sessions in the leak tests.
const CONCURRENCY: usize = 32;

// ---------------------------------------------------------------------------------------------
// A bare Streamable HTTP client.

/// Posts JSON-RPC messages to one server.
#[derive(Clone)]
struct Raw {
    http: reqwest::Client,
    url: String,
    /// The server's address without path, where `/stats` is.
    base: String,
}

/// One session opened by [`Raw::open`].
struct RawSession {
    raw: Raw,
    id: String,
    next_request: u64,
}

/// A server on the memory store with `plugins`, and a raw session opened on it.
async fn one_raw_session(plugins: &[&str]) -> (PluginDir, Server, RawSession) {
    let plugins = PluginDir::with(plugins);
    let server = Server::http(plugins.path(), &["--store", "memory:"]);
    let session = Raw::new(&server).open().await;
    (plugins, server, session)
}

impl Raw {
    fn new(server: &Server) -> Raw {
        Raw {
            http: http(),
            url: server.url.clone(),
            base: server.base(),
        }
    }

    /// What the server holds now (`/stats`).
    async fn held(&self) -> Held {
        held(&self.http, &self.base).await
    }

    /// Polls `/stats` until `check` holds; ending a session is asynchronous.
    async fn wait_until(
        &self,
        within: Duration,
        what: &str,
        check: impl Fn(&Held) -> bool,
    ) -> Held {
        eventually(
            &format!("/stats still does not show {what}"),
            within,
            Duration::from_millis(50),
            async || {
                let now = self.held().await;
                if check(&now) {
                    Ok(now)
                } else {
                    Err(format!("{now:?}"))
                }
            },
        )
        .await
    }

    fn post(&self, session: Option<&str>, message: &Value) -> reqwest::RequestBuilder {
        self.post_text(session, message.to_string())
    }

    /// A POST of `body`, whatever it holds, as a client sends a JSON-RPC message.
    fn post_text(&self, session: Option<&str>, body: String) -> reqwest::RequestBuilder {
        post_with(&self.http, &self.url, session, body)
    }

    /// `initialize`, then `notifications/initialized`: a session as every client starts one.
    async fn open(&self) -> RawSession {
        let initialize = initialize_message(0, PROTOCOL);
        let response = self
            .post(None, &initialize)
            .send()
            .await
            .expect("initialize");
        assert_eq!(response.status(), StatusCode::OK, "initialize");
        let id = response
            .headers()
            .get("mcp-session-id")
            .expect("the server starts a session (Mcp-Session-Id)")
            .to_str()
            .expect("session id is text")
            .to_string();
        let body = response.text().await.expect("initialize body");
        let result = result_of(&body, 0, "initialize");
        assert_eq!(result["protocolVersion"], PROTOCOL);
        assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = self
            .post(Some(&id), &initialized)
            .send()
            .await
            .expect("notifications/initialized");
        assert_eq!(response.status(), StatusCode::ACCEPTED, "initialized");
        RawSession {
            raw: self.clone(),
            id,
            next_request: 1,
        }
    }
}

impl RawSession {
    /// A POST of request `id` on this session, ready to send (the answer is the caller's to read).
    fn post_request(&self, id: u64, method: &str, params: Value) -> reqwest::RequestBuilder {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.raw.post(Some(&self.id), &message)
    }

    /// A POST of `body` on this session, ready to send.
    fn post_body(&self, body: &str) -> reqwest::RequestBuilder {
        self.raw.post_text(Some(&self.id), body.to_owned())
    }

    /// Sends a request and returns its result.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_request;
        self.next_request += 1;
        let response = self
            .post_request(id, method, params)
            .send()
            .await
            .unwrap_or_else(|error| panic!("{method}: {error}"));
        assert_eq!(response.status(), StatusCode::OK, "{method}");
        let body = response.text().await.expect("response body");
        result_of(&body, id, method)
    }

    /// `tools/list`, optionally naming instances in `_meta`; sorted names.
    async fn tool_names(&mut self, meta: Option<Value>) -> Vec<String> {
        let params = match meta {
            Some(meta) => json!({"_meta": meta}),
            None => json!({}),
        };
        let result = self.request("tools/list", params).await;
        let mut names: Vec<String> = result["tools"]
            .as_array()
            .expect("tools/list returns tools")
            .iter()
            .map(|tool| tool["name"].as_str().expect("tool name").to_string())
            .collect();
        names.sort();
        names
    }

    /// `tools/call` that must succeed; its `structuredContent`.
    async fn call(&mut self, name: &str, arguments: Value) -> Value {
        let result = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        assert_ne!(result["isError"], true, "{name} failed: {result}");
        result["structuredContent"].clone()
    }

    /// DELETE: the client ends the session.
    async fn end(self) {
        let response = self
            .raw
            .http
            .delete(&self.raw.url)
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", PROTOCOL)
            .send()
            .await
            .expect("DELETE");
        assert!(
            response.status().is_success(),
            "DELETE answered {}",
            response.status()
        );
    }

    /// Opens the session's event stream (GET), where notices unrelated to a request arrive.
    async fn open_stream(&self) -> reqwest::Response {
        let stream = self
            .raw
            .http
            .get(&self.raw.url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", PROTOCOL)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("GET stream");
        assert_eq!(stream.status(), StatusCode::OK, "GET stream of {}", self.id);
        stream
    }

    /// Waits until the server serves this session's plain requests itself: it takes a session
    /// up once it has handled `notifications/initialized`, which it accepts (202) before
    /// handling; until then rmcp answers, with a stream. A moment at most.
    async fn until_taken_up(&self) {
        eventually(
            "never answered with plain JSON",
            Duration::from_secs(5),
            Duration::from_millis(10),
            async || {
                let response = self.post_request(0, "ping", json!({})).send().await;
                let answer = response.expect("ping");
                answer
                    .headers()
                    .get(CONTENT_TYPE)
                    .is_some_and(|framing| framing == "application/json")
            },
        )
        .await
    }

    /// What a request on this session gets now.
    async fn probe(&self) -> StatusCode {
        let message = json!({"jsonrpc": "2.0", "id": 999_999, "method": "tools/list"});
        self.raw
            .post(Some(&self.id), &message)
            .send()
            .await
            .expect("probe")
            .status()
    }
}

// ---------------------------------------------------------------------------------------------
// What the server holds.

/// The parts of `/stats` these tests are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    instances: u64,
    session_instances: u64,
    sessions: u64,
    subscriptions: u64,
    watched_instances: u64,
}

impl Held {
    const NOTHING: Held = Held {
        instances: 0,
        session_instances: 0,
        sessions: 0,
        subscriptions: 0,
        watched_instances: 0,
    };
    /// One session, watching the one instance it touched.
    const ONE_SESSION_ONE_INSTANCE: Held = Held {
        instances: 1,
        session_instances: 1,
        sessions: 1,
        subscriptions: 1,
        watched_instances: 1,
    };
}

async fn held(http: &reqwest::Client, base: &str) -> Held {
    let body = http
        .get(format!("{base}/stats"))
        .send()
        .await
        .expect("GET /stats")
        .text()
        .await
        .expect("stats body");
    let stats: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("stats: {body}"));
    let number = |value: &Value| {
        value
            .as_u64()
            .unwrap_or_else(|| panic!("stats field missing: {body}"))
    };
    Held {
        instances: number(&stats["registry"]["instances"]),
        session_instances: number(&stats["registry"]["session_instances"]),
        sessions: number(&stats["notifier"]["sessions"]),
        subscriptions: number(&stats["notifier"]["subscriptions"]),
        watched_instances: number(&stats["notifier"]["watched_instances"]),
    }
}

/// Runs `session(i)` for `i` in `0..count`, at most [`CONCURRENCY`] at a time; a panic in one
/// fails the test.
async fn run_sessions<F, Fut>(count: usize, session: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let session = Arc::new(session);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY.min(count) {
        let session = session.clone();
        let next = next.clone();
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                session(i).await;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        if let Err(error) = done {
            std::panic::resume_unwind(error.into_panic());
        }
    }
}

fn has(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == name)
}

// ---------------------------------------------------------------------------------------------
// Leaks.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_ended_sessions_leave_nothing_behind() {
    const SESSIONS: usize = 10_000;
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let store_url = format!("embedded:{}", data.path().join("state.redb").display());
    let server = Server::http(plugins.path(), &["--store", &store_url]);
    let raw = Raw::new(&server);

    // A witness that stays: the counts below must be exactly its own, which shows they count.
    let mut witness = raw.open().await;
    assert!(has(&witness.tool_names(None).await, "invoice.submit"));
    let submitted = witness.call("invoice.submit", json!({"amount": 1})).await;
    assert_eq!(submitted["state"], "review");
    let witness_only = Held::ONE_SESSION_ONE_INSTANCE;
    assert_eq!(raw.held().await, witness_only);

    let started = Instant::now();
    let session_raw = raw.clone();
    run_sessions(SESSIONS, move |i| {
        let raw = session_raw.clone();
        async move {
            let mut session = raw.open().await;
            // Listing creates the session's own invoice and subscribes the session to it.
            let menu = session.tool_names(None).await;
            assert!(has(&menu, "invoice.submit"), "session {i}: {menu:?}");
            if i % 4 == 0 {
                let submitted = session
                    .call("invoice.submit", json!({"amount": i + 1}))
                    .await;
                assert_eq!(submitted["state"], "review", "session {i}");
            }
            let ended = if i % 500 == 0 {
                Some(RawSession {
                    raw: raw.clone(),
                    id: session.id.clone(),
                    next_request: 0,
                })
            } else {
                None
            };
            session.end().await;
            if let Some(ended) = ended {
                assert_eq!(
                    ended.probe().await,
                    StatusCode::NOT_FOUND,
                    "session {i} answers after DELETE"
                );
            }
        }
    })
    .await;
    let took = started.elapsed();
    println!(
        "{SESSIONS} sessions (initialize, initialized, tools/list, every 4th invoice.submit, \
         DELETE; {CONCURRENCY} at a time) took {took:.2?} ({:.0} sessions/s)",
        SESSIONS as f64 / took.as_secs_f64()
    );

    let settled = Instant::now();
    raw.wait_until(Duration::from_secs(20), "only the witness", |now| {
        *now == witness_only
    })
    .await;
    println!(
        "/stats settled {:.2?} after the last DELETE",
        settled.elapsed()
    );
    // The witness still works, and its invoice is where it left it.
    assert!(has(&witness.tool_names(None).await, "invoice.approve"));

    // The store: every ended session's invoice deleted, the witness's saved. redb locks its file,
    // so look once the server is gone (deletes are queued after /stats settles: give them time).
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(server);
    let store = store::open(&store_url, &StoreOptions::default())
        .await
        .expect("open the server's store");
    let left = store.count(SESSION_PREFIX).await.expect("count");
    let some = store
        .list_keys(SESSION_PREFIX, None, 3)
        .await
        .expect("list");
    assert_eq!(
        left, 1,
        "session instances in the store: only the live witness's may remain ({some:?}…)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passivated_session_instance_comes_back_once_and_leaves_no_record_when_it_ends() {
    let plugins = PluginDir::with(&["invoice"]);
    let data = tempfile::tempdir().expect("temp dir");
    let store_url = format!("embedded:{}", data.path().join("state.redb").display());
    let server = Server::http(
        plugins.path(),
        &["--store", &store_url, "--idle-after", "1"],
    );
    let raw = Raw::new(&server);
    let mut session = raw.open().await;
    let submitted = session.call("invoice.submit", json!({"amount": 4})).await;
    assert_eq!(submitted["state"], "review");
    // The session stays, its invoice idles out of memory (it is saved).
    raw.wait_until(
        Duration::from_secs(10),
        "the session's instance passivated",
        |now| now.instances == 0 && now.sessions == 1,
    )
    .await;
    // It comes back as it was, and is counted once.
    assert!(has(&session.tool_names(None).await, "invoice.approve"));
    assert_eq!(
        raw.held().await,
        Held::ONE_SESSION_ONE_INSTANCE,
        "after passivation and reactivation the session's one instance counts once"
    );
    // Idle out again, then end: the record must go although no actor holds it.
    raw.wait_until(
        Duration::from_secs(10),
        "the session's instance passivated again",
        |now| now.instances == 0 && now.sessions == 1,
    )
    .await;
    session.end().await;
    raw.wait_until(Duration::from_secs(10), "everything forgotten", |now| {
        *now == Held::NOTHING
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(server);
    let store = store::open(&store_url, &StoreOptions::default())
        .await
        .expect("open the server's store");
    let left = store
        .list_keys(SESSION_PREFIX, None, 10)
        .await
        .expect("list");
    assert!(
        left.is_empty(),
        "the ended session's invoice is still stored: {left:?}"
    );
}

/// Polls `/stats` until `count` sessions are passivated.
async fn wait_for_passivated(server: &Server, count: u64) {
    let what = format!("no {count} sessions passivated within 20 s of a 1 s delay");
    server
        .stats_until(&what, Duration::from_secs(20), |stats| {
            stats["http_sessions_passivated"] == count
        })
        .await;
}

/// A session with nothing in flight for `--session-passivate-after` keeps only a small record;
/// its next request is served as if nothing had happened: the same session id, its instance in
/// the state it was left in, and its `list_changed` on an event stream it opens afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_passivated_and_its_next_request_finds_it_as_it_was() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--store", "memory:", "--session-passivate-after", "1"],
    );
    let raw = Raw::new(&server);
    let mut session = raw.open().await;
    let submitted = session.call("invoice.submit", json!({"amount": 4})).await;
    assert_eq!(submitted["state"], "review");
    wait_for_passivated(&server, 1).await;

    // A request restores it: the menu of the state it was left in.
    let names = session.tool_names(None).await;
    assert!(
        has(&names, "invoice.approve") && !has(&names, "invoice.submit"),
        "{names:?}"
    );
    let stats = server.stats().await;
    assert_eq!(stats["http_sessions"], 1, "{stats}");
    assert_eq!(stats["http_sessions_passivated"], 0, "{stats}");
    assert_eq!(
        raw.held().await,
        Held::ONE_SESSION_ONE_INSTANCE,
        "the restored session is the same session, counted once"
    );

    // Passivated again, then back through its event stream: it hears its own transition (a
    // call with a progress token goes through rmcp, whose session tells it on the stream).
    wait_for_passivated(&server, 1).await;
    let mut stream = session.open_stream().await;
    let rejected = session
        .request(
            "tools/call",
            json!({
                "name": "invoice.reject",
                "arguments": {"reason": "no PO number"},
                "_meta": {"progressToken": "reject"},
            }),
        )
        .await;
    assert_eq!(rejected["structuredContent"]["state"], "draft");
    let mut heard = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !heard.contains("notifications/tools/list_changed") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => heard.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("no list_changed on the restored session's stream: {other:?} {heard}"),
        }
    }
    drop(stream);

    session.end().await;
    raw.wait_until(Duration::from_secs(10), "everything forgotten", |now| {
        *now == Held::NOTHING
    })
    .await;
    assert_eq!(server.stats().await["http_sessions"], 0);
}

/// Issue 51, item 1: a session that only watches (its event stream open, nothing else in flight)
/// is passivated like an idle one, so that ten thousand watchers do not each hold rmcp's
/// machinery; its stream stays open and goes on telling it of the instance it watches, and its
/// next request finds it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watching_session_is_passivated_and_its_open_stream_goes_on_telling_it() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &[
            "--store",
            "memory:",
            "--state-handle-key",
            "--session-passivate-after",
            "1",
        ],
    );
    let raw = Raw::new(&server);
    let mut watcher = raw.open().await;
    let submitted = watcher.call("invoice.submit", json!({"amount": 4})).await;
    assert_eq!(submitted["state"], "review");
    let handle = submitted["handle"].as_str().expect("a handle").to_string();
    watcher.until_taken_up().await;
    let mut stream = watcher.open_stream().await;
    wait_for_passivated(&server, 1).await;

    // Another session moves the instance: the passivated watcher hears it on its open stream.
    let mut mover = raw.open().await;
    let approved = mover
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_eq!(approved["state"], "approved", "{approved}");
    let heard = heard_within(&mut stream, Duration::from_secs(10)).await;
    assert!(
        heard.contains("notifications/tools/list_changed"),
        "the watching session heard nothing while passivated: {heard:?}"
    );
    let stats = server.stats().await;
    assert_eq!(
        stats["http_sessions_passivated"], 1,
        "the watcher stayed passivated while it was told: {stats}"
    );

    // Its next request restores it: the menu of the state the other session moved it to.
    let names = watcher.tool_names(Some(json!({"handle": handle}))).await;
    assert!(
        has(&names, "invoice.discharge") && !has(&names, "invoice.approve"),
        "{names:?}"
    );
    let stats = server.stats().await;
    assert_eq!(stats["http_sessions"], 2, "{stats}");

    // Restored, and passivated again while the same stream stays open: it still hears.
    wait_for_passivated(&server, 2).await;
    let discharged = mover
        .call("invoice.discharge", json!({"handle": handle}))
        .await;
    assert_eq!(discharged["state"], "discharged", "{discharged}");
    let heard = heard_within(&mut stream, Duration::from_secs(10)).await;
    assert!(
        heard.contains("notifications/tools/list_changed"),
        "the stream went quiet after a restore and a second passivation: {heard:?}"
    );
    drop(stream);
    watcher.end().await;
    mover.end().await;
}

/// What arrives on `stream` until a tools `list_changed` (the first notice of a transition) or
/// until `within` passes.
async fn heard_within(stream: &mut reqwest::Response, within: Duration) -> String {
    let mut heard = String::new();
    let deadline = Instant::now() + within;
    while !heard.contains("notifications/tools/list_changed") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => heard.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    heard
}

/// A passivated session still ends after `--session-idle-timeout` without a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passivated_session_ends_after_the_idle_timeout() {
    let (_plugins, server) = common::start(
        &["invoice"],
        &[
            "--store",
            "memory:",
            "--session-passivate-after",
            "1",
            "--session-idle-timeout",
            "3",
        ],
    );
    let raw = Raw::new(&server);
    let mut session = raw.open().await;
    session.call("invoice.submit", json!({"amount": 4})).await;
    wait_for_passivated(&server, 1).await;
    raw.wait_until(
        Duration::from_secs(20),
        "the passivated session ended",
        |now| *now == Held::NOTHING,
    )
    .await;
    assert_eq!(server.stats().await["http_sessions"], 0);
    assert_eq!(session.probe().await, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_joining_a_shared_store_keeps_the_other_servers_live_sessions() {
    // Session-mode servers sharing Redis (as in tests/multinode.rs).
    let redis = common::redis_url();
    let namespace = format!("sessions_{}", uuid::Uuid::new_v4().simple());
    let shared = [
        "--store",
        redis.as_str(),
        "--store-namespace",
        namespace.as_str(),
    ];
    let plugins = PluginDir::with(&["invoice"]);
    let east = Server::http(plugins.path(), &shared);
    let raw = Raw::new(&east);
    let mut session = raw.open().await;
    let submitted = session.call("invoice.submit", json!({"amount": 6})).await;
    assert_eq!(submitted["state"], "review");

    // A second server starts on the same store while the session is alive.
    let west = Server::http(plugins.path(), &shared);
    let status = session.call("invoice.status", json!({})).await;
    assert_eq!(
        status["state"],
        "review",
        "a live session's invoice was reset when another server started; west said:\n{}",
        west.stderr()
    );
    session.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_stop_without_delete_end_after_the_idle_timeout() {
    const SESSIONS: usize = 100;
    let (_plugins, server) = common::start(
        &["invoice"],
        &["--session-idle-timeout", "1", "--store", "memory:"],
    );
    let raw = Raw::new(&server);
    let streams = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));

    let (session_raw, session_streams, session_ids) = (raw.clone(), streams.clone(), ids.clone());
    run_sessions(SESSIONS, move |i| {
        let (raw, streams, ids) = (
            session_raw.clone(),
            session_streams.clone(),
            session_ids.clone(),
        );
        async move {
            let mut session = raw.open().await;
            assert!(has(&session.tool_names(None).await, "invoice.submit"));
            if i % 2 == 0 {
                session.call("invoice.submit", json!({"amount": 2})).await;
            }
            if i % 4 == 0 {
                // An open GET stream is not a request: it must not keep the session alive.
                streams.lock().await.push(session.open_stream().await);
            }
            ids.lock().unwrap().push(session.id.clone());
            // No DELETE: the client just goes away.
        }
    })
    .await;

    // One more session keeps sending requests: it must outlive the others.
    let mut busy = raw.open().await;
    let alone = Held::ONE_SESSION_ONE_INSTANCE;
    eventually(
        "idle sessions did not end within 20 s of a 1 s idle timeout",
        Duration::from_secs(20),
        Duration::from_millis(300),
        async || {
            assert!(has(&busy.tool_names(None).await, "invoice.submit"));
            let now = raw.held().await;
            if now == alone {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len(), SESSIONS);
    for id in ids.iter().step_by(10) {
        let gone = RawSession {
            raw: raw.clone(),
            id: id.clone(),
            next_request: 0,
        };
        assert_eq!(gone.probe().await, StatusCode::NOT_FOUND, "session {id}");
    }
    drop(streams);

    // The busy one stops too.
    raw.wait_until(Duration::from_secs(20), "everything forgotten", |now| {
        *now == Held::NOTHING
    })
    .await;
    assert_eq!(busy.probe().await, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_a_handle_unsubscribe_when_they_end_and_the_instance_lives_on() {
    const SESSIONS: usize = 300;
    let (_plugins, server) = common::start(&["invoice"], &["--state-handle-key"]);
    let raw = Raw::new(&server);

    let mut minter = raw.open().await;
    let minted = minter.call("invoice.submit", json!({"amount": 9})).await;
    let handle = minted["handle"]
        .as_str()
        .expect("the result carries the handle")
        .to_string();
    minter.end().await;
    raw.wait_until(Duration::from_secs(10), "zero subscriptions", |now| {
        now.subscriptions == 0 && now.sessions == 0
    })
    .await;

    // Every session touches the one invoice by listing it, and stays open until all have.
    let opened = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let (session_raw, session_opened, session_handle) =
        (raw.clone(), opened.clone(), handle.clone());
    run_sessions(SESSIONS, move |i| {
        let (raw, opened, handle) = (
            session_raw.clone(),
            session_opened.clone(),
            session_handle.clone(),
        );
        async move {
            let mut session = raw.open().await;
            let menu = session.tool_names(Some(json!({"handle": handle}))).await;
            assert!(
                has(&menu, "invoice.approve") && has(&menu, "invoice.reject"),
                "session {i}: {menu:?}"
            );
            opened.lock().await.push(session);
        }
    })
    .await;
    let all = raw.held().await;
    assert_eq!(
        (all.sessions, all.subscriptions, all.watched_instances),
        (SESSIONS as u64, SESSIONS as u64, 1),
        "every session is subscribed to the one instance: {all:?}"
    );
    assert_eq!(
        all.session_instances, 0,
        "handle mode keys no instance by session"
    );

    let sessions = std::mem::take(&mut *opened.lock().await);
    run_sessions_owned(sessions).await;
    raw.wait_until(Duration::from_secs(20), "zero subscriptions", |now| {
        now.sessions == 0 && now.subscriptions == 0 && now.watched_instances == 0
    })
    .await;

    // The instance outlives every session that touched it.
    let mut later = raw.open().await;
    let meta = json!({"handle": handle});
    assert!(has(
        &later.tool_names(Some(meta.clone())).await,
        "invoice.approve"
    ));
    let approved = later
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_eq!(approved["state"], "approved");
    let status = later
        .call("invoice.status", json!({"handle": handle}))
        .await;
    assert_eq!(status["state"], "approved");
    assert_eq!(
        raw.held().await.subscriptions,
        1,
        "only the new session watches the instance"
    );
    later.end().await;
    raw.wait_until(Duration::from_secs(10), "zero subscriptions", |now| {
        now.sessions == 0 && now.subscriptions == 0 && now.watched_instances == 0
    })
    .await;
}

/// Ends `sessions` with DELETE, [`CONCURRENCY`] at a time.
async fn run_sessions_owned(sessions: Vec<RawSession>) {
    let sessions = Arc::new(std::sync::Mutex::new(sessions));
    let count = sessions.lock().unwrap().len();
    run_sessions(count, move |_| {
        let session = sessions
            .lock()
            .unwrap()
            .pop()
            .expect("one session per index");
        session.end()
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Fan-out.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_that_touched_a_handle_hears_one_transition() {
    const SESSIONS: usize = 200;
    let (_plugins, server) =
        common::start(&["invoice"], &["--state-handle-key", "--store", "memory:"]);
    let http = reqwest::Client::new();

    let minter = Client::http(&server.url).await;
    let minted = minter
        .call("invoice.submit", json!({"amount": 3}))
        .await
        .structured_content
        .expect("structuredContent");
    let handle = minted["handle"].as_str().expect("handle").to_string();
    // The minter watches its invoice from the start and heard it move to review.
    minter.changes.wait_for(1).await;

    let clients = Arc::new(tokio::sync::Mutex::new(Vec::new()));
    let (url, session_clients, session_handle) =
        (server.url.clone(), clients.clone(), handle.clone());
    run_sessions(SESSIONS, move |i| {
        let (url, clients, handle) = (url.clone(), session_clients.clone(), session_handle.clone());
        async move {
            let client = Client::http(&url).await;
            let menu = client.tool_names_with_meta(json!({"handle": handle})).await;
            assert!(has(&menu, "invoice.approve"), "session {i}: {menu:?}");
            clients.lock().await.push(client);
        }
    })
    .await;
    let clients = std::mem::take(&mut *clients.lock().await);
    let subscribed = held(&http, &server.base()).await;
    assert_eq!(
        (subscribed.subscriptions, subscribed.watched_instances),
        (SESSIONS as u64 + 1, 1),
        "the minter and every session watch the one instance: {subscribed:?}"
    );
    assert!(
        clients.iter().all(|client| client.changes.count() == 0),
        "nothing changed yet"
    );

    // One transition, made by one of the watchers.
    let approved = clients[0]
        .call("invoice.approve", json!({"handle": handle}))
        .await;
    assert_ne!(approved.is_error, Some(true), "approve: {approved:?}");

    eventually(
        "not every session (nor the minter) heard of the transition",
        Duration::from_secs(20),
        Duration::from_millis(20),
        async || {
            let waiting = clients
                .iter()
                .filter(|client| client.changes.count() == 0)
                .count();
            if waiting == 0 && minter.changes.count() >= 2 {
                Ok(())
            } else {
                Err(format!(
                    "{waiting} of {SESSIONS} sessions (and the minter: {} of 2) got no list_changed",
                    minter.changes.count()
                ))
            }
        },
    )
    .await;
    // Exactly one each.
    minter.changes.stays_at(2).await;
    let extra: Vec<usize> = clients.iter().map(|c| c.changes.count()).collect();
    assert!(
        extra.iter().all(|&n| n == 1),
        "each session hears one transition once: {extra:?}"
    );
    for client in clients {
        client.close().await;
    }
    minter.close().await;
}

/// Issue 10, item 3: a session's request whose response can carry nothing but its result comes
/// back as plain JSON (no event stream to frame it); one that asks for progress, which may come
/// ahead of the result, still gets an event stream, and so does a call that moves the instance,
/// whose `list_changed` comes ahead of its result. All give the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_only_requests_of_a_session_come_back_as_plain_json() {
    let (_plugins, _server, mut session) = one_raw_session(&["invoice"]).await;
    let post =
        |id: u64, method: &str, params: Value| session.post_request(id, method, params).send();
    let framing = |response: &reqwest::Response| {
        response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };

    session.until_taken_up().await;
    for (id, method, params) in [
        (1, "ping", json!({})),
        (2, "tools/list", json!({})),
        (
            3,
            "tools/call",
            json!({"name": "invoice.status", "arguments": {}}),
        ),
        (
            4,
            "tools/call",
            json!({"name": "invoice.submit", "arguments": {"amount": 3}}),
        ),
        (
            5,
            "tools/call",
            json!({"name": "invoice.submit", "arguments": {"amount": 3}}),
        ),
        (
            6,
            "tools/call",
            json!({"name": "no.such.tool", "arguments": {}}),
        ),
    ] {
        let response = post(id, method, params).await.expect(method);
        assert_eq!(response.status(), StatusCode::OK, "{method}");
        let moves = id == 4;
        assert_eq!(
            framing(&response),
            if moves {
                "text/event-stream"
            } else {
                "application/json"
            },
            "{method} (request {id})"
        );
        let body = response.text().await.expect("body");
        let answer: Value = if moves {
            let events: Vec<Value> = body
                .lines()
                .filter_map(|line| line.strip_prefix("data: "))
                .map(|data| serde_json::from_str(data).expect("an event's JSON-RPC message"))
                .collect();
            // The lists it changed (tools, and this workflow's prompts and resources too),
            // then the result.
            let (result, notices) = events.split_last().expect("events");
            assert_eq!(
                notices
                    .iter()
                    .map(|notice| notice["method"].as_str().unwrap_or_default())
                    .collect::<Vec<_>>(),
                [
                    "notifications/tools/list_changed",
                    "notifications/prompts/list_changed",
                    "notifications/resources/list_changed"
                ],
                "{body}"
            );
            result.clone()
        } else {
            serde_json::from_str(&body).expect("one JSON-RPC message")
        };
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], id);
        match id {
            4 => assert_eq!(answer["result"]["structuredContent"]["state"], "review"),
            // The same gating as ever: submitted once, the second submit is refused.
            5 => assert_eq!(
                answer["result"]["structuredContent"]["error"]["code"],
                "FORBIDDEN"
            ),
            6 => assert_eq!(answer["error"]["code"], -32602),
            _ => assert!(answer.get("result").is_some(), "{method}: {answer}"),
        }
    }

    let response = post(
        7,
        "tools/call",
        json!({"name": "invoice.status", "arguments": {}, "_meta": {"progressToken": "p7"}}),
    )
    .await
    .expect("tools/call with a progress token");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(framing(&response), "text/event-stream");
    let status = result_of(&response.text().await.unwrap(), 7, "status");
    assert_eq!(status["structuredContent"]["state"], "review");
    session.next_request = 8;
    assert_eq!(
        session.call("invoice.status", json!({})).await["state"],
        "review"
    );
    session.end().await;
}

/// The invoice plugin's prompt, offered in review.
const CHECKLIST: &str = "invoice.review_checklist";

/// Where a request of the corpus below is answered.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Served {
    /// On the spot, by `mcp/http/direct.rs` (a plain JSON response).
    Here,
    /// By rmcp's machinery either way: `direct.rs` hands it on (or it is not a request at all).
    ByRmcp,
}

/// An answer of the corpus test, as a client reads it: the HTTP status, the JSON-RPC message
/// that answers the request (`Null` where none does) and the body otherwise.
fn answer_of(status: StatusCode, body: &str) -> (StatusCode, Value, String) {
    let answer = messages(body)
        .into_iter()
        .find(|message| message.get("result").is_some() || message.get("error").is_some());
    match answer {
        Some(answer) => (status, answer, String::new()),
        None => (status, Value::Null, body.to_owned()),
    }
}

/// Every request `mcp/http/direct.rs` may answer on the spot (each method of its `ANSWER_ONLY`,
/// with and without parameters, answered with a result, a tool error or a JSON-RPC error), and
/// the requests it must hand to rmcp but could be taken for them (an unknown method, parameters
/// rmcp's types refuse, an id that is missing, null or not an id, a batch, another JSON-RPC
/// version, a body that is not JSON), gets the answer rmcp's own dispatch gives the same bytes.
/// Each body is sent twice on one session: plainly, and with an `Origin` (allowed on loopback),
/// which `direct.rs` leaves to rmcp, as it leaves anything rmcp must check; a `tools/call` is
/// also sent a third time with a progress token, the other way a client gets rmcp's dispatch.
/// This is what keeps the two the same: it fails where the answers differ, and where a request
/// meant to be answered on the spot was not (no plain JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_answered_on_the_spot_is_answered_as_rmcp_answers_it() {
    use Served::{ByRmcp, Here};
    let (_plugins, server, mut session) = one_raw_session(&["invoice", "testkit"]).await;
    session.until_taken_up().await;
    // In review: the review checklist is offered, the invoice is readable.
    assert_eq!(
        session
            .call("invoice.submit", json!({"amount": 1234.5}))
            .await["state"],
        "review"
    );
    let origin = format!(
        "http://localhost:{}",
        server.base().rsplit(':').next().unwrap()
    );
    let request = |id: u64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let call = |id: u64, name: &str, arguments: Value| {
        request(
            id,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        )
    };
    let message = |message: Value| message.to_string();
    // What direct.rs answers itself.
    let on_the_spot = [
        // ping
        message(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
        request(2, "ping", json!({})),
        request(3, "ping", json!({"_meta": {"note": 1}})),
        message(json!({"jsonrpc": "2.0", "id": "a-7", "method": "ping"})),
        // tools/list
        message(json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"})),
        request(11, "tools/list", json!({})),
        request(12, "tools/list", Value::Null),
        request(13, "tools/list", json!({"cursor": "nowhere"})),
        // tools/call: a result, a tool error (refused by the gate), JSON-RPC errors (wrong
        // arguments, an unknown tool), an image block beside structured content, a call id.
        call(20, "invoice.status", json!({})),
        call(21, "invoice.submit", json!({"amount": 5})),
        call(22, "invoice.approve", json!({"note": 5})),
        call(23, "no.such.tool", json!({})),
        call(24, "testkit.content", json!({})),
        call(25, "testkit.echo", json!({"word": "same"})),
        request(26, "tools/call", json!({"name": "invoice.status"})),
        call(27, "invoice.status", json!([1, 2])),
        // prompts/list and prompts/get: a prompt, wrong arguments, an unknown prompt.
        request(30, "prompts/list", json!({})),
        message(json!({"jsonrpc": "2.0", "id": 31, "method": "prompts/list"})),
        request(
            32,
            "prompts/get",
            json!({"name": CHECKLIST, "arguments": {"focus": "the VAT number"}}),
        ),
        request(
            33,
            "prompts/get",
            json!({"name": CHECKLIST, "arguments": {"focus": 3}}),
        ),
        request(34, "prompts/get", json!({"name": "no.such.prompt"})),
        // resources/list, resources/templates/list, resources/read: a resource, unknown ones.
        request(40, "resources/list", json!({})),
        message(json!({"jsonrpc": "2.0", "id": 41, "method": "resources/list"})),
        request(42, "resources/templates/list", json!({})),
        request(43, "resources/read", json!({"uri": "invoice://session"})),
        request(44, "resources/read", json!({"uri": "nothing://here"})),
        request(45, "resources/read", json!({"uri": "invoice://invoice-0"})),
        // Parameters rmcp's types refuse: rmcp reads each as a request of that method it has
        // no type for, and answers it with an error.
        request(60, "tools/call", json!({})),
        request(62, "prompts/get", json!({})),
        request(63, "resources/read", json!({})),
        request(64, "resources/read", json!({"uri": 7})),
    ];
    // What direct.rs hands to rmcp whichever way it comes.
    let handed_on = [
        // Ids that are not ids, and no id (a notification, not a request).
        message(json!({"jsonrpc": "2.0", "id": null, "method": "ping"})),
        message(json!({"jsonrpc": "2.0", "id": {"n": 1}, "method": "tools/list"})),
        message(json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"})),
        message(json!({"jsonrpc": "2.0", "method": "tools/list"})),
        message(json!({"jsonrpc": "2.0", "method": "tools/call",
                       "params": {"name": "invoice.status", "arguments": {}}})),
        // Methods that are not answer-only.
        request(50, "foo/bar", json!({})),
        request(51, "completion/complete", json!({})),
        request(52, "logging/setLevel", json!({"level": "debug"})),
        // Parameters that are not an object.
        request(61, "tools/call", json!("nope")),
        request(65, "tools/list", json!([1])),
        // Not one JSON-RPC 2.0 request.
        message(json!({"jsonrpc": "1.0", "id": 70, "method": "ping"})),
        message(json!([{"jsonrpc": "2.0", "id": 71, "method": "ping"}])),
        message(json!({"jsonrpc": "2.0", "id": 72})),
        r#"{"jsonrpc": "2.0", "id": 73, "method": "ping""#.to_string(),
        String::new(),
    ];
    let corpus = (on_the_spot.into_iter().map(|body| (Here, body)))
        .chain(handed_on.into_iter().map(|body| (ByRmcp, body)));
    for (served, body) in corpus {
        let here = session.post_body(&body).send().await.expect(&body);
        let framing = here.headers().get(CONTENT_TYPE).cloned();
        let here = answer_of(here.status(), &here.text().await.expect("body"));
        if served == Here {
            assert_eq!(
                framing.as_ref().and_then(|value| value.to_str().ok()),
                Some("application/json"),
                "{body} was not answered on the spot: {here:?}"
            );
        }
        let mut by_rmcp = vec![session.post_body(&body).header("Origin", &origin)];
        let mut with_progress: Value = serde_json::from_str(&body).unwrap_or_default();
        if with_progress["method"] == "tools/call" && with_progress["params"].is_object() {
            with_progress["params"]["_meta"] = json!({"progressToken": "p"});
            by_rmcp.push(session.post_body(&with_progress.to_string()));
        }
        for rmcp in by_rmcp {
            let rmcp = rmcp.send().await.expect(&body);
            if served == Here {
                assert_eq!(
                    rmcp.headers()[CONTENT_TYPE],
                    "text/event-stream",
                    "{body}: rmcp answers with a stream"
                );
            }
            let rmcp = answer_of(rmcp.status(), &rmcp.text().await.expect("body"));
            let (mut here, mut rmcp) = (here.clone(), rmcp);
            if body.contains("testkit.echo") {
                // Each call has an id of its own; nothing else may differ.
                for (_, answer, _) in [&mut here, &mut rmcp] {
                    let result = &mut answer["result"];
                    result["structuredContent"]
                        .as_object_mut()
                        .map(|echo| echo.remove("call_id"));
                    result["content"] = Value::Null;
                }
            }
            assert_eq!(
                here, rmcp,
                "{body}: served on the spot (left) and by rmcp (right)"
            );
        }
    }
    session.end().await;
}

/// A session hears of its own move in the call's reply, ahead of the result: a client that
/// closes once its call returns has nothing still on its way (on the event stream the notice
/// would come after the result; the Python SDK 1.x logs an ERROR for a message that reaches a
/// stream it is closing). A move another session makes before this one opens its event stream
/// is not lost: it arrives when the stream opens (the Python SDK 1.x opens its stream only
/// after the handshake, and a client may call before it does), and the stream does not repeat
/// the session's own move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_due_before_the_event_stream_opens_arrives_when_it_opens() {
    let (_plugins, server) =
        common::start(&["invoice"], &["--state-handle-key", "--store", "memory:"]);
    let raw = Raw::new(&server);
    let alice = raw.open().await;
    let mut bob = raw.open().await;
    let minted = alice
        .post_request(
            1,
            "tools/call",
            json!({"name": "invoice.submit", "arguments": {"amount": 5}}),
        )
        .send()
        .await
        .expect("POST tools/call");
    let body = minted.text().await.expect("the reply's body");
    let notice = body
        .find("notifications/tools/list_changed")
        .unwrap_or_else(|| panic!("the reply tells the caller its list changed: {body}"));
    let result = body.find(r#""result""#).expect("the reply's result");
    assert!(
        notice < result,
        "the notice comes ahead of the result: {body}"
    );
    let handle = result_of(&body, 1, "tools/call")["structuredContent"]["handle"]
        .as_str()
        .expect("the minted handle")
        .to_owned();
    assert_eq!(
        bob.call("invoice.approve", json!({"handle": handle})).await["state"],
        "approved"
    );
    let mut stream = alice.open_stream().await;
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("notifications/tools/list_changed") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("no list_changed on the stream within 10 s ({other:?}): {seen:?}"),
        }
    }
    // Bob's move, and not Alice's own again; it came as an SSE event.
    if let Ok(Ok(Some(chunk))) =
        tokio::time::timeout(Duration::from_millis(300), stream.chunk()).await
    {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(
        seen.matches("notifications/tools/list_changed").count(),
        1,
        "{seen}"
    );
    assert!(seen.contains("data: "), "{seen}");
    drop(stream);
    alice.end().await;
    bob.end().await;
}

/// `notifications/cancelled` reaches a call served without rmcp's service loop (one without a
/// progress token, answered as plain JSON): the plugin, which watches for cancellation, stops
/// long before its 5 s, and its transition does not fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_plain_call_stops_its_plugin_and_fires_nothing() {
    let (_plugins, server, mut session) = one_raw_session(&["testkit"]).await;
    session.call("testkit.go", json!({})).await;
    let names = session.tool_names(None).await;
    assert!(has(&names, "testkit.reset"), "{names:?}");

    let call = session
        .post_request(
            77,
            "tools/call",
            json!({"name": "testkit.reset", "arguments": {"watch_ms": 5000}}),
        )
        .send();
    let call = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled = session
        .raw
        .post(
            Some(&session.id),
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 77, "reason": "the user gave up"}}),
        )
        .send()
        .await
        .expect("notifications/cancelled");
    assert_eq!(cancelled.status(), StatusCode::ACCEPTED);
    let stopped = |stats: &Value| stats["plugins"]["testkit"]["calls_running"] == 0;
    let what = "the plugin did not stop on cancellation";
    server
        .stats_until(what, Duration::from_secs(3), stopped)
        .await;
    let answered = call.await.expect("the call's task").expect("the call");
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(
        answered.headers()[CONTENT_TYPE],
        "application/json",
        "the call was served on the plain path"
    );
    // Nothing fired: the instance is still `done`, where reset is offered.
    session.next_request = 100;
    assert!(has(&session.tool_names(None).await, "testkit.reset"));
    session.end().await;
}

/// A plugin's log lines are about the call that made them, so they travel on that call's own
/// response stream, ahead of its result, in the order the plugin wrote them; the session's GET
/// stream, for news unrelated to a running request, does not carry them. A call that logs
/// nothing is still plain JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_logs_streams_its_lines_ahead_of_its_result_on_its_own_response() {
    let (_plugins, _server, mut session) = one_raw_session(&["testkit"]).await;
    session.until_taken_up().await;
    session
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    let mut events = session.open_stream().await;
    let call = |id: u64, count: u32, level: &str| {
        let arguments = json!({"count": count, "level": level});
        session
            .post_request(
                id,
                "tools/call",
                json!({"name": "testkit.report", "arguments": arguments}),
            )
            .send()
    };
    for id in 10..20 {
        let response = call(id, 3, "warning").await.expect("tools/call");
        assert_eq!(response.status(), StatusCode::OK);
        let framing = response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(framing, "text/event-stream", "request {id}");
        let said = messages(&response.text().await.expect("body"));
        let what: Vec<Value> = said
            .iter()
            .map(|message| match message["method"].as_str() {
                Some(method) => json!([method, message["params"]["data"]["step"]]),
                None => json!(["result", message["result"]["structuredContent"]["reported"]]),
            })
            .collect();
        assert_eq!(
            what,
            [
                json!(["notifications/message", 1]),
                json!(["notifications/message", 2]),
                json!(["notifications/message", 3]),
                json!(["result", 3]),
            ],
            "request {id}: {said:?}"
        );
        assert_eq!(said[3]["id"], id);
    }
    // Below the session's level: nothing to say, so nothing but the result.
    let response = call(30, 2, "debug").await.expect("tools/call");
    assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
    let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(answer["result"]["structuredContent"]["reported"], 2);

    // The GET stream heard none of it (it carries keep-alive comments at most).
    let mut heard = String::new();
    while let Ok(Ok(Some(chunk))) =
        tokio::time::timeout(Duration::from_millis(500), events.chunk()).await
    {
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!heard.contains("notifications/message"), "{heard}");
    session.next_request = 40;
    session.end().await;
}
