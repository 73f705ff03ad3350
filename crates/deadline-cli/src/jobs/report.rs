//! What a run of `deadline jobs` measured: the line, the JSON, the check.

use std::time::Duration;

use serde_json::{Value, json};

use super::Settings;

/// One piece of work: when it began, how old its message was then, how long it ran.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkRecord {
    /// When the work began, in ms from the run's start.
    pub(crate) began_ms: f64,
    /// The message's age when the work began, in ms.
    pub(crate) age_ms: f64,
    /// How long the work ran, in ms (to its end, or to its deadline).
    pub(crate) work_ms: f64,
    /// Whether the message was already past its expiry when the work began.
    pub(crate) expired: bool,
}

/// The broker's count of ready messages at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// When, in ms from the run's start.
    pub(crate) at_ms: f64,
    /// Messages ready on the queue.
    pub(crate) backlog: u64,
}

/// How a run's messages ended (each counted once, by the first copy of it accounted for), and
/// what a broker restart cost the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Handlers that ran to their end.
    pub(crate) worked: u64,
    /// Expired messages a consumer discarded before any work.
    pub(crate) discarded_by_consumer: u64,
    /// Expired messages the broker dropped at the head of the queue (its TTL).
    pub(crate) discarded_by_broker: u64,
    /// Messages whose expiry passed while the broker was unreachable, before any broker
    /// confirmed them: the producer gave them up.
    pub(crate) discarded_by_producer: u64,
    /// Handlers stopped at their message's deadline.
    pub(crate) cut_at_deadline: u64,
    /// Messages settled any other way (none expected).
    pub(crate) other: u64,
    /// Further copies of messages already accounted for (delivery is at least once across a
    /// broker restart: a publish sent again, an acknowledgement lost), seen before the run
    /// ended.
    pub(crate) duplicates: u64,
    /// Times the run's broker connection was dialled again after it dropped.
    pub(crate) reconnects: u64,
    /// Publishes sent again because the connection dropped before the broker confirmed them.
    pub(crate) republished: u64,
    /// Times a consumer subscribed again after its connection dropped.
    pub(crate) resubscribed: u64,
    /// Deliveries the broker flagged as delivered before (unsettled when the connection
    /// dropped).
    pub(crate) redelivered: u64,
}

/// One run's figures.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    pub(crate) expiry: bool,
    pub(crate) produced: u64,
    /// How the messages ended, and what a broker restart cost.
    pub(crate) counts: Counts,
    pub(crate) records: Vec<WorkRecord>,
    pub(crate) samples: Vec<Sample>,
    pub(crate) work_on_expired_ms: f64,
    pub(crate) age_p50_ms: f64,
    pub(crate) age_p99_ms: f64,
    pub(crate) age_max_ms: f64,
    pub(crate) produced_for: Duration,
    pub(crate) took: Duration,
}

/// The `q` quantile of sorted values (nearest rank), 0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn run_name(expiry: bool) -> &'static str {
    if expiry {
        "with expiry"
    } else {
        "without expiry"
    }
}

impl RunReport {
    pub(crate) fn new(
        expiry: bool,
        produced: u64,
        counts: Counts,
        records: Vec<WorkRecord>,
        samples: Vec<Sample>,
        produced_for: Duration,
        took: Duration,
    ) -> RunReport {
        let mut ages: Vec<f64> = records.iter().map(|r| r.age_ms).collect();
        ages.sort_by(f64::total_cmp);
        let work_on_expired_ms = records
            .iter()
            .filter(|r| r.expired)
            .map(|r| r.work_ms)
            .fold(0.0, |sum, ms| sum + ms);
        RunReport {
            expiry,
            produced,
            counts,
            work_on_expired_ms,
            age_p50_ms: quantile(&ages, 0.50),
            age_p99_ms: quantile(&ages, 0.99),
            age_max_ms: ages.last().copied().unwrap_or(0.0),
            records,
            samples,
            produced_for,
            took,
        }
    }

    /// Expired messages discarded without work, by the consumers, the broker and the producer.
    pub(crate) fn discarded(&self) -> u64 {
        let counts = &self.counts;
        counts.discarded_by_consumer + counts.discarded_by_broker + counts.discarded_by_producer
    }

    /// Messages accounted for: worked, discarded, cut at their deadline, or settled otherwise.
    pub(crate) fn settled(&self) -> u64 {
        self.counts.worked + self.discarded() + self.counts.cut_at_deadline + self.counts.other
    }

    /// Work that began on messages already past their expiry.
    pub(crate) fn worked_expired(&self) -> usize {
        self.records.iter().filter(|r| r.expired).count()
    }

    /// The human-readable line.
    pub(crate) fn line(&self) -> String {
        let counts = &self.counts;
        let mut line = format!(
            "{:<15} produced {:>5}  worked {:>5}  discarded {:>5} (broker {}, consumers {})  \
             cut at deadline {}  work on expired messages {:.0} ms ({} messages)  \
             age when worked p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms  ({:.1} s)",
            run_name(self.expiry),
            self.produced,
            counts.worked,
            self.discarded(),
            counts.discarded_by_broker,
            counts.discarded_by_consumer,
            counts.cut_at_deadline,
            self.work_on_expired_ms,
            self.worked_expired(),
            self.age_p50_ms,
            self.age_p99_ms,
            self.age_max_ms,
            self.took.as_secs_f64()
        );
        if counts.discarded_by_producer > 0 {
            line += &format!(
                "  discarded by the producer {}",
                counts.discarded_by_producer
            );
        }
        line += &format!(
            "  broker: reconnects {}, republished {}, resubscribed {}, redelivered {}, \
             duplicates {}",
            counts.reconnects,
            counts.republished,
            counts.resubscribed,
            counts.redelivered,
            counts.duplicates
        );
        line
    }

    fn json(&self) -> Value {
        let round = |ms: f64| (ms * 10.0).round() / 10.0;
        json!({
            "expiry": self.expiry,
            "produced": self.produced,
            "worked": self.counts.worked,
            "discarded": self.discarded(),
            "discarded_by_broker": self.counts.discarded_by_broker,
            "discarded_by_consumer": self.counts.discarded_by_consumer,
            "discarded_by_producer": self.counts.discarded_by_producer,
            "cut_at_deadline": self.counts.cut_at_deadline,
            "other": self.counts.other,
            "work_on_expired_ms": round(self.work_on_expired_ms),
            "worked_expired": self.worked_expired(),
            "age_p50_ms": round(self.age_p50_ms),
            "age_p99_ms": round(self.age_p99_ms),
            "age_max_ms": round(self.age_max_ms),
            "produced_for_ms": self.produced_for.as_millis() as u64,
            "duration_ms": self.took.as_millis() as u64,
            "reconnects": self.counts.reconnects,
            "republished": self.counts.republished,
            "resubscribed": self.counts.resubscribed,
            "redelivered": self.counts.redelivered,
            "duplicates": self.counts.duplicates,
        })
    }
}

/// The JSON document: the settings and `runs[]` (the keys the jobs report has always had, and a few more).
pub(crate) fn json(settings: &Settings, runs: &[RunReport]) -> Value {
    json!({
        "broker": crate::redact::redacted(&settings.broker),
        "rate": settings.rate,
        "seconds": settings.seconds,
        "work_ms": settings.work.as_millis() as u64,
        "consumers": settings.consumers,
        "capacity_per_s": settings.capacity(),
        "expiry_ms": settings.expiry.as_millis() as u64,
        "prefetch": settings.prefetch,
        "runs": runs.iter().map(RunReport::json).collect::<Vec<_>>(),
    })
}

/// What `--check` finds wrong; empty when it passes.
pub(crate) fn check(settings: &Settings, runs: &[RunReport]) -> Vec<String> {
    let expiry_ms = settings.expiry.as_secs_f64() * 1e3;
    let mut failures = Vec::new();
    for run in runs {
        let name = run_name(run.expiry);
        let settled = run.settled();
        if settled != run.produced {
            failures.push(format!(
                "{name}: {} messages produced but {settled} accounted for",
                run.produced
            ));
        }
        if run.counts.other > 0 {
            failures.push(format!(
                "{name}: {} messages settled neither worked nor expired",
                run.counts.other
            ));
        }
        if run.expiry {
            if run.work_on_expired_ms > 0.0 {
                failures.push(format!(
                    "{name}: {:.0} ms of work on {} expired messages (expected 0)",
                    run.work_on_expired_ms,
                    run.worked_expired()
                ));
            }
            if run.age_max_ms >= expiry_ms {
                failures.push(format!(
                    "{name}: a message was worked at age {:.0} ms, past its {expiry_ms:.0} ms expiry",
                    run.age_max_ms
                ));
            }
            if run.counts.worked == 0 {
                failures.push(format!("{name}: no message was worked on"));
            }
        } else if run.work_on_expired_ms == 0.0 {
            failures.push(format!(
                "{name}: no work went to expired messages, so the consumers kept up and the \
                 comparison shows nothing (raise --rate above {:.1}/s)",
                settings.capacity()
            ));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.5), 50.0);
        assert_eq!(quantile(&values, 0.99), 99.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
    }

    fn record(age_ms: f64, expired: bool) -> WorkRecord {
        WorkRecord {
            began_ms: 0.0,
            age_ms,
            work_ms: 100.0,
            expired,
        }
    }

    #[test]
    fn the_check_fails_on_work_on_expired_messages_with_expiry() {
        let settings = Settings {
            broker: String::new(),
            rate: 40.0,
            seconds: 1.0,
            work: Duration::from_millis(100),
            consumers: 2,
            expiry: Duration::from_millis(1_000),
            prefetch: 10,
        };
        let run = |expiry, records: Vec<WorkRecord>| {
            let worked = records.len() as u64;
            let counts = Counts {
                worked,
                ..Counts::default()
            };
            RunReport::new(
                expiry,
                worked,
                counts,
                records,
                Vec::new(),
                Duration::ZERO,
                Duration::ZERO,
            )
        };
        let without = run(false, vec![record(1_500.0, true), record(10.0, false)]);
        let good = run(true, vec![record(900.0, false)]);
        assert_eq!(
            check(&settings, &[without.clone(), good]),
            Vec::<String>::new()
        );
        let bad = run(true, vec![record(1_200.0, true)]);
        let failures = check(&settings, &[without, bad]);
        assert_eq!(failures.len(), 2, "{failures:?}");
        let kept_up = run(false, vec![record(10.0, false)]);
        assert_eq!(check(&settings, &[kept_up]).len(), 1);
    }
}
