//! Publishing: the expiry stamped twice (a header for the consumer, a TTL for the broker), and
//! the broker's confirmation awaited, never past the message's expiry.
//!
//! # A broker that stops reading
//!
//! Under a resource alarm (memory or disk) RabbitMQ blocks every publishing connection: it stops
//! reading from it until the alarm clears, which can take minutes. A publish then neither
//! fails nor completes. Waiting for it past the message's expiry helps no one: a consumer
//! would discard the message anyway. So the wait for the confirmation ends at the message's
//! expiry ([`PublishError::ExpiredUnconfirmed`]), and [`Broker`](crate::Broker) also ends it
//! after its [`give_up_after`](crate::Reconnect::give_up_after)
//! ([`PublishError::GaveUp`]). The first publish that finds its connection blocked logs one
//! warning, and no other until the connection has been seen unblocked again.
//!
//! A publish given up this way may still reach the broker when the alarm clears (its frames
//! are queued on the connection), or may have reached it with only its confirmation late: a
//! message with an expiry is worked only if a consumer gets it before the expiry, and is
//! discarded unworked after it, at the broker or by the consumer; one without expiry may be
//! delivered, so publishing it again can deliver it twice (at least once, as after a broker
//! restart).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadline::absolute::WallInstant;
use deadline_http::DeadlineContext;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionStatus};
use tokio::time::Instant;

use crate::alive::{Over, open_channel, while_up};
use crate::clock::wall_now;
use crate::metrics::JobMetrics;
use crate::policy::{Expiry, NoRequestDeadline};
use crate::stamp::{self, PRODUCED_AT_HEADER};

/// AMQP delivery mode 2: the broker writes the message to disk (on a durable queue it
/// survives a broker restart).
const PERSISTENT: u8 = 2;

/// How often a publish waiting for its confirmation looks at whether the broker has blocked
/// its connection.
const BLOCKED_LOOK: Duration = Duration::from_millis(250);

/// Publishes messages that carry their expiry, on a channel of its own with publisher
/// confirms: [`publish`](Self::publish) returns once the broker has taken responsibility for
/// the message (written it to disk, for a durable queue), so a broker restart loses no
/// message whose publish returned `Ok`.
///
/// Cheap to clone: clones share the channel.
#[derive(Clone, Debug)]
pub struct Producer {
    channel: Channel,
    exchange: ShortString,
    metrics: Option<JobMetrics>,
    /// The connection's status, for whether the broker has blocked it.
    status: ConnectionStatus,
    /// Whether a blocked connection has been logged (cleared once it is seen unblocked).
    blocked_said: Arc<AtomicBool>,
}

/// What a publish stamped on the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The instant in the `deadline-expires-at` header (truncated to the millisecond), if the
    /// message has an expiry.
    pub expires_at: Option<WallInstant>,
    /// The broker's per-message TTL (the `expiration` property), if the message has an expiry.
    pub ttl: Option<Duration>,
}

/// Why a message was not published.
#[derive(Debug)]
#[non_exhaustive]
pub enum PublishError {
    /// [`Expiry::OfRequest`] with no request deadline current.
    NoRequestDeadline(NoRequestDeadline),
    /// The expiry had passed (to the millisecond) before the publish: nobody would work on it.
    AlreadyExpired {
        /// The instant it expired.
        at: WallInstant,
    },
    /// The expiry cannot be written in RFC 3339 (a year outside 0000–9999).
    Unspellable {
        /// The instant.
        at: WallInstant,
    },
    /// The routing key is longer than AMQP allows (255 bytes).
    RoutingKeyTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The broker could not route the message to any queue (it was returned).
    Unroutable {
        /// The broker's reply text.
        reply: String,
    },
    /// The broker refused to take the message (a negative confirm).
    Refused,
    /// The message expired before the broker confirmed it (a broker that has blocked the
    /// connection under a resource alarm answers nothing until the alarm clears). It may still
    /// reach the broker, or have reached it with only its confirmation late: a consumer that
    /// gets it before its expiry works it, one that gets it after discards it.
    ExpiredUnconfirmed {
        /// The instant it expired.
        at: WallInstant,
        /// Whether the broker had blocked the connection.
        blocked: bool,
    },
    /// [`Broker::publish`](crate::Broker::publish) waited its
    /// [`give_up_after`](crate::Reconnect::give_up_after) for the confirmation. The message may
    /// still reach the broker later.
    GaveUp {
        /// How long the publish waited.
        waited: Duration,
        /// Whether the broker had blocked the connection.
        blocked: bool,
    },
    /// The connection or channel failed.
    Broker(lapin::Error),
}

/// ` (the broker had blocked the connection: a resource alarm)`, or nothing.
fn blocked_words(blocked: bool) -> &'static str {
    if blocked {
        " (the broker had blocked the connection: a resource alarm)"
    } else {
        ""
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::NoRequestDeadline(err) => err.fmt(f),
            PublishError::AlreadyExpired { at } => {
                write!(f, "the message expired at {at}, before it was published")
            }
            PublishError::Unspellable { at } => {
                write!(f, "the expiry {at} cannot be written in RFC 3339")
            }
            PublishError::RoutingKeyTooLong { len } => {
                write!(f, "the routing key is {len} bytes long; AMQP allows 255")
            }
            PublishError::Unroutable { reply } => {
                write!(f, "the broker routed the message to no queue: {reply}")
            }
            PublishError::Refused => f.write_str("the broker refused the message (nack)"),
            PublishError::ExpiredUnconfirmed { at, blocked } => write!(
                f,
                "the message expired at {at} before the broker confirmed it{}",
                blocked_words(*blocked)
            ),
            PublishError::GaveUp { waited, blocked } => write!(
                f,
                "no confirmation from the broker after {} ms; gave up{}",
                waited.as_millis(),
                blocked_words(*blocked)
            ),
            PublishError::Broker(err) => write!(f, "publish failed: {err}"),
        }
    }
}

impl std::error::Error for PublishError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PublishError::NoRequestDeadline(err) => Some(err),
            PublishError::Broker(err) => Some(err),
            _ => None,
        }
    }
}

impl From<lapin::Error> for PublishError {
    fn from(err: lapin::Error) -> PublishError {
        PublishError::Broker(err)
    }
}

impl Producer {
    /// A producer publishing to the default exchange (the routing key names the queue), on a
    /// new channel of `connection` with publisher confirms on.
    pub async fn new(connection: &Connection) -> Result<Producer, lapin::Error> {
        let channel = open_channel(connection).await?;
        while_up(
            &Over::Channel(&channel),
            "confirm.select",
            channel.confirm_select(ConfirmSelectOptions::default()),
        )
        .await?;
        Ok(Producer {
            channel,
            exchange: ShortString::default(),
            metrics: None,
            status: connection.status().clone(),
            blocked_said: Arc::default(),
        })
    }

    /// Whether the broker has blocked this producer's connection (a resource alarm), logging
    /// it once per blocked spell.
    pub(crate) fn look_blocked(&self, routing_key: &str) -> bool {
        let blocked = self.status.blocked();
        if !blocked {
            self.blocked_said.store(false, Ordering::Relaxed);
        } else if !self.blocked_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                routing_key,
                "the broker has blocked publishing on this connection (a resource alarm, \
                 memory or disk): publishes wait for it at most until their message expires \
                 or the broker's give-up time"
            );
        }
        blocked
    }

    /// Publishes to `exchange` instead of the default one. `None` if the name is longer than
    /// 255 bytes.
    pub fn exchange(mut self, exchange: &str) -> Option<Producer> {
        self.exchange = ShortString::try_new(exchange).ok()?;
        Some(self)
    }

    /// Counts every confirmed message in `deadline_messages_produced_total` (label `queue`:
    /// the routing key).
    pub fn record_metrics(mut self, metrics: &JobMetrics) -> Producer {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Publishes `payload` with routing key `routing_key`, expiring as `expiry` says, and
    /// waits for the broker's confirmation. See [`publish_with`](Self::publish_with).
    pub async fn publish(
        &self,
        routing_key: &str,
        payload: &[u8],
        expiry: Expiry,
    ) -> Result<Published, PublishError> {
        self.publish_with(routing_key, payload, expiry, BasicProperties::default())
            .await
    }

    /// Publishes with the application's own `properties` (content type, correlation id, its
    /// own headers...), to which the producer adds:
    ///
    /// - the `deadline-produced-at` header (now, RFC 3339 with milliseconds);
    /// - with an expiry: the `deadline-expires-at` header and the `expiration` property (the
    ///   per-message TTL: whole milliseconds from now to the expiry, truncated), replacing any
    ///   the application set, so the broker drops the message at its expiry when it reaches
    ///   the head of the queue, and the consumer discards it if it gets it later;
    /// - delivery mode 2 (persistent), so a durable queue keeps it across a broker restart.
    ///
    /// The message is published `mandatory`, so one that reaches no queue is an error
    /// ([`PublishError::Unroutable`]), not a silent loss. A message whose expiry is less than
    /// a millisecond away is not published ([`PublishError::AlreadyExpired`]). The wait for
    /// the broker's confirmation ends at the message's expiry
    /// ([`PublishError::ExpiredUnconfirmed`]; see the [module docs](self)).
    pub async fn publish_with(
        &self,
        routing_key: &str,
        payload: &[u8],
        expiry: Expiry,
        properties: BasicProperties,
    ) -> Result<Published, PublishError> {
        let key =
            ShortString::try_new(routing_key).map_err(|_| PublishError::RoutingKeyTooLong {
                len: routing_key.len(),
            })?;
        let wall = wall_now();
        let context = DeadlineContext::current();
        let expires_at = expiry
            .resolve(context.as_ref(), wall, Instant::now())
            .map_err(PublishError::NoRequestDeadline)?;
        let mut headers = properties.headers().clone().unwrap_or_default();
        stamp::write(&mut headers, PRODUCED_AT_HEADER, wall)
            .ok_or(PublishError::Unspellable { at: wall })?;
        let mut properties = properties.with_delivery_mode(PERSISTENT);
        let mut published = Published {
            expires_at: None,
            ttl: None,
        };
        if let Some(at) = expires_at {
            let ttl_ms = u64::try_from(at.nanos_since(wall).max(0) / 1_000_000).unwrap_or(u64::MAX);
            if ttl_ms == 0 {
                return Err(PublishError::AlreadyExpired { at });
            }
            stamp_expiry(&mut headers, at)?;
            properties = properties.with_expiration(ShortString::from(ttl_ms.to_string()));
            published = Published {
                expires_at: Some(truncated_to_millis(at)),
                ttl: Some(Duration::from_millis(ttl_ms)),
            };
        }
        let properties = properties.with_headers(headers);
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let send = async {
            self.channel
                .basic_publish(self.exchange.clone(), key, options, payload, properties)
                .await?
                .await
        };
        // The expiry on this process's clock: the wall clock's distance to it, from now.
        let until = expires_at.map(|at| {
            let left = u64::try_from(at.nanos_since(wall_now()).max(0)).unwrap_or(u64::MAX);
            Instant::now() + Duration::from_nanos(left)
        });
        let Some(confirm) = self.confirmed(send, until, routing_key).await else {
            return Err(PublishError::ExpiredUnconfirmed {
                at: expires_at.expect("only an expiry ends the wait"),
                blocked: self.status.blocked(),
            });
        };
        match confirm? {
            Confirmation::Ack(None) | Confirmation::NotRequested => {}
            Confirmation::Ack(Some(returned)) => {
                return Err(PublishError::Unroutable {
                    reply: returned.reply_text.to_string(),
                });
            }
            Confirmation::Nack(_) => return Err(PublishError::Refused),
        }
        if let Some(metrics) = &self.metrics {
            metrics.produced(routing_key);
        }
        Ok(published)
    }
}

impl Producer {
    /// `send`'s output, or `None` if `until` came first; looks every [`BLOCKED_LOOK`] at
    /// whether the broker has blocked the connection, to say so.
    async fn confirmed<F: Future>(
        &self,
        send: F,
        until: Option<Instant>,
        routing_key: &str,
    ) -> Option<F::Output> {
        tokio::pin!(send);
        loop {
            let look = Instant::now() + BLOCKED_LOOK;
            let end = until.map_or(look, |until| until.min(look));
            if let Ok(output) = tokio::time::timeout_at(end, &mut send).await {
                if !self.status.blocked() {
                    // Unblocked again (a confirmation came): the next block is a new spell.
                    self.blocked_said.store(false, Ordering::Relaxed);
                }
                return Some(output);
            }
            self.look_blocked(routing_key);
            if until.is_some_and(|until| Instant::now() >= until) {
                return None;
            }
        }
    }
}

fn stamp_expiry(headers: &mut FieldTable, at: WallInstant) -> Result<(), PublishError> {
    stamp::write(headers, stamp::EXPIRES_AT, at).ok_or(PublishError::Unspellable { at })
}

fn truncated_to_millis(at: WallInstant) -> WallInstant {
    let nanos = at.unix_nanos();
    WallInstant::from_unix_nanos(nanos - nanos.rem_euclid(1_000_000))
}
