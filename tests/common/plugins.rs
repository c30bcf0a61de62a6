//! Where the built artefacts are: the binary under test, the plugin libraries cargo built next
//! to it, and the target directory they live in. This is the one way the tests find them.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use tempfile::TempDir;

/// The binary under test.
pub fn turnstile_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_turnstile"))
}

/// A binary of an example store crate (`turnstile-mariadb` of `host/examples/mariadb-store`,
/// `turnstile-nats` of `host/examples/nats-kv-store`: the host with a store registered by its
/// public API), built by cargo next to the binary under test. They are workspace members outside
/// the host package, so only a workspace build makes them.
pub fn example_store_bin(name: &str) -> PathBuf {
    let path = turnstile_bin().with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build --workspace`",
        path.display()
    );
    path
}

/// A plugin library built by cargo next to the binary (`target/<profile>/`).
pub fn built_plugin(name: &str) -> PathBuf {
    let dir = turnstile_bin()
        .parent()
        .expect("the binary lives in a directory")
        .to_path_buf();
    let path = dir.join(format!("libturnstile_plugin_{name}.so"));
    assert!(
        path.exists(),
        "{} is missing: build the plugins first with `cargo build --workspace`",
        path.display()
    );
    path
}

/// The cargo target directory the binary under test was built in (`<target>/<profile>/..`).
pub fn target_dir() -> PathBuf {
    turnstile_bin()
        .parent()
        .and_then(Path::parent)
        .expect("the binary lives in <target>/<profile>/")
        .to_path_buf()
}

/// A private plugin directory for one test.
pub struct PluginDir {
    dir: TempDir,
}

impl PluginDir {
    /// A directory holding copies of the named built plugins.
    pub fn with(plugins: &[&str]) -> PluginDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for name in plugins {
            let source = built_plugin(name);
            std::fs::copy(&source, dir.path().join(source.file_name().unwrap()))
                .expect("copy plugin");
        }
        PluginDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Compiles `tests/fixtures/<name>.c` against the real plugin header into `lib<name>.so` here
    /// (gcc is on every machine that builds the C example plugin).
    pub fn add_c_fixture(&self, name: &str) -> PathBuf {
        let output = self.dir.path().join(format!("lib{name}.so"));
        compile_c_fixture(name, &output, &[]);
        output
    }

    /// Puts an arbitrary file into the directory (for broken-plugin tests).
    pub fn add_file(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

/// Compiles `tests/fixtures/<name>.c` against the real plugin header into `output`, with the
/// given preprocessor definitions (`-D` arguments, e.g. `BUILD="v2"`).
pub fn compile_c_fixture(name: &str, output: &Path, defines: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(output)
        .arg("-I")
        .arg(root.join("plugin-api/abi/include"))
        .args(defines.iter().map(|define| format!("-D{define}")))
        .arg(root.join(format!("tests/fixtures/{name}.c")))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling tests/fixtures/{name}.c failed");
}
