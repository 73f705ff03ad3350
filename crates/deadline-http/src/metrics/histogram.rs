//! The histogram every series in seconds uses: the shared [`BUCKETS`], observed with atomic
//! additions instead of a lock.
//!
//! `prometheus-client`'s own histogram takes a mutex for every observation (its buckets, sum and
//! count live behind one lock, with room for native buckets this library does not use). A hop
//! observes up to four histograms for every request, so the lock, its release and the search
//! through a vector of bucket pairs were most of what recording metrics cost a request. Here
//! the bounds are a constant array and each observation is two relaxed atomic additions (the
//! bucket and, through a compare-and-swap loop, the sum's bits).
//!
//! A scrape reads the buckets and the sum one by one while requests may be observed: it writes
//! the count as the sum of the bucket counts it read, so `_count` and the `+Inf` bucket always
//! agree, and the sum may lack an observation that was counted (or hold one that was not) when
//! the two met mid-way. The next scrape sees both; Prometheus reads a histogram's series as
//! monotonic counters, which they stay.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// The histograms' bucket bounds, in seconds: 1 ms to an hour (see the
/// [module docs](super#buckets-and-labels)).
pub const BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// A histogram over [`BUCKETS`] (plus `+Inf`), in seconds. Clones share their counts, as the
/// series a [`Family`](prometheus_client::metrics::family::Family) hands out do.
#[derive(Clone, Debug, Default)]
pub(crate) struct SecondsHistogram {
    inner: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Observations per bucket (not cumulative): index `i` holds those at most `BUCKETS[i]`
    /// and above the bound before it; the last holds those above every bound (and NaN).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    /// The sum of every observation, as the bits of an `f64`.
    sum_bits: AtomicU64,
}

impl SecondsHistogram {
    /// Counts `seconds` in its bucket and adds it to the sum.
    pub(crate) fn observe(&self, seconds: f64) {
        // Most observations are short (queue waits, work of a few ms), so a linear search from
        // the smallest bound ends within a few comparisons.
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.inner.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let mut current = self.inner.sum_bits.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + seconds).to_bits();
            match self.inner.sum_bits.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
    }

    /// The bucket bounds with their counts (not cumulative; `+Inf` last), the count and the sum.
    fn snapshot(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.inner.buckets)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = f64::from_bits(self.inner.sum_bits.load(Ordering::Relaxed));
        (buckets, count, sum)
    }
}

impl TypedMetric for SecondsHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SecondsHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (buckets, count, sum) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    fn text(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encoding to a String cannot fail");
        out
    }

    /// The same observations give the same text as `prometheus-client`'s own histogram, bucket
    /// by bucket: on the bounds, between them, above the last and at zero.
    #[test]
    fn encodes_as_the_clients_own_histogram() {
        let observations = [
            0.0,
            0.0004,
            0.001,
            0.0011,
            0.004,
            0.3,
            2.5,
            7.0,
            59.0,
            3600.0,
            5000.0,
            0.02,
            -1.0,
            f64::INFINITY,
        ];
        let ours = SecondsHistogram::default();
        let theirs = Histogram::new(BUCKETS);
        for seconds in observations {
            ours.observe(seconds);
            theirs.observe(seconds);
        }
        let ours = text(|r| r.register("wait_seconds", "A wait", ours.clone()));
        let theirs = text(|r| r.register("wait_seconds", "A wait", theirs.clone()));
        assert_eq!(ours, theirs);
        assert!(ours.contains("wait_seconds_count 14\n"), "{ours}");
        assert!(
            ours.contains("wait_seconds_bucket{le=\"0.001\"} 4\n"),
            "{ours}"
        );
        assert!(
            ours.contains("wait_seconds_bucket{le=\"+Inf\"} 14\n"),
            "{ours}"
        );
    }

    /// NaN is counted in the `+Inf` bucket and makes the sum NaN, as in the client's own.
    #[test]
    fn nan_is_counted_as_the_client_counts_it() {
        let ours = SecondsHistogram::default();
        let theirs = Histogram::new(BUCKETS);
        for seconds in [0.002, f64::NAN] {
            ours.observe(seconds);
            theirs.observe(seconds);
        }
        let ours = text(|r| r.register("wait_seconds", "A wait", ours.clone()));
        let theirs = text(|r| r.register("wait_seconds", "A wait", theirs.clone()));
        assert_eq!(ours, theirs);
        assert!(ours.contains("wait_seconds_count 2\n"), "{ours}");
    }

    /// Observations from several threads at once are all counted and all summed.
    #[test]
    fn concurrent_observations_are_all_counted() {
        let histogram = SecondsHistogram::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        histogram.observe(0.5);
                    }
                });
            }
        });
        let (buckets, count, sum) = histogram.snapshot();
        assert_eq!(count, 40_000);
        assert_eq!(sum, 20_000.0);
        let half = BUCKETS
            .iter()
            .position(|b| *b == 0.5)
            .expect("0.5 is a bound");
        assert_eq!(buckets[half], (0.5, 40_000));
    }
}
