//! **Test fixture plugin** for Turnstile's own test suites; not an example to copy and not meant
//! for production plugin directories. It gives tests tools that misbehave on purpose:
//!
//! - `testkit.panic` (ungated): panics, to check a plugin panic is contained and reported.
//! - `testkit.slow` (ungated): sleeps `ms` milliseconds, then returns; for concurrency and
//!   timeout tests.
//! - `testkit.echo` (ungated): returns its input and the call context, to check what the host
//!   passes.
//! - workflow `testkit` (`idle` --GO--> `done` --RESET--> `idle`) with `testkit.go` (bound to
//!   `idle`, fires `GO`; fails with a tool error when its input has `"fail": true`, panics with
//!   `"panic": true`) and `testkit.reset` (bound to `done`, fires `RESET`), to check that a
//!   failed or panicked call fires no transition.

use std::{thread, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};
use turnstile_plugin_api::{CallContext, Manifest, Plugin, ToolError, ToolManifest, parse_input};

/// The plugin value; stateless.
#[derive(Default)]
pub struct Testkit;

turnstile_plugin_api::export_plugin!(Testkit);

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
}

impl Plugin for Testkit {
    fn manifest(&self) -> Manifest {
        let object = json!({"type": "object", "properties": {}});
        Manifest::new("testkit", env!("CARGO_PKG_VERSION"))
            .workflow(json!({
                "id": "testkit",
                "initial": "idle",
                "states": {
                    "idle": {"on": {"GO": "done"}},
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
                        "properties": {"fail": {"type": "boolean"}, "panic": {"type": "boolean"}}
                    }),
                )
                .compact("Test fixture: idle -> done.")
                .workflow("testkit", ["idle"])
                .transition("GO"),
            )
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
            "testkit.slow" => {
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
            })),
            "testkit.go" => {
                let go: GoInput = parse_input(input)?;
                if go.panic {
                    panic!("testkit.go was asked to panic");
                }
                if go.fail {
                    return Err(ToolError::failed("testkit.go was asked to fail"));
                }
                Ok(json!({"event": "GO", "message": "idle -> done"}))
            }
            "testkit.reset" => Ok(json!({"event": "RESET", "message": "done -> idle"})),
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}
