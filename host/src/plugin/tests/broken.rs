//! Libraries broken in one way each: a text file and C libraries compiled on the fly. Every
//! failure must stop the load at the right step with an error that names the file.

use std::fs;

use serde_json::json;

use super::{CallContext, LoadedPlugin, PluginError, PluginOutput, ctx, fixtures::CLibrary};
use crate::plugin::PrimitiveKind;

#[test]
fn a_text_file_is_not_a_shared_library() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.so");
    fs::write(&path, "just some text, not ELF\n").unwrap();
    let err = LoadedPlugin::load(&path).unwrap_err();
    assert!(matches!(err, PluginError::NotALibrary { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{}: not a shared library", path.display())
    );

    let empty = dir.path().join("empty.so");
    fs::write(&empty, "").unwrap();
    assert!(matches!(
        LoadedPlugin::load(&empty),
        Err(PluginError::NotALibrary { .. })
    ));
    let missing = LoadedPlugin::load(&dir.path().join("missing.so")).unwrap_err();
    assert!(matches!(missing, PluginError::Io { .. }), "{missing:?}");
}

#[test]
fn a_wrong_abi_version_is_refused_before_anything_else() {
    // The entry symbol of this library would crash (it returns a wild pointer): the version
    // check must stop the load first.
    let lib = CLibrary::build("abi2", &CLibrary::source().abi_version(2).wild_entry());
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(
        matches!(err, PluginError::UnsupportedAbi { found: 2, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}: ABI version 2 is not supported (this host speaks 1)",
            lib.path().display()
        )
    );
}

#[test]
fn missing_symbols_are_named() {
    let lib = CLibrary::build("noentry", &CLibrary::source().without_entry());
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: missing symbol turnstile_plugin_v1",
            lib.path().display()
        )
    );

    let lib = CLibrary::build("noversion", &CLibrary::source().without_version());
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("missing symbol turnstile_plugin_abi_version"),
        "{err}"
    );
}

#[test]
fn a_bad_table_is_refused() {
    let lib = CLibrary::build("small", &CLibrary::source().table_size("sizeof(size_t)"));
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(matches!(err, PluginError::BadTable { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("bad function table: struct_size is 8"),
        "{err}"
    );

    let lib = CLibrary::build("nullcall", &CLibrary::source().null_call());
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("bad function table: function pointer call is NULL"),
        "{err}"
    );
}

/// The growth rule, host side: a plugin compiled against ABI 1.0's header (smaller call context,
/// no host services) loads and runs on this host, and so does one whose table is larger than
/// this host knows (a newer plugin with entries appended).
#[test]
fn plugins_built_for_older_and_newer_layouts_load() {
    let old = CLibrary::build("abi10", &CLibrary::source().built_against_abi_1_0());
    let plugin = LoadedPlugin::load(old.path()).unwrap();
    let out = plugin
        .call("fixture.ok", &json!({}), &ctx(json!("s")))
        .unwrap();
    assert_eq!(out, PluginOutput::success(json!({"tool": "fixture.ok"})));

    let newer = CLibrary::build(
        "abinewer",
        &CLibrary::source().table_size("sizeof(TurnstilePluginV1) + 2 * sizeof(void *)"),
    );
    let plugin = LoadedPlugin::load(newer.path()).unwrap();
    assert!(
        plugin
            .call("fixture.ok", &json!({}), &ctx(json!("s")))
            .is_ok()
    );
}

/// The growth rule for ABI 1.3's `read`: a plugin whose table ends before it (built against ABI
/// 1.0's header) loads and may declare prompts and resources with static text, which the host
/// serves without calling it; one whose manifest needs `read` is refused, naming the entry. A
/// plugin built now fills `read`, and the host passes it the name, the request and the
/// instance's state and context.
#[test]
fn read_is_optional_and_reaches_a_plugin_that_has_it() {
    let declares = |prompt: &str| {
        format!(
            r#"{{"name":"p","version":"1","tools":[{{"name":"fixture.ok","description":"d",
            "input_schema":{{"type":"object"}}}}],"prompts":[{prompt}]}}"#
        )
    };
    let with_text = declares(r#"{"name":"p.hello","description":"d","text":"Hello."}"#);
    let without_text = declares(r#"{"name":"p.hello","description":"d"}"#);

    let old = CLibrary::build(
        "abi10static",
        &CLibrary::source()
            .built_against_abi_1_0()
            .manifest(&with_text),
    );
    let plugin = LoadedPlugin::load(old.path()).unwrap();
    assert_eq!(
        plugin.static_text(PrimitiveKind::Prompt, "p.hello"),
        Some(json!("Hello."))
    );
    let err = plugin
        .read(
            PrimitiveKind::Prompt,
            "p.hello",
            &json!({}),
            &ctx(json!("s")),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("prompt p.hello: the plugin has no read entry point (ABI 1.3)"),
        "{err}"
    );

    let old = CLibrary::build(
        "abi10noread",
        &CLibrary::source()
            .built_against_abi_1_0()
            .manifest(&without_text),
    );
    let err = LoadedPlugin::load(old.path()).unwrap_err();
    assert!(matches!(err, PluginError::BadManifest { .. }), "{err:?}");
    assert!(
        err.to_string().ends_with(
            "bad manifest: prompts[0] (p.hello) has no text, and the plugin has no read entry \
             point (ABI 1.3) to produce it"
        ),
        "{err}"
    );

    let new = CLibrary::build(
        "reads",
        &CLibrary::source().manifest(&without_text).with_read(),
    );
    let plugin = LoadedPlugin::load(new.path()).unwrap();
    let context = CallContext {
        context: json!({"amount": 5}),
        ..ctx(json!("review"))
    };
    let request = json!({"arguments": {"focus": "x"}});
    assert_eq!(
        plugin
            .read(PrimitiveKind::Prompt, "p.hello", &request, &context)
            .unwrap(),
        PluginOutput::success(json!({"name": "p.hello", "request": request,
            "state": "review", "context": {"amount": 5}}))
    );
    let err = plugin
        .read(PrimitiveKind::Resource, "p.hello", &json!({}), &context)
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("resource p.hello: the plugin's read does not know it: unknown"),
        "{err}"
    );
    // A NUL byte cannot cross as a C string: refused before the plugin is asked.
    let nul = CallContext {
        handle: "a\0b".into(),
        ..context
    };
    let err = plugin
        .read(PrimitiveKind::Prompt, "p.hello", &request, &nul)
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("prompt p.hello: an argument contains a NUL byte"),
        "{err}"
    );
    let err = plugin
        .guard("a\0b", &json!({}), &json!({}), &json!({}))
        .unwrap_err();
    assert!(
        err.to_string().ends_with("the guard name holds a NUL byte"),
        "{err}"
    );
}

#[test]
fn a_failing_init_is_reported_with_its_message() {
    let lib = CLibrary::build(
        "initfail",
        &CLibrary::source().failing_init("no config file"),
    );
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: plugin init failed: no config file",
            lib.path().display()
        )
    );
}

#[test]
fn a_bad_manifest_names_the_field() {
    let manifest = r#"{"name":"bad","version":"1","tools":[{"name":"bad.t","description":"d",
        "input_schema":{"type":"object"},"states":"draft"}]}"#;
    let lib = CLibrary::build("badmanifest", &CLibrary::source().manifest(manifest));
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(matches!(err, PluginError::BadManifest { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "{}: bad manifest: tools[0].states: invalid type",
            lib.path().display()
        )),
        "{text}"
    );

    let duplicate = r#"{"name":"dup","version":"1","tools":[
        {"name":"dup.t","description":"d","input_schema":{"type":"object"}},
        {"name":"dup.t","description":"d","input_schema":{"type":"object"}}]}"#;
    let lib = CLibrary::build("dupmanifest", &CLibrary::source().manifest(duplicate));
    let err = LoadedPlugin::load(lib.path()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("bad manifest: tools[1] (dup.t): duplicate tool name"),
        "{err}"
    );
}

#[test]
fn a_c_plugin_round_trips_and_protocol_violations_are_errors() {
    let lib = CLibrary::build("good", &CLibrary::source());
    let plugin = LoadedPlugin::load(lib.path()).unwrap();
    assert_eq!(plugin.manifest().name, "fixture");
    // The fixture's `call` answers according to the tool name.
    let call = |tool: &str| plugin.call(tool, &json!({"x": 1}), &ctx(json!("s")));
    assert_eq!(
        call("fixture.ok").unwrap(),
        PluginOutput::success(json!({"tool": "fixture.ok"}))
    );
    assert_eq!(
        call("fixture.fail").unwrap(),
        PluginOutput::ToolError("it failed".into())
    );
    assert!(
        matches!(call("fixture.panic"), Err(PluginError::Panicked { message, .. }) if message == "bug")
    );
    let err = call("fixture.garbage").unwrap_err();
    assert!(
        err.to_string()
            .contains("tool fixture.garbage: output is not JSON"),
        "{err}"
    );
    let err = call("fixture.status").unwrap_err();
    assert!(
        err.to_string()
            .ends_with("tool fixture.status: unknown status 42"),
        "{err}"
    );
    let err = call("fixture.silent").unwrap_err();
    assert!(
        err.to_string()
            .contains("status 1 without a {\"message\"} output"),
        "{err}"
    );
    // In the manifest, but the plugin's `call` does not know it.
    let err = call("fixture.unknown").unwrap_err();
    assert!(matches!(err, PluginError::UnknownTool { .. }), "{err:?}");
    // A NUL byte cannot cross as a C string; nothing is called.
    let nul = CallContext {
        handle: "a\0b".into(),
        ..ctx(json!("s"))
    };
    let err = plugin.call("fixture.ok", &json!({}), &nul).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: tool fixture.ok: cannot pass the handle: it contains a NUL byte",
            lib.path().display()
        )
    );
}
