//! Waiting for what the server does in its own time.
//!
//! Much of what the tests check happens a moment after the request that causes it: a session
//! ends, a record is deleted, a timer fires, a plugin process goes away, a token file is read
//! again. A test cannot sleep a fixed time for it (too short is flaky, long enough is slow), so
//! it polls: asks, and asks again after a pause, until the answer is the one it waits for or a
//! generous bound has passed, then fails saying what it waited for and what it saw last. That
//! loop was written out by hand at every such place; it is here once, so a test says only what
//! it asks, how long and how often, and what it waited for.
//!
//! A probe answers with a [`Probe`]: `true`, `Some(value)` or `Ok(value)` when done; `false`,
//! `None`, or `Err(what it saw)` when not yet. It may also assert (a probe that sees something
//! that must never happen fails the test at once). [`eventually`] panics when the bound passes;
//! [`poll`] gives back what the probe saw last, for a caller that fails in its own way (or does
//! not fail). [`eventually_blocking`] and [`poll_blocking`] are the same for code that is not
//! async (they block the thread between tries).

use std::{
    fmt::Display,
    time::{Duration, Instant},
};

/// What a probe answers: done, with a value, or not yet, with what it saw (empty: nothing worth
/// saying), for the message of a test that gives up.
pub trait Probe<T> {
    fn done(self) -> Result<T, String>;
}

impl Probe<()> for bool {
    fn done(self) -> Result<(), String> {
        if self { Ok(()) } else { Err(String::new()) }
    }
}

impl<T> Probe<T> for Option<T> {
    fn done(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T, E: Display> Probe<T> for Result<T, E> {
    fn done(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Asks `probe`, then again every `every`, until it is done or `within` has passed since the
/// first try; its value, or what it saw at its last try.
pub async fn poll<T, P: Probe<T>>(
    within: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> P,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(outcome) = settled(probe().await.done(), deadline) {
            return outcome;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll`], failing the test with `what` (what it waited for, in the test's words) and what the
/// probe saw last when `within` passes.
pub async fn eventually<T, P: Probe<T>>(
    what: &str,
    within: Duration,
    every: Duration,
    probe: impl AsyncFnMut() -> P,
) -> T {
    match poll(within, every, probe).await {
        Ok(value) => value,
        Err(seen) => panic!("{}", gave_up(what, within, &seen)),
    }
}

/// [`poll`] for code that is not async: sleeps the thread between tries.
pub fn poll_blocking<T, P: Probe<T>>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> P,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(outcome) = settled(probe().done(), deadline) {
            return outcome;
        }
        std::thread::sleep(every);
    }
}

/// [`eventually`] for code that is not async: sleeps the thread between tries.
pub fn eventually_blocking<T, P: Probe<T>>(
    what: &str,
    within: Duration,
    every: Duration,
    probe: impl FnMut() -> P,
) -> T {
    match poll_blocking(within, every, probe) {
        Ok(value) => value,
        Err(seen) => panic!("{}", gave_up(what, within, &seen)),
    }
}

/// What a try's `answer` ends a wait until `deadline` with: its value, or, past the deadline,
/// what it saw; `None`: try again.
fn settled<T>(answer: Result<T, String>, deadline: Instant) -> Option<Result<T, String>> {
    match answer {
        Ok(value) => Some(Ok(value)),
        Err(seen) if Instant::now() >= deadline => Some(Err(seen)),
        Err(_) => None,
    }
}

/// The message of a test that waited `within` for `what` and last saw `seen`.
fn gave_up(what: &str, within: Duration, seen: &str) -> String {
    if seen.is_empty() {
        format!("{what} (waited {within:?})")
    } else {
        format!("{what} (waited {within:?}): {seen}")
    }
}
