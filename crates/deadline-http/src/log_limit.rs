//! A log line that repeats at most once per interval, saying how many times it happened since
//! the last one written.
//!
//! Some warnings are caused by the peer: one per accept error while file descriptors run out,
//! one per request carrying a bad header. An attacker who can make them can fill the disk or
//! the terminal with them (one per connection, thousands a second). So such a line is written
//! at most once per interval, with the count of occurrences it stands for, and the ones in
//! between are only counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per interval for one kind of event (see the [module docs](self)).
#[derive(Debug)]
pub struct LogLimit {
    base: Instant,
    interval_ms: u64,
    /// When the last line was written, in ms since `base`, plus one (0: never).
    last_ms: AtomicU64,
    /// Occurrences since the last line written.
    count: AtomicU64,
}

impl LogLimit {
    /// A limit of one line per `interval`.
    pub fn new(interval: Duration) -> LogLimit {
        LogLimit {
            base: Instant::now(),
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            last_ms: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Counts one occurrence; `Some(n)` when a line is due now, `n` the occurrences it stands
    /// for (this one included).
    pub fn hit(&self) -> Option<u64> {
        self.count.fetch_add(1, Ordering::AcqRel);
        let now = u64::try_from(
            Instant::now()
                .saturating_duration_since(self.base)
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
        .saturating_add(1);
        let last = self.last_ms.load(Ordering::Acquire);
        if last != 0 && now.saturating_sub(last) < self.interval_ms {
            return None;
        }
        // One caller wins the line for this interval.
        self.last_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(self.count.swap(0, Ordering::AcqRel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_flood_writes_one_line_per_interval_with_its_count() {
        let limit = LogLimit::new(Duration::from_secs(1));
        assert_eq!(limit.hit(), Some(1), "the first occurrence is written");
        for _ in 0..999 {
            assert_eq!(limit.hit(), None);
        }
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(limit.hit(), None, "still within the interval");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            limit.hit(),
            Some(1_001),
            "the next line counts what it stands for"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(limit.hit(), Some(1));
    }
}
