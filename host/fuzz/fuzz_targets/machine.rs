//! Fuzz target: see `turnstile::statechart::fuzz_machine`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| turnstile::statechart::fuzz_machine(bytes));
