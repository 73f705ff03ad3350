//! The lag guard: how late this hop's cutoff timers fire, and what the hop does about it.
//!
//! A hop whose CPU is overrun runs everything late, its timers included. A request's cutoff
//! timer that should fire at 1,000 ms fires at 1,400 ms, and the work runs, and holds its
//! worker, for 400 ms after the caller has left. The budget cannot see this: it was read on
//! time, and the timer was armed for the right instant. What the hop can see is its timers'
//! lateness: when a cutoff timer fires, the time since the instant it was armed for.
//!
//! [`TimerLag`] keeps a moving average of that lateness (over the last eight samples or so,
//! each new sample weighing one eighth), and the layer uses it twice:
//! - **on arrival**, a request whose cutoff is nearer than the lag is answered 504 at once: its
//!   timer would fire after the deadline, so any work it started would outlive its caller;
//! - **while it works or queues**, the cutoff timer is armed the lag earlier, so that, firing
//!   that late, it fires at the cutoff.
//!
//! Only lateness beyond the timer's own resolution counts: the runtime's timers fire on a
//! millisecond tick, so up to a millisecond late is a timer on time, and a hop that is not
//! overrun keeps a lag of zero and behaves as without the guard. An estimate whose newest
//! sample is older than [`TimerLag::STALE_AFTER`] is zero: when cutoffs stop firing (the
//! overload passed), nothing is cut early on old news. Samples come only from timers that
//! fire, so a hop whose work always beats its deadline measures nothing and needs nothing.
//!
//! The average is a pair of atomics updated without a lock: two samples that race may lose one
//! of them, which an average over eight does not notice. Reading it is one or two atomic loads
//! per request that has a deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The resolution of the runtime's timers: lateness up to this is a timer on time.
const RESOLUTION: Duration = Duration::from_millis(1);

/// How late this hop's cutoff timers fire, as a moving average: see the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct TimerLag {
    /// The origin of `last_sample_ms`.
    origin: Instant,
    /// The average lateness beyond the resolution, in microseconds.
    average_us: AtomicU64,
    /// When the newest sample was taken, in ms since `origin`, plus one (0: never).
    last_sample_ms: AtomicU64,
}

impl TimerLag {
    /// An estimate whose newest sample is older than this reads as zero.
    pub(crate) const STALE_AFTER: Duration = Duration::from_secs(1);

    /// No lag measured yet; times are kept relative to `origin`.
    pub(crate) fn new(origin: Instant) -> TimerLag {
        TimerLag {
            origin,
            average_us: AtomicU64::new(0),
            last_sample_ms: AtomicU64::new(0),
        }
    }

    /// A cutoff timer armed for `armed_for` fired at `now`.
    pub(crate) fn fired(&self, armed_for: Instant, now: Instant) {
        let late = now
            .saturating_duration_since(armed_for)
            .saturating_sub(RESOLUTION);
        let sample = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let previous = if self.is_stale(now) {
            0
        } else {
            self.average_us.load(Ordering::Relaxed)
        };
        // previous + (sample - previous) / 8, in integers, both ways round.
        let average = if sample >= previous {
            previous.saturating_add((sample - previous) / 8)
        } else {
            previous - (previous - sample) / 8
        };
        self.average_us.store(average, Ordering::Relaxed);
        self.last_sample_ms.store(
            self.ms_since_origin(now).saturating_add(1),
            Ordering::Relaxed,
        );
    }

    /// The lag at `now`: the average, or zero if no timer has fired lately.
    pub(crate) fn at(&self, now: Instant) -> Duration {
        if self.is_stale(now) {
            return Duration::ZERO;
        }
        Duration::from_micros(self.average_us.load(Ordering::Relaxed))
    }

    fn is_stale(&self, now: Instant) -> bool {
        match self.last_sample_ms.load(Ordering::Relaxed) {
            0 => true,
            last => {
                let age = self.ms_since_origin(now).saturating_sub(last - 1);
                Duration::from_millis(age) > Self::STALE_AFTER
            }
        }
    }

    fn ms_since_origin(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_timer_within_its_resolution_is_on_time() {
        let origin = Instant::now();
        let lag = TimerLag::new(origin);
        assert_eq!(lag.at(origin), Duration::ZERO, "nothing measured yet");
        for i in 0..50 {
            let armed = origin + ms(10 * i);
            lag.fired(armed, armed + Duration::from_micros(990));
        }
        assert_eq!(lag.at(origin + ms(500)), Duration::ZERO);
    }

    #[test]
    fn the_lag_follows_late_timers_and_comes_back_down() {
        let origin = Instant::now();
        let lag = TimerLag::new(origin);
        // Timers firing 401 ms late: the average climbs towards 400 ms.
        let mut now = origin;
        for _ in 0..40 {
            now += ms(5);
            lag.fired(now - ms(401), now);
        }
        let high = lag.at(now);
        assert!(high > ms(390) && high <= ms(400), "{high:?}");
        // One sample moves it an eighth of the way.
        now += ms(5);
        lag.fired(now - ms(1), now);
        let high_us = u64::try_from(high.as_micros()).unwrap();
        assert_eq!(lag.at(now), Duration::from_micros(high_us - high_us / 8));
        // On time again: it falls back.
        for _ in 0..60 {
            now += ms(5);
            lag.fired(now, now);
        }
        assert!(lag.at(now) < ms(2), "{:?}", lag.at(now));
    }

    #[test]
    fn an_old_estimate_reads_as_zero_and_restarts_from_zero() {
        let origin = Instant::now();
        let lag = TimerLag::new(origin);
        let mut now = origin;
        for _ in 0..40 {
            now += ms(5);
            lag.fired(now - ms(301), now);
        }
        assert!(lag.at(now) > ms(290));
        assert!(
            lag.at(now + TimerLag::STALE_AFTER) > ms(290),
            "not stale yet"
        );
        let later = now + TimerLag::STALE_AFTER + ms(2);
        assert_eq!(lag.at(later), Duration::ZERO, "stale");
        // A new sample after a stale spell starts from zero, not from the old average.
        lag.fired(later - ms(81), later);
        assert_eq!(lag.at(later), ms(10));
    }
}
