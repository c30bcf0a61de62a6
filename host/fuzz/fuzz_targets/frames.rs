//! Fuzz target: see `turnstile::plugin::fuzz_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| turnstile::plugin::fuzz_frames(bytes));
