//! The live progress line on stderr (elapsed, calls/s, p50/p99 so far, errors, violations),
//! drawn only when stderr is a terminal, so that logs and pipes get the final report alone.

use std::{io::IsTerminal, sync::atomic::Ordering, time::Duration};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;

use super::{contract::Violations, stats::Stats};

pub struct Progress {
    bar: ProgressBar,
    target: std::sync::Mutex<String>,
}

impl Progress {
    pub fn new(wanted: bool) -> Progress {
        let bar = if wanted && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                    .expect("a static template"),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            target: std::sync::Mutex::new(String::new()),
        }
    }

    /// Names the target (and round, when comparing) the line is about.
    pub fn set_target(&self, url: &str, round: usize, rounds: usize) {
        let label = if rounds > 1 {
            format!("{url} (round {}/{rounds})", round + 1)
        } else {
            url.to_string()
        };
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = label;
    }

    /// Redraws from the stats; `measuring_since` is `None` during the warm-up.
    pub fn update(&self, stats: &Stats, violations: &Violations, measuring_since: Option<Instant>) {
        if self.bar.is_hidden() {
            return;
        }
        let target = self
            .target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let message = match measuring_since {
            None => format!("{target}: warming up"),
            Some(since) => {
                let seconds = (stats.measured() + since.elapsed()).as_secs_f64().max(1e-3);
                format!(
                    "{target}: {:.0} calls/s  p50 {:.2} ms  p99 {:.2} ms  errors {}  violations {}",
                    stats.calls.load(Ordering::Relaxed) as f64 / seconds,
                    stats.call_percentile_ms(0.5),
                    stats.call_percentile_ms(0.99),
                    stats.error_count(),
                    violations.total()
                )
            }
        };
        self.bar.set_message(message);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
