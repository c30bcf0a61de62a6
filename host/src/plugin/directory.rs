//! [`Directory`]: the plugin directory as a set of library files that are done being written.
//!
//! It owns what the last look at the directory saw (each library's [`Stamp`]: size,
//! modification time and, on Unix, device and inode) and the stamp at which each file was last
//! handled (loaded or refused). A file is *settled* once its stamp has stayed the same for the
//! settle time (seen by two looks at least that far apart); only settled files are reported, so
//! a copy still in progress is not loaded half-way. [`watch`] wakes the caller when the directory changes.
//!
//! It does not load anything (the caller does, and reports back with [`Directory::handled`]),
//! and knows nothing of catalogs.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use super::{PluginError, library_files};

/// What identifies one version of a file on disk. A rename over the file (the safe deploy)
/// changes the inode; writing in place changes the size or the modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// Device and inode (Unix only): a replaced file is a new one even with equal size and time.
    #[cfg(unix)]
    inode: (u64, u64),
}

impl Stamp {
    /// The stamp of the file at `path` now (following symlinks); `None` if it is gone.
    pub fn of(path: &Path) -> Option<Stamp> {
        let meta = fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        Some(Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            inode,
        })
    }
}

/// A settled change of one library file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// New, or different from when it was last handled: load it (as of `stamp`).
    Ready { path: PathBuf, stamp: Stamp },
    /// Gone since it was handled.
    Vanished { path: PathBuf },
}

/// What one look at the directory found.
#[derive(Debug, Default)]
pub struct Look {
    pub changes: Vec<FileChange>,
    /// Some file changed since the previous look: look again after the settle time.
    pub unsettled: bool,
    /// The directory could not be read (or some entry of it).
    pub errors: Vec<PluginError>,
}

/// The plugin directory, as last seen and as last handled.
pub struct Directory {
    dir: PathBuf,
    settle: Duration,
    /// Each file's stamp at the last look, and since when it has had that stamp.
    seen: BTreeMap<PathBuf, (Stamp, Instant)>,
    handled: BTreeMap<PathBuf, Stamp>,
}

impl Directory {
    /// A directory of which nothing was seen or handled yet, whose files are settled once
    /// unchanged for `settle`.
    pub fn new(dir: &Path, settle: Duration) -> Self {
        Directory {
            dir: dir.to_owned(),
            settle,
            seen: BTreeMap::new(),
            handled: BTreeMap::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Records every library file as it is now as seen and handled: what serving starts with.
    /// (Stamped before the start-up load, so a file changed during it is handled again.)
    pub fn assume_handled(&mut self) {
        let (files, _) = library_files(&self.dir);
        self.handled = stamps(files);
        let now = Instant::now();
        self.seen = self
            .handled
            .iter()
            .map(|(path, stamp)| (path.clone(), (*stamp, now)))
            .collect();
    }

    /// Looks at the directory: which files settled in a new version, which vanished.
    pub fn look(&mut self) -> Look {
        let (files, errors) = library_files(&self.dir);
        if !errors.is_empty() {
            // A directory that cannot be read (gone, permissions) says nothing about its files:
            // report no change rather than every library vanished.
            return Look {
                errors,
                ..Look::default()
            };
        }
        let now = stamps(files);
        let mut look = Look::default();
        let mut seen = BTreeMap::new();
        for (path, stamp) in &now {
            // Unchanged since an earlier look at least the settle time ago.
            let (since, settled) = match self.seen.get(path) {
                Some((seen, since)) if seen == stamp => (*since, since.elapsed() >= self.settle),
                _ => (Instant::now(), false),
            };
            seen.insert(path.clone(), (*stamp, since));
            if self.handled.get(path) == Some(stamp) {
                continue;
            }
            if !settled {
                look.unsettled = true;
            } else {
                look.changes.push(FileChange::Ready {
                    path: path.clone(),
                    stamp: *stamp,
                });
            }
        }
        for path in self.handled.keys() {
            if !now.contains_key(path) {
                look.changes
                    .push(FileChange::Vanished { path: path.clone() });
            }
        }
        self.seen = seen;
        look
    }

    /// `path` was handled (loaded, or refused) as of `stamp`: not reported again until it
    /// changes.
    pub fn handled(&mut self, path: &Path, stamp: Stamp) {
        self.handled.insert(path.to_owned(), stamp);
    }

    /// Forgets how `path` was handled: a vanished file, or a refused one to be tried again.
    pub fn forget(&mut self, path: &Path) {
        self.handled.remove(path);
    }
}

fn stamps(files: Vec<PathBuf>) -> BTreeMap<PathBuf, Stamp> {
    files
        .into_iter()
        .filter_map(|path| Stamp::of(&path).map(|stamp| (path, stamp)))
        .collect()
}

/// Calls `changed` whenever something in `dir` (not below it) is created, written, renamed or
/// removed, from notify's own thread; watching stops when the returned watcher is dropped.
pub fn watch(
    dir: &Path,
    changed: impl Fn() + Send + 'static,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Errors (an overflowed event queue) also call for a look: the directory is what counts.
        if event.is_err() || event.is_ok_and(|event| !matches!(event.kind, EventKind::Access(_))) {
            changed();
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(look: &Look) -> Vec<PathBuf> {
        look.changes
            .iter()
            .filter_map(|change| match change {
                FileChange::Ready { path, .. } => Some(path.clone()),
                FileChange::Vanished { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_file_is_reported_once_two_looks_agree_and_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(dir.path(), Duration::ZERO);
        directory.assume_handled();
        let file = dir.path().join("a.so");
        fs::write(&file, b"partial").unwrap();
        let look = directory.look();
        assert!(look.unsettled && look.changes.is_empty(), "{look:?}");
        // Still being written: the stamp differs, so it is still not reported.
        fs::write(&file, b"partial, and more").unwrap();
        let look = directory.look();
        assert!(look.unsettled && look.changes.is_empty(), "{look:?}");
        let look = directory.look();
        assert!(!look.unsettled);
        assert_eq!(ready(&look), std::slice::from_ref(&file));
        let FileChange::Ready { stamp, .. } = look.changes[0].clone() else {
            unreachable!()
        };
        directory.handled(&file, stamp);
        assert!(directory.look().changes.is_empty());

        // Replaced by a rename: a new inode, reported again once settled.
        let staged = dir.path().join("a.so.tmp");
        fs::write(&staged, b"partial, and more").unwrap();
        fs::rename(&staged, &file).unwrap();
        assert!(directory.look().unsettled);
        assert_eq!(ready(&directory.look()), std::slice::from_ref(&file));

        fs::remove_file(&file).unwrap();
        let look = directory.look();
        assert_eq!(look.changes, [FileChange::Vanished { path: file.clone() }]);
        directory.forget(&file);
        assert!(directory.look().changes.is_empty());
    }

    #[test]
    fn a_file_is_not_settled_before_the_settle_time_even_if_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(dir.path(), Duration::from_secs(3600));
        directory.assume_handled();
        fs::write(dir.path().join("a.so"), b"x").unwrap();
        for _ in 0..3 {
            let look = directory.look();
            assert!(look.unsettled && look.changes.is_empty(), "{look:?}");
        }
    }

    #[test]
    fn an_unreadable_directory_reports_no_change() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.so"), b"x").unwrap();
        let mut directory = Directory::new(dir.path(), Duration::ZERO);
        directory.assume_handled();
        fs::remove_file(dir.path().join("a.so")).unwrap();
        fs::remove_dir(dir.path()).unwrap();
        let look = directory.look();
        assert!(
            look.changes.is_empty() && !look.errors.is_empty(),
            "{look:?}"
        );
    }

    #[test]
    fn files_present_at_start_are_not_reported() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.so"), b"x").unwrap();
        fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let mut directory = Directory::new(dir.path(), Duration::ZERO);
        directory.assume_handled();
        let look = directory.look();
        assert!(!look.unsettled && look.changes.is_empty(), "{look:?}");
    }
}
