//! Calls per second and the 99th percentile of their duration over the last minutes, from the
//! figures `/metrics` serves: `turnstile_calls_total` and the buckets of
//! `turnstile_call_duration_seconds`, summed over tools and outcomes. Every [`EVERY`] the
//! Prometheus text is rendered and those two read from it, and [`KEPT`] of history is kept;
//! a window's rate is the difference of its ends, its p99 the upper bound of the bucket where
//! 99% of the window's calls fall (so "≤ 5 ms", as exact as the buckets are).
//!
//! Sampled only while the console is served, so a server without it renders nothing.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::metrics::{CALL_DURATION, CALLS};

/// How often the figures are read.
const EVERY: Duration = Duration::from_secs(5);
/// How much history is kept: the longest window shown.
const KEPT: Duration = Duration::from_secs(300);

/// One reading: the calls answered so far, and the cumulative bucket counts (`le` in seconds,
/// ascending, `+Inf` last).
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    at: Instant,
    calls: f64,
    buckets: Vec<(f64, f64)>,
}

/// The readings of the last [`KEPT`].
#[derive(Clone, Default)]
pub struct Rates {
    samples: Arc<Mutex<VecDeque<Sample>>>,
}

/// What a window shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// How long the window really is (shorter while the server is young).
    pub seconds: u64,
    pub calls: u64,
    pub calls_per_second: f64,
    /// The upper bound of the bucket holding the 99th percentile, in milliseconds; `None`
    /// without calls, `+Inf` (JSON `null` too) past the last bucket.
    pub p99_ms: Option<f64>,
}

impl Rates {
    /// Starts reading the figures, until `closing`.
    pub fn start(closing: CancellationToken) -> Rates {
        let rates = Rates::default();
        let samples = rates.samples.clone();
        tokio::spawn(async move {
            let handle = crate::metrics::install();
            let mut ticks = tokio::time::interval(EVERY);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = closing.cancelled() => return,
                }
                let sample = read(&handle.render(), Instant::now());
                let mut kept = lock(&samples);
                kept.push_back(sample);
                while kept
                    .front()
                    .is_some_and(|oldest| oldest.at.elapsed() > KEPT + EVERY)
                {
                    kept.pop_front();
                }
            }
        });
        rates
    }

    /// The figures over (up to) the last `span`; `None` before two readings.
    pub fn over(&self, span: Duration) -> Option<Window> {
        let kept = lock(&self.samples);
        let last = kept.back()?;
        let first = kept
            .iter()
            .find(|sample| last.at.duration_since(sample.at) <= span + EVERY / 2)?;
        window(first, last)
    }
}

fn lock(samples: &Mutex<VecDeque<Sample>>) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
    // Pushes and reads only: a panic cannot leave the queue inconsistent.
    samples.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The window between two readings.
fn window(first: &Sample, last: &Sample) -> Option<Window> {
    let seconds = last.at.duration_since(first.at).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let calls = (last.calls - first.calls).max(0.0);
    let before = |le: f64| {
        first
            .buckets
            .iter()
            .find(|(bound, _)| *bound == le)
            .map_or(0.0, |(_, count)| *count)
    };
    let deltas: Vec<(f64, f64)> = last
        .buckets
        .iter()
        .map(|(le, count)| (*le, (count - before(*le)).max(0.0)))
        .collect();
    let timed = deltas.last().map_or(0.0, |(_, count)| *count);
    let p99_ms = (timed > 0.0)
        .then(|| {
            deltas
                .iter()
                .find(|(_, count)| *count >= 0.99 * timed)
                .map(|(le, _)| le * 1000.0)
        })
        .flatten()
        .filter(|ms| ms.is_finite());
    Some(Window {
        seconds: seconds.round() as u64,
        calls: calls.round() as u64,
        calls_per_second: calls / seconds,
        p99_ms,
    })
}

/// The two figures in a Prometheus text exposition.
fn read(text: &str, at: Instant) -> Sample {
    let bucket_name = format!("{CALL_DURATION}_bucket");
    let mut calls = 0.0;
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if name == CALLS {
            calls += value;
        } else if name == bucket_name {
            let Some(le) = label(series, "le") else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                match le.parse::<f64>() {
                    Ok(le) => le,
                    Err(_) => continue,
                }
            };
            match buckets.iter_mut().find(|(bound, _)| *bound == le) {
                Some((_, count)) => *count += value,
                None => buckets.push((le, value)),
            }
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Sample { at, calls, buckets }
}

/// The value of label `name` in `series` (`name{a="1",le="0.5"}`).
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let labels = series.split_once('{')?.1.strip_suffix('}')?;
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ok: u64, fast: u64, slow: u64) -> String {
        format!(
            "# TYPE turnstile_calls_total counter\n\
             turnstile_calls_total{{tool=\"a\",outcome=\"ok\"}} {ok}\n\
             turnstile_calls_total{{tool=\"b\",outcome=\"FORBIDDEN\"}} 1\n\
             turnstile_call_duration_seconds_bucket{{tool=\"a\",le=\"0.005\"}} {fast}\n\
             turnstile_call_duration_seconds_bucket{{tool=\"a\",le=\"0.5\"}} {}\n\
             turnstile_call_duration_seconds_bucket{{tool=\"a\",le=\"+Inf\"}} {}\n",
            fast + slow,
            fast + slow
        )
    }

    #[test]
    fn a_window_has_its_rate_and_its_p99() {
        let start = Instant::now();
        let first = read(&text(10, 10, 0), start);
        assert_eq!(first.calls, 11.0);
        let last = read(&text(210, 208, 2), start + Duration::from_secs(10));
        let window = window(&first, &last).unwrap();
        assert_eq!(window.calls, 200);
        assert_eq!(window.calls_per_second, 20.0);
        // 198 of the 200 new calls took at most 5 ms: 99% of them is within the first bucket.
        assert_eq!(window.p99_ms, Some(5.0));
        let slower = read(&text(210, 190, 20), start + Duration::from_secs(10));
        assert_eq!(window_p99(&first, &slower), Some(500.0));
    }

    fn window_p99(first: &Sample, last: &Sample) -> Option<f64> {
        window(first, last).unwrap().p99_ms
    }
}
