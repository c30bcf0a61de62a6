//! `turnstile new-plugin`: what it writes builds outside this repository, passes its own test,
//! and is served by the real binary with its tools gated (issue 41, item 5); a Rust plugin
//! builds from an installed binary alone, on the copy of the SDK the binary carries.

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use common::{Client, Server};
use serde_json::json;

/// What a command wrote, its standard output then its errors.
fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `command`, failing the test with its output if it fails.
fn run(command: &mut Command) -> String {
    let output = command.output().expect("the command starts");
    let said = said(&output);
    assert!(output.status.success(), "{command:?}:\n{said}");
    said
}

fn new_plugin(args: &[&str]) -> Command {
    let mut command = Command::new(common::turnstile_bin());
    command.arg("new-plugin").args(args);
    command
}

/// A cargo for the new crate, building into `target`: offline when the registry cache holds what
/// it needs (it does after this workspace's build), else online.
fn cargo(crate_dir: &Path, target: &Path, args: &[&str]) -> String {
    let attempt = |offline: bool| {
        let mut command = Command::new(env!("CARGO"));
        command
            .args(args)
            .args(offline.then_some("--offline"))
            .current_dir(crate_dir)
            .env("CARGO_TARGET_DIR", target)
            .env_remove("RUSTFLAGS");
        command.output().expect("cargo starts")
    };
    let output = match attempt(true) {
        output if output.status.success() => output,
        _ => attempt(false),
    };
    let said = said(&output);
    assert!(output.status.success(), "cargo {args:?}:\n{said}");
    said
}

/// Serves the one library in `library` and walks its workflow as a client would.
async fn served_and_gated(library: &Path, name: &str) {
    let plugins = tempfile::tempdir().unwrap();
    fs::copy(library, plugins.path().join(library.file_name().unwrap())).unwrap();
    let server = Server::http(plugins.path(), &["--store", "memory:"]);
    let client = Client::http(&server.url).await;
    let (start, finish, status) = (
        format!("{name}.start"),
        format!("{name}.finish"),
        format!("{name}.status"),
    );
    let mut menu = client.tool_names().await;
    menu.sort();
    assert_eq!(menu, [start.clone(), status.clone()]);
    let started = client.call(&start, json!({"topic": "the report"})).await;
    assert_ne!(started.is_error, Some(true), "{started:?}");
    let mut menu = client.tool_names().await;
    menu.sort();
    assert_eq!(menu, [finish, status]);
}

/// The source tree this suite was built from, which a new plugin must not need.
fn source_tree() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the source tree")
        .to_path_buf()
}

/// Where the new crates build: one target directory under the suite's, kept between runs, so
/// that a run compiles the plugin and its copy of the SDK, not serde and the rest again.
fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-plugin-target")
}

/// Every file under `dir`, with its text.
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            let text = fs::read_to_string(&path).unwrap();
            files.push((path, text));
        }
    }
    files
}

/// `turnstile` as installed (the binary alone, copied out of the build) writes a crate that names
/// nothing of the source tree, builds, passes its test, and is served with its tools gated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_plugin_from_an_installed_binary_needs_no_source_tree() {
    let installed = tempfile::tempdir().unwrap();
    let turnstile = installed.path().join("turnstile");
    fs::copy(common::turnstile_bin(), &turnstile).unwrap();
    let work = tempfile::tempdir().unwrap();
    let said = run(Command::new(&turnstile)
        .args(["new-plugin", "tickets"])
        .current_dir(work.path()));
    assert!(
        said.contains("libtickets") && said.contains("turnstile-sdk"),
        "{said}"
    );

    let crate_dir = work.path().join("tickets");
    let tree = source_tree().display().to_string();
    let written = files_under(&crate_dir);
    for (path, text) in &written {
        assert!(
            !text.contains(&tree),
            "{} names {tree}:\n{text}",
            path.display()
        );
    }
    let manifest = fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let dependency = format!(
        "turnstile-plugin = {{ version = \"{}\", path = \"turnstile-sdk/turnstile-plugin\" }}",
        env!("CARGO_PKG_VERSION")
    );
    assert!(manifest.contains(&dependency), "{manifest}");
    for krate in [
        "turnstile-plugin",
        "turnstile-plugin-abi",
        "turnstile-statechart",
    ] {
        let carried = crate_dir
            .join("turnstile-sdk")
            .join(krate)
            .join("Cargo.toml");
        assert!(written.iter().any(|(path, _)| *path == carried), "{krate}");
    }

    let target = shared_target();
    let tested = cargo(&crate_dir, &target, &["test"]);
    assert!(tested.contains("2 passed"), "{tested}");
    cargo(&crate_dir, &target, &["build"]);
    let library: PathBuf = target.join("debug").join(format!(
        "{}tickets{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    served_and_gated(&library, "tickets").await;
}

#[test]
fn sdk_names_another_sdk_by_path_and_carries_none() {
    let work = tempfile::tempdir().unwrap();
    let crate_dir = work.path().join("tickets");
    let sdk = source_tree().join("plugin-api").canonicalize().unwrap();
    run(new_plugin(&["tickets", "--dir"])
        .arg(&crate_dir)
        .arg("--sdk")
        .arg(&sdk));
    let manifest = fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let dependency = format!("turnstile-plugin = {{ path = \"{}\" }}", sdk.display());
    assert!(manifest.contains(&dependency), "{manifest}");
    assert!(!crate_dir.join("turnstile-sdk").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_c_plugin_builds_with_make_tests_and_is_served_gated() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("tickets_c");
    run(new_plugin(&["tickets_c", "--lang", "c", "--dir"]).arg(&dir));
    let tested = run(Command::new("make").arg("test").current_dir(&dir));
    assert!(tested.contains("tickets_c.start said"), "{tested}");
    served_and_gated(&dir.join("libtickets_c.so"), "tickets_c").await;
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused_and_nothing_is_written() {
    let work = tempfile::tempdir().unwrap();
    let output = new_plugin(&["Tickets", "--dir"])
        .arg(work.path().join("x"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot name a plugin"));
    assert!(!work.path().join("x").exists());
    let output = new_plugin(&["tickets", "--dir"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("exists already"));
}
