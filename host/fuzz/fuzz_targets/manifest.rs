//! Fuzz target: see `turnstile::plugin::fuzz_manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| turnstile::plugin::fuzz_manifest(bytes));
