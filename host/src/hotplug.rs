//! Hot plugins: the plugin directory's changes, applied to the catalog being served.
//!
//! [`HotPlug`] owns the libraries being served and the loop that keeps them in step with the
//! directory: woken by the watcher ([`directory::watch`]) or by SIGHUP, it waits until changed
//! files are settled ([`Directory`]), loads each as at start (a private copy, `turnstile check`'s
//! rules), builds a new catalog and swaps it into the [`LiveCatalog`] in one step, then reports
//! whose menus changed ([`CatalogChange`]). A library that is refused changes nothing: the
//! version served before (if any) stays. A load that fails while the file is still changing is
//! tried again once it settles, not reported.
//!
//! It runs on a thread of its own, since loading blocks (copying, `dlopen`, plugin
//! initialisers). It must not tell clients anything itself: the change goes to a callback.
//!
//! Replacing a library is safe for calls in flight: each holds its tool, and through it the old
//! plugin, which is unloaded only when the last of them returns (see [`LiveCatalog`]).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    sync::{
        Arc,
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    thread,
    time::Duration,
};

use crate::{
    catalog::{Catalog, LiveCatalog},
    gate::CatalogChange,
    plugin::{
        self, LoadOptions, LoadedPlugin,
        directory::{Directory, FileChange, Stamp},
    },
};

/// How long a changed file must stay unchanged before it is loaded. A copy in progress writes
/// far more often than this; the safe deploy (write elsewhere, then rename) needs no wait at all.
pub const SETTLE: Duration = Duration::from_millis(300);

/// Why the loop should look at the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// The watcher saw something change.
    Changed,
    /// SIGHUP: look, and try again the libraries refused so far (what they clashed with may
    /// be gone).
    Hangup,
    /// An upstream said its tools changed: load its file again, though the file is the same.
    Relist(PathBuf),
}

/// The libraries being served and the catalog they make.
pub struct HotPlug {
    directory: Directory,
    /// Admitted libraries, in admission order (the first to claim a name keeps it).
    served: Vec<LoadedPlugin>,
    /// Files refused as they are now; SIGHUP tries them again.
    refused: BTreeSet<PathBuf>,
    /// How each library is loaded (call pool, isolation), as at start.
    options: LoadOptions,
    live: Arc<LiveCatalog>,
    changed: Box<dyn Fn(CatalogChange) + Send>,
}

impl HotPlug {
    /// Takes over serving `live`, whose plugins were loaded from `directory` (stamped before
    /// that load, see [`Directory::assume_handled`]); `refused` are the files that failed then.
    /// `changed` hears every catalog replacement that changed some client's menu; `configs` are
    /// the plugins' configuration tables.
    pub fn new(
        directory: Directory,
        live: Arc<LiveCatalog>,
        refused: impl IntoIterator<Item = PathBuf>,
        options: LoadOptions,
        changed: impl Fn(CatalogChange) + Send + 'static,
    ) -> Self {
        let served = live
            .current()
            .plugins()
            .iter()
            .map(|plugin| LoadedPlugin::clone(plugin))
            .collect();
        HotPlug {
            directory,
            served,
            refused: refused.into_iter().collect(),
            options,
            live,
            changed: Box::new(changed),
        }
    }

    /// Runs until every sender of `wakes` is gone.
    fn run(mut self, wakes: &Receiver<Wake>) {
        let mut unsettled = false;
        loop {
            // With files still settling, look again after the settle time even if nothing
            // else happens; else sleep until woken.
            let wake = if unsettled {
                match wakes.recv_timeout(SETTLE) {
                    Ok(wake) => Some(wake),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match wakes.recv() {
                    Ok(wake) => Some(wake),
                    Err(_) => return,
                }
            };
            // A burst of events (a copy writes many times) makes one look.
            let mut hangup = false;
            for wake in wake
                .into_iter()
                .chain(std::iter::from_fn(|| wakes.try_recv().ok()))
            {
                match wake {
                    Wake::Changed => {}
                    Wake::Hangup => hangup = true,
                    Wake::Relist(path) => {
                        tracing::info!(path = %path.display(), "an upstream's tools changed: loading it again");
                        self.directory.forget(&path);
                    }
                }
            }
            if hangup {
                tracing::info!(dir = %self.directory.path().display(), "SIGHUP: rescanning the plugin directory");
                for path in std::mem::take(&mut self.refused) {
                    self.directory.forget(&path);
                }
            }
            unsettled = self.rescan();
        }
    }

    /// Looks at the directory once and applies what settled; returns whether some file is
    /// still settling.
    pub fn rescan(&mut self) -> bool {
        let look = self.directory.look();
        for error in &look.errors {
            tracing::warn!("cannot read the plugin directory: {error}");
        }
        let mut unsettled = look.unsettled;
        if look.changes.is_empty() {
            return unsettled;
        }
        let mut served = self.served.clone();
        for change in look.changes {
            match change {
                FileChange::Vanished { path } => {
                    self.directory.forget(&path);
                    self.refused.remove(&path);
                    let before = served.len();
                    served.retain(|plugin| plugin.path() != path);
                    if served.len() < before {
                        tracing::info!(path = %path.display(), "plugin removed");
                    }
                }
                FileChange::Ready { path, stamp } => match self.try_load(&served, &path, stamp) {
                    Attempt::Admitted(next) => {
                        served = next;
                        self.refused.remove(&path);
                        self.directory.handled(&path, stamp);
                    }
                    Attempt::Refused => {
                        self.refused.insert(path.clone());
                        self.directory.handled(&path, stamp);
                    }
                    Attempt::StillChanging => unsettled = true,
                },
            }
        }
        self.serve(served);
        unsettled
    }

    /// Loads `path` as of `stamp` and checks that `served` with it (replacing its previous
    /// version, or added last) makes a catalog without problems.
    fn try_load(&self, served: &[LoadedPlugin], path: &Path, stamp: Stamp) -> Attempt {
        let loaded = plugin::load_with(path, &self.options);
        // The copy must be of the settled file: if it changed meanwhile, this was a look at a
        // file being written, and it will settle again.
        if Stamp::of(path) != Some(stamp) {
            return Attempt::StillChanging;
        }
        let plugin = match loaded {
            Ok(plugin) => plugin,
            Err(error @ plugin::PluginError::TestFixture { .. }) => {
                tracing::info!("plugin not loaded: {error}");
                return Attempt::Refused;
            }
            Err(error) => {
                tracing::error!("plugin not loaded: {error}");
                return Attempt::Refused;
            }
        };
        let mut next = served.to_vec();
        let replacing = match next.iter_mut().find(|served| served.path() == path) {
            Some(slot) => {
                *slot = plugin.clone();
                true
            }
            None => {
                next.push(plugin.clone());
                false
            }
        };
        let (_, errors) = Catalog::build(next.clone());
        if !errors.is_empty() {
            for error in errors {
                if error.plugin == path {
                    tracing::error!("plugin not loaded: {error}");
                } else {
                    tracing::error!(
                        "plugin not loaded: {}: refused: it would leave another plugin out: {error}",
                        path.display()
                    );
                }
            }
            return Attempt::Refused;
        }
        for note in plugin.notes() {
            tracing::warn!("{}: {note}", path.display());
        }
        let manifest = plugin.manifest();
        tracing::info!(
            plugin = %manifest.name,
            version = %manifest.version,
            path = %path.display(),
            "{}",
            if replacing { "plugin replaced" } else { "plugin loaded" }
        );
        Attempt::Admitted(next)
    }

    /// Serves `served` from now on and reports whose menus changed.
    fn serve(&mut self, served: Vec<LoadedPlugin>) {
        let (catalog, errors) = Catalog::build(served);
        // A removal can strand a plugin whose tools used the removed plugin's workflow.
        for error in &errors {
            tracing::error!("plugin not loaded: {error}");
            self.refused.insert(error.plugin.clone());
        }
        self.served = catalog
            .plugins()
            .iter()
            .map(|plugin| LoadedPlugin::clone(plugin))
            .collect();
        let old = self.live.replace(catalog);
        let change = CatalogChange::between(&old, &self.live.current());
        if !change.is_empty() {
            (self.changed)(change);
        }
    }
}

enum Attempt {
    /// The plugins to serve with this library in.
    Admitted(Vec<LoadedPlugin>),
    /// Refused (and logged): nothing changes.
    Refused,
    /// The file changed while it was being loaded: look again once it settles.
    StillChanging,
}

/// Serves hot plugins for the rest of the process's life: watches `directory` (and SIGHUP) and
/// keeps `live` in step with it, telling `runtime` whose menus changed. `refused` are the files
/// the start-up load refused; `directory` was stamped before that load.
pub fn start(
    directory: Directory,
    live: Arc<LiveCatalog>,
    refused: Vec<PathBuf>,
    options: LoadOptions,
    runtime: crate::actors::Runtime,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let (wake, wakes) = mpsc::channel();
    let relist = wake.clone();
    options.relist.set(move |path| {
        // Fails only once the loop is gone, at exit.
        let _ = relist.send(Wake::Relist(path));
    });
    let on_change = wake.clone();
    let watcher = plugin::directory::watch(directory.path(), move || {
        // Fails only once the loop is gone, at exit.
        let _ = on_change.send(Wake::Changed);
    });
    // Without a watcher (inotify limits, say), SIGHUP still rescans: serve rather than fail.
    let watcher = match watcher {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::warn!(dir = %directory.path().display(), %error, "cannot watch the plugin directory; send SIGHUP to load changes");
            None
        }
    };
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if wake.send(Wake::Hangup).is_err() {
                return;
            }
        }
    });
    let tokio = tokio::runtime::Handle::current();
    let hotplug = HotPlug::new(directory, live, refused, options, move |change| {
        let runtime = runtime.clone();
        tokio.spawn(async move { runtime.catalog_changed(change).await });
    });
    thread::Builder::new()
        .name("hotplug".into())
        .spawn(move || {
            // The watcher stops when dropped: it lives as long as the loop.
            let _watcher = watcher;
            hotplug.run(&wakes);
        })
        .context("cannot start the hot-plug thread")?;
    Ok(())
}
