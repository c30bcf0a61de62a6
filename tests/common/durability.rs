//! Fixtures for the durability tests (issue 5): the invoice workflow as a walk of acknowledged
//! transitions, and a seeded random sequence so a failing walk can be replayed. Servers are
//! started on a data directory the test keeps across restarts (`Server::http_in`).

use serde_json::{Value, json};

/// The states of the invoice workflow, as `invoice.status` reports them.
pub const DRAFT: &str = "draft";
pub const REVIEW: &str = "review";
pub const APPROVED: &str = "approved";
pub const DISCHARGED: &str = "discharged";

/// The tool, its arguments (without the handle) and the state it leads to, for the next step of
/// an invoice in `state`: reject/submit cycles while `cycles_left > 0`, then approve and
/// discharge. `None` once discharged.
pub fn next_step(state: &str, cycles_left: u32) -> Option<(&'static str, Value, &'static str)> {
    match state {
        DRAFT => Some(("invoice.submit", json!({"amount": 12.5}), REVIEW)),
        REVIEW if cycles_left > 0 => Some((
            "invoice.reject",
            json!({"reason": "missing purchase order"}),
            DRAFT,
        )),
        REVIEW => Some(("invoice.approve", json!({}), APPROVED)),
        APPROVED => Some(("invoice.discharge", json!({}), DISCHARGED)),
        _ => None,
    }
}

/// The same call with `{"handle": handle}` added.
pub fn with_handle(arguments: &Value, handle: &str) -> Value {
    let mut arguments = arguments.clone();
    arguments["handle"] = json!(handle);
    arguments
}

/// A small deterministic pseudo-random sequence (xorshift), so a failing run can be replayed
/// from the seed it prints.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A seed from the clock, or `TURNSTILE_TEST_SEED` to replay one.
pub fn seed() -> u64 {
    std::env::var("TURNSTILE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}
