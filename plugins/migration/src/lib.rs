//! Turnstile example plugin written in C: see `migration.c` beside this crate.
//!
//! This Rust library is intentionally empty. The package exists so that `cargo build
//! --workspace` runs `build.rs`, which compiles `migration.c` against
//! `plugin-api/abi/include/turnstile_plugin.h` into `target/<profile>/libturnstile_plugin_migration.so`.
