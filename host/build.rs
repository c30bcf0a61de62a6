//! Puts the plugin SDK's sources into the binary, for `turnstile new-plugin` to write next to a
//! new plugin (`commands/new_plugin/sdk.rs`), so that it builds where this source tree is not.
//!
//! It writes `$OUT_DIR/carried_sdk.rs`: the SDK's version and a list of files, each a path in
//! the new plugin's `turnstile-sdk/` folder and its text. The three crates (`turnstile-plugin`,
//! `turnstile-plugin-abi`, `turnstile-statechart`) are carried whole but for their tests, each in
//! a folder named after it, their manifests rewritten to stand alone: what they take from the
//! workspace (`edition.workspace = true`, `serde.workspace = true`) written out, and their paths
//! to each other pointing at the sibling folders. The rewrite reads the manifests line by line
//! (the host has no TOML reader at build time, and these manifests are simple): a form it does
//! not know fails the build here, rather than a plugin's build later.
//!
//! It must not write anywhere but `OUT_DIR`, nor change what the crates mean.

use std::{
    collections::BTreeMap,
    env,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

/// Each carried crate: its name (its folder in `turnstile-sdk/`), its directory in this tree,
/// and the folders of it a build needs.
const CRATES: &[(&str, &str, &[&str])] = &[
    (
        "turnstile-plugin-abi",
        "plugin-api/abi",
        &["src", "include"],
    ),
    ("turnstile-statechart", "plugin-api/statechart", &["src"]),
    ("turnstile-plugin", "plugin-api", &["src"]),
];

/// Files carried beside the crates: (path in this tree, path in `turnstile-sdk/`).
const BESIDE: &[(&str, &str)] = &[
    ("LICENSE", "LICENSE"),
    ("plugin-api/README.md", "README.md"),
];

fn main() {
    let root = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    let workspace = Workspace::read(&root.join("Cargo.toml"));
    println!(
        "cargo::rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );

    let mut files: Vec<(String, Carried)> = Vec::new();
    let mut version = None;
    for (name, dir, folders) in CRATES {
        let manifest_path = root.join(dir).join("Cargo.toml");
        println!("cargo::rerun-if-changed={}", manifest_path.display());
        let manifest = standalone(&read(&manifest_path), &workspace, &manifest_path);
        if *name == "turnstile-plugin" {
            version = Some(package_version(&manifest, &manifest_path));
        }
        files.push((format!("{name}/Cargo.toml"), Carried::Text(manifest)));
        for folder in *folders {
            let folder_path = root.join(dir).join(folder);
            println!("cargo::rerun-if-changed={}", folder_path.display());
            let mut found = Vec::new();
            walk(&folder_path, &mut found);
            for file in found {
                let within = file
                    .strip_prefix(root.join(dir))
                    .expect("walked from inside the crate");
                let within = within.to_str().expect("the SDK's file names are UTF-8");
                files.push((
                    format!("{name}/{}", within.replace('\\', "/")),
                    Carried::File(file),
                ));
            }
        }
    }
    for (from, to) in BESIDE {
        let path = root.join(from);
        println!("cargo::rerun-if-changed={}", path.display());
        files.push(((*to).to_owned(), Carried::File(path)));
    }

    let version = version.expect("turnstile-plugin is among the carried crates");
    let mut out = String::new();
    writeln!(out, "/// The version of the carried `turnstile-plugin`.").unwrap();
    writeln!(out, "pub const VERSION: &str = {version:?};").unwrap();
    writeln!(
        out,
        "/// Every carried file: its path in `turnstile-sdk/`, and its text."
    )
    .unwrap();
    writeln!(out, "pub const FILES: &[(&str, &str)] = &[").unwrap();
    for (path, carried) in &files {
        // `{:?}` of a `str` is a Rust string literal, escapes and all.
        match carried {
            Carried::Text(text) => writeln!(out, "    ({path:?}, {text:?}),"),
            Carried::File(file) => {
                let file = file.to_str().expect("the SDK's paths are UTF-8");
                writeln!(out, "    ({path:?}, include_str!({file:?})),")
            }
        }
        .unwrap();
    }
    writeln!(out, "];").unwrap();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    fs::write(out_dir.join("carried_sdk.rs"), out).expect("OUT_DIR is writable");
}

/// A carried file's text: rewritten here, or a file of the tree included as it is.
enum Carried {
    Text(String),
    File(PathBuf),
}

/// What the workspace's manifest gives its crates to inherit.
struct Workspace {
    /// `[workspace.package]`: `edition`, `version`, `license`, ….
    package: BTreeMap<String, String>,
    /// `[workspace.dependencies]`: each dependency's value as written.
    dependencies: BTreeMap<String, String>,
}

impl Workspace {
    fn read(path: &Path) -> Workspace {
        let mut workspace = Workspace {
            package: BTreeMap::new(),
            dependencies: BTreeMap::new(),
        };
        let mut section = String::new();
        for line in read(path).lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
            } else if let Some((key, value)) = key_value(line) {
                let table = match section.as_str() {
                    "[workspace.package]" => &mut workspace.package,
                    "[workspace.dependencies]" => &mut workspace.dependencies,
                    _ => continue,
                };
                table.insert(key.to_owned(), value.to_owned());
            }
        }
        workspace
    }
}

/// The crate's manifest with what it inherits written out, its paths to the other carried crates
/// made sibling folders, and its `readme` (a file of this tree, not carried) left out.
fn standalone(manifest: &str, workspace: &Workspace, path: &Path) -> String {
    let mut out = String::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            section = trimmed.to_owned();
        }
        let dependencies = section.ends_with("dependencies]");
        let inherited = trimmed
            .strip_suffix("true")
            .and_then(|rest| rest.trim_end().strip_suffix('='))
            .and_then(|rest| rest.trim_end().strip_suffix(".workspace"));
        let line = match inherited {
            Some(key) if section == "[package]" => match workspace.package.get(key) {
                Some(value) => format!("{key} = {value}"),
                None => refuse(path, line, "the workspace has no such package key"),
            },
            Some(name) if dependencies => match workspace.dependencies.get(name) {
                Some(value) => format!("{name} = {}", sibling_path(name, value, path, line)),
                None => refuse(path, line, "the workspace has no such dependency"),
            },
            Some(_) => refuse(
                path,
                line,
                "inherited in a section the rewrite does not know",
            ),
            None if section == "[package]" && trimmed.starts_with("readme") => continue,
            None => line.to_owned(),
        };
        if line.contains(".workspace") || line.contains("workspace =") {
            refuse(path, &line, "the rewrite knows only `KEY.workspace = true`");
        }
        if dependencies && line.contains("path =") && !line.contains("path = \"../turnstile-") {
            refuse(path, &line, "a path to a crate that is not carried");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A workspace dependency's value, its `path` (if any) made the carried sibling's folder.
fn sibling_path(name: &str, value: &str, path: &Path, line: &str) -> String {
    const PATH: &str = "path = \"";
    let Some(start) = value.find(PATH).map(|at| at + PATH.len()) else {
        return value.to_owned();
    };
    let Some(len) = value[start..].find('"') else {
        refuse(path, line, "an unclosed path");
    };
    if !CRATES.iter().any(|(carried, _, _)| *carried == name) || value.contains("package =") {
        refuse(path, line, "a path to a crate that is not carried");
    }
    if !value.contains("version =") {
        refuse(path, line, "a path dependency without a version");
    }
    format!("{}../{name}{}", &value[..start], &value[start + len..])
}

fn refuse(path: &Path, line: &str, why: &str) -> ! {
    panic!(
        "{}: cannot carry `{line}` into a plugin's turnstile-sdk/: {why} (host/build.rs)",
        path.display()
    )
}

/// The `version` of the manifest's `[package]`.
fn package_version(manifest: &str, path: &Path) -> String {
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let (Some(("version", value)), "[package]") = (key_value(line), section) {
            return value.trim_matches('"').to_owned();
        }
    }
    panic!("{}: no [package] version", path.display())
}

/// `key = value` of a TOML line (no comment after the value, as these manifests write them).
fn key_value(line: &str) -> Option<(&str, &str)> {
    if line.starts_with('#') {
        return None;
    }
    let (key, value) = line.split_once('=')?;
    Some((key.trim(), value.trim()))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every file under `dir` but hidden ones (an editor's swap file, say), in a stable order.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_none_or(|name| name.starts_with('.'));
        if hidden {
            continue;
        } else if path.is_dir() {
            walk(&path, files);
        } else {
            files.push(path);
        }
    }
}
