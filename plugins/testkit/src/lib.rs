//! **Test fixture plugin** for Turnstile's own test suites; not an example to copy and not meant
//! for production plugin directories. It gives tests tools that misbehave on purpose:
//!
//! - `testkit.panic` (ungated): panics, to check a plugin panic is contained and reported.
//! - `testkit.slow` (ungated): sleeps `ms` milliseconds, then returns; for concurrency and
//!   timeout tests.
//! - `testkit.echo` (ungated): returns its input, the call context and the plugin's
//!   configuration, to check what the host passes.
//! - workflow `testkit` (`idle` --GO--> `done` --RESET--> `idle`; `GO` guarded by this plugin's
//!   named guard `testkit.allows`, false when the call's `word` is the guard's `params.deny`,
//!   `"stop"`) with `testkit.go` (bound to
//!   `idle`, fires `GO`; sleeps `sleep_ms` first; fails with a tool error when its input has
//!   `"fail": true`, panics with
//!   `"panic": true`, and breaks its declared `output_schema` with `"bad_output": true`) and
//!   `testkit.reset` (bound to `done`, fires `RESET`; sleeps `sleep_ms` first, or up to
//!   `watch_ms` while polling for cancellation), to check that a
//!   failed, panicked, malformed or abandoned call fires no transition. `testkit.reset` first
//!   appends a line (call id, idempotency key, process id) to the file `run_log` names, when
//!   given, so tests count its handler's runs across server processes.
//! - `testkit.content` (ungated): returns an image content block and structured data beside it
//!   (the `_content` output convention).
//! - `testkit.report` (ungated): logs `count` messages at `level` and reports progress `count`
//!   times (host services), then returns.
//! - `testkit.abort` (ungated): calls `abort()`, ending the process it runs in; and
//!   `testkit.go` with `"abort": true` does the same. Only for tests that run testkit isolated
//!   (`serve --isolate testkit`, or the configuration `TURNSTILE_PLUGIN_TESTKIT_ISOLATE=true`,
//!   which makes the manifest ask for it).

use std::{thread, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};
use turnstile_plugin::{
    CallContext, LogLevel, Manifest, Plugin, ToolError, ToolManifest, parse_input, plugin_config,
};

/// The plugin value; stateless.
#[derive(Default)]
pub struct Testkit;

turnstile_plugin::export_plugin!(Testkit);

/// The longest `testkit.slow` sleeps, so a typo in a test cannot hang the suite.
const MAX_SLEEP_MS: u64 = 60_000;

#[derive(Deserialize)]
struct SlowInput {
    ms: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GoInput {
    fail: bool,
    panic: bool,
    bad_output: bool,
    abort: bool,
    /// Milliseconds to sleep first: a mint in flight that long, for the racing tests.
    sleep_ms: u64,
}

#[derive(Deserialize)]
struct ReportInput {
    count: u32,
    level: String,
}

/// Appends the call's id, its idempotency key and this process's id as one line to the file at
/// `path`: one `write` of an `O_APPEND` file, so lines from several processes never interleave.
fn log_run(path: &str, ctx: &CallContext) -> Result<(), ToolError> {
    use std::io::Write;
    let line = format!(
        "{} {} {}\n",
        ctx.call_id,
        ctx.idempotency_key,
        std::process::id()
    );
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .map_err(|error| ToolError::failed(format!("cannot append to {path}: {error}")))
}

impl Plugin for Testkit {
    fn manifest(&self) -> Manifest {
        let object = json!({"type": "object", "properties": {}});
        // A fixture: `turnstile serve` refuses it unless told `--allow-test-plugins`.
        let mut manifest = Manifest::new("testkit", env!("CARGO_PKG_VERSION")).test_fixture();
        manifest.guards.push("testkit.allows".into());
        let manifest = if plugin_config()["isolate"] == "true" {
            manifest.isolated()
        } else {
            manifest
        };
        manifest
            .workflow(json!({
                "id": "testkit",
                "initial": "idle",
                "states": {
                    "idle": {"on": {"GO": {"target": "done", "guard": {
                        "type": "testkit.allows", "params": {"deny": "stop"}}}}},
                    "done": {"on": {"RESET": "idle"}}
                }
            }))
            .tool(ToolManifest::new(
                "testkit.panic",
                "Test fixture: always panics inside the plugin.",
                object.clone(),
            ))
            .tool(ToolManifest::new(
                "testkit.slow",
                "Test fixture: sleeps `ms` milliseconds (at most 60000), then returns.",
                json!({
                    "type": "object",
                    "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
                    "required": ["ms"]
                }),
            ))
            .tool(
                ToolManifest::new(
                    "testkit.quick_slow",
                    "Test fixture: declares itself quick (1 ms) but sleeps `ms` milliseconds.",
                    json!({
                        "type": "object",
                        "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
                        "required": ["ms"]
                    }),
                )
                .quick(1),
            )
            .tool(ToolManifest::new(
                "testkit.echo",
                "Test fixture: returns its input and the call context.",
                json!({"type": "object"}),
            ))
            .tool(
                ToolManifest::new(
                    "testkit.go",
                    "Test fixture: moves the testkit workflow from idle to done. Fails with a \
                     tool error when `fail` is true, panics when `panic` is true.",
                    json!({
                        "type": "object",
                        "properties": {
                            "fail": {"type": "boolean"},
                            "panic": {"type": "boolean"},
                            "bad_output": {"type": "boolean"},
                            "word": {"type": "string"},
                            "abort": {"type": "boolean"},
                            "sleep_ms": {"type": "integer", "minimum": 0}
                        }
                    }),
                )
                .compact("Test fixture: idle -> done.")
                .workflow("testkit", ["idle"])
                .transition("GO")
                .output_schema(json!({
                    "type": "object",
                    "properties": {"event": {"const": "GO"}, "message": {"type": "string"}},
                    "required": ["event", "message"]
                })),
            )
            .tool(ToolManifest::new(
                "testkit.content",
                "Test fixture: returns an image block and structured data.",
                json!({"type": "object"}),
            ))
            .tool(ToolManifest::new(
                "testkit.report",
                "Test fixture: logs `count` messages at `level` and reports progress `count` \
                 times.",
                json!({
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer", "minimum": 0, "maximum": 100},
                        "level": {"type": "string"}
                    },
                    "required": ["count", "level"]
                }),
            ))
            .tool(ToolManifest::new(
                "testkit.abort",
                "Test fixture: calls abort(), ending the process the plugin runs in.",
                object.clone(),
            ))
            .tool(
                ToolManifest::new(
                    "testkit.reset",
                    "Test fixture: moves the testkit workflow from done back to idle.",
                    object,
                )
                .workflow("testkit", ["done"])
                .transition("RESET"),
            )
    }

    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        match tool {
            "testkit.panic" => panic!("testkit.panic was called"),
            "testkit.abort" => std::process::abort(),
            "testkit.slow" | "testkit.quick_slow" => {
                let SlowInput { ms } = parse_input(input)?;
                if ms > MAX_SLEEP_MS {
                    return Err(ToolError::bad_input(format!(
                        "ms must be at most {MAX_SLEEP_MS}"
                    )));
                }
                thread::sleep(Duration::from_millis(ms));
                Ok(json!({"slept_ms": ms}))
            }
            "testkit.echo" => Ok(json!({
                "input": input,
                "call_id": ctx.call_id,
                "handle": ctx.handle,
                "state": ctx.state,
                // A fixture may show its configuration; a real plugin must not (secrets).
                "config": plugin_config(),
            })),
            "testkit.go" => {
                let go: GoInput = parse_input(input)?;
                thread::sleep(Duration::from_millis(go.sleep_ms.min(MAX_SLEEP_MS)));
                if go.panic {
                    panic!("testkit.go was asked to panic");
                }
                if go.abort {
                    std::process::abort();
                }
                if go.fail {
                    return Err(ToolError::failed("testkit.go was asked to fail"));
                }
                if go.bad_output {
                    return Ok(json!({"event": 7}));
                }
                Ok(json!({"event": "GO", "message": "idle -> done"}))
            }
            "testkit.content" => Ok(json!({
                "_content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}],
                "width": 1
            })),
            "testkit.report" => {
                let ReportInput { count, level } = parse_input(input)?;
                let level = LogLevel::parse(&level)
                    .ok_or_else(|| ToolError::bad_input(format!("no log level {level}")))?;
                for step in 1..=count {
                    ctx.host.log(level, &json!({"step": step}));
                    ctx.host
                        .progress(f64::from(step), Some(f64::from(count)), Some("working"));
                }
                Ok(json!({"reported": count, "services": ctx.host.is_offered()}))
            }
            "testkit.reset" => {
                if let Some(path) = input.get("run_log").and_then(Value::as_str) {
                    log_run(path, ctx)?;
                }
                // `sleep_ms`: a slow transition, for shutdown tests. `watch_ms`: as slow, but it
                // stops early with an error once the host says the call was cancelled.
                let sleep_ms = input.get("sleep_ms").and_then(Value::as_u64).unwrap_or(0);
                thread::sleep(Duration::from_millis(sleep_ms.min(MAX_SLEEP_MS)));
                let watch_ms = input.get("watch_ms").and_then(Value::as_u64).unwrap_or(0);
                for _ in 0..watch_ms.min(MAX_SLEEP_MS) / 10 {
                    if ctx.host.is_cancelled() {
                        return Err(ToolError::failed("cancelled before it finished"));
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                Ok(json!({"event": "RESET", "message": "done -> idle"}))
            }
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }

    /// `testkit.allows`: true unless the call's `word` (its input) is `params.deny`, after
    /// sleeping the call's `guard_sleep_ms` first (a guard slower than the host's deadline).
    /// Any other name is an error, which the host counts as false.
    fn guard(
        &self,
        name: &str,
        params: &Value,
        _context: &Value,
        event: &Value,
    ) -> Result<bool, ToolError> {
        match name {
            "testkit.allows" => {
                let sleep_ms = event["input"]["guard_sleep_ms"].as_u64().unwrap_or(0);
                thread::sleep(Duration::from_millis(sleep_ms.min(MAX_SLEEP_MS)));
                let word = &event["input"]["word"];
                Ok(word.is_null() || *word != params["deny"])
            }
            other => Err(ToolError::failed(format!("no guard {other}"))),
        }
    }
}
