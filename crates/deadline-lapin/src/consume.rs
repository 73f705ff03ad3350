//! Consuming: the expiry checked before any work, the handler run with the message's deadline.
//!
//! Each delivery goes through the same steps, and every one ends with the message settled
//! (acknowledged or rejected), so no message is redelivered forever:
//!
//! | the message | what happens | acked? | [`Outcome`] |
//! |---|---|---|---|
//! | expiry header malformed | not worked on; rejected without requeue | reject | `malformed` |
//! | expired (header against the wall clock, through the core's skew guard) | not worked on; discarded | ack | `expired` |
//! | live with less than the consumer's [`min_budget`](Consumer::min_budget) left | not worked on; discarded | ack | `expired` |
//! | live, or no expiry | the handler runs with the message's deadline current | | |
//! | ... the handler succeeds | | ack | `ok` |
//! | ... the handler returns an error | rejected without requeue | reject | `error` |
//! | ... the deadline passes while it works | the handler's future is dropped | ack | `deadline` |
//!
//! # Why the consumer checks even though the broker has a TTL
//!
//! RabbitMQ drops an expired message only when it reaches the head of its queue. Messages
//! already delivered to a consumer (its prefetch window), messages behind a message that never
//! expires, and messages stamped by a producer that set no TTL all reach a consumer after their
//! expiry. So the header is the rule and the broker's TTL an optimisation.
//!
//! # The malformed-header rule: dead-lettered, not worked on
//!
//! A message whose `deadline-expires-at` cannot be read was stamped by a broken producer that
//! meant it to expire. Treating it as "no expiry" would work on it however late, which is the
//! waste expiry exists to prevent; working on it with a guessed expiry would be inventing one.
//! So it is rejected without requeue (`basic.reject`, `requeue = false`): where the queue has a
//! dead-letter exchange (the `x-dead-letter-exchange` argument, see
//! [`declare_queue`](crate::declare_queue)) it lands there for inspection, otherwise RabbitMQ
//! drops it. Either way it is counted (`outcome="malformed"`) and logged, never panicked on,
//! and never redelivered to the same queue.
//!
//! # The handler's deadline
//!
//! A live message's remaining time (its expiry less the wall clock, less the skew guard's
//! assumed skew) becomes a deadline on this process's monotonic clock when the message is
//! taken, and the handler runs inside a deadline-http [`DeadlineContext`] with that deadline.
//! So the HTTP and gRPC calls it makes through the propagate layer, and the statements it runs
//! through the project's database glue, carry what is left of it, as they would inside a
//! served request; [`deadline_http::check`] works for CPU-bound code. A message without expiry
//! runs with no deadline: nothing leaks in from whatever the consuming task was doing.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use deadline::absolute::{SkewGuard, WallInstant};
use deadline::expiry::Freshness;
use deadline::{Budget, Deadline};
use deadline_http::DeadlineContext;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use tokio::time::Instant;

use crate::alive::{LIVENESS, Over, open_channel, while_up};
use crate::broker::Broker;
use crate::clock::wall_now;
use crate::metrics::{JobMetrics, Outcome};
use crate::stamp::{self, ExpiryStamp, MalformedExpiry};

/// Consumes one queue, one message at a time, with manual acknowledgements: a message is
/// settled only after its handler has finished (or it was discarded), so a consumer or broker
/// that dies mid-work leaves it on the queue for redelivery. Run several consumers for
/// parallel work.
pub struct Consumer {
    channel: Channel,
    queue: Arc<str>,
    deliveries: lapin::Consumer,
    guard: SkewGuard,
    reserve: Duration,
    min_budget: Duration,
    metrics: Option<JobMetrics>,
    resume: Option<Resume>,
}

/// What a consumer made with [`Consumer::on`] needs to subscribe again after the connection
/// dropped.
struct Resume {
    broker: Broker,
    prefetch: u16,
    /// The subscription's channel is known dead (an acknowledgement failed): subscribe again
    /// before waiting for the next delivery.
    stale: bool,
    resubscribed: u64,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.queue)
            .field("guard", &self.guard)
            .field("reserve", &self.reserve)
            .field("min_budget", &self.min_budget)
            .finish_non_exhaustive()
    }
}

/// A message handed to the handler.
#[derive(Debug)]
#[non_exhaustive]
pub struct Message {
    /// The payload.
    pub data: Vec<u8>,
    /// The AMQP properties, headers included.
    pub properties: BasicProperties,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Whether the broker delivered it before (to a consumer that did not settle it).
    pub redelivered: bool,
    /// When it expires (the header), if it has an expiry.
    pub expires_at: Option<WallInstant>,
    /// Its deadline on this process's clock: the one current while the handler runs.
    pub deadline: Option<Deadline>,
    /// When it was published (the `deadline-produced-at` header), if known.
    pub produced_at: Option<WallInstant>,
}

/// What identifies one delivery, whatever became of it (see [`Consumer::next_delivery`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Delivered {
    /// The payload.
    pub data: Vec<u8>,
    /// Whether the broker had delivered it before (to a consumer that did not settle it, or
    /// whose settlement was lost with its connection).
    pub redelivered: bool,
}

/// What became of one delivery.
#[derive(Debug)]
#[non_exhaustive]
pub enum Handled {
    /// The handler ran and succeeded.
    Worked {
        /// How long the message had waited when it was taken.
        age: Option<Duration>,
        /// The budget it was worked with (none: no expiry).
        budget: Option<Budget>,
    },
    /// Expired before any work, and discarded.
    Expired {
        /// How long the message had waited.
        age: Option<Duration>,
        /// How long ago it expired (counting the assumed skew).
        by: Duration,
    },
    /// Live, but with less time left than the consumer's
    /// [`min_budget`](Consumer::min_budget): discarded without work, as an expired message is.
    NotEnoughTime {
        /// How long the message had waited.
        age: Option<Duration>,
        /// The time it had left.
        left: Budget,
    },
    /// The expiry header could not be read: rejected without work.
    Malformed {
        /// How long the message had waited.
        age: Option<Duration>,
        /// What the header held.
        error: MalformedExpiry,
    },
    /// The handler was stopped at the message's deadline.
    DeadlineExceeded {
        /// How long the message had waited when it was taken.
        age: Option<Duration>,
    },
    /// The handler returned an error.
    Failed {
        /// How long the message had waited when it was taken.
        age: Option<Duration>,
        /// The handler's error, as text.
        error: String,
    },
}

impl Handled {
    /// The metrics outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Handled::Worked { .. } => Outcome::Ok,
            Handled::Expired { .. } | Handled::NotEnoughTime { .. } => Outcome::Expired,
            Handled::Malformed { .. } => Outcome::Malformed,
            Handled::DeadlineExceeded { .. } => Outcome::Deadline,
            Handled::Failed { .. } => Outcome::Error,
        }
    }

    /// How long the message had waited when it was taken, if it carried `deadline-produced-at`.
    pub fn age(&self) -> Option<Duration> {
        match self {
            Handled::Worked { age, .. }
            | Handled::Expired { age, .. }
            | Handled::NotEnoughTime { age, .. }
            | Handled::Malformed { age, .. }
            | Handled::DeadlineExceeded { age }
            | Handled::Failed { age, .. } => *age,
        }
    }
}

/// What the check before any work decided.
enum Verdict {
    Work(Option<Budget>),
    Discard(Handled),
}

impl Consumer {
    /// Starts consuming `queue` on a new channel of `connection`, with manual
    /// acknowledgements and at most `prefetch` unsettled messages delivered ahead (at least 1).
    ///
    /// The prefetch window is where messages wait on the consumer's side, out of the broker's
    /// reach: its TTL no longer drops them there, the consumer's check does.
    pub async fn new(
        connection: &Connection,
        queue: &str,
        prefetch: u16,
    ) -> Result<Consumer, lapin::Error> {
        let channel = open_channel(connection).await?;
        Consumer::subscribed(channel, queue, prefetch, None).await
    }

    /// Starts consuming `queue` as [`new`](Self::new) does, on a connection of `broker` that
    /// is re-dialled when it drops: [`next`](Self::next) then subscribes again on the new
    /// connection by itself instead of returning the error, and messages that were delivered
    /// but not settled come back from the broker (see the [broker module](crate::broker)).
    /// `next` returns `Err` only when the broker stays unreachable longer than its
    /// [`Reconnect::give_up_after`](crate::Reconnect::give_up_after).
    pub async fn on(broker: &Broker, queue: &str, prefetch: u16) -> Result<Consumer, lapin::Error> {
        let (channel, _) = broker.channel().await?;
        let resume = Resume {
            broker: broker.clone(),
            prefetch,
            stale: false,
            resubscribed: 0,
        };
        Consumer::subscribed(channel, queue, prefetch, Some(resume)).await
    }

    async fn subscribed(
        channel: Channel,
        queue: &str,
        prefetch: u16,
        resume: Option<Resume>,
    ) -> Result<Consumer, lapin::Error> {
        let deliveries = subscribe(&channel, queue, prefetch).await?;
        Ok(Consumer {
            channel,
            queue: Arc::from(queue),
            deliveries,
            guard: SkewGuard::DEFAULT,
            reserve: Duration::ZERO,
            min_budget: Duration::ZERO,
            metrics: None,
            resume,
        })
    }

    /// How many times this consumer subscribed again after its connection dropped (a consumer
    /// made with [`on`](Self::on); always 0 otherwise).
    pub fn resubscribed(&self) -> u64 {
        self.resume.as_ref().map_or(0, |resume| resume.resubscribed)
    }

    /// Subscribes again on a live connection of the broker, re-dialled if need be.
    async fn resubscribe(&mut self) -> Result<(), lapin::Error> {
        let Some(resume) = &mut self.resume else {
            return Ok(());
        };
        let started = Instant::now();
        let give_up_after = resume.broker.reconnect_policy().give_up_after;
        loop {
            let attempt = async {
                let (channel, _) = resume.broker.channel().await?;
                let deliveries = subscribe(&channel, &self.queue, resume.prefetch).await?;
                Ok::<_, lapin::Error>((channel, deliveries))
            }
            .await;
            match attempt {
                Ok((channel, deliveries)) => {
                    self.channel = channel;
                    self.deliveries = deliveries;
                    resume.stale = false;
                    resume.resubscribed += 1;
                    tracing::info!(queue = %self.queue, "consumer subscribed again");
                    return Ok(());
                }
                Err(err) if Instant::now().saturating_duration_since(started) >= give_up_after => {
                    return Err(err);
                }
                Err(err) => {
                    tracing::warn!(queue = %self.queue, %err, "cannot subscribe again yet");
                    tokio::time::sleep(resume.broker.reconnect_policy().first_wait).await;
                }
            }
        }
    }

    /// How far the producers' wall clocks may be trusted (default: the core's
    /// [`SkewGuard::DEFAULT`], 50 ms assumed skew): a message is expired this much early.
    pub fn skew_guard(mut self, guard: SkewGuard) -> Consumer {
        self.guard = guard;
        self
    }

    /// Time kept back at the end of a message's life (default 0): the handler's context
    /// reports its cutoff this much before the deadline, and the handler is stopped then.
    /// Raise it when the handler must still do something with a result (a reply message).
    pub fn reserve(mut self, reserve: Duration) -> Consumer {
        self.reserve = reserve;
        self
    }

    /// The least time a message must have left for its work to begin (default 0: any live
    /// message is worked on). A message with less is discarded like an expired one
    /// ([`Handled::NotEnoughTime`], outcome `expired`): work that cannot finish before the
    /// requester gives up would be stopped at the deadline, its time spent for nothing. Set
    /// it to the work's usual duration.
    pub fn min_budget(mut self, min_budget: Duration) -> Consumer {
        self.min_budget = min_budget;
        self
    }

    /// Counts every settled message in `deadline_messages_consumed_total` and its age in
    /// `deadline_message_age_seconds` (label `queue`: the queue consumed).
    pub fn record_metrics(mut self, metrics: &JobMetrics) -> Consumer {
        metrics.touch(&self.queue);
        self.metrics = Some(metrics.clone());
        self
    }

    /// The queue consumed.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Waits for the next delivery and handles it with `handler` (see the
    /// [module docs](self)). `Ok(None)` when the consumption ended (cancelled, or the channel
    /// closed cleanly); `Err` when the broker connection failed, in which case unsettled
    /// messages go back to the queue.
    ///
    /// Cancel-safe while waiting for a delivery; dropped while a handler runs, the message
    /// stays unsettled and is redelivered once the channel closes.
    pub async fn next<H, F, E>(&mut self, handler: H) -> Result<Option<Handled>, lapin::Error>
    where
        H: FnOnce(Message) -> F,
        F: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        Ok(self
            .next_delivery(handler)
            .await?
            .map(|(handled, _)| handled))
    }

    /// As [`next`](Self::next), with what identifies the delivery (its payload, and whether
    /// the broker had delivered it before) whatever became of it, discarded ones included:
    /// for a caller that counts each message once although the broker may deliver it twice
    /// (at least once, across a broker restart: see the [broker module](crate::broker)).
    pub async fn next_delivery<H, F, E>(
        &mut self,
        handler: H,
    ) -> Result<Option<(Handled, Delivered)>, lapin::Error>
    where
        H: FnOnce(Message) -> F,
        F: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        loop {
            if self.resume.as_ref().is_some_and(|resume| resume.stale) {
                self.resubscribe().await?;
            }
            let next = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(Pin::new(&mut self.deliveries), cx)
            });
            let delivery = if self.resume.is_none() {
                next.await
            } else {
                // A subscription that re-dials must not wait forever on a stream that the
                // dropped connection never ended: look at the channel every `LIVENESS` while
                // no delivery comes, and subscribe again once it is closed.
                match tokio::time::timeout(LIVENESS, next).await {
                    Ok(delivery) => delivery,
                    Err(_) if self.channel.status().connected() => continue,
                    Err(_) => {
                        tracing::warn!(queue = %self.queue, "consumer's channel closed without a word; subscribing again");
                        self.resubscribe().await?;
                        continue;
                    }
                }
            };
            match delivery {
                Some(Ok(delivery)) => {
                    let delivered = Delivered {
                        data: delivery.data.clone(),
                        redelivered: delivery.redelivered,
                    };
                    let (handled, settled) = self.handle(delivery, handler).await;
                    return match (settled, &mut self.resume) {
                        (Ok(()), _) => Ok(Some((handled, delivered))),
                        // The work is done but its settlement was lost with the connection:
                        // the broker delivers the message again (at least once). Report what
                        // the handler did, and subscribe again before the next delivery.
                        (Err(err), Some(resume)) => {
                            tracing::warn!(queue = %self.queue, %err, "settlement lost with the connection; the message comes again");
                            resume.stale = true;
                            Ok(Some((handled, delivered)))
                        }
                        (Err(err), None) => Err(err),
                    };
                }
                Some(Err(err)) if self.resume.is_some() => {
                    tracing::warn!(queue = %self.queue, %err, "consumer's connection dropped");
                    self.resubscribe().await?;
                }
                None if self.resume.is_some() && !self.channel.status().connected() => {
                    self.resubscribe().await?;
                }
                None => return Ok(None),
                Some(Err(err)) => return Err(err),
            }
        }
    }

    /// Handles deliveries with `handler` until the consumption ends (`Ok`) or the connection
    /// fails (`Err`).
    pub async fn run<H, F, E>(&mut self, mut handler: H) -> Result<(), lapin::Error>
    where
        H: FnMut(Message) -> F,
        F: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        while self.next(&mut handler).await?.is_some() {}
        Ok(())
    }

    /// Stops the consumption: messages delivered but not yet handled go back to the queue
    /// when the channel closes.
    pub async fn close(self) -> Result<(), lapin::Error> {
        self.channel.close(200, "consumer closed".into()).await
    }

    fn check(
        &self,
        headers: Option<&FieldTable>,
        wall: WallInstant,
        age: Option<Duration>,
    ) -> Verdict {
        match stamp::read_expiry(headers) {
            ExpiryStamp::Absent => Verdict::Work(None),
            ExpiryStamp::Malformed(error) => Verdict::Discard(Handled::Malformed { age, error }),
            ExpiryStamp::At(expiry) => match expiry.check(wall, &self.guard) {
                Freshness::Live(left) if left.as_duration() < self.min_budget => {
                    Verdict::Discard(Handled::NotEnoughTime { age, left })
                }
                Freshness::Live(budget) => Verdict::Work(Some(budget)),
                Freshness::Expired { by } => Verdict::Discard(Handled::Expired { age, by }),
            },
        }
    }

    /// Checks and works on `delivery`, then settles it: what became of it, and whether the
    /// settlement reached the broker.
    async fn handle<H, F, E>(
        &self,
        delivery: Delivery,
        handler: H,
    ) -> (Handled, Result<(), lapin::Error>)
    where
        H: FnOnce(Message) -> F,
        F: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        let (wall, taken) = (wall_now(), Instant::now());
        let headers = delivery.properties.headers().as_ref();
        let produced_at = stamp::read_produced_at(headers);
        let age = produced_at.map(|at| {
            Duration::from_nanos(u64::try_from(wall.nanos_since(at).max(0)).unwrap_or(u64::MAX))
        });
        let handled = match self.check(headers, wall, age) {
            Verdict::Discard(handled) => handled,
            Verdict::Work(budget) => {
                let deadline = budget.map(|b| Deadline::after(taken.into_std(), b));
                let expires_at = match stamp::read_expiry(headers) {
                    ExpiryStamp::At(expiry) => Some(expiry.instant()),
                    _ => None,
                };
                let message = Message {
                    data: delivery.data.clone(),
                    properties: delivery.properties.clone(),
                    routing_key: delivery.routing_key.to_string(),
                    redelivered: delivery.redelivered,
                    expires_at,
                    deadline,
                    produced_at,
                };
                let context = DeadlineContext::new(deadline, self.reserve, taken);
                let cutoff = context.cutoff();
                let work = context.scope(handler(message));
                let result = match cutoff {
                    None => Some(work.await),
                    Some(cutoff) => {
                        let at = Instant::from_std(cutoff.instant());
                        tokio::time::timeout_at(at, work).await.ok()
                    }
                };
                match result {
                    Some(Ok(())) => Handled::Worked { age, budget },
                    Some(Err(error)) => Handled::Failed {
                        age,
                        error: error.to_string(),
                    },
                    None => Handled::DeadlineExceeded { age },
                }
            }
        };
        let reject = match &handled {
            Handled::Malformed { error, .. } => {
                tracing::warn!(queue = %self.queue, %error, "message rejected: malformed expiry");
                true
            }
            Handled::Failed { error, .. } => {
                tracing::warn!(queue = %self.queue, %error, "message rejected: the handler failed");
                true
            }
            Handled::Worked { .. }
            | Handled::Expired { .. }
            | Handled::NotEnoughTime { .. }
            | Handled::DeadlineExceeded { .. } => false,
        };
        let operation = if reject { "basic.reject" } else { "basic.ack" };
        let settle = async {
            if reject {
                delivery.reject(BasicRejectOptions { requeue: false }).await
            } else {
                delivery.ack(BasicAckOptions::default()).await
            }
        };
        // Not trusted to answer on a channel that died (see the `alive` module), and an acker
        // that declines (`Ok(false)`: its channel had already ended) settled nothing.
        let over = Over::Channel(&self.channel);
        let settled = match while_up(&over, operation, settle).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(over.gone(operation)),
            Err(err) => Err(err),
        };
        if let Some(metrics) = &self.metrics
            && (settled.is_ok() || self.resume.is_some())
        {
            metrics.consumed(&self.queue, handled.outcome(), age);
        }
        (handled, settled)
    }
}

/// Sets the prefetch window of `channel` and subscribes it to `queue`, with manual
/// acknowledgements.
async fn subscribe(
    channel: &Channel,
    queue: &str,
    prefetch: u16,
) -> Result<lapin::Consumer, lapin::Error> {
    let over = Over::Channel(channel);
    while_up(
        &over,
        "basic.qos",
        channel.basic_qos(prefetch.max(1), BasicQosOptions::default()),
    )
    .await?;
    let name = crate::queue::name(queue)?;
    while_up(
        &over,
        "basic.consume",
        channel.basic_consume(
            name,
            ShortString::default(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
}
