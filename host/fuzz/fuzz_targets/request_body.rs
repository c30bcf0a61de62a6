//! Fuzz target: see `turnstile::mcp::fuzz_request_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| turnstile::mcp::fuzz_request_body(bytes));
