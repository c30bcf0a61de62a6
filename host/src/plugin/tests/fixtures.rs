//! Test fixtures: the example plugins as cargo builds them, and C libraries compiled on the fly.

use std::{
    env,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The repository root, found from this file's path: cargo passes it relative to the workspace
/// root for workspace members and absolute otherwise (as in a scratch crate pointing here).
fn repo_root() -> PathBuf {
    let file = Path::new(file!());
    let file = if file.is_absolute() {
        file.to_owned()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("host/ has a parent")
            .join(file)
    };
    // host/src/plugin/tests/fixtures.rs -> the root is five levels up.
    file.ancestors()
        .nth(5)
        .expect("fixtures.rs is five levels deep")
        .to_owned()
}

/// The directory cargo puts this test binary's sibling artifacts in (`target/<profile>/`): the
/// binary runs from `target/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = env::current_exe().expect("the test binary has a path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary is in target/<profile>/deps")
        .to_owned()
}

/// The packages [`cargo_plugin`] builds.
const PLUGINS: [&str; 4] = [
    "turnstile-plugin-invoice",
    "turnstile-plugin-payment",
    "turnstile-plugin-migration",
    "turnstile-plugin-testkit",
];

/// The path of the example plugin `plugins/<name>`, built for this test run.
///
/// `cargo test` does not build `cdylib` artifacts of other packages, so the first call runs
/// `cargo build` for the test plugins into the same target directory and profile (cargo has
/// released its build lock by the time tests run). That keeps the fixtures fresh when only the
/// host's tests are run, at the cost of a no-op build when they already are.
pub fn cargo_plugin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let profile_dir = profile_dir();
    let built = BUILT.get_or_init(|| {
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug");
        let profile = if profile == "debug" { "dev" } else { profile };
        let target_dir = profile_dir.parent().expect("target/<profile> has a parent");
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--profile", profile, "--manifest-path"])
            .arg(repo_root().join("Cargo.toml"))
            .args(PLUGINS.iter().flat_map(|name| ["-p", name]))
            .env("CARGO_TARGET_DIR", target_dir)
            .status()
            .map_err(|err| format!("cannot run cargo: {err}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("cargo build of the test plugins failed: {status}"))
    });
    if let Err(err) = built {
        panic!("{err}");
    }
    let path = profile_dir.join(format!(
        "libturnstile_plugin_{name}{}",
        env::consts::DLL_SUFFIX
    ));
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// A C plugin library compiled for one test, deleted with its temp directory on drop.
pub struct CLibrary {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl CLibrary {
    /// A working fixture plugin's source, to break in one way with the builder methods.
    pub fn source() -> CSource {
        CSource {
            abi_version: 1,
            entry: Entry::Table,
            version_symbol: true,
            table_size: "sizeof(TurnstilePluginV1)".into(),
            header_dir: repo_root().join("plugin-api/abi/include"),
            null_call: false,
            init_error: None,
            reads: false,
            manifest: r#"{"name":"fixture","version":"1","tools":[
                {"name":"fixture.ok","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.fail","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.panic","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.garbage","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.status","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.silent","description":"d","input_schema":{"type":"object"}},
                {"name":"fixture.unknown","description":"d","input_schema":{"type":"object"}}]}"#
                .into(),
        }
    }

    /// Compiles `source` with `$CC` (or `cc`) into `lib<name>.so` in a fresh temp directory.
    pub fn build(name: &str, source: &CSource) -> CLibrary {
        let dir = tempfile::tempdir().unwrap();
        let c_file = dir.path().join(format!("{name}.c"));
        fs::write(&c_file, source.render()).unwrap();
        let path = dir
            .path()
            .join(format!("lib{name}{}", env::consts::DLL_SUFFIX));
        let compiler = env::var_os("CC").unwrap_or_else(|| "cc".into());
        let output = Command::new(compiler)
            .args([
                "-shared",
                "-fPIC",
                "-Wall",
                "-Werror",
                "-Wno-unused-function",
                "-I",
            ])
            .arg(&source.header_dir)
            .arg("-o")
            .arg(&path)
            .arg(&c_file)
            .output()
            .expect("a C compiler (cc) is installed");
        assert!(
            output.status.success(),
            "cc failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        CLibrary { _dir: dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

enum Entry {
    Table,
    /// Returns a pointer that must never be dereferenced.
    Wild,
    Missing,
}

/// The source of a C fixture plugin, built up by test-specific breakage.
pub struct CSource {
    abi_version: u32,
    entry: Entry,
    version_symbol: bool,
    table_size: String,
    /// The directory holding the `turnstile_plugin.h` the plugin is compiled against.
    header_dir: PathBuf,
    null_call: bool,
    init_error: Option<String>,
    manifest: String,
    /// Fills the table's `read` (ABI 1.3) with `fx_read`.
    reads: bool,
}

impl CSource {
    pub fn abi_version(mut self, version: u32) -> Self {
        self.abi_version = version;
        self
    }

    pub fn wild_entry(mut self) -> Self {
        self.entry = Entry::Wild;
        self
    }

    pub fn without_entry(mut self) -> Self {
        self.entry = Entry::Missing;
        self
    }

    pub fn without_version(mut self) -> Self {
        self.version_symbol = false;
        self
    }

    pub fn table_size(mut self, c_expr: &str) -> Self {
        self.table_size = c_expr.into();
        self
    }

    /// Compiles against the header as ABI 1.0 shipped it (`tests/fixtures/abi-1.0`), as a
    /// plugin built before any field was appended would be.
    pub fn built_against_abi_1_0(mut self) -> Self {
        self.header_dir = repo_root().join("tests/fixtures/abi-1.0");
        self
    }

    pub fn null_call(mut self) -> Self {
        self.null_call = true;
        self
    }

    pub fn failing_init(mut self, message: &str) -> Self {
        self.init_error = Some(message.into());
        self
    }

    pub fn manifest(mut self, json: &str) -> Self {
        self.manifest = json.into();
        self
    }

    /// Gives the plugin a `read` (ABI 1.3): a prompt is `{"messages"}` echoing its name and
    /// the instance's state and context; a resource `"unknown"`.
    pub fn with_read(mut self) -> Self {
        self.reads = true;
        self
    }

    fn render(&self) -> String {
        let mut c = String::from(FIXTURE_PRELUDE);
        writeln!(
            c,
            "static const char MANIFEST[] = {};",
            c_string(&self.manifest)
        )
        .unwrap();
        let init_body = match &self.init_error {
            Some(message) => format!(
                "put(out_error, {}); return TURNSTILE_INTERNAL;",
                c_string(&format!(r#"{{"message":"{message}"}}"#))
            ),
            None => "return TURNSTILE_OK;".into(),
        };
        writeln!(
            c,
            "static TurnstileStatus fx_init(const TurnstileInitParams *params, void **out_instance, \
             TurnstileBuffer *out_error) {{ (void)params; *out_instance = NULL; {init_body} }}"
        )
        .unwrap();
        let call = if self.null_call { "NULL" } else { "fx_call" };
        let read = if self.reads {
            c.push_str(FIXTURE_READ);
            // After `guard` (ABI 1.2), which this fixture leaves NULL.
            ", NULL, fx_read"
        } else {
            ""
        };
        writeln!(
            c,
            "static const TurnstilePluginV1 TABLE = {{ {}, 1, fx_init, fx_destroy, fx_manifest, {call}, fx_free{read} }};",
            self.table_size
        )
        .unwrap();
        if self.version_symbol {
            writeln!(
                c,
                "uint32_t turnstile_plugin_abi_version(void) {{ return {}; }}",
                self.abi_version
            )
            .unwrap();
        }
        match self.entry {
            Entry::Table => c.push_str("const TurnstilePluginV1 *turnstile_plugin_v1(void) { return &TABLE; }\n"),
            Entry::Wild => c.push_str(
                "const TurnstilePluginV1 *turnstile_plugin_v1(void) { (void)TABLE; return (const TurnstilePluginV1 *)16; }\n",
            ),
            Entry::Missing => c.push_str("const TurnstilePluginV1 *fixture_table(void) { return &TABLE; }\n"),
        }
        c
    }
}

/// A C string literal holding `text`.
fn c_string(text: &str) -> String {
    let mut literal = String::from("\"");
    for ch in text.chars() {
        match ch {
            '"' => literal.push_str("\\\""),
            '\\' => literal.push_str("\\\\"),
            '\n' => literal.push_str("\\n"),
            ch => literal.push(ch),
        }
    }
    literal.push('"');
    literal
}

/// Everything but the parts [`CSource`] varies: helpers, `destroy`, `manifest`, `call`, `free`.
const FIXTURE_PRELUDE: &str = r#"
#include <stdlib.h>
#include <string.h>
#include "turnstile_plugin.h"

static const char MANIFEST[];

static void put(TurnstileBuffer *out, const char *text) {
    size_t len = strlen(text);
    uint8_t *data = malloc(len);
    memcpy(data, text, len);
    out->data = data;
    out->len = len;
}

static void fx_destroy(void *instance) { (void)instance; }

static TurnstileStatus fx_manifest(void *instance, TurnstileBuffer *out) {
    (void)instance;
    put(out, MANIFEST);
    return TURNSTILE_OK;
}

static TurnstileStatus fx_call(void *instance, const char *tool, const char *input_json,
                               const TurnstileCallContext *ctx, TurnstileBuffer *out) {
    (void)instance; (void)input_json; (void)ctx;
    if (strcmp(tool, "fixture.ok") == 0) { put(out, "{\"tool\":\"fixture.ok\"}"); return TURNSTILE_OK; }
    if (strcmp(tool, "fixture.fail") == 0) { put(out, "{\"message\":\"it failed\"}"); return TURNSTILE_TOOL_ERROR; }
    if (strcmp(tool, "fixture.panic") == 0) { put(out, "{\"message\":\"bug\"}"); return TURNSTILE_PANIC; }
    if (strcmp(tool, "fixture.garbage") == 0) { put(out, "not json"); return TURNSTILE_OK; }
    if (strcmp(tool, "fixture.status") == 0) { put(out, "{}"); return 42; }
    if (strcmp(tool, "fixture.silent") == 0) { return TURNSTILE_TOOL_ERROR; }
    put(out, "{\"message\":\"unknown tool\"}");
    return TURNSTILE_UNKNOWN_TOOL;
}

static void fx_free(uint8_t *data, size_t len) { (void)len; free(data); }
"#;

/// The `read` of [`CSource::with_read`] (compiled only against a header that has it).
const FIXTURE_READ: &str = r#"
#include <stdio.h>
static TurnstileStatus fx_read(void *instance, TurnstileReadKind kind, const char *name,
                               const char *request_json, const TurnstileCallContext *ctx,
                               TurnstileBuffer *out) {
    (void)instance;
    if (kind != TURNSTILE_READ_PROMPT) { put(out, "{\"message\":\"unknown\"}"); return TURNSTILE_UNKNOWN_TOOL; }
    const char *context = TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, context_json) && ctx->context_json
        ? ctx->context_json : "null";
    char text[1024];
    snprintf(text, sizeof text, "{\"name\":\"%s\",\"request\":%s,\"state\":%s,\"context\":%s}",
             name, request_json, ctx->state_json, context);
    put(out, text);
    return TURNSTILE_OK;
}
"#;
