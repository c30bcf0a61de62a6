//! When each call starts. Closed loop (the default): as soon as its client is free, and latency
//! is measured from then. Open loop (`--rate R`): calls are due at fixed times, `1/R` apart over
//! all clients together, whether or not a client is free; a call that starts late because every
//! client was busy has its latency measured from when it was due. That is how the report avoids
//! coordinated omission: a server that stalls is charged for the calls that queued behind it. A
//! call whose client was free waits for its slot, and is measured from when it starts: the
//! timer's own lateness is not the server's.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::time::Instant;

/// Hands out start times.
pub struct Pacer {
    schedule: Option<Schedule>,
}

struct Schedule {
    start: Instant,
    interval: Duration,
    next: AtomicU64,
}

impl Pacer {
    pub fn closed_loop() -> Pacer {
        Pacer { schedule: None }
    }

    /// `rate` calls per second, the first due now.
    pub fn open_loop(rate: f64) -> Pacer {
        Pacer {
            schedule: Some(Schedule {
                start: Instant::now(),
                interval: Duration::from_secs_f64(1.0 / rate),
                next: AtomicU64::new(0),
            }),
        }
    }

    /// Waits until the next call is due and returns when it was due: the instant its latency is
    /// measured from. In a closed loop, now.
    pub async fn next_start(&self) -> Instant {
        let Some(schedule) = &self.schedule else {
            return Instant::now();
        };
        let slot = schedule.next.fetch_add(1, Ordering::Relaxed);
        let due = schedule.start + schedule.interval.mul_f64(slot as f64);
        if Instant::now() >= due {
            // Late for its slot: every client was busy when it fell due, so the wait is the
            // server's doing and counts.
            return due;
        }
        // Early: the client waits for its slot. tokio's timer ticks in milliseconds and wakes
        // it up to a tick after `due`; that lateness is this load tester's, not the server's
        // (it made a 0.3 ms call read as 1.4 ms at the median), so latency starts when the call
        // does.
        tokio::time::sleep_until(due).await;
        Instant::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_loop_calls_are_due_on_a_fixed_schedule_whoever_takes_them() {
        let pacer = Pacer::open_loop(100.0);
        let first = pacer.next_start().await;
        // A client that was busy for 30 ms takes the next slot late: it was due 10 ms after the
        // first, and that is what its latency is measured from, not the moment it started.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let second = pacer.next_start().await;
        assert_eq!(second - first, Duration::from_millis(10));
        assert!(Instant::now() - second >= Duration::from_millis(20));
        let third = pacer.next_start().await;
        assert_eq!(third - first, Duration::from_millis(20));
    }

    #[tokio::test]
    async fn a_call_that_waited_for_its_slot_is_measured_from_when_it_started() {
        let pacer = Pacer::open_loop(10.0);
        let first = pacer.next_start().await;
        // The client is free at once; its slot is due 100 ms after the first.
        let second = pacer.next_start().await;
        let woke = Instant::now();
        // The timer wakes it after the slot fell due, never at the exact instant: measured from
        // the due time (as a late call is), its latency would include that lateness.
        assert!(
            second > first + Duration::from_millis(100),
            "measured from the wake-up, not from when the slot fell due"
        );
        assert!(second <= woke);
    }

    #[tokio::test]
    async fn closed_loop_starts_now() {
        let pacer = Pacer::closed_loop();
        let before = Instant::now();
        let start = pacer.next_start().await;
        assert!(start >= before && start <= Instant::now());
    }
}
