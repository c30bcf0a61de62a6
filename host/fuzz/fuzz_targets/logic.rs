//! Fuzz target: see `turnstile::statechart::fuzz_logic`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| turnstile::statechart::fuzz_logic(bytes));
