//! Loader tests against real shared libraries: the example plugins built by cargo here, and in
//! `broken.rs` tiny C libraries compiled with the system C compiler, each broken in one way.

mod broken;
mod fixtures;

use std::{fs, path::Path, sync::Arc, thread};

use serde_json::json;

use self::fixtures::cargo_plugin;
use super::*;

fn ctx(state: serde_json::Value) -> CallContext {
    CallContext {
        call_id: "call-1".into(),
        handle: "inv-1".into(),
        state,
        ..CallContext::default()
    }
}

#[test]
fn loads_the_invoice_plugin_and_calls_it() {
    let plugin = LoadedPlugin::load(&cargo_plugin("invoice")).unwrap();
    let manifest = plugin.manifest();
    assert_eq!(manifest.name, "invoice");
    assert_eq!(manifest.workflows[0]["id"], "invoice");
    let names: Vec<_> = manifest
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "invoice.submit",
            "invoice.approve",
            "invoice.second_approve",
            "invoice.reject",
            "invoice.discharge",
            "invoice.status"
        ]
    );
    let submit = plugin.tool("invoice.submit").unwrap();
    assert_eq!(submit.states, ["draft"]);
    assert_eq!(submit.transition.as_deref(), Some("SUBMIT"));
    assert_eq!(
        submit.input_schema["properties"]["amount"]["exclusiveMinimum"],
        0
    );

    let out = plugin
        .call(
            "invoice.submit",
            &json!({"amount": 12.5, "customer": "ACME"}),
            &ctx(json!("draft")),
        )
        .unwrap();
    let PluginOutput::Success(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(out.value["invoice"], "inv-1");
    assert_eq!(out.value["amount"], 12.5);

    let out = plugin
        .call("invoice.status", &json!({}), &ctx(json!("review")))
        .unwrap();
    assert!(
        matches!(&out, PluginOutput::Success(v) if v.value["state"] == "review"),
        "{out:?}"
    );

    let out = plugin
        .call(
            "invoice.submit",
            &json!({"amount": -1}),
            &ctx(json!("draft")),
        )
        .unwrap();
    assert_eq!(
        out,
        PluginOutput::BadInput("amount must be a number greater than 0".into())
    );

    let err = plugin
        .call("invoice.nope", &json!({}), &ctx(json!("draft")))
        .unwrap_err();
    assert!(matches!(err, PluginError::UnknownTool { ref tool, .. } if tool == "invoice.nope"));
    assert!(
        err.to_string()
            .ends_with("libturnstile_plugin_invoice.so: no tool named invoice.nope"),
        "{err}"
    );
}

/// The example plugins' bindings fit their own (flat) machines: every bound state exists and
/// handles the tool's transition event. (The loader itself does not check this; the catalog
/// does, with the statechart engine. This only keeps the examples honest.)
#[test]
fn every_example_plugin_binds_its_tools_to_its_machine() {
    for name in ["invoice", "payment", "migration", "testkit"] {
        let plugin = LoadedPlugin::load(&cargo_plugin(name)).unwrap();
        let manifest = plugin.manifest();
        assert_eq!(manifest.name, name);
        for tool in &manifest.tools {
            assert!(tool.name.starts_with(&format!("{name}.")), "{}", tool.name);
            let Some(workflow) = &tool.workflow else {
                continue;
            };
            let machine = manifest
                .workflows
                .iter()
                .find(|m| m["id"] == **workflow)
                .unwrap();
            for state in &tool.states {
                let on = &machine["states"][state]["on"];
                let event = tool.transition.as_deref().unwrap();
                // A target, a transition object, or a list of guarded candidates.
                assert!(
                    !on[event].is_null(),
                    "{}: {state} does not handle {event}",
                    tool.name
                );
            }
        }
    }
}

#[test]
fn a_panicking_tool_is_reported_and_the_plugin_stays_usable() {
    let plugin = LoadedPlugin::load(&cargo_plugin("testkit")).unwrap();
    let err = plugin
        .call("testkit.panic", &json!({}), &ctx(json!(null)))
        .unwrap_err();
    match &err {
        PluginError::Panicked { tool, message, .. } => {
            assert_eq!(tool, "testkit.panic");
            assert_eq!(message, "testkit.panic was called");
        }
        other => panic!("{other:?}"),
    }
    let out = plugin
        .call("testkit.go", &json!({"fail": true}), &ctx(json!("idle")))
        .unwrap();
    assert_eq!(
        out,
        PluginOutput::ToolError("testkit.go was asked to fail".into())
    );
    let out = plugin
        .call("testkit.echo", &json!({"a": [1]}), &ctx(json!({"p": "c"})))
        .unwrap();
    assert_eq!(
        out,
        PluginOutput::success(json!({"input": {"a": [1]}, "call_id": "call-1",
            "handle": "inv-1", "state": {"p": "c"}, "config": null}))
    );
}

#[test]
fn calls_run_concurrently_from_many_threads() {
    let plugin = LoadedPlugin::load(&cargo_plugin("testkit")).unwrap();
    let started = std::time::Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let plugin = plugin.clone();
            thread::spawn(move || {
                let out = plugin
                    .call("testkit.slow", &json!({"ms": 200}), &ctx(json!(i)))
                    .unwrap();
                assert_eq!(out, PluginOutput::success(json!({"slept_ms": 200})));
            })
        })
        .collect();
    // Dropping our handle while calls run must not unload the library under them.
    drop(plugin);
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(
        started.elapsed().as_millis() < 1_500,
        "calls were serialised: {:?}",
        started.elapsed()
    );
}

#[test]
fn the_c_migration_plugin_loads_and_walks_its_workflow() {
    let plugin = LoadedPlugin::load(&cargo_plugin("migration")).unwrap();
    let manifest = plugin.manifest();
    assert_eq!(manifest.name, "migration");
    assert_eq!(
        manifest.workflows[0]["states"]["applied"]["on"]["ROLLBACK"],
        "backed_up"
    );
    let steps = [
        ("migration.dry_run", "planned", "DRY_RUN"),
        ("migration.backup", "dry_run_ok", "BACKUP"),
        ("migration.apply", "backed_up", "APPLY"),
        ("migration.rollback", "applied", "ROLLBACK"),
        ("migration.verify", "applied", "VERIFY"),
    ];
    for (tool, state, event) in steps {
        let binding = plugin.tool(tool).unwrap();
        assert_eq!(
            (binding.states.as_slice(), binding.transition.as_deref()),
            ([state.to_owned()].as_slice(), Some(event))
        );
        let out = plugin
            .call(tool, &json!({"confirm": true}), &ctx(json!(state)))
            .unwrap();
        let PluginOutput::Success(out) = out else {
            panic!("{tool}: {out:?}")
        };
        assert_eq!(
            (out.value["event"].as_str(), out.value["migration"].as_str()),
            (Some(event), Some("inv-1"))
        );
    }
    let refused = plugin.call(
        "migration.apply",
        &json!({"confirm": false}),
        &ctx(json!("backed_up")),
    );
    assert!(
        matches!(refused, Ok(PluginOutput::BadInput(ref m)) if m.contains("destructive")),
        "{refused:?}"
    );

    // Strings are escaped, and the state is embedded as the JSON it is.
    let odd = CallContext {
        call_id: "c".into(),
        handle: "h\"\\\n".into(),
        state: json!({"a": "b"}),
        ..CallContext::default()
    };
    let out = plugin.call("migration.status", &json!({}), &odd).unwrap();
    let PluginOutput::Success(out) = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        (&out.value["migration"], &out.value["state"]),
        (&json!("h\"\\\n"), &json!({"a": "b"}))
    );
    let out = plugin
        .call("migration.status", &json!({}), &ctx(json!("applied")))
        .unwrap();
    assert!(
        matches!(out, PluginOutput::Success(ref v) if v.value["message"] == "The migration is at step applied."),
        "{out:?}"
    );
}

#[test]
fn load_dir_loads_libraries_in_order_and_reports_each_failure() {
    let dir = tempfile::tempdir().unwrap();
    fs::copy(cargo_plugin("invoice"), dir.path().join("b-invoice.so")).unwrap();
    fs::copy(cargo_plugin("testkit"), dir.path().join("a-testkit.so")).unwrap();
    fs::write(dir.path().join("x.so"), "text").unwrap();
    fs::write(dir.path().join("README.md"), "ignored").unwrap();
    fs::create_dir(dir.path().join("sub.so")).unwrap();
    let (plugins, errors) = load_dir(dir.path());
    let names: Vec<_> = plugins.iter().map(|p| p.manifest().name.as_str()).collect();
    assert_eq!(names, ["testkit", "invoice"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path(), dir.path().join("x.so"));

    let (plugins, errors) = load_dir(&dir.path().join("nope"));
    assert!(plugins.is_empty());
    assert!(
        errors[0].to_string().contains("cannot read directory"),
        "{}",
        errors[0]
    );
}

#[test]
fn private_copies_are_independent_and_named_after_the_original() {
    let original = cargo_plugin("invoice");
    let copies_dir = tempfile::tempdir().unwrap();
    let a = load_private_copy_in(&original, copies_dir.path(), &PluginConfigs::default()).unwrap();
    let b = Arc::new(load_private_copy(&original, &PluginConfigs::default()).unwrap());
    assert_eq!(a.path(), original);
    assert_eq!(b.path(), original);
    assert_eq!(a.manifest(), b.manifest());
    // The copy is gone from disk; the mapping lives on.
    assert_eq!(fs::read_dir(copies_dir.path()).unwrap().count(), 0);
    let out = a
        .call("invoice.status", &json!({}), &ctx(json!("draft")))
        .unwrap();
    assert!(matches!(out, PluginOutput::Success(_)));
    drop(a);
    assert!(
        b.call("invoice.status", &json!({}), &ctx(json!("draft")))
            .is_ok()
    );
}

/// Every load maps a private copy: rewriting the file in the plugin directory in place (which
/// would corrupt a mapped library's code) leaves the loaded plugin working.
#[test]
fn load_dir_maps_private_copies_so_rewriting_the_file_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("invoice.so");
    fs::copy(cargo_plugin("invoice"), &file).unwrap();
    let (plugins, errors) = load_dir(dir.path());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(plugins[0].path(), file);
    // In place: same inode, new bytes, as `cp` over an existing file does.
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &[0u8; 4096]))
        .unwrap();
    let out = plugins[0]
        .call("invoice.status", &json!({}), &ctx(json!("draft")))
        .unwrap();
    assert!(matches!(out, PluginOutput::Success(_)), "{out:?}");
}

#[test]
fn plugin_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<LoadedPlugin>();
    assert_send_sync::<PluginError>();
    let _ = Path::new("");
}

/// ABI 1.1: the host hands a plugin its configuration at `init`, and the plugin reads it.
#[test]
fn a_plugin_gets_its_configuration_at_init() {
    // A copy under its own name: the dynamic loader shares one mapping (and its statics, the
    // configuration among them) between loads of one path, and other tests load testkit too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libturnstile_plugin_testkit_configured.so");
    fs::copy(cargo_plugin("testkit"), &path).unwrap();
    let config = json!({"greeting": "hello", "api_key": "s3cret"});
    let plugin = LoadedPlugin::load_with_config(&path, &config).unwrap();
    let PluginOutput::Success(out) = plugin
        .call("testkit.echo", &json!({}), &ctx(json!(null)))
        .unwrap()
    else {
        panic!("echo failed");
    };
    assert_eq!(out.value["config"], config);
}
