//! A broker connection that outlives the broker: re-dialled with a bounded backoff when it
//! drops (a broker restart, a network cut), with publishing and consuming that resume on the
//! new connection.
//!
//! # What a broker restart does
//!
//! Messages on a durable queue ([`declare_queue`](crate::declare_queue)) that were published
//! persistent (the [`Producer`] always does) survive the restart. Around it:
//!
//! - [`Broker::publish`] waits for the broker's confirmation. A publish whose connection
//!   drops before the confirmation arrives is published again on the new connection, with the
//!   same expiry instant, and returns only once a broker has confirmed it. The broker may have
//!   kept the first copy too, so delivery is **at least once**: a message can arrive twice,
//!   never zero times once `publish` returned `Ok`. [`Broker::republished`] counts the
//!   messages published again.
//! - A [`Consumer`](crate::Consumer) made with [`Consumer::on`](crate::Consumer::on) settles a
//!   message only after its work (manual acknowledgements). Messages delivered but not yet
//!   acknowledged when the connection drops go back to the queue and are delivered again after
//!   the restart (flagged `redelivered`), so the work of a message whose acknowledgement was
//!   lost is done twice. The consumer subscribes again on the new connection by itself.
//! - Nothing waits on a dead connection: an acknowledgement, a channel opening or a
//!   subscription that lapin leaves unanswered when the connection drops is given up within a
//!   second of the connection or channel no longer reading as up, and the publish or consumer
//!   goes on as above.
//! - The expiry rules do not change: a message that expired while the broker was down is
//!   discarded unworked (and acknowledged, counted) when it is delivered.
//! - [`Broker::reconnects`] counts the connections re-dialled. If the broker is unreachable for
//!   longer than [`Reconnect::give_up_after`], the publish or the consumer's `next` returns the
//!   last connection error.
//! - A broker that blocks publishing (a memory or disk alarm) while the connection stays up:
//!   a publish waits for its confirmation at most until its message expires, and at most
//!   [`Reconnect::give_up_after`] ([`PublishError::GaveUp`]), with one warning logged when the
//!   block is first seen (the [`produce`](crate::produce) module says what becomes of such a
//!   message).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::alive::{LIVENESS, connection_closed, open_channel};
use crate::clock::wall_now;
use crate::metrics::JobMetrics;
use crate::policy::Expiry;
use crate::produce::{Producer, PublishError, Published};

/// How [`Broker`] re-dials a dropped connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reconnect {
    /// The wait after the first failed dial (default 100 ms); each further failure doubles it.
    pub first_wait: Duration,
    /// The longest wait between two dials (default 2 s).
    pub max_wait: Duration,
    /// How long the broker may stay unreachable before the caller gets the error
    /// (default 60 s); also the longest a publish waits for its confirmation on a connection
    /// that stays up but confirms nothing (a broker blocking it under a resource alarm).
    pub give_up_after: Duration,
    /// How long one dial may take (default 5 s).
    pub dial_timeout: Duration,
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect {
            first_wait: Duration::from_millis(100),
            max_wait: Duration::from_secs(2),
            give_up_after: Duration::from_secs(60),
            dial_timeout: Duration::from_secs(5),
        }
    }
}

/// A connection to one broker, re-dialled when it drops (see the [module docs](self)). Cheap
/// to clone: clones share the connection, its producer and its counts.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    reconnect: Reconnect,
    state: Mutex<State>,
    reconnects: AtomicU64,
    republished: AtomicU64,
    metrics: std::sync::Mutex<Option<JobMetrics>>,
}

struct State {
    connection: Option<Connection>,
    /// Which connection `connection` is: 1 for the first, one more per re-dial.
    generation: u64,
    producer: Option<(u64, Producer)>,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("reconnect", &self.inner.reconnect)
            .field("reconnects", &self.reconnects())
            .field("republished", &self.republished())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Connects to the broker at `url` (`amqp://user:password@host:port/vhost`) with the
    /// default [`Reconnect`] policy; the first dial is retried as a re-dial is.
    pub async fn connect(url: &str) -> Result<Broker, lapin::Error> {
        Broker::connect_with(url, Reconnect::default()).await
    }

    /// Connects with the re-dial policy `reconnect`.
    pub async fn connect_with(url: &str, reconnect: Reconnect) -> Result<Broker, lapin::Error> {
        let broker = Broker {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                reconnect,
                state: Mutex::new(State {
                    connection: None,
                    generation: 0,
                    producer: None,
                }),
                reconnects: AtomicU64::new(0),
                republished: AtomicU64::new(0),
                metrics: std::sync::Mutex::new(None),
            }),
        };
        broker.channel().await?;
        Ok(broker)
    }

    /// Counts re-dials in `deadline_broker_reconnects_total`, publishes sent again in
    /// `deadline_messages_republished_total`, and confirmed publishes (through
    /// [`publish`](Self::publish)) in `deadline_messages_produced_total`. Applies to clones
    /// too.
    pub fn record_metrics(self, metrics: &JobMetrics) -> Broker {
        *self.metrics_slot() = Some(metrics.clone());
        self
    }

    fn metrics_slot(&self) -> std::sync::MutexGuard<'_, Option<JobMetrics>> {
        self.inner
            .metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn metrics(&self) -> Option<JobMetrics> {
        self.metrics_slot().clone()
    }

    /// The re-dial policy.
    pub fn reconnect_policy(&self) -> Reconnect {
        self.inner.reconnect
    }

    /// How many times the connection was re-dialled after it dropped.
    pub fn reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    /// How many publishes were sent again because their connection dropped before the
    /// broker's confirmation (each may have reached the queue twice).
    pub fn republished(&self) -> u64 {
        self.inner.republished.load(Ordering::Relaxed)
    }

    /// A new channel on the live connection, re-dialling first if the connection dropped
    /// (waiting as long as the [`Reconnect`] policy allows): for the broker operations the
    /// producer and consumers do not cover (declaring, inspecting or deleting queues). The
    /// channel itself dies with its connection; after an error on it, take a new one.
    pub async fn new_channel(&self) -> Result<Channel, lapin::Error> {
        self.channel().await.map(|(channel, _)| channel)
    }

    /// A new channel on the live connection, re-dialling first if it dropped; with the
    /// connection's generation (1 for the first connection, one more per re-dial).
    pub(crate) async fn channel(&self) -> Result<(Channel, u64), lapin::Error> {
        let mut state = self.inner.state.lock().await;
        self.live(&mut state).await?;
        let connection = state.connection.as_ref().expect("connected just above");
        let channel = open_channel(connection).await;
        match channel {
            Ok(channel) => Ok((channel, state.generation)),
            Err(err) => {
                // The connection died between the check and the channel: dial again next time.
                state.connection = None;
                Err(err)
            }
        }
    }

    /// Makes `state.connection` a connected one, dialling with backoff when it is not.
    async fn live(&self, state: &mut State) -> Result<(), lapin::Error> {
        if let Some(connection) = &state.connection
            && connection.status().connected()
        {
            return Ok(());
        }
        let policy = self.inner.reconnect;
        let started = Instant::now();
        let mut wait = policy.first_wait;
        loop {
            let dial = tokio::time::timeout(
                policy.dial_timeout,
                Connection::connect(&self.inner.url, ConnectionProperties::default()),
            )
            .await;
            let err = match dial {
                Ok(Ok(connection)) => {
                    if state.generation > 0 {
                        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
                        if let Some(metrics) = self.metrics() {
                            metrics.reconnected();
                        }
                        tracing::info!(generation = state.generation + 1, "broker re-dialled");
                    }
                    state.connection = Some(connection);
                    state.generation += 1;
                    state.producer = None;
                    return Ok(());
                }
                Ok(Err(err)) => err,
                Err(_) => lapin::Error::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the broker did not answer within {:?}", policy.dial_timeout),
                )),
            };
            if Instant::now().saturating_duration_since(started) + wait > policy.give_up_after {
                return Err(err);
            }
            tracing::warn!(%err, ?wait, "broker unreachable; dialling again");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(policy.max_wait);
        }
    }

    /// The shared confirming producer on the live connection, with its generation.
    async fn producer(&self) -> Result<(Producer, u64), lapin::Error> {
        let mut state = self.inner.state.lock().await;
        self.live(&mut state).await?;
        if let Some((generation, producer)) = &state.producer
            && *generation == state.generation
        {
            return Ok((producer.clone(), *generation));
        }
        let connection = state.connection.as_ref().expect("connected just above");
        match Producer::new(connection).await {
            Ok(producer) => {
                let producer = match self.metrics() {
                    Some(metrics) => producer.record_metrics(&metrics),
                    None => producer,
                };
                state.producer = Some((state.generation, producer.clone()));
                Ok((producer, state.generation))
            }
            Err(err) => {
                state.connection = None;
                Err(err)
            }
        }
    }

    /// After a failed publish on connection `generation` (`failed`), or between two slices of
    /// a publish still waiting for its confirmation: says whether the connection itself was
    /// lost (then the next use dials again), as opposed to only the channel (a refusal to
    /// publish again). A failed publish's producer is forgotten (its channel is dead either
    /// way); a waiting one's is kept while the connection is up.
    async fn dropped(&self, generation: u64, failed: bool) -> bool {
        let mut state = self.inner.state.lock().await;
        if state.generation != generation {
            return true;
        }
        if failed {
            state.producer = None;
        }
        match &state.connection {
            Some(connection) if connection.status().connected() => false,
            _ => {
                state.connection = None;
                true
            }
        }
    }

    /// Publishes as [`Producer::publish`] does (to the default exchange, persistent, confirmed),
    /// publishing again on a new connection if the connection drops before the confirmation.
    pub async fn publish(
        &self,
        routing_key: &str,
        payload: &[u8],
        expiry: Expiry,
    ) -> Result<Published, PublishError> {
        self.publish_with(routing_key, payload, expiry, BasicProperties::default())
            .await
    }

    /// Publishes as [`Producer::publish_with`] does, publishing again on a new connection if
    /// the connection drops before the broker's confirmation (at least once: see the
    /// [module docs](self)). An error that closes only the channel, with the connection up,
    /// is returned, not retried. The expiry is resolved once, before the first attempt, so a
    /// message published again keeps its instant (and the TTL shrinks accordingly).
    pub async fn publish_with(
        &self,
        routing_key: &str,
        payload: &[u8],
        expiry: Expiry,
        properties: BasicProperties,
    ) -> Result<Published, PublishError> {
        let context = deadline_http::DeadlineContext::current();
        let expiry = match expiry
            .resolve(context.as_ref(), wall_now(), Instant::now())
            .map_err(PublishError::NoRequestDeadline)?
        {
            Some(at) => Expiry::At(at),
            None => Expiry::Never,
        };
        let started = Instant::now();
        let give_up_after = self.inner.reconnect.give_up_after;
        let mut attempt = 0_u32;
        loop {
            let (producer, generation) = match self.producer().await {
                Ok(found) => found,
                Err(err) => return Err(PublishError::Broker(err)),
            };
            if attempt > 0 {
                self.inner.republished.fetch_add(1, Ordering::Relaxed);
                if let Some(metrics) = self.metrics() {
                    metrics.republished(routing_key);
                }
            }
            attempt += 1;
            // Waited for in slices: a confirmation that a dropped connection never ends must
            // not hold the publish forever, so between slices the connection is looked at.
            let publish = producer.publish_with(routing_key, payload, expiry, properties.clone());
            tokio::pin!(publish);
            // From this attempt's start, once its connection is up: a re-dial that took until
            // past the first attempt's give-up time must not give up the new attempt at once.
            let give_up = Instant::now() + give_up_after;
            let outcome = loop {
                let slice = (Instant::now() + LIVENESS).min(give_up);
                match tokio::time::timeout_at(slice, &mut publish).await {
                    Ok(outcome) => break outcome,
                    Err(_) if self.dropped(generation, false).await => {
                        break Err(PublishError::Broker(connection_closed()));
                    }
                    // A live connection that confirms nothing (a broker blocking it under a
                    // resource alarm) is waited for no longer than a dead one.
                    Err(_) if Instant::now() >= give_up => {
                        return Err(PublishError::GaveUp {
                            waited: give_up_after,
                            blocked: producer.look_blocked(routing_key),
                        });
                    }
                    Err(_) => {}
                }
            };
            match outcome {
                Err(PublishError::Broker(err))
                    if Instant::now().saturating_duration_since(started) < give_up_after =>
                {
                    // A connection that is going down may still read as connected for a
                    // moment: look twice before taking the error for the channel's own.
                    let mut lost = self.dropped(generation, true).await;
                    tokio::time::sleep(self.inner.reconnect.first_wait).await;
                    lost = lost || self.dropped(generation, true).await;
                    if !lost {
                        return Err(PublishError::Broker(err));
                    }
                    tracing::warn!(%err, routing_key, "publish not confirmed; publishing again");
                }
                other => return other,
            }
        }
    }
}
