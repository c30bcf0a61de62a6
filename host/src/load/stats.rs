//! What a load run measured: call latency, session setup time and notification delay as HDR
//! histograms (microseconds), calls and their outcomes, errors by kind. Shared by every client
//! of one target; only what happens while `measuring` is on counts (not the warm-up).

use std::{
    borrow::Cow,
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds up to an hour, to three significant figures.
const HIGHEST_MICROS: u64 = 3_600_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_MICROS, 3).expect("static bounds are valid")
}

/// One target's measurements.
pub struct Stats {
    measuring: AtomicBool,
    pub calls: AtomicU64,
    pub lists: AtomicU64,
    /// Walks, scenario passes or races completed.
    pub iterations: AtomicU64,
    pub transitions: AtomicU64,
    /// Time spent measuring, in microseconds, over every round.
    measured_micros: AtomicU64,
    // std Mutexes: each is held to record one value, never across an await. At the few
    // thousand calls a second one machine serves, the lock costs well under a microsecond.
    call_latency: Mutex<Histogram<u64>>,
    list_latency: Mutex<Histogram<u64>>,
    setup: Mutex<Histogram<u64>>,
    notification_delay: Mutex<Histogram<u64>>,
    outcomes: Mutex<BTreeMap<String, u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            measuring: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            iterations: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
            measured_micros: AtomicU64::new(0),
            call_latency: Mutex::new(histogram()),
            list_latency: Mutex::new(histogram()),
            setup: Mutex::new(histogram()),
            notification_delay: Mutex::new(histogram()),
            outcomes: Mutex::default(),
            errors: Mutex::default(),
        }
    }
}

fn micros(duration: Duration) -> u64 {
    (duration.as_micros() as u64).clamp(1, HIGHEST_MICROS)
}

fn record(histogram: &Mutex<Histogram<u64>>, value: Duration) {
    let mut histogram = histogram.lock().unwrap_or_else(|p| p.into_inner());
    histogram.saturating_record(micros(value));
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, kind: Cow<'_, str>) {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    // Allocates a key only the first time a kind is seen.
    match map.get_mut(kind.as_ref()) {
        Some(count) => *count += 1,
        None => {
            map.insert(kind.into_owned(), 1);
        }
    }
}

impl Stats {
    pub fn set_measuring(&self, on: bool) {
        self.measuring.store(on, Ordering::SeqCst);
    }

    pub fn is_measuring(&self) -> bool {
        self.measuring.load(Ordering::Relaxed)
    }

    pub fn add_measured(&self, duration: Duration) {
        self.measured_micros
            .fetch_add(duration.as_micros() as u64, Ordering::SeqCst);
    }

    pub fn measured(&self) -> Duration {
        Duration::from_micros(self.measured_micros.load(Ordering::SeqCst))
    }

    /// A `tools/call` that got an answer, `latency` after it should have started.
    pub fn call(&self, latency: Duration, outcome_kind: Cow<'_, str>) {
        if self.is_measuring() {
            self.calls.fetch_add(1, Ordering::Relaxed);
            record(&self.call_latency, latency);
            bump(&self.outcomes, outcome_kind);
        }
    }

    pub fn list(&self, latency: Duration) {
        if self.is_measuring() {
            self.lists.fetch_add(1, Ordering::Relaxed);
            record(&self.list_latency, latency);
        }
    }

    pub fn setup(&self, took: Duration) {
        if self.is_measuring() {
            record(&self.setup, took);
        }
    }

    /// How long a transition that [`Stats::transition`] counted took to be heard. Recorded
    /// even if the measurement closed while the notice was on its way, so that every counted
    /// transition has its delay.
    pub fn notification_delay(&self, delay: Duration) {
        record(&self.notification_delay, delay);
    }

    /// A transition; `true` if it is counted (the measurement is running), and only then is
    /// its notification delay to be recorded.
    pub fn transition(&self) -> bool {
        let measuring = self.is_measuring();
        if measuring {
            self.transitions.fetch_add(1, Ordering::Relaxed);
        }
        measuring
    }

    pub fn iteration(&self) {
        if self.is_measuring() {
            self.iterations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Something that should not have happened to a well-formed request (a transport failure, an
    /// error the server answered to valid arguments); counted whether measuring or not.
    pub fn error(&self, kind: String) {
        bump(&self.errors, kind.into());
    }

    pub fn error_count(&self) -> u64 {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum()
    }

    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn outcomes(&self) -> BTreeMap<String, u64> {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn call_latency(&self) -> Histogram<u64> {
        self.call_latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn list_latency(&self) -> Histogram<u64> {
        self.list_latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn setup_time(&self) -> Histogram<u64> {
        self.setup.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn notification_delays(&self) -> Histogram<u64> {
        self.notification_delay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Call latency percentile so far, in milliseconds (for the progress line).
    pub fn call_percentile_ms(&self, quantile: f64) -> f64 {
        let histogram = self.call_latency.lock().unwrap_or_else(|p| p.into_inner());
        histogram.value_at_quantile(quantile) as f64 / 1000.0
    }
}
