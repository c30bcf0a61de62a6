//! Checks that `include/turnstile_plugin.h` matches the Rust `#[repr(C)]` types exactly: a C
//! program compiled against the header prints every struct's size and field offsets and every
//! constant, and they must equal what Rust computes. Needs a C compiler (`$CC` or `cc`).

use std::{env, fs, mem::offset_of, path::Path, process::Command};

use turnstile_plugin_abi::abi::{
    ABI_VERSION, ABI_VERSION_SYMBOL, CALL_CONTEXT_V1_0_SIZE, ENTRY_SYMBOL_V1,
    INIT_PARAMS_V1_0_SIZE, PLUGIN_TABLE_V1_0_SIZE, PluginTableV1, RawBuffer, RawCallContext,
    RawHostServices, RawInitParams, ReadKind, Status,
};

/// The C side: one `name=value` line per fact.
const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include "turnstile_plugin.h"

#define SIZE(T) printf(#T "=%zu\n", sizeof(T))
#define OFF(T, f) printf(#T "." #f "=%zu\n", offsetof(T, f))

int main(void) {
    SIZE(TurnstileBuffer); OFF(TurnstileBuffer, struct_size); OFF(TurnstileBuffer, data);
    OFF(TurnstileBuffer, len);
    SIZE(TurnstileInitParams); OFF(TurnstileInitParams, struct_size);
    OFF(TurnstileInitParams, host_abi_version); OFF(TurnstileInitParams, config_json);
    SIZE(TurnstileCallContext); OFF(TurnstileCallContext, struct_size);
    OFF(TurnstileCallContext, call_id); OFF(TurnstileCallContext, handle);
    OFF(TurnstileCallContext, state_json); OFF(TurnstileCallContext, host);
    OFF(TurnstileCallContext, context_json); OFF(TurnstileCallContext, idempotency_key);
    OFF(TurnstileCallContext, asking_json);
    SIZE(TurnstileHostServices); OFF(TurnstileHostServices, struct_size);
    OFF(TurnstileHostServices, call); OFF(TurnstileHostServices, log);
    OFF(TurnstileHostServices, progress); OFF(TurnstileHostServices, is_cancelled);
    printf("CALL_CONTEXT_V1_0_SIZE=%zu\n", TURNSTILE_CALL_CONTEXT_V1_0_SIZE);
    printf("INIT_PARAMS_V1_0_SIZE=%zu\n", TURNSTILE_INIT_PARAMS_V1_0_SIZE);
    printf("PLUGIN_TABLE_V1_0_SIZE=%zu\n", TURNSTILE_PLUGIN_TABLE_V1_0_SIZE);
    SIZE(TurnstilePluginV1); OFF(TurnstilePluginV1, struct_size);
    OFF(TurnstilePluginV1, abi_version); OFF(TurnstilePluginV1, init);
    OFF(TurnstilePluginV1, destroy); OFF(TurnstilePluginV1, manifest);
    OFF(TurnstilePluginV1, call); OFF(TurnstilePluginV1, free_buffer);
    OFF(TurnstilePluginV1, read);
    SIZE(TurnstileStatus); SIZE(TurnstileReadKind);
    printf("READ_PROMPT=%d\nREAD_RESOURCE=%d\n", TURNSTILE_READ_PROMPT, TURNSTILE_READ_RESOURCE);
    printf("READ_COMPLETION=%d\n", TURNSTILE_READ_COMPLETION);
    printf("ABI_VERSION=%u\n", TURNSTILE_PLUGIN_ABI_VERSION);
    printf("ABI_VERSION_SYMBOL=%s\n", TURNSTILE_PLUGIN_ABI_VERSION_SYMBOL);
    printf("ENTRY_SYMBOL_V1=%s\n", TURNSTILE_PLUGIN_ENTRY_SYMBOL_V1);
    printf("OK=%d\nTOOL_ERROR=%d\nBAD_INPUT=%d\nUNKNOWN_TOOL=%d\nPANIC=%d\nINTERNAL=%d\n",
           TURNSTILE_OK, TURNSTILE_TOOL_ERROR, TURNSTILE_BAD_INPUT, TURNSTILE_UNKNOWN_TOOL,
           TURNSTILE_PANIC, TURNSTILE_INTERNAL);
    printf("NEEDS_INPUT=%d\n", TURNSTILE_NEEDS_INPUT);
    return 0;
}
"#;

/// The Rust side, in the same format.
fn rust_facts() -> String {
    macro_rules! size {
        ($c:literal, $t:ty) => {
            format!("{}={}\n", $c, size_of::<$t>())
        };
    }
    macro_rules! off {
        ($c:literal, $t:ty, $f:ident) => {
            format!("{}.{}={}\n", $c, stringify!($f), offset_of!($t, $f))
        };
    }
    [
        size!("TurnstileBuffer", RawBuffer),
        off!("TurnstileBuffer", RawBuffer, struct_size),
        off!("TurnstileBuffer", RawBuffer, data),
        off!("TurnstileBuffer", RawBuffer, len),
        size!("TurnstileInitParams", RawInitParams),
        off!("TurnstileInitParams", RawInitParams, struct_size),
        off!("TurnstileInitParams", RawInitParams, host_abi_version),
        off!("TurnstileInitParams", RawInitParams, config_json),
        size!("TurnstileCallContext", RawCallContext),
        off!("TurnstileCallContext", RawCallContext, struct_size),
        off!("TurnstileCallContext", RawCallContext, call_id),
        off!("TurnstileCallContext", RawCallContext, handle),
        off!("TurnstileCallContext", RawCallContext, state_json),
        off!("TurnstileCallContext", RawCallContext, host),
        off!("TurnstileCallContext", RawCallContext, context_json),
        off!("TurnstileCallContext", RawCallContext, idempotency_key),
        off!("TurnstileCallContext", RawCallContext, asking_json),
        size!("TurnstileHostServices", RawHostServices),
        off!("TurnstileHostServices", RawHostServices, struct_size),
        off!("TurnstileHostServices", RawHostServices, call),
        off!("TurnstileHostServices", RawHostServices, log),
        off!("TurnstileHostServices", RawHostServices, progress),
        off!("TurnstileHostServices", RawHostServices, is_cancelled),
        format!("CALL_CONTEXT_V1_0_SIZE={CALL_CONTEXT_V1_0_SIZE}\n"),
        format!("INIT_PARAMS_V1_0_SIZE={INIT_PARAMS_V1_0_SIZE}\n"),
        format!("PLUGIN_TABLE_V1_0_SIZE={PLUGIN_TABLE_V1_0_SIZE}\n"),
        size!("TurnstilePluginV1", PluginTableV1),
        off!("TurnstilePluginV1", PluginTableV1, struct_size),
        off!("TurnstilePluginV1", PluginTableV1, abi_version),
        off!("TurnstilePluginV1", PluginTableV1, init),
        off!("TurnstilePluginV1", PluginTableV1, destroy),
        off!("TurnstilePluginV1", PluginTableV1, manifest),
        off!("TurnstilePluginV1", PluginTableV1, call),
        off!("TurnstilePluginV1", PluginTableV1, free_buffer),
        off!("TurnstilePluginV1", PluginTableV1, read),
        size!("TurnstileStatus", Status),
        size!("TurnstileReadKind", ReadKind),
        format!(
            "READ_PROMPT={}\nREAD_RESOURCE={}\n",
            ReadKind::PROMPT.0,
            ReadKind::RESOURCE.0
        ),
        format!("READ_COMPLETION={}\n", ReadKind::COMPLETION.0),
        format!("ABI_VERSION={ABI_VERSION}\n"),
        format!("ABI_VERSION_SYMBOL={ABI_VERSION_SYMBOL}\n"),
        format!("ENTRY_SYMBOL_V1={ENTRY_SYMBOL_V1}\n"),
        format!(
            "OK={}\nTOOL_ERROR={}\nBAD_INPUT={}\nUNKNOWN_TOOL={}\nPANIC={}\nINTERNAL={}\n",
            Status::OK.0,
            Status::TOOL_ERROR.0,
            Status::BAD_INPUT.0,
            Status::UNKNOWN_TOOL.0,
            Status::PANIC.0,
            Status::INTERNAL.0
        ),
        format!("NEEDS_INPUT={}\n", Status::NEEDS_INPUT.0),
    ]
    .concat()
}

#[test]
fn header_matches_the_rust_types() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("header-probe-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let (source, binary) = (dir.join("probe.c"), dir.join("probe"));
    fs::write(&source, PROBE).unwrap();
    let compiler = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let compiled = Command::new(compiler)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C compiler (cc) is installed");
    assert!(
        compiled.status.success(),
        "{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let output = Command::new(&binary).output().unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8(output.stdout).unwrap(), rust_facts());
    fs::remove_dir_all(&dir).unwrap();
}
