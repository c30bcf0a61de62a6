//! Compiles `migration.c` into the C plugin `libturnstile_plugin_migration.so`, so that the
//! ordinary `cargo build --workspace` of a fresh clone produces every example plugin.
//!
//! The library goes to the profile output directory (`target/<profile>/`), beside the Rust
//! plugins' `cdylib`s, so the host finds all of them in one place. Cargo gives build scripts no
//! variable naming that directory, only `OUT_DIR`, which is
//! `target/<profile>/build/<package>-<hash>/out` (also with `--target <triple>`, where
//! `target/` is `target/<triple>/`): three levels up is the profile directory. A cargo
//! configured with a separate `build.build-dir` puts `OUT_DIR` elsewhere; then the library lands
//! in that build directory's profile directory instead, and the warning below says so.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

const SOURCE: &str = "migration.c";
const HEADER_DIR: &str = "../../plugin-api/abi/include";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    let header = format!("{HEADER_DIR}/turnstile_plugin.h");
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is target/<profile>/build/<package>-<hash>/out");
    if out_dir.ancestors().nth(2).and_then(Path::file_name) != Some("build".as_ref()) {
        println!(
            "cargo:warning=unexpected OUT_DIR layout {}; writing the plugin to {}",
            out_dir.display(),
            profile_dir.display()
        );
    }
    let suffix = match env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("macos" | "ios") => ".dylib",
        Ok("windows") => ".dll",
        _ => ".so",
    };
    let library = profile_dir.join(format!("libturnstile_plugin_migration{suffix}"));
    // Also rerun when the library itself is missing (deleted by hand): cargo knows nothing
    // about files a build script writes outside OUT_DIR. See `backdate` for the other half.
    println!("cargo:rerun-if-changed={}", library.display());
    // Build next to OUT_DIR's files first and rename into place, so a failed or interrupted
    // build never leaves a half-written library where the host would load it.
    let staged = out_dir.join(format!("libturnstile_plugin_migration{suffix}"));

    // `cc` picks the compiler the way the C ecosystem expects ($CC, $TARGET_CC, cross
    // toolchains, else `cc`) and adds the target's flags (-fPIC, -O and -g from the profile).
    let compiler = cc::Build::new().get_compiler();
    let mut command: Command = compiler.to_command();
    command
        .args([
            "-shared",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-fvisibility=hidden",
        ])
        .arg("-I")
        .arg(HEADER_DIR)
        .arg("-o")
        .arg(&staged)
        .arg(SOURCE);
    let status = command
        .status()
        .unwrap_or_else(|err| panic!("cannot run the C compiler {:?}: {err}", compiler.path()));
    assert!(status.success(), "compiling {SOURCE} failed: {status}");
    fs::rename(&staged, &library)
        .or_else(|_| fs::copy(&staged, &library).map(drop))
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", library.display()));
    backdate(
        &library,
        &[SOURCE.as_ref(), header.as_ref(), "build.rs".as_ref()],
    );
}

/// Sets the library's modification time to that of its newest input.
///
/// The library is a `rerun-if-changed` path, and cargo reruns a build script when such a path is
/// newer than the script's last start. A library written during this run would always be newer,
/// rerunning the script on every build; dated like its inputs it is not, and a missing library
/// still triggers a rebuild.
fn backdate(library: &Path, inputs: &[&Path]) {
    let newest = inputs
        .iter()
        .filter_map(|input| fs::metadata(input).and_then(|meta| meta.modified()).ok())
        .max();
    let Some(newest) = newest else { return };
    let result = fs::File::options()
        .write(true)
        .open(library)
        .and_then(|file| file.set_modified(newest));
    if let Err(err) = result {
        println!(
            "cargo:warning=cannot set the modification time of {}: {err}",
            library.display()
        );
    }
}
