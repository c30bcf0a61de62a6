//! Steps run as MCP tasks (the 2026-07-28 tasks extension, SEP-2663), as a client sees them:
//! a workflow tool whose manifest lets it run as a task, called by a client declaring the
//! extension, is answered at once with a task once the gate let it through; the instance is
//! held while it runs (a call that would move it is refused naming the task, a reading call is
//! served); the task ends with the result a plain call would have given, the instance moved as
//! that result says; a cancelled task fires nothing.
//!
//! The example plugin's `migration.apply` runs only as a task and works for
//! `TURNSTILE_PLUGIN_MIGRATION_APPLY_MS` (its `apply_ms`). A client of the 2025 revisions follows
//! the same tasks in 2025-11-25's words (the official Python SDK 1.x's `session.experimental`).

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{
    PluginDir, Server, call_2026, declaring_tasks, open_session, post_in_session, post_sessionless,
    python, python::Sdk, result_of, task_request,
};
use serde_json::{Value, json};

/// How long `migration.apply` works here: long enough to be seen running.
const APPLY_MS: &str = "1500";

fn migration_server() -> (PluginDir, Server) {
    migration_server_with(&[], APPLY_MS)
}

/// A server of the migration plugin started with `flags`, whose `migration.apply` works
/// `apply_ms`.
fn migration_server_with(flags: &[&str], apply_ms: &str) -> (PluginDir, Server) {
    let plugins = PluginDir::with(&["migration"]);
    let server = Server::http_with_env(
        plugins.path(),
        flags,
        &[("TURNSTILE_PLUGIN_MIGRATION_APPLY_MS", apply_ms)],
    );
    (plugins, server)
}

/// A plain 2026-07-28 call's result (`result` of the response).
async fn call(url: &str, tool: &str, arguments: Value) -> Value {
    let (response, _) = call_2026(url, tool, arguments, json!({})).await;
    response["result"].clone()
}

/// A migration that reached `backed_up`: its handle.
async fn backed_up(url: &str) -> String {
    let dry_run = call(url, "migration.dry_run", json!({})).await;
    let handle = dry_run["structuredContent"]["handle"]
        .as_str()
        .unwrap_or_else(|| panic!("a handle: {dry_run}"))
        .to_owned();
    let backup = call(url, "migration.backup", json!({"handle": handle})).await;
    assert_ne!(backup["isError"], true, "{backup}");
    handle
}

/// The migration's step, as `migration.status` reports it.
async fn step(url: &str, handle: &str) -> Value {
    let status = call(url, "migration.status", json!({"handle": handle})).await;
    assert_ne!(status["isError"], true, "{status}");
    status["structuredContent"]["state"].clone()
}

/// `tasks/get` until the task ends (or 20 s pass): its last answer.
async fn ended(url: &str, task_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = task_request(url, "tasks/get", task_id, json!({})).await;
        let result = got["result"].clone();
        assert!(result.is_object(), "tasks/get answers: {got}");
        if result["status"] != "working" || Instant::now() > deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The id of the task a call's answer (`result`) started.
fn task_id_of(created: &Value) -> String {
    created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task id: {created}"))
        .to_owned()
}

/// `turnstile instances show HANDLE` on `store` under `namespace`: the instance as an operator
/// reads it, with its audit trail.
fn shown(store: &str, namespace: &str, handle: &str) -> Value {
    let shown = Command::new(common::turnstile_bin())
        .args(["instances", "--json", "--store", store])
        .args(["--store-namespace", namespace, "show", handle])
        .output()
        .expect("run turnstile instances show");
    assert!(shown.status.success(), "{shown:?}");
    serde_json::from_slice(&shown.stdout).expect("one JSON line")
}

/// `migration.apply` on `handle` as a task: the response's `result`.
async fn apply_as_task(url: &str, handle: &str) -> Value {
    let (response, _) = call_2026(
        url,
        "migration.apply",
        json!({"handle": handle, "confirm": true}),
        json!({"_meta": declaring_tasks()}),
    )
    .await;
    response["result"].clone()
}

#[tokio::test]
async fn a_step_run_as_a_task_holds_its_instance_until_it_ends_with_the_transition() {
    let (_plugins, server) = migration_server();
    let url = &server.url;
    let handle = backed_up(url).await;

    let started = Instant::now();
    let created = apply_as_task(url, &handle).await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    let task_id = task_id_of(&created);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "answered before the step ended"
    );

    // Held: a call that would move it is refused, naming the task; a reading call is served.
    let again = apply_as_task(url, &handle).await;
    assert_eq!(again["isError"], true, "{again}");
    assert_eq!(
        again["structuredContent"]["error"]["code"], "BUSY",
        "{again}"
    );
    assert_eq!(
        again["structuredContent"]["error"]["taskId"],
        task_id.as_str()
    );
    assert_eq!(step(url, &handle).await, "backed_up");
    // Every result's next step says the task is running, and offers only what reads.
    let status = call(url, "migration.status", json!({"handle": handle})).await;
    let next = &status["_meta"]["dev.turnstile/next-step"];
    assert_eq!(next["runningTask"]["taskId"], task_id.as_str(), "{status}");
    assert_eq!(next["runningTask"]["tool"], "migration.apply", "{status}");
    assert_eq!(next["available"], json!(["migration.status"]), "{status}");
    let said = status["content"].as_array().unwrap().last().unwrap()["text"].clone();
    let said = said.as_str().unwrap_or_default();
    assert!(
        said.contains(&format!(
            "migration.apply is running on it as task {task_id}"
        )),
        "{said}"
    );
    let working = task_request(url, "tasks/get", &task_id, json!({})).await;
    assert_eq!(working["result"]["status"], "working", "{working}");

    let done = ended(url, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Migration applied"), "{done}");
    assert_eq!(step(url, &handle).await, "applied");
    let status = call(url, "migration.status", json!({"handle": handle})).await;
    let next = &status["_meta"]["dev.turnstile/next-step"];
    assert!(next.get("runningTask").is_none(), "{status}");
    // No longer held: the next step runs.
    let verify = call(url, "migration.verify", json!({"handle": handle})).await;
    assert_ne!(verify["isError"], true, "{verify}");
}

/// A step running as a task holds its place in its plugin's call pool (`--plugin-pool`) as a
/// plain call does: with a pool of one, another migration's call is turned away `BUSY` while
/// the task works, and served once it has ended.
#[tokio::test]
async fn a_running_task_holds_its_place_in_its_plugins_pool() {
    // The step works longer than the second a call waits for a place before it is turned away.
    let (_plugins, server) = migration_server_with(&["--plugin-pool", "1"], "4000");
    let url = &server.url;
    let handle = backed_up(url).await;
    let created = apply_as_task(url, &handle).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let task_id = task_id_of(&created);

    let crowded = call(url, "migration.dry_run", json!({})).await;
    assert_eq!(crowded["isError"], true, "{crowded}");
    assert_eq!(
        crowded["structuredContent"]["error"]["code"], "BUSY",
        "{crowded}"
    );
    assert_eq!(
        task_request(url, "tasks/get", &task_id, json!({})).await["result"]["status"],
        "working"
    );

    let done = ended(url, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let served = call(url, "migration.dry_run", json!({})).await;
    assert_ne!(served["isError"], true, "{served}");
}

#[tokio::test]
async fn a_cancelled_task_fires_nothing_and_lets_its_instance_go() {
    let (_plugins, server) = migration_server();
    let url = &server.url;
    let handle = backed_up(url).await;
    let created = apply_as_task(url, &handle).await;
    let task_id = task_id_of(&created);

    let ack = task_request(url, "tasks/cancel", &task_id, json!({})).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(ended(url, &task_id).await["status"], "cancelled");
    // The plugin stopped having changed nothing: no transition fired, and once its end is
    // saved the step can be taken again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let retried = loop {
        let retried = apply_as_task(url, &handle).await;
        let busy = retried["structuredContent"]["error"]["code"] == "BUSY";
        if !busy || Instant::now() > deadline {
            break retried;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let retried = task_id_of(&retried);
    assert_eq!(ended(url, &retried).await["status"], "completed");
    assert_eq!(step(url, &handle).await, "applied");
}

#[tokio::test]
async fn a_refused_call_starts_no_task() {
    let (_plugins, server) = migration_server();
    let url = &server.url;
    let dry_run = call(url, "migration.dry_run", json!({})).await;
    let handle = dry_run["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    // `migration.apply` before a backup: out of order, refused at once, and no task.
    let refused = apply_as_task(url, &handle).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_ne!(refused["resultType"], "task", "{refused}");
    assert!(refused.get("taskId").is_none(), "{refused}");
    assert_eq!(step(url, &handle).await, "dry_run_ok");
    // `migration.apply` runs only as a task: a plain call (no tasks extension declared) is
    // refused -32021, naming the capability it needs, and nothing ran.
    let params =
        json!({"name": "migration.apply", "arguments": {"handle": handle, "confirm": true}});
    let plain = post_sessionless(url, 1, "tools/call", params)
        .send()
        .await
        .expect("the server answers");
    let plain: Value = plain.json().await.expect("a JSON-RPC error");
    assert_eq!(plain["error"]["code"], -32021, "{plain}");
    assert!(
        plain["error"]["data"]["requiredCapabilities"].is_object(),
        "{plain}"
    );
    // Unknown to tasks/get: -32602.
    let unknown = task_request(url, "tasks/get", "no-such-task", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test]
async fn a_client_past_its_task_limit_is_refused_until_one_ends() {
    let (_plugins, server) = migration_server_with(&["--max-tasks-per-principal", "1"], APPLY_MS);
    let url = &server.url;
    let (first, second) = (backed_up(url).await, backed_up(url).await);
    let running = apply_as_task(url, &first).await;
    let running = task_id_of(&running);

    // One task not ended is this client's limit: the next is refused, and nothing ran.
    let refused = apply_as_task(url, &second).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["structuredContent"]["error"]["code"], "QUOTA_EXCEEDED",
        "{refused}"
    );
    assert!(refused.get("taskId").is_none(), "{refused}");
    assert_eq!(step(url, &second).await, "backed_up");

    // Once it ended, its place is free.
    assert_eq!(ended(url, &running).await["status"], "completed");
    let started = apply_as_task(url, &second).await;
    let started = task_id_of(&started);
    assert_eq!(ended(url, &started).await["status"], "completed");
    assert_eq!(step(url, &second).await, "applied");
}

/// `--max-tasks-per-principal` counts a client's tasks on every server sharing the store: with
/// a task working on one server, the client's next task on the other is refused and nothing
/// ran; once the first ended, the other server starts it.
#[tokio::test]
async fn a_task_limit_holds_across_servers_sharing_the_store() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let limit = ["--max-tasks-per-principal", "1"];
    let (a, b, _data, _namespace) = two_servers(&plugins, &store, APPLY_MS, &limit);
    let (first, second) = (backed_up(&a.url).await, backed_up(&b.url).await);
    let running = task_id_of(&apply_as_task(&a.url, &first).await);

    let refused = apply_as_task(&b.url, &second).await;
    assert_eq!(
        refused["structuredContent"]["error"]["code"], "QUOTA_EXCEEDED",
        "{refused}"
    );
    assert!(refused.get("taskId").is_none(), "{refused}");
    assert_eq!(step(&b.url, &second).await, "backed_up");

    assert_eq!(ended(&a.url, &running).await["status"], "completed");
    // The first task's place is given back as it ends, on its own server's time.
    let started = common::eventually(
        "the first task's place given back",
        Duration::from_secs(5),
        Duration::from_millis(100),
        async || {
            let started = apply_as_task(&b.url, &second).await;
            if started["structuredContent"]["error"]["code"] == "QUOTA_EXCEEDED" {
                Err(started.to_string())
            } else {
                Ok(started)
            }
        },
    )
    .await;
    let started = task_id_of(&started);
    assert_eq!(ended(&b.url, &started).await["status"], "completed");
    assert_eq!(step(&a.url, &second).await, "applied");
}

/// A binding's `on_cancel`: a step cancelled mid-run fires that event (the rollout is stopped,
/// not left ready), and the trail says the cancel did it.
#[tokio::test]
async fn a_cancelled_step_fires_its_on_cancel_event() {
    let plugins = PluginDir::with(&[]);
    plugins.add_c_fixture("rollout");
    let server = Server::http(plugins.path(), &[]);
    let url = &server.url;
    let planned = call(url, "rollout.plan", json!({})).await;
    let handle = planned["structuredContent"]["handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let (response, _) = call_2026(
        url,
        "rollout.run",
        json!({"handle": handle}),
        json!({"_meta": declaring_tasks()}),
    )
    .await;
    let created = response["result"].clone();
    let task_id = task_id_of(&created);
    let running = call(url, "rollout.status", json!({"handle": handle})).await;
    assert_eq!(running["structuredContent"]["state"], "ready", "{running}");

    let ack = task_request(url, "tasks/cancel", &task_id, json!({})).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(ended(url, &task_id).await["status"], "cancelled");
    let deadline = Instant::now() + Duration::from_secs(10);
    let stopped = loop {
        let status = call(url, "rollout.status", json!({"handle": handle})).await;
        if status["structuredContent"]["state"] != "ready" || Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        stopped["structuredContent"]["state"], "stopped",
        "{stopped}"
    );
}

/// The SDK printed nothing a user would read as a warning or an error.
fn assert_sdk_quiet(summary: &Value) {
    let printed: Vec<&str> = summary["stderr"]
        .as_array()
        .expect("the summary reports the SDK's stderr")
        .iter()
        .filter_map(Value::as_str)
        .filter(|line| {
            let line = line.to_lowercase();
            line.contains("warning") || line.contains("error")
        })
        .collect();
    assert!(printed.is_empty(), "the SDK printed: {printed:#?}");
}

/// Two servers sharing `store`, each with its own data directory; `apply_ms` for the handler,
/// and `extra` flags.
fn two_servers(
    plugins: &PluginDir,
    store: &str,
    apply_ms: &str,
    extra: &[&str],
) -> (Server, Server, [tempfile::TempDir; 2], String) {
    let namespace = format!("tasks_{}", uuid::Uuid::new_v4().simple());
    // A lapsed lease is noticed within a second.
    let mut flags = vec!["--lease-ttl", "1000", "--lease-wait", "200"];
    flags.extend(extra);
    let env = [("TURNSTILE_PLUGIN_MIGRATION_APPLY_MS", apply_ms)];
    let data = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let on = |data: &tempfile::TempDir| {
        Server::on_store(
            plugins.path(),
            data.path(),
            Some(store),
            &namespace,
            &flags,
            &env,
        )
    };
    let (a, b) = (on(&data[0]), on(&data[1]));
    (a, b, data, namespace)
}

#[tokio::test]
async fn a_task_whose_server_was_killed_ends_failed_with_what_is_known_on_another_server() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let (mut a, b, _data, _) = two_servers(&plugins, &store, "10000", &[]);
    let handle = backed_up(&a.url).await;
    let created = apply_as_task(&a.url, &handle).await;
    let task_id = task_id_of(&created);

    // The other server reads the task from the instance's record: running, held by its runner.
    let seen = task_request(&b.url, "tasks/get", &task_id, json!({})).await;
    assert_eq!(seen["result"]["status"], "working", "{seen}");
    let busy = apply_as_task(&b.url, &handle).await;
    assert_eq!(busy["structuredContent"]["error"]["code"], "BUSY", "{busy}");

    a.kill9();
    // Once the killed server's lease lapsed, the task ends failed, saying what is known: its
    // handler may have run; nothing it did was saved.
    let failed = ended(&b.url, &task_id).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(failed["error"]["data"]["handlerRan"], "unknown", "{failed}");
    assert_eq!(failed["error"]["data"]["committed"], false, "{failed}");
    assert!(failed.get("result").is_none(), "{failed}");
    // The instance is where the record and its trail say: the step did not happen, and it can
    // be taken now.
    assert_eq!(step(&b.url, &handle).await, "backed_up");
    let again = apply_as_task(&b.url, &handle).await;
    let again = task_id_of(&again);
    assert_eq!(ended(&b.url, &again).await["status"], "completed");
    assert_eq!(step(&b.url, &handle).await, "applied");
}

#[tokio::test]
async fn a_task_that_ended_before_its_server_was_killed_is_read_completed_on_another_server() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let (mut a, b, _data, _) = two_servers(&plugins, &store, "300", &[]);
    let handle = backed_up(&a.url).await;
    let created = apply_as_task(&a.url, &handle).await;
    let task_id = task_id_of(&created);
    assert_eq!(ended(&a.url, &task_id).await["status"], "completed");
    a.kill9();

    let done = ended(&b.url, &task_id).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Migration applied"), "{done}");
    assert_eq!(step(&b.url, &handle).await, "applied");
}

/// A 2025 session's `tools/list` in its revision's shape: a tool that runs as a task says how in
/// `execution.taskSupport`, one that does not says nothing, and the answer has no 2026-07-28
/// `resultType`.
#[tokio::test]
async fn a_2025_listing_says_which_tools_run_as_tasks_in_its_revisions_shape() {
    let (_plugins, server) = migration_server_with(&["--state-handle-key", "handle"], APPLY_MS);
    let handle = backed_up(&server.url).await;
    let session = open_session(&server.url).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": {"handle": handle}}});
    let body = post_in_session(&server.url, &session, list.to_string())
        .send()
        .await
        .expect("the server answers")
        .text()
        .await
        .expect("a body");
    let listed = result_of(&body, 2, "tools/list");
    assert!(listed.get("resultType").is_none(), "{listed}");
    let execution = |name: &str| {
        listed["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|tool| tool["name"] == name))
            .unwrap_or_else(|| panic!("{name} listed: {listed}"))
            .get("execution")
            .cloned()
    };
    assert_eq!(
        execution("migration.apply"),
        Some(json!({"taskSupport": "required"}))
    );
    assert_eq!(execution("migration.status"), None);
}

/// A client whose `tasks/cancel` reaches another server than the one running the task (a load
/// balancer sends requests where it likes) cancels it all the same: the runner is told through
/// the store, the plugin stops, nothing fires, and the trail says who cancelled.
#[tokio::test]
async fn a_task_is_cancelled_through_another_server() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let (a, b, _data, namespace) = two_servers(&plugins, &store, "10000", &[]);
    let handle = backed_up(&a.url).await;
    let created = apply_as_task(&a.url, &handle).await;
    let task_id = task_id_of(&created);

    let started = Instant::now();
    let cancelled = task_request(&b.url, "tasks/cancel", &task_id, json!({})).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    // Answered once the runner had ended it (the step works 10 s).
    let seen = task_request(&b.url, "tasks/get", &task_id, json!({})).await;
    assert_eq!(
        seen["result"]["status"],
        "cancelled",
        "{seen}\n{}\n---\n{}",
        a.stderr(),
        b.stderr()
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the plugin was stopped"
    );
    let on_a = task_request(&a.url, "tasks/get", &task_id, json!({})).await;
    assert_eq!(on_a["result"]["status"], "cancelled", "{on_a}");
    // A second cancel of the ended task is acknowledged, and changes nothing.
    let again = task_request(&b.url, "tasks/cancel", &task_id, json!({})).await;
    assert!(again.get("error").is_none(), "{again}");

    assert_eq!(step(&b.url, &handle).await, "backed_up");
    let shown = shown(&store, &namespace, &handle);
    let last = shown["audit"]
        .as_array()
        .and_then(|trail| trail.last())
        .cloned();
    let last = last.unwrap_or_default();
    assert_eq!(last["by"], "tasks/cancel:migration.apply", "{shown}");
    assert_eq!(last["to"], "backed_up", "{shown}");
}

/// The official Python SDK (1.x, protocol 2025-11-25, `session.experimental`) starts
/// `migration.apply` as a task on one server, and reads it on a second sharing its Redis after
/// the first was killed with SIGKILL: once the killed server's lease lapsed, the task ends
/// failed, `tasks/result` answers with the JSON-RPC error saying what is known, and the
/// migration is where its record and audit trail say: the step never happened.
#[test]
fn an_sdk_client_reads_a_task_of_a_killed_server_failed_on_another_server() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let handle_mode = ["--state-handle-key", "handle"];
    let (a, mut b, _data, namespace) = two_servers(&plugins, &store, "10000", &handle_mode);
    let first = format!("{},{}", a.url, a.pid());
    let summary = python::run_scenario(Sdk::Mcp1, &format!("task-failover:{first}"), &mut b);
    assert_sdk_quiet(&summary);

    assert_eq!(summary["protocol"], "2025-11-25", "{summary}");
    // A plain call of a tool that runs only as a task: -32601, as 2025-11-25 says.
    assert_eq!(summary["refused_plainly"], -32601, "{summary}");
    assert_eq!(summary["seen_on_second"], "working", "{summary}");
    assert_eq!(summary["ended"]["status"], "failed", "{summary}");
    let error = &summary["outcome"]["error"];
    assert_eq!(error["code"], -32603, "{summary}");
    assert_eq!(error["data"]["handlerRan"], "unknown", "{summary}");
    assert_eq!(error["data"]["committed"], false, "{summary}");
    assert_eq!(summary["state"], "backed_up", "{summary}");

    // What the operator reads of it agrees: no step past the backup was recorded.
    let handle = summary["handle"].as_str().expect("a handle");
    let shown = shown(&store, &namespace, handle);
    assert_eq!(shown["state"], "backed_up", "{shown}");
    let trail: Vec<&Value> = shown["audit"].as_array().expect("a trail").iter().collect();
    let last = trail.last().expect("a transition");
    assert_eq!(last["to"], "backed_up", "{shown}");
    assert!(
        trail
            .iter()
            .all(|entry| entry["by"] != "tool:migration.apply"),
        "{shown}"
    );
}

/// The official Python SDK (1.x) cancels `migration.apply` while it works, as an authenticated
/// principal: the task ends cancelled, its result is refused, nothing fired (the migration is
/// still backed up), the audit trail says who cancelled it; and once its end is saved the step
/// is taken again, to its end.
/// The official TypeScript SDK's client, strict about capabilities, runs a step the way it
/// runs any tool that works as a task: from what a 2025-11-25 server declares alone (its
/// `capabilities.tasks`, the tool's `execution.taskSupport`), with no `task` param of its own.
#[test]
fn the_typescript_sdk_runs_a_step_as_a_task_from_what_the_server_declares() {
    let (_plugins, server) = migration_server_with(&["--state-handle-key", "handle"], APPLY_MS);
    let output = common::run_ts_client("task_client.mjs", &[&server.url]);
    let seen = |why: &str| {
        format!(
            "{why}: the client {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server ---\n{}",
            output.describe_status(),
            output.stdout,
            output.stderr,
            server.stderr()
        )
    };
    assert_eq!(output.status, Some(0), "{}", seen("the client failed"));
    // The SDK said nothing: no warning, no error of its own.
    assert!(
        output.stderr.trim().is_empty(),
        "{}",
        seen("the SDK printed")
    );
    let summary: Value = serde_json::from_str(output.stdout.trim())
        .unwrap_or_else(|e| panic!("{}", seen(&e.to_string())));

    assert_eq!(
        summary["declared"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{summary}"
    );
    assert_eq!(
        summary["applyExecution"],
        json!({"taskSupport": "required"}),
        "{summary}"
    );
    // A tool that does not run as a task says nothing.
    assert_eq!(summary["statusExecution"], Value::Null, "{summary}");
    let refusal = summary["plainRefusal"].as_str().unwrap_or_default();
    assert!(
        refusal.contains("requires task-based execution"),
        "{summary}"
    );
    // Created, polled while it worked, then its result.
    assert_eq!(
        summary["seen"],
        json!([
            "taskCreated",
            "taskStatus:working",
            "taskStatus:completed",
            "result"
        ]),
        "{summary}"
    );
    assert_eq!(summary["resultIsError"], false, "{summary}");
    assert!(summary["relatedTask"].is_string(), "{summary}");
    assert_eq!(summary["error"], Value::Null, "{summary}");
    assert_eq!(summary["stateAfter"], "applied", "{summary}");
}

#[test]
fn an_sdk_client_cancels_a_running_step_and_the_trail_says_who() {
    let store = common::reachable_redis_url();
    let plugins = PluginDir::with(&["migration"]);
    let tokens = common::TokenFile::with("alice alice-secret\n");
    let namespace = format!("tasks_{}", uuid::Uuid::new_v4().simple());
    let data = tempfile::tempdir().unwrap();
    let flags = [
        "--state-handle-key",
        "handle",
        "--auth-token-file",
        tokens.arg(),
    ];
    let mut server = Server::on_store(
        plugins.path(),
        data.path(),
        Some(&store),
        &namespace,
        &flags,
        &[("TURNSTILE_PLUGIN_MIGRATION_APPLY_MS", "3000")],
    );
    let summary = python::run_scenario(Sdk::Mcp1, "task-cancel:alice-secret", &mut server);
    assert_sdk_quiet(&summary);

    assert_eq!(summary["cancel_answer"], "cancelled", "{summary}");
    assert_eq!(summary["ended"], "cancelled", "{summary}");
    assert_eq!(summary["result_refused"], -32600, "{summary}");
    // An ended task cannot be cancelled again: -32602, as 2025-11-25 says.
    assert_eq!(summary["cancelled_again"], -32602, "{summary}");
    assert_eq!(summary["state_after_cancel"], "backed_up", "{summary}");
    assert_eq!(summary["final_is_error"], false, "{summary}");
    assert_eq!(summary["state_at_end"], "applied", "{summary}");
    assert_eq!(
        summary["listed"],
        json!(["cancelled", "completed"]),
        "{summary}"
    );
    // Each task's end was told on the session (notifications/tasks/status).
    assert_eq!(
        summary["told"],
        json!([{"task": "first", "status": "cancelled"}, {"task": "again", "status": "completed"}]),
        "{summary}"
    );

    let handle = summary["handle"].as_str().expect("a handle");
    let shown = shown(&store, &namespace, handle);
    let trail: Vec<Value> = shown["audit"]
        .as_array()
        .expect("a trail")
        .iter()
        .map(|entry| json!([entry["by"], entry["from"], entry["to"], entry["principal"]]))
        .collect();
    assert_eq!(
        trail,
        [
            json!([
                "tool:migration.dry_run",
                "planned",
                "dry_run_ok",
                "token:alice"
            ]),
            json!([
                "tool:migration.backup",
                "dry_run_ok",
                "backed_up",
                "token:alice"
            ]),
            json!([
                "tasks/cancel:migration.apply",
                "backed_up",
                "backed_up",
                "token:alice"
            ]),
            json!([
                "tool:migration.apply",
                "backed_up",
                "applied",
                "token:alice"
            ]),
        ],
        "{shown}"
    );
}
