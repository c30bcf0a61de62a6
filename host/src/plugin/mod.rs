//! Loading plugin libraries and calling them through the C ABI of `turnstile-plugin-abi`.
//!
//! This module owns everything between a file on disk and a JSON result: opening the library,
//! checking its ABI version and tables, reading and checking its manifest, passing calls across
//! the boundary and freeing what crosses back. It must not know about workflows, gating, MCP or
//! the statechart: whether a tool's bindings fit its machine is the catalog's business.
//!
//! # Layout
//!
//! - [`LoadedPlugin`] (`loaded.rs`): the safe, cloneable handle; start reading here.
//! - `library.rs`: the loading protocol and the only raw-pointer code of the host.
//! - `manifest.rs`: manifest parsing (with the JSON path of errors) and local checks.
//! - [`PluginError`] (`error.rs`): every failure, naming the file.
//! - [`PluginConfigs`] (`config.rs`): a plugin's configuration, from the config file's
//!   `[plugin.<name>]` table and `TURNSTILE_PLUGIN_<NAME>_*` (ABI 1.1).
//! - [`directory::Directory`] (`directory.rs`): the plugin directory while serving: which files
//!   settled in a new version or vanished, and a watcher that says when to look.
//! - [`CallPool`] (`pool.rs`): how many calls of one plugin may run at once.
//! - [`HostCall`] (`services.rs`): the host services a plugin may use during a call (ABI 1.1).
//! - `isolated/`: plugins that run in a process of their own ([`Isolation`]), both the server's
//!   side and the child's (`turnstile plugin-host`, [`run_plugin_host`]).
//! - `upstream/`: an MCP server in any language, named by a `NAME.upstream.toml` file that binds
//!   its tools to a machine, called as its MCP client ([`Relist`] hears that its tools changed).
//!
//! **Invariant:** a library is never unloaded while a call may run: every [`LoadedPlugin`]
//! clone holds an `Arc` to it, and `call` borrows one. The instance is destroyed, then the
//! library unloaded, when the last clone drops.
//!
//! Every load, at start too, goes through [`load_private_copy`], which loads a copy of the file
//! under a unique name: glibc's `dlopen` of a path that is still loaded returns the old code (and
//! `dlclose` often leaves a library mapped), and rewriting a file that is mapped can crash the
//! process (SIGBUS). With a private copy, the file in the plugin directory is never mapped, so
//! an operator may replace or rewrite it at any time.

pub mod config;
pub mod directory;
mod error;
mod isolated;
mod library;
mod loaded;
mod manifest;
mod output;
mod pool;
mod quick;
mod services;
#[cfg(test)]
mod tests;
mod upstream;

use std::{
    env::consts::DLL_SUFFIX,
    fs, io,
    path::{Path, PathBuf},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

pub use turnstile_plugin_abi::{CallContext, LogLevel, Manifest, PrimitiveKind, ToolManifest};

pub use self::{
    config::PluginConfigs,
    error::PluginError,
    isolated::{Isolation, run_child as run_plugin_host},
    loaded::{LoadedPlugin, MAX_COMPLETIONS},
    output::{PluginOutput, Returned},
    pool::{CallPool, DEFAULT_POOL_SIZE, QUEUE_WAIT},
    quick::Overrun,
    services::{CallEvent, EventReceiver, HostCall},
    upstream::{
        file::Transport as UpstreamTransport, is_upstream_name, list_tools as list_upstream_tools,
    },
};

#[doc(hidden)]
pub use self::isolated::fuzz_frames;

/// For `host/fuzz`: a manifest as a plugin's library or an isolated child hands it over, checked
/// as loading checks it.
#[doc(hidden)]
pub fn fuzz_manifest(bytes: &[u8]) {
    if let Ok(manifest) = manifest::parse(bytes) {
        let _ = manifest::check_content_source(&manifest, true);
    }
}

/// How the server loads each plugin: the bound on its concurrent calls, and whether it runs in
/// a process of its own.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// `--plugin-pool`.
    pub pool_size: usize,
    /// Which plugins run isolated; `None`: all in this process (`turnstile check` and `graph`,
    /// which call no tool, and library users).
    pub isolation: Option<Isolation>,
    /// The config file's plugin tables, given to each plugin's `init` with its environment
    /// variables. (An isolated plugin's process reads only the environment.)
    pub configs: PluginConfigs,
    /// Whether plugins whose manifest says `test_fixture` load (`--allow-test-plugins`; `serve`
    /// refuses them by default, `check`, `graph` and library users, which call no tool on a
    /// client's behalf, load them).
    pub allow_test_fixtures: bool,
    /// Who is told that an upstream's tools changed (its `notifications/tools/list_changed`),
    /// so that it is loaded again.
    pub relist: Relist,
}

/// Where an upstream's "my tools changed" goes: set once by whoever reloads plugins (the hot
/// plugin loop); until then, and in `check` and `graph`, nowhere.
#[derive(Clone, Default)]
pub struct Relist(Arc<OnceLock<RelistTo>>);

/// Whoever hears [`Relist`]'s paths.
type RelistTo = Box<dyn Fn(PathBuf) + Send + Sync>;

impl Relist {
    /// From now on, `to` hears the path of each upstream file whose tools changed.
    pub fn set(&self, to: impl Fn(PathBuf) + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(to));
    }

    /// Tells whoever listens that the upstream `path`'s tools changed.
    fn tell(&self, path: PathBuf) {
        if let Some(to) = self.0.get() {
            to(path);
        }
    }
}

impl std::fmt::Debug for Relist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relist")
            .field("set", &self.0.get().is_some())
            .finish()
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            pool_size: DEFAULT_POOL_SIZE,
            isolation: None,
            configs: PluginConfigs::default(),
            allow_test_fixtures: true,
            relist: Relist::default(),
        }
    }
}

/// Loads every shared library (by the platform suffix: `.so`, `.dylib` or `.dll`) in `dir`,
/// non-recursively, in file-name order, each from a private copy (see [`load_private_copy`]).
/// Returns what loaded and one error per file that did not; a file with the suffix that is not
/// a loadable plugin is an error, files with other suffixes and directories are ignored. An
/// unreadable `dir` is a single error.
pub fn load_dir(dir: &Path) -> (Vec<LoadedPlugin>, Vec<PluginError>) {
    load_dir_with(dir, &LoadOptions::default())
}

/// [`load_dir`], each library loaded with `options` (see [`load_with`]).
pub fn load_dir_with(dir: &Path, options: &LoadOptions) -> (Vec<LoadedPlugin>, Vec<PluginError>) {
    let (files, mut errors) = library_files(dir);
    let mut plugins = Vec::new();
    for file in files {
        match load_with(&file, options) {
            Ok(plugin) => plugins.push(plugin),
            Err(err) => errors.push(err),
        }
    }
    (plugins, errors)
}

/// Loads the library at `path` as the server does: from a private copy (see
/// [`load_private_copy`]), with a pool of `options.pool_size` calls, and, when `options`
/// isolate it (by name or by its manifest's `isolate`), moved into a process of its own
/// started on the bytes just loaded. Blocking; for an isolated plugin, until its process is
/// ready.
///
/// An upstream file (`NAME.upstream.toml`) is read, its server connected to and its tools listed
/// instead (see `upstream`): blocking until it answered.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<LoadedPlugin, PluginError> {
    if is_upstream_name(path) {
        let (relist, file) = (options.relist.clone(), path.to_owned());
        return LoadedPlugin::load_upstream(path, Arc::new(move || relist.tell(file.clone())));
    }
    let mut plugin = match &options.isolation {
        Some(isolation) => load_private_copy_then(
            path,
            &std::env::temp_dir(),
            &options.configs,
            |plugin, copy| {
                if !isolation.wants(plugin.manifest()) {
                    return Ok(plugin);
                }
                let image = fs::read(copy).map_err(|err| io_error(path, "cannot read", err))?;
                plugin.into_isolated(image, isolation)
            },
        )?,
        None => load_private_copy(path, &options.configs)?,
    };
    if plugin.manifest().test_fixture && !options.allow_test_fixtures {
        return Err(PluginError::TestFixture {
            path: path.to_path_buf(),
            name: plugin.manifest().name.clone(),
        });
    }
    plugin.set_pool_size(options.pool_size);
    Ok(plugin)
}

/// The plugin files in `dir` (shared libraries by the platform suffix, and upstream files,
/// `*.upstream.toml`), non-recursively, in file-name order, and the errors met reading the
/// directory. A symlink to a file counts as a file.
pub fn library_files(dir: &Path) -> (Vec<PathBuf>, Vec<PluginError>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(source) => {
            return (
                Vec::new(),
                vec![io_error(dir, "cannot read directory", source)],
            );
        }
    };
    let mut errors = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                let path = entry.path();
                // `fs::metadata` follows symlinks, so a symlinked plugin counts as a file.
                if (is_library_name(&path) || is_upstream_name(&path))
                    && fs::metadata(&path).is_ok_and(|meta| meta.is_file())
                {
                    files.push(path);
                }
            }
            Err(source) => errors.push(io_error(dir, "cannot read directory", source)),
        }
    }
    files.sort();
    (files, errors)
}

/// Whether `path`'s file name ends with the platform's library suffix (and is more than it).
pub fn is_library_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(DLL_SUFFIX) && name.len() > DLL_SUFFIX.len())
}

/// Loads a private copy of the library at `path`, copied into the system temp directory under a
/// unique name, so that a changed file is really loaded anew even though the old one is still
/// mapped (see the module docs). [`LoadedPlugin::path`] and errors name the original `path`.
///
/// The copy is deleted right after loading (on Unix the mapping outlives the file). A temp
/// directory mounted `noexec` makes `dlopen` fail; use [`load_private_copy_in`] then. The
/// plugin's `init` gets what `configs` has for `path`.
pub fn load_private_copy(
    path: &Path,
    configs: &PluginConfigs,
) -> Result<LoadedPlugin, PluginError> {
    load_private_copy_in(path, &std::env::temp_dir(), configs)
}

/// [`load_private_copy`] with the copy made in `dir`.
pub fn load_private_copy_in(
    path: &Path,
    dir: &Path,
    configs: &PluginConfigs,
) -> Result<LoadedPlugin, PluginError> {
    load_private_copy_then(path, dir, configs, |plugin, _| Ok(plugin))
}

/// [`load_private_copy_in`], then `then` with the plugin and its copy, before the copy is
/// deleted.
fn load_private_copy_then(
    path: &Path,
    dir: &Path,
    configs: &PluginConfigs,
    then: impl FnOnce(LoadedPlugin, &Path) -> Result<LoadedPlugin, PluginError>,
) -> Result<LoadedPlugin, PluginError> {
    /// Distinguishes the copies one process makes; the process id distinguishes processes.
    static NEXT_COPY: AtomicU64 = AtomicU64::new(0);

    let file_name = path
        .file_name()
        .map_or_else(|| "plugin".into(), |name| name.to_string_lossy());
    let mut source = fs::File::open(path).map_err(|err| io_error(path, "cannot read", err))?;
    let (copy, mut target) = loop {
        let n = NEXT_COPY.fetch_add(1, Ordering::Relaxed);
        let copy = dir.join(format!("turnstile-{}-{n}-{file_name}", std::process::id()));
        // `create_new` never reuses a file left over by an earlier process with the same id.
        match fs::File::options().write(true).create_new(true).open(&copy) {
            Ok(target) => break (copy, target),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => {
                return Err(io_error(
                    path,
                    &format!("cannot copy to {}", copy.display()),
                    err,
                ));
            }
        }
    };
    let copied = io::copy(&mut source, &mut target).and_then(|_| target.sync_all());
    drop(target);
    let result = match copied {
        Ok(()) => {
            LoadedPlugin::load_file(path, &copy, configs).and_then(|plugin| then(plugin, &copy))
        }
        Err(err) => Err(io_error(
            path,
            &format!("cannot copy to {}", copy.display()),
            err,
        )),
    };
    // Best effort: a copy that cannot be deleted (Windows keeps loaded DLLs locked) only costs
    // disk space in the temp directory.
    let _ = fs::remove_file(&copy);
    result
}

fn io_error(path: &Path, action: &str, source: io::Error) -> PluginError {
    PluginError::Io {
        path: path.to_owned(),
        action: action.to_owned(),
        source,
    }
}
