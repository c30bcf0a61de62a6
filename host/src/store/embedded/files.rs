//! Keeping the embedded store's files private: the data directory `0700`, the store file `0600`.
//!
//! The file holds every handle in plain text, and a handle is a bearer token for its instance, so
//! no other user of the machine may read it. What is created here is created with those modes
//! (before any byte is written, so there is no moment when it is readable); what already exists
//! with wider permissions is tightened, and the change is logged once at INFO.
//!
//! It must not touch a directory it was not told is Turnstile's own: the store file may be named
//! in any directory (`--store embedded:/srv/state.redb`), whose mode is the operator's business.
//! Only the data directory (`--data-dir`, or the default one) is tightened when it exists.

use std::{
    fs::{DirBuilder, OpenOptions, Permissions},
    io,
    os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt},
    path::Path,
};

/// The mode of a directory Turnstile keeps its data in.
pub const DIR_MODE: u32 = 0o700;
/// The mode of a file holding instance state.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) as `0700`, or tightens it to at most `0700` if it exists
/// with group or other permissions. For the data directory only (see the module doc).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    // Missing parents are made `0700` too: XDG asks the same of `$XDG_DATA_HOME` itself.
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    tighten(dir, DIR_MODE)
}

/// Creates a missing parent of the store file `0700`, then the file itself, empty, as `0600`, or
/// tightens an existing file to `0600`. The parent is left as it is when it exists.
pub fn private_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
        && !dir.exists()
    {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)?;
    }
    // An empty file is what redb makes a new database in; `create` keeps an existing one as is.
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)?;
    tighten(path, FILE_MODE)
}

/// Removes from `path`'s permissions whatever `allowed` does not grant, saying so when it did.
fn tighten(path: &Path, allowed: u32) -> io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    let tightened = mode & allowed;
    if tightened != mode {
        std::fs::set_permissions(path, Permissions::from_mode(tightened))?;
        tracing::info!(
            path = %path.display(),
            "tightened permissions from {mode:04o} to {tightened:04o}: the store holds handles, \
             which are credentials"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn new_directories_and_files_are_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(mode_of(&root.path().join("a")), 0o700);
        let file = root.path().join("c/state.redb");
        private_file(&file).unwrap();
        assert_eq!(mode_of(&root.path().join("c")), 0o700);
        assert_eq!(mode_of(&file), 0o600);
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 0);
    }

    #[test]
    fn existing_ones_are_tightened_and_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("state.redb");
        std::fs::write(&file, b"kept").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();

        private_file(&file).unwrap();
        assert_eq!(mode_of(&file), 0o600);
        assert_eq!(std::fs::read(&file).unwrap(), b"kept");
        assert_eq!(
            mode_of(&dir),
            0o755,
            "the file's directory is not ours to change"
        );

        private_dir(&dir).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
    }

    #[test]
    fn narrower_modes_are_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("state.redb");
        std::fs::write(&file, b"").unwrap();
        std::fs::set_permissions(&file, Permissions::from_mode(0o400)).unwrap();
        tighten(&file, FILE_MODE).unwrap();
        assert_eq!(mode_of(&file), 0o400);
    }
}
