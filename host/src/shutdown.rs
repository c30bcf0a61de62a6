//! Graceful shutdown: what SIGTERM and SIGINT do.
//!
//! The first signal starts **draining**: the server stops accepting connections, lets the tool
//! calls in flight finish and deliver their results, then closes event streams (listen streams
//! with their final result) and exits 0. If calls are still running when `--shutdown-timeout`
//! passes, the **deadline** fires: the instance actors stop waiting for them, answer
//! `SHUTTING_DOWN` and save nothing (the plugin thread runs on unseen), and the process exits 1.
//! A second signal exits at once.
//!
//! Orchestrators (systemd, Docker, Kubernetes) send SIGTERM and wait a grace period before
//! SIGKILL; set `--shutdown-timeout` below that period.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The shutdown's stages, shared by everything that must act on them.
#[derive(Clone, Default)]
pub struct Shutdown {
    /// Cancelled on the first signal: stop taking new work.
    pub draining: CancellationToken,
    /// Cancelled when the calls in flight are done (or the deadline passed): close the streams.
    pub closing_streams: CancellationToken,
    /// Cancelled when `--shutdown-timeout` passed with calls still running: abandon them.
    pub deadline: CancellationToken,
    calls: Arc<InFlight>,
}

#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// Counts one tool call as in flight until dropped.
pub struct CallInFlight(Arc<InFlight>);

impl Drop for CallInFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Shutdown {
    /// Marks a tool call as in flight for as long as the returned guard lives.
    pub fn call_started(&self) -> CallInFlight {
        self.calls.count.fetch_add(1, Ordering::AcqRel);
        CallInFlight(self.calls.clone())
    }

    /// How many tool calls are in flight.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.count.load(Ordering::Acquire)
    }

    /// Waits until no tool call is in flight.
    async fn calls_done(&self) {
        loop {
            let idle = self.calls.idle.notified();
            if self.calls_in_flight() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Drives the shutdown once draining has begun: waits for the calls in flight, at most
    /// `timeout`, then closes the streams. Returns whether every call finished in time.
    pub async fn drain(&self, timeout: Duration) -> bool {
        self.draining.cancelled().await;
        let in_flight = self.calls_in_flight();
        tracing::info!(
            in_flight,
            timeout_s = timeout.as_secs_f64(),
            "draining: finishing the calls in flight"
        );
        let finished = tokio::time::timeout(timeout, self.calls_done())
            .await
            .is_ok();
        if !finished {
            tracing::warn!(
                still_running = self.calls_in_flight(),
                "shutdown timeout passed; answering the remaining calls SHUTTING_DOWN"
            );
            self.deadline.cancel();
            // The actors answer at once once the deadline fires; give the answers a moment to
            // be written before the streams close.
            let _ = tokio::time::timeout(Duration::from_secs(2), self.calls_done()).await;
        }
        self.closing_streams.cancel();
        finished
    }

    /// Starts draining on the first SIGTERM or SIGINT, and exits at once on the second.
    pub fn on_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let draining = self.draining.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(
                signal = name,
                "shutting down (a second signal exits at once)"
            );
            draining.cancel();
            tokio::select! {
                _ = terminate.recv() => {},
                _ = interrupt.recv() => {},
            }
            tracing::warn!("second signal: exiting at once");
            std::process::exit(1);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_calls_in_flight_then_closes_streams() {
        let shutdown = Shutdown::default();
        let call = shutdown.call_started();
        shutdown.draining.cancel();
        let draining = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.drain(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !shutdown.closing_streams.is_cancelled(),
            "a call is still in flight"
        );
        drop(call);
        assert!(draining.await.unwrap(), "finished in time");
        assert!(shutdown.closing_streams.is_cancelled());
        assert!(!shutdown.deadline.is_cancelled());
    }

    #[tokio::test]
    async fn drain_gives_up_at_the_timeout() {
        let shutdown = Shutdown::default();
        let _stuck = shutdown.call_started();
        shutdown.draining.cancel();
        let finished = shutdown.drain(Duration::from_millis(50)).await;
        assert!(!finished);
        assert!(shutdown.deadline.is_cancelled());
        assert!(shutdown.closing_streams.is_cancelled());
    }
}
