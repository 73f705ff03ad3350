//! How late a service's runtime runs, for the lag rule
//! ([`admit_on_lag`](deadline::admission::admit_on_lag)).
//!
//! A task the layer starts sets itself a timer every [`TICK`] and records how late it fired.
//! When the processor is the bottleneck, that timer waits like everything else: behind the
//! tasks ready to run, and behind other processes when the machine's cores are all busy. Its
//! lateness is therefore the delay every request of the service is seeing, measured without
//! touching the requests, and read at arrival with two atomic loads.
//!
//! A timer that is overdue when a request arrives counts as late by what it is overdue, so a
//! runtime that has stopped firing timers altogether reads as late at once instead of when the
//! timer finally fires. The task holds only a weak reference to the clock and ends with it. It
//! is started by the first reading inside a tokio runtime; outside one the lag reads zero.
//!
//! # Why a timer and not the requests' own delay
//!
//! A request's budget starts when its head is read, so the time it spent in the kernel's
//! buffers and the runtime's ready queue before that is invisible to it: under overload that is
//! where the time goes. A timer of the service's own runs through the same queue and so sees
//! it. One tick every 5 ms costs the runtime 200 wake-ups a second, and lateness under 1 ms is
//! the timer wheel's own resolution, far below any useful bound.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

/// How often the timer is set.
pub(crate) const TICK: Duration = Duration::from_millis(5);

/// A runtime's lag, as the last tick measured it (or the pending one, if overdue).
#[derive(Debug)]
pub(crate) struct LagClock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// What every instant below is counted from.
    origin: Instant,
    /// How late the last tick fired, in µs.
    last_us: AtomicU64,
    /// When the pending tick is due, in µs from `origin` (0: none pending).
    due_us: AtomicU64,
    /// Whether the ticking task was started (or tried).
    started: AtomicBool,
}

impl LagClock {
    pub(crate) fn new() -> LagClock {
        LagClock {
            shared: Arc::new(Shared {
                origin: Instant::now(),
                last_us: AtomicU64::new(0),
                due_us: AtomicU64::new(0),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// How late the runtime runs at `now`: the last tick's lateness, or the pending tick's
    /// if it is overdue by more. Starts the ticking task on the first call inside a runtime.
    pub(crate) fn lag(&self, now: Instant) -> Duration {
        if !self.shared.started.load(Ordering::Relaxed) {
            self.start();
        }
        let last = self.shared.last_us.load(Ordering::Relaxed);
        let due = self.shared.due_us.load(Ordering::Relaxed);
        let overdue = match due {
            0 => 0,
            due => micros(now.saturating_duration_since(self.shared.origin)).saturating_sub(due),
        };
        Duration::from_micros(last.max(overdue))
    }

    fn start(&self) {
        if self.shared.started.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(tick(Arc::downgrade(&self.shared)));
        }
    }
}

/// Sets the timer every [`TICK`] and records how late it fired, until the clock is dropped.
async fn tick(shared: Weak<Shared>) {
    loop {
        let due = Instant::now() + TICK;
        {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let at = micros(due.saturating_duration_since(shared.origin)).max(1);
            shared.due_us.store(at, Ordering::Relaxed);
        }
        tokio::time::sleep_until(due).await;
        let late = micros(Instant::now().saturating_duration_since(due));
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.last_us.store(late, Ordering::Relaxed);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{LagClock, TICK};

    #[tokio::test(start_paused = true)]
    async fn an_idle_runtime_reads_no_lag() {
        let clock = LagClock::new();
        assert_eq!(clock.lag(Instant::now()), Duration::ZERO);
        tokio::time::sleep(TICK * 10).await;
        assert!(clock.lag(Instant::now()) < Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_kept_busy_reads_late_at_once_and_recovers() {
        let clock = LagClock::new();
        // Starts the ticking task and lets it set its first timer.
        let _ = clock.lag(Instant::now());
        tokio::task::yield_now().await;
        // Hold the only thread past the tick: time moves on but no timer can fire. Paused time
        // moves only by `advance`, which does not run other tasks, so this is a runtime that
        // has no time to fire its timers.
        tokio::time::advance(Duration::from_millis(40)).await;
        let lag = clock.lag(Instant::now());
        assert!(
            lag >= Duration::from_millis(30),
            "an overdue tick read as {lag:?}"
        );
        // Once the runtime fires its timers again the lag falls back within a few ticks.
        tokio::time::sleep(TICK * 4).await;
        let lag = clock.lag(Instant::now());
        assert!(lag < Duration::from_millis(2), "still {lag:?} late");
    }

    #[test]
    fn outside_a_runtime_the_lag_is_zero() {
        let clock = LagClock::new();
        assert_eq!(clock.lag(Instant::now()), Duration::ZERO);
    }
}
