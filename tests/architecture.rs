//! The house rules ARCHITECTURE.md states, held by reading the host's `use` lines.
//!
//! - No import circle, not even of two files: a circle means neither room can be read, changed
//!   or tested without the others.
//! - No upward arrow out of the lower floors (`statechart/`, `catalog/`, `store/`): each names
//!   only the floors below it.
//! - `mcp/handler/` names no axum, hyper or `http` type, and nothing of `mcp/http/`: the handler
//!   is the same whatever transport carried the request.
//!
//! A directory module's `mod.rs` is the hall of its rooms: a room naming what its own hall (or
//! a hall further up) defines, `super::StateStore`, is not an arrow, since a hall and its rooms
//! are one unit, as Rust's modules are written. The arrows between rooms, and out of the unit,
//! are.
//!
//! The scan is textual, not a compiler's: it reads `use` trees and inline `crate::`/`super::`
//! paths outside comments and `#[cfg(test)]` code, and follows a module's `pub use`
//! re-exports to the file that defines the item, so a facade `mod.rs` is not itself a room.
//!
//! The statechart engine is a crate of its own, `turnstile-statechart` (`plugin-api/statechart/`),
//! shared with the plugin SDK; the host names it `crate::statechart` through a re-export. The
//! scan reads it where the host sees it, as the module `statechart` (its `crate::` is that
//! module), so its rooms, circles and floor are held as when it lived in `host/src/statechart/`.
//! That it names nothing of the host is now also the compiler's to hold: its manifest depends
//! on no crate of this workspace, which a test here checks.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// A module of the host library: `store::embedded::writer`, or `` for the crate root.
type Module = String;

/// The crates the scan reads as one: the host's source, and the statechart crate mounted where
/// the host names it (`crate::statechart`).
const MOUNTS: &[(&str, &str)] = &[("src", ""), ("../plugin-api/statechart/src", "statechart")];

/// `module` under `mount` (`` for the host's own).
fn mounted(mount: &str, module: &str) -> Module {
    match (mount, module) {
        ("", module) => module.to_owned(),
        (mount, "") => mount.to_owned(),
        (mount, module) => format!("{mount}::{module}"),
    }
}

/// The root that `crate::` names in `module`: the mount of the crate it belongs to.
fn crate_root(module: &str) -> Vec<String> {
    MOUNTS
        .iter()
        .map(|(_, mount)| *mount)
        .find(|mount| !mount.is_empty() && within(module, mount))
        .map_or_else(Vec::new, |mount| {
            mount.split("::").map(str::to_owned).collect()
        })
}

struct Crate {
    /// Each module's source, with comments and test code taken out.
    source: BTreeMap<Module, String>,
    /// Each module's re-exports: the name it offers and the path (from the crate root) it is.
    exports: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    fn read() -> Crate {
        let mut source = BTreeMap::new();
        for (dir, mount) in MOUNTS {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut files = Vec::new();
            walk(&root, &mut files);
            let test_only = test_only_modules(&root, &files);
            for file in files {
                let Some(module) = module_of(&root, &file) else {
                    continue;
                };
                if test_only
                    .iter()
                    .any(|t| module == *t || module.starts_with(&format!("{t}::")))
                {
                    continue;
                }
                let text = fs::read_to_string(&file).unwrap();
                source.insert(mounted(mount, &module), strip(&text));
            }
        }
        let mut exports = BTreeMap::new();
        for (module, text) in &source {
            let mut offered = BTreeMap::new();
            for (visible, tree) in use_statements(text) {
                if !visible {
                    continue;
                }
                for path in expand(&tree) {
                    let (path, alias) = match path.split_once(" as ") {
                        Some((path, alias)) => (path.trim().to_owned(), alias.trim().to_owned()),
                        None => {
                            let last = path.rsplit("::").next().unwrap().to_owned();
                            (path, last)
                        }
                    };
                    if let Some(absolute) = absolute(module, &path) {
                        offered.insert(alias, absolute);
                    }
                }
            }
            exports.insert(module.clone(), offered);
        }
        Crate { source, exports }
    }

    /// The module whose file defines what `path` (from the crate root) names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Module> {
        let mut module: Vec<String> = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let child = [module.clone(), vec![segment.clone()]].concat().join("::");
            if self.source.contains_key(&child) {
                module.push(segment.clone());
                continue;
            }
            let here = module.join("::");
            if depth < 8
                && let Some(target) = self.exports.get(&here).and_then(|e| e.get(segment))
            {
                let mut rest = target.clone();
                rest.extend(path[i + 1..].iter().cloned());
                return self.resolve(&rest, depth + 1);
            }
            return self.source.contains_key(&here).then_some(here);
        }
        Some(module.join("::"))
    }

    /// Which modules each module names.
    fn edges(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut edges = BTreeMap::new();
        for (module, text) in &self.source {
            let mut named = BTreeSet::new();
            let mut paths = Vec::new();
            for (_, tree) in use_statements(text) {
                paths.extend(expand(&tree));
            }
            paths.extend(inline_paths(text));
            for path in paths {
                let path = path.split(" as ").next().unwrap().trim().to_owned();
                if let Some(absolute) = absolute(module, &path)
                    && let Some(target) = self.resolve(&absolute, 0)
                    && target != *module
                    && !target.is_empty()
                    && !within(module, &target)
                {
                    named.insert(target);
                }
            }
            edges.insert(module.clone(), named);
        }
        edges
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/store/embedded/writer.rs` → `store::embedded::writer`; `main.rs` (the binary) is not a
/// module of the library.
fn module_of(root: &Path, file: &Path) -> Option<Module> {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.last().map(String::as_str) {
        Some("main") if parts.len() == 1 => return None,
        Some("lib") if parts.len() == 1 => parts.clear(),
        Some("mod") => {
            parts.pop();
        }
        _ => {}
    }
    Some(parts.join("::"))
}

/// Modules declared under `#[cfg(test)]` (`#[cfg(test)] mod contract;`).
fn test_only_modules(root: &Path, files: &[PathBuf]) -> Vec<Module> {
    let mut found = Vec::new();
    for file in files {
        let Some(module) = module_of(root, file) else {
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line == "#[cfg(test)]"
                && let Some(next) = lines.next()
                && let Some(name) = next
                    .strip_prefix("mod ")
                    .or_else(|| next.strip_prefix("pub mod "))
                    .and_then(|rest| rest.strip_suffix(';'))
            {
                found.push(if module.is_empty() {
                    name.to_owned()
                } else {
                    format!("{module}::{name}")
                });
            }
        }
    }
    found
}

/// The source without comments and without `#[cfg(test)]` items (a test module's block, or the
/// one item after the attribute).
fn strip(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    while let Some(at) = out.find("#[cfg(test)]") {
        let after = at + "#[cfg(test)]".len();
        let end = match (out[after..].find('{'), out[after..].find(';')) {
            (Some(brace), semi) if semi.is_none_or(|semi| brace < semi) => {
                let mut depth = 0;
                let mut end = out.len();
                for (i, c) in out[after + brace..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = after + brace + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (_, Some(semi)) => after + semi + 1,
            _ => out.len(),
        };
        out.replace_range(at..end, "");
    }
    out
}

/// Every `use` statement's tree, and whether it is a re-export (`pub`, `pub(crate)`, ...).
fn use_statements(text: &str) -> Vec<(bool, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let word_start =
            at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let Some(end) = rest[at..].find(';') else {
            break;
        };
        if word_start {
            let line_start = before.rfind('\n').map_or(0, |n| n + 1);
            let prefix = before[line_start..].trim();
            let statement_start = prefix.is_empty() || prefix.starts_with("pub");
            if statement_start {
                found.push((
                    prefix.starts_with("pub"),
                    rest[at + 4..at + end].trim().to_owned(),
                ));
            }
        }
        rest = &rest[at + end + 1..];
    }
    found
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let body = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(|item| {
            let joined = if item == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{item}")
            };
            expand(&joined)
        })
        .collect()
}

/// Paths written in code: `crate::a::b`, `super::a`.
fn inline_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for start in ["crate::", "super::"] {
        let mut rest = text;
        while let Some(at) = rest.find(start) {
            let boundary = at == 0
                || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if boundary {
                found.push(path.trim_end_matches(':').to_owned());
            }
            rest = &rest[at + start.len()..];
        }
    }
    found
}

/// `path` as written in `module`, from the crate root; `None` for another crate's path.
fn absolute(module: &str, path: &str) -> Option<Vec<String>> {
    let mut segments: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut base: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_owned).collect()
    };
    match segments[0] {
        "crate" => {
            base = crate_root(module);
            segments.remove(0);
        }
        "self" => {
            segments.remove(0);
        }
        "super" => {
            while segments.first() == Some(&"super") {
                base.pop();
                segments.remove(0);
            }
        }
        _ => return None,
    }
    segments.retain(|s| *s != "*" && !s.is_empty());
    base.extend(segments.into_iter().map(str::to_owned));
    Some(base)
}

/// The strongly connected groups of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    group.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

fn within(module: &str, floor: &str) -> bool {
    module == floor || module.starts_with(&format!("{floor}::"))
}

#[test]
fn no_import_circle() {
    let edges = Crate::read().edges();
    let found = circles(&edges);
    assert!(
        found.is_empty(),
        "import circles, each with its arrows:\n{}",
        found
            .iter()
            .map(|group| {
                let arrows: Vec<String> = group
                    .iter()
                    .flat_map(|from| {
                        edges[from]
                            .iter()
                            .filter(|to| group.contains(to))
                            .map(move |to| format!("    {from} → {to}"))
                    })
                    .collect();
                format!("  {}\n{}", group.join(", "), arrows.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_lower_floors_name_only_what_is_below_them() {
    // Each floor and what it may name besides itself (its own rooms, std and other crates).
    let floors: &[(&str, &[&str])] = &[
        // Its own crate now, naming nothing outside itself (`fast_hash`, which it was allowed,
        // stays in the host: the engine never used it).
        ("statechart", &[]),
        ("catalog", &["statechart", "plugin", "fast_hash", "confirm"]),
        ("store", &["statechart", "actors::key", "fast_hash"]),
    ];
    // Arrows known today and being taken out (issue 41). Shrink this list; never add to it.
    let known = [
        "catalog::change → gate",
        "store::embedded::writer → metrics",
    ];
    let edges = Crate::read().edges();
    let mut upward = Vec::new();
    for (floor, below) in floors {
        for (module, named) in edges.iter().filter(|(m, _)| within(m, floor)) {
            for target in named {
                let allowed = within(target, floor) || below.iter().any(|b| within(target, b));
                let arrow = format!("{module} → {target}");
                if !allowed && !known.contains(&arrow.as_str()) {
                    upward.push(format!("  {arrow}"));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "arrows out of a lower floor to one above it:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_handler_names_no_http_type() {
    let krate = Crate::read();
    let edges = krate.edges();
    let mut found = Vec::new();
    for (module, text) in krate
        .source
        .iter()
        .filter(|(m, _)| within(m, "mcp::handler"))
    {
        for word in ["axum", "hyper", "http_body", "http::"] {
            let named = text.match_indices(word).any(|(at, _)| {
                let before = text[..at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                found.push(format!("  {module} names `{word}`"));
            }
        }
        for target in &edges[module] {
            if within(target, "mcp::http") {
                found.push(format!("  {module} → {target}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the handler must not know its transport:\n{}",
        found.join("\n")
    );
}

/// The scan itself: a re-export is followed to the file that defines the item, and test code
/// is not read.
#[test]
fn the_scan_follows_re_exports_and_skips_tests() {
    let krate = Crate::read();
    let edges = krate.edges();
    // `crate::mcp::Quotas` is `mcp::quotas::Quotas`, re-exported by `mcp/mod.rs`.
    assert_eq!(
        krate
            .resolve(&["mcp".into(), "Quotas".into()], 0)
            .as_deref(),
        Some("mcp::quotas")
    );
    assert!(edges["mcp::handler::server"].contains("mcp::quotas"));
    // The statechart crate is read where the host names it, its `crate::` its own root.
    assert_eq!(
        krate
            .resolve(&["statechart".into(), "Machine".into()], 0)
            .as_deref(),
        Some("statechart")
    );
    assert!(edges["statechart::diagram::dot"].contains("statechart::tree"));
    assert!(edges["catalog"].iter().any(|m| within(m, "statechart")));
    assert!(strip("a\n#[cfg(test)]\nmod tests {\n use crate::x;\n}\nb").trim() == "a\n\nb");
    assert_eq!(
        expand("crate::a::{b, c::{d, self}}"),
        ["crate::a::b", "crate::a::c::d", "crate::a::c"]
    );
}

/// The statechart crate is the floor below every other: it depends on no crate of this
/// workspace, so the host's rooms and the SDK's cannot leak into it.
#[test]
fn the_statechart_crate_depends_on_nothing_of_the_workspace() {
    let manifest = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-api/statechart/Cargo.toml"),
    )
    .unwrap();
    let inside: Vec<&str> = manifest
        .lines()
        .filter(|line| line.starts_with("turnstile") || line.contains("path ="))
        .collect();
    assert!(
        inside.is_empty(),
        "turnstile-statechart depends on crates of the workspace: {inside:?}"
    );
}
