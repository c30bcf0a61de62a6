//! `turnstile new-plugin NAME [--lang rust|c]`: a plugin crate (or C project) that builds out of
//! this repository, with a workflow of three states, three tools bound to it, and a test, so a
//! plugin author starts from something that loads rather than from the ABI's header.
//!
//! The Rust crate depends on the SDK this binary carries (`sdk.rs`), written beside it in
//! `turnstile-sdk/` and named by version and path, so it builds on a machine with an installed
//! `turnstile` and no source tree; `--sdk DIR` names another SDK crate instead, by path. The C
//! project carries its own copy of the header. Nothing is overwritten: the directory must not
//! exist.

mod sdk;

use std::{
    fs,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context, bail};

/// The C header, as the project gets it.
const HEADER: &str = include_str!("../../../plugin-api/abi/include/turnstile_plugin.h");

/// The SDK a new Rust plugin depends on.
enum Sdk {
    /// The one this binary carries, written into the plugin's `turnstile-sdk/`.
    Carried,
    /// The crate in this directory (`--sdk DIR`), by path.
    At(PathBuf),
}

/// The language of the new plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    C,
}

/// Writes the plugin `name` into `dir` (default `./NAME`) and says what to do next.
pub fn run(
    name: &str,
    lang: Lang,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir.exists() {
        bail!("{} exists already: name a new directory", dir.display());
    }
    let (files, carried) = match lang {
        Lang::Rust => {
            let sdk = match sdk {
                None => Sdk::Carried,
                Some(sdk) => Sdk::At(
                    sdk.canonicalize()
                        .with_context(|| format!("--sdk {}: no such directory", sdk.display()))?,
                ),
            };
            let carried = matches!(sdk, Sdk::Carried).then(|| {
                format!(
                    "The SDK it builds on, turnstile-plugin {}, is in {}/{}/.\n",
                    sdk::VERSION,
                    dir.display(),
                    sdk::FOLDER
                )
            });
            (rust_files(name, &sdk), carried)
        }
        Lang::C => (c_files(name), None),
    };
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let library = library_file(name);
    let (build, built) = match lang {
        Lang::Rust => (
            "cargo test && cargo build --release",
            format!("target/release/{library}"),
        ),
        Lang::C => ("make test", library.clone()),
    };
    println!(
        "Wrote the plugin `{name}` in {dir}.\n\
         {carried}\
         Build and test it:  cd {dir} && {build}\n\
         Then put {built} in the directory a server loads (`turnstile serve --plugins DIR`);\n\
         a server with hot plugins takes it up without a restart (docs/plugins.md).",
        dir = dir.display(),
        carried = carried.unwrap_or_default(),
    );
    Ok(ExitCode::SUCCESS)
}

/// A plugin's name starts its tools' names (`NAME.start`), so it follows their rule: lowercase
/// ASCII letters, digits and `_`, starting with a letter.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_well
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        || name.len() > 48
    {
        bail!(
            "`{name}` cannot name a plugin: use lowercase letters, digits and `_`, starting \
             with a letter (at most 48), since its tools are called `{name}.…`"
        );
    }
    Ok(())
}

/// The library file a build of plugin `name` produces, as the server's directory wants it.
fn library_file(name: &str) -> String {
    format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// The crate's files: its own, and the carried SDK's unless it names another.
fn rust_files(name: &str, sdk: &Sdk) -> Vec<(String, String)> {
    let dependency = match sdk {
        Sdk::Carried => sdk::dependency(),
        Sdk::At(dir) => format!(
            "turnstile-plugin = {{ path = \"{}\" }}",
            dir.display().to_string().replace('\\', "/")
        ),
    };
    let mut files = vec![
        (
            "Cargo.toml".to_owned(),
            RUST_MANIFEST
                .replace("{name}", name)
                .replace("{sdk}", &dependency)
                .replace("{sdk_folder}", sdk::FOLDER),
        ),
        ("src/lib.rs".to_owned(), RUST_LIB.replace("{name}", name)),
        (".gitignore".to_owned(), "/target\n".to_owned()),
    ];
    if let Sdk::Carried = sdk {
        files.extend(sdk::files().map(|(path, text)| (path, text.to_owned())));
    }
    files
}

fn c_files(name: &str) -> Vec<(String, String)> {
    vec![
        ("plugin.c".to_owned(), C_PLUGIN.replace("{name}", name)),
        ("turnstile_plugin.h".to_owned(), HEADER.to_owned()),
        ("check.c".to_owned(), C_CHECK.replace("{name}", name)),
        (
            "Makefile".to_owned(),
            C_MAKEFILE
                .replace("{name}", name)
                .replace("{library}", &library_file(name)),
        ),
    ]
}

const RUST_MANIFEST: &str = r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# A plugin is a shared library (cdylib) the server loads; the rlib lets `cargo test` call it.
[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
{sdk}
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1.2"

# A crate of its own, even inside another workspace's tree; the SDK's crates are its
# dependencies, not its members.
[workspace]
exclude = ["{sdk_folder}"]
"#;

const RUST_LIB: &str = r#"//! The `{name}` plugin for Turnstile: one workflow, three tools.
//!
//! ```text
//! open --START--> working --FINISH--> done (final)
//! ```
//!
//! `{name}.start` is on an agent's menu only in `open`, `{name}.finish` only in `working`, and
//! `{name}.status` always. A session has one instance of the workflow, which the server keeps
//! (a client that names instances by handle gets one per `{name}.start`): the handlers below
//! say what they did, and the server moves the instance on and tells the client its menu
//! changed. Keep no state in the plugin's memory: the server may restart, or run on several
//! machines.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use turnstile_plugin::sdk::{NoInput, Toolkit, Workflow};

turnstile_plugin::export_toolkit!(toolkit);

/// The workflow, XState v5 JSON. The context keeps what the work is about (assigned from
/// `{name}.start`'s input).
fn machine() -> Value {
    json!({
        "id": "{name}",
        "initial": "open",
        "context": {"topic": null},
        "states": {
            "open": {"on": {"START": {
                "target": "working",
                "actions": [{"type": "xstate.assign",
                    "params": {"topic": {"var": "event.input.topic"}}}]
            }}},
            "working": {"on": {"FINISH": "done"}},
            "done": {"type": "final"}
        }
    })
}

/// `{name}.start`'s arguments; the doc comments are what a model reads.
#[derive(Deserialize, JsonSchema)]
struct Start {
    /// What the work is about.
    topic: String,
}

/// The plugin: its workflow and its tools.
pub fn toolkit() -> Toolkit {
    let work = Workflow::new(machine());
    Toolkit::new("{name}", env!("CARGO_PKG_VERSION"))
        .tool(
            work.action("{name}.start")
                .describe("Start the work on a topic. Afterwards finish it with {name}.finish.")
                .bind_state("open", "START")
                .handle(|input: Start, _ctx| {
                    Ok(json!({"topic": input.topic, "message": "Started."}))
                }),
        )
        .tool(
            work.action("{name}.finish")
                .describe("Finish the work started with {name}.start. This is the last step.")
                .bind_state("working", "FINISH")
                .handle(|_: NoInput, _ctx| Ok(json!({"message": "Finished."}))),
        )
        .tool(
            work.action("{name}.status")
                .describe("Report where the work stands. Changes nothing.")
                .read_only()
                .handle(|_: NoInput, ctx| Ok(json!({"state": ctx.state}))),
        )
}

#[cfg(test)]
mod tests {
    use turnstile_plugin::{
        Plugin,
        testing::{bindings, built, context},
    };

    use super::*;

    #[test]
    fn each_tool_is_offered_where_the_workflow_needs_it() {
        let manifest = built(toolkit()).manifest();
        assert_eq!(
            bindings(&manifest),
            [
                ("{name}.start", "open".to_owned(), Some("START")),
                ("{name}.finish", "working".to_owned(), Some("FINISH")),
                ("{name}.status", String::new(), None),
            ]
        );
    }

    #[test]
    fn start_says_what_it_started() {
        let said = built(toolkit())
            .call("{name}.start", json!({"topic": "the report"}), &context("h1", "open"))
            .unwrap();
        assert_eq!(said["topic"], "the report");
    }
}
"#;

const C_PLUGIN: &str = r#"/*
 * The `{name}` plugin for Turnstile, in C: one workflow, three tools.
 *
 *   open --START--> working --FINISH--> done (final)
 *
 * `{name}.start` is on an agent's menu only in `open`, `{name}.finish` only in `working`, and
 * `{name}.status` always. The server keeps the workflow's state and moves it on after a call
 * that succeeds; the plugin only says what it did. It keeps no state of its own. The manifest
 * is a JSON string; turnstile_plugin.h is the whole contract (ABI rules in its comments).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turnstile_plugin.h"

static const char MANIFEST[] =
    "{\"name\":\"{name}\",\"version\":\"0.1.0\","
    "\"workflows\":[{\"id\":\"{name}\",\"initial\":\"open\",\"states\":{"
    "\"open\":{\"on\":{\"START\":\"working\"}},"
    "\"working\":{\"on\":{\"FINISH\":\"done\"}},"
    "\"done\":{\"type\":\"final\"}}}],"
    "\"tools\":["
    "{\"name\":\"{name}.start\",\"description\":\"Start the work. Afterwards finish it.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"{name}\",\"states\":[\"open\"],\"transition\":\"START\"},"
    "{\"name\":\"{name}.finish\",\"description\":\"Finish the work. The last step.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"{name}\",\"states\":[\"working\"],\"transition\":\"FINISH\"},"
    "{\"name\":\"{name}.status\",\"description\":\"Report where the work stands.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},\"workflow\":\"{name}\"}]}";

/* Hands the server a malloc'd copy of the formatted text. Returns 0, or -1 without memory. */
static int put(TurnstileBuffer *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int len = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (len < 0 || out == NULL || out->struct_size < sizeof(TurnstileBuffer)) {
        return -1;
    }
    char *data = malloc((size_t)len + 1);
    if (data == NULL) {
        return -1;
    }
    va_start(args, format);
    vsnprintf(data, (size_t)len + 1, format, args);
    va_end(args);
    out->data = (uint8_t *)data;
    out->len = (size_t)len;
    return 0;
}

static TurnstileStatus plugin_init(const TurnstileInitParams *params, void **out_instance,
                                   TurnstileBuffer *out_error) {
    if (params == NULL || params->struct_size < TURNSTILE_INIT_PARAMS_V1_0_SIZE ||
        out_instance == NULL) {
        put(out_error, "{\"message\":\"init: bad arguments\"}");
        return TURNSTILE_INTERNAL;
    }
    *out_instance = NULL; /* stateless */
    return TURNSTILE_OK;
}

static void plugin_destroy(void *instance) { (void)instance; }

static TurnstileStatus plugin_manifest(void *instance, TurnstileBuffer *out) {
    (void)instance;
    return put(out, "%s", MANIFEST) == 0 ? TURNSTILE_OK : TURNSTILE_INTERNAL;
}

static TurnstileStatus plugin_call(void *instance, const char *tool, const char *input_json,
                                   const TurnstileCallContext *ctx, TurnstileBuffer *out) {
    (void)instance;
    (void)input_json;
    if (tool == NULL || ctx == NULL || ctx->struct_size < TURNSTILE_CALL_CONTEXT_V1_0_SIZE) {
        put(out, "{\"message\":\"bad call arguments\"}");
        return TURNSTILE_INTERNAL;
    }
    const char *said = NULL;
    if (strcmp(tool, "{name}.start") == 0) {
        said = "{\"message\":\"Started.\"}";
    } else if (strcmp(tool, "{name}.finish") == 0) {
        said = "{\"message\":\"Finished.\"}";
    } else if (strcmp(tool, "{name}.status") == 0) {
        /* The state is JSON already (a string, or an object for nested states). */
        const char *state = ctx->state_json != NULL && ctx->state_json[0] ? ctx->state_json : "null";
        return put(out, "{\"state\":%s}", state) == 0 ? TURNSTILE_OK : TURNSTILE_INTERNAL;
    } else {
        put(out, "{\"message\":\"unknown tool\"}");
        return TURNSTILE_UNKNOWN_TOOL;
    }
    return put(out, "%s", said) == 0 ? TURNSTILE_OK : TURNSTILE_INTERNAL;
}

static void plugin_free(uint8_t *data, size_t len) {
    (void)len;
    free(data);
}

static const TurnstilePluginV1 TABLE = {
    .struct_size = sizeof(TurnstilePluginV1),
    .abi_version = TURNSTILE_PLUGIN_ABI_VERSION,
    .init = plugin_init,
    .destroy = plugin_destroy,
    .manifest = plugin_manifest,
    .call = plugin_call,
    .free_buffer = plugin_free,
};

TURNSTILE_PLUGIN_EXPORT uint32_t turnstile_plugin_abi_version(void) {
    return TURNSTILE_PLUGIN_ABI_VERSION;
}

TURNSTILE_PLUGIN_EXPORT const TurnstilePluginV1 *turnstile_plugin_v1(void) { return &TABLE; }
"#;

const C_CHECK: &str = r#"/*
 * `make test`: loads the built library as the server would (its two exported symbols), checks
 * the ABI version and the manifest, and calls `{name}.start`.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turnstile_plugin.h"

static int failed(const char *what) {
    fprintf(stderr, "FAILED: %s\n", what);
    return 1;
}

int main(int argc, char **argv) {
    void *library = dlopen(argc > 1 ? argv[1] : "./lib{name}.so", RTLD_NOW);
    if (library == NULL) return failed(dlerror());
    uint32_t (*abi)(void) = (uint32_t(*)(void))dlsym(library, "turnstile_plugin_abi_version");
    const TurnstilePluginV1 *(*table_of)(void) =
        (const TurnstilePluginV1 *(*)(void))dlsym(library, "turnstile_plugin_v1");
    if (abi == NULL || table_of == NULL) return failed("the two exported symbols");
    if (abi() != TURNSTILE_PLUGIN_ABI_VERSION) return failed("the ABI version");
    const TurnstilePluginV1 *plugin = table_of();
    TurnstileInitParams params = {0};
    params.struct_size = sizeof params;
    params.host_abi_version = TURNSTILE_PLUGIN_ABI_VERSION;
    void *instance = NULL;
    TurnstileBuffer out = {0};
    out.struct_size = sizeof out;
    if (plugin->init(&params, &instance, &out) != TURNSTILE_OK) return failed("init");
    if (plugin->manifest(instance, &out) != TURNSTILE_OK) return failed("manifest");
    int named = out.len > 0 && strstr((const char *)out.data, "\"{name}.start\"") != NULL;
    plugin->free_buffer(out.data, out.len);
    if (!named) return failed("the manifest names {name}.start");
    TurnstileCallContext ctx = {0};
    ctx.struct_size = sizeof ctx;
    ctx.call_id = "check";
    ctx.handle = "check";
    ctx.state_json = "\"open\"";
    TurnstileBuffer said = {0};
    said.struct_size = sizeof said;
    if (plugin->call(instance, "{name}.start", "{}", &ctx, &said) != TURNSTILE_OK)
        return failed("{name}.start");
    printf("{name}.start said %.*s\n", (int)said.len, (const char *)said.data);
    plugin->free_buffer(said.data, said.len);
    plugin->destroy(instance);
    return 0;
}
"#;

const C_MAKEFILE: &str = "# `make` builds the plugin; `make test` loads it and calls a tool.
CFLAGS ?= -O2 -Wall -Wextra

{library}: plugin.c turnstile_plugin.h
\t$(CC) $(CFLAGS) -shared -fPIC -o $@ plugin.c

check: check.c turnstile_plugin.h
\t$(CC) $(CFLAGS) -o $@ check.c -ldl

test: {library} check
\t./check ./{library}

clean:
\trm -f {library} check

.PHONY: test clean
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_follows_the_tool_name_rule() {
        assert!(check_name("tickets").is_ok());
        assert!(check_name("crm_v2").is_ok());
        for bad in ["", "Tickets", "2fa", "a-b", "a.b", "émoji"] {
            let refused = check_name(bad).unwrap_err().to_string();
            assert!(refused.contains("cannot name a plugin"), "{bad}: {refused}");
        }
    }

    #[test]
    fn every_template_names_the_plugin_and_nothing_else() {
        let ours = |files: Vec<(String, String)>| {
            files
                .into_iter()
                .filter(|(path, _)| !path.starts_with(sdk::FOLDER))
        };
        for (_, text) in ours(rust_files("tickets", &Sdk::Carried))
            .chain(ours(rust_files("tickets", &Sdk::At("/sdk".into()))))
            .chain(c_files("tickets"))
        {
            assert!(!text.contains("{name}"), "{text}");
            assert!(!text.contains("{library}") && !text.contains("{sdk"));
        }
    }

    #[test]
    fn the_manifest_names_the_carried_sdk_by_version_or_another_by_path() {
        let manifest = |sdk| rust_files("tickets", &sdk).swap_remove(0).1;
        let carried = manifest(Sdk::Carried);
        let line = format!(
            "turnstile-plugin = {{ version = \"{}\", path = \"turnstile-sdk/turnstile-plugin\" }}",
            sdk::VERSION
        );
        assert!(carried.contains(&line), "{carried}");
        let named = manifest(Sdk::At("/opt/turnstile/plugin-api".into()));
        assert!(
            named.contains("turnstile-plugin = { path = \"/opt/turnstile/plugin-api\" }"),
            "{named}"
        );
        let files = rust_files("tickets", &Sdk::At("/sdk".into()));
        assert_eq!(files.len(), 3, "another SDK is not carried");
    }
}
