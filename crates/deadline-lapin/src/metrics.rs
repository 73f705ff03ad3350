//! Prometheus metrics for queued work, registered in the application's own registry beside the
//! deadline-http set.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `deadline_messages_produced_total` | counter | `service`, `queue` | messages published and confirmed by the broker |
//! | `deadline_messages_consumed_total` | counter | `service`, `queue`, `outcome` | messages consumed, by what became of them: `ok`, `expired`, `malformed`, `deadline`, `error` (see [`Outcome`]) |
//! | `deadline_message_age_seconds` | histogram | `service`, `queue` | how long a message waited, from its publish to its consumption (messages carrying `deadline-produced-at`) |
//! | `deadline_broker_reconnects_total` | counter | `service` | broker connections dialled again after they dropped (a [`Broker`](crate::Broker)) |
//! | `deadline_messages_republished_total` | counter | `service`, `queue` | publishes sent again because the connection dropped before the broker's confirmation (each may be a duplicate) |
//!
//! "Discarded as expired" is `deadline_messages_consumed_total{outcome="expired"}`. The
//! histogram uses the HTTP set's [`BUCKETS`] (1 ms to an hour), so a message that waited a day is in the `+Inf` bucket
//! and its sum. `queue` is the routing key a message was published with, or the queue it was
//! consumed from: names the application chose, so the number of series stays bounded.
//!
//! # Why in this crate, with a registry hook
//!
//! The families are registered by [`JobMetrics::register`] in the same
//! [`Registry`] the application gives
//! [`DeadlineMetrics::register`](deadline_http::metrics::DeadlineMetrics::register), so one
//! scrape shows both; they live here rather than in deadline-http so that an HTTP service
//! without a broker does not carry them, and the HTTP set is not disturbed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadline_http::metrics::{BUCKETS, Registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// What became of one consumed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Worked on by the handler, which succeeded; acknowledged.
    Ok,
    /// Expired before any work, or with too little time left to finish it: acknowledged and
    /// discarded, never redelivered.
    Expired,
    /// Its expiry header could not be read: rejected without requeue (dead-lettered where
    /// the queue has a dead-letter exchange), never worked on.
    Malformed,
    /// The handler was still working when the message's deadline passed: its future was
    /// dropped and the message acknowledged (nobody wants the result any more).
    Deadline,
    /// The handler returned an error: rejected without requeue (dead-lettered where the
    /// queue has a dead-letter exchange).
    Error,
}

impl Outcome {
    /// Every outcome, in the order above.
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Expired,
        Outcome::Malformed,
        Outcome::Deadline,
        Outcome::Error,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Expired => "expired",
            Outcome::Malformed => "malformed",
            Outcome::Deadline => "deadline",
            Outcome::Error => "error",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    service: Arc<str>,
    queue: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServiceLabels {
    service: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ConsumedLabels {
    service: Arc<str>,
    queue: Arc<str>,
    outcome: OutcomeLabel,
}

/// Encodes an [`Outcome`] as its lowercase label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct OutcomeLabel(Outcome);

impl EncodeLabelValue for OutcomeLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.0.as_str())
    }
}

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Debug)]
struct Families {
    produced: Family<QueueLabels, Counter>,
    consumed: Family<ConsumedLabels, Counter>,
    age: Family<QueueLabels, Histogram, fn() -> Histogram>,
    reconnects: Family<ServiceLabels, Counter>,
    republished: Family<QueueLabels, Counter>,
}

/// The queued-work metric families in an application's [`Registry`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct JobMetrics {
    families: Arc<Families>,
    service: Arc<str>,
}

impl JobMetrics {
    /// Registers the families (see the [module docs](self)) in `registry`, labelled
    /// `service`. Call it once per registry.
    pub fn register(registry: &mut Registry, service: impl Into<String>) -> JobMetrics {
        let families = Families {
            produced: Family::default(),
            consumed: Family::default(),
            age: Family::new_with_constructor(histogram as fn() -> Histogram),
            reconnects: Family::default(),
            republished: Family::default(),
        };
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "deadline_messages_produced",
            "Messages published and confirmed by the broker",
            families.produced.clone(),
        );
        registry.register(
            "deadline_messages_consumed",
            "Messages consumed, by what became of them",
            families.consumed.clone(),
        );
        registry.register(
            "deadline_message_age_seconds",
            "How long a message waited from its publish to its consumption",
            families.age.clone(),
        );
        registry.register(
            "deadline_broker_reconnects",
            "Broker connections dialled again after they dropped",
            families.reconnects.clone(),
        );
        registry.register(
            "deadline_messages_republished",
            "Publishes sent again because the connection dropped before the confirmation",
            families.republished.clone(),
        );
        JobMetrics {
            families: Arc::new(families),
            service: Arc::from(service.into()),
        }
    }

    fn labels(&self, queue: &str) -> QueueLabels {
        QueueLabels {
            service: self.service.clone(),
            queue: Arc::from(queue),
        }
    }

    /// Creates the series of `queue` at 0, so a scrape shows them before the first message.
    pub fn touch(&self, queue: &str) {
        let labels = self.labels(queue);
        drop(self.families.produced.get_or_create(&labels));
        drop(self.families.age.get_or_create(&labels));
        drop(self.families.republished.get_or_create(&labels));
        drop(self.families.reconnects.get_or_create(&ServiceLabels {
            service: labels.service.clone(),
        }));
        for outcome in Outcome::ALL {
            drop(self.families.consumed.get_or_create(&ConsumedLabels {
                service: labels.service.clone(),
                queue: labels.queue.clone(),
                outcome: OutcomeLabel(outcome),
            }));
        }
    }

    pub(crate) fn reconnected(&self) {
        self.families
            .reconnects
            .get_or_create(&ServiceLabels {
                service: self.service.clone(),
            })
            .inc();
    }

    pub(crate) fn republished(&self, queue: &str) {
        self.families
            .republished
            .get_or_create(&self.labels(queue))
            .inc();
    }

    pub(crate) fn produced(&self, queue: &str) {
        self.families
            .produced
            .get_or_create(&self.labels(queue))
            .inc();
    }

    pub(crate) fn consumed(&self, queue: &str, outcome: Outcome, age: Option<Duration>) {
        let labels = self.labels(queue);
        if let Some(age) = age {
            self.families
                .age
                .get_or_create(&labels)
                .observe(age.as_secs_f64());
        }
        self.families
            .consumed
            .get_or_create(&ConsumedLabels {
                service: labels.service,
                queue: labels.queue,
                outcome: OutcomeLabel(outcome),
            })
            .inc();
    }
}
