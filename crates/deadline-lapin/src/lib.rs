//! Queued work through RabbitMQ (via lapin) that carries its expiry, so consumers never work on
//! messages nobody is waiting for.
//!
//! A request that hands work to a queue leaves the synchronous chain, and a budget in
//! milliseconds means nothing on the other side: the message may wait seconds or hours, and the
//! monotonic clock it was measured on stays behind. When consumers fall behind, a plain queue
//! makes it worse: every message is worked on in turn, including those whose requester gave up
//! long ago, so the backlog is spent on dead work while live messages age past their use.
//!
//! This crate stamps each message with the instant it stops being useful, an absolute time on
//! the wall clock in the core's `X-Request-Deadline` form (RFC 3339 with milliseconds, header
//! `deadline-expires-at`), and with RabbitMQ's own per-message TTL (the `expiration`
//! property). The [`Consumer`] reads the header through the core's skew guard before any work:
//! expired messages are acknowledged, counted and discarded, never redelivered; live ones run
//! their handler with the message's deadline as the current deadline, so the HTTP and gRPC
//! calls and database statements the handler makes inherit it.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use deadline_lapin::{Consumer, Expiry, Handled, Producer, QueueOptions, declare_queue};
//! use lapin::{Connection, ConnectionProperties};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let connection =
//!     Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default())
//!         .await?;
//! let channel = connection.create_channel().await?;
//! declare_queue(&channel, "thumbnails", QueueOptions::default()).await?;
//!
//! // Producing: the expiry is a policy stated at every publish. Inside a request's work,
//! // `Expiry::OfRequest` ties the job to the user's wait; here the job has a lifetime of its own.
//! let producer = Producer::new(&connection).await?;
//! producer.publish("thumbnails", b"photo-17", Expiry::Lifetime(Duration::from_secs(30))).await?;
//!
//! // Consuming: expired messages never reach the handler; live ones run with their deadline.
//! let mut consumer = Consumer::new(&connection, "thumbnails", 10).await?;
//! let handled = consumer
//!     .next(|message| async move {
//!         assert!(deadline_http::current_deadline().is_some());
//!         let _ = message.data; // ... resize the photo, call services, query the database ...
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! assert!(matches!(handled, Some(Handled::Worked { .. })));
//! # Ok(()) }
//! ```
//!
//! # Why RabbitMQ through lapin first
//!
//! Every part of the rule is a standard broker feature in RabbitMQ, available on any queue
//! with no set-up: a per-message TTL (`expiration`), message headers for the absolute instant,
//! manual acknowledgements (a message is settled only after its work), publisher confirms (a
//! publish returns once the broker has the message), persistent messages on durable queues
//! (they survive a broker restart) and dead-lettering (where rejected messages go). lapin is
//! the maintained AMQP 0.9.1 client for tokio, speaks all of these, and needs no TLS stack for
//! a plain `amqp://` connection (this crate builds it without one).
//!
//! NATS JetStream (through async-nats) could carry the same stamps, with more set-up: the
//! per-message TTL (the `Nats-TTL` header) works only on a stream created with message TTLs
//! allowed, redelivery is bounded by the consumer's `max_deliver` and `ack_wait` rather than a
//! reject, and there is no dead-letter exchange (a rejected message is terminated with
//! `AckKind::Term`). The parts that do not depend on the broker are kept apart for such a
//! second crate: the header form and its three-outcome reading ([`stamp`]), the publish policy
//! ([`Expiry`]) and the metrics ([`JobMetrics`]).
//!
//! # Modules
//!
//! - [`policy`]: [`Expiry`], the choice every publish makes.
//! - [`produce`]: [`Producer`], stamping and confirmed publishing.
//! - [`consume`]: [`Consumer`], the check before work, the handler's deadline, the rule for a
//!   malformed header (dead-lettered, never worked on).
//! - [`broker`]: [`Broker`], a connection re-dialled when the broker restarts, with publishes
//!   confirmed again and consumers subscribing again (at least once, nothing lost).
//! - [`metrics`]: produced, consumed by outcome (`expired` among them), age at consumption.
//! - [`stamp`]: the two headers, written and read.

mod alive;
pub mod broker;
mod clock;
pub mod consume;
pub mod metrics;
pub mod policy;
pub mod produce;
mod queue;
pub mod stamp;

pub use broker::{Broker, Reconnect};
pub use consume::{Consumer, Delivered, Handled, Message};
pub use metrics::{JobMetrics, Outcome};
pub use policy::{Expiry, NoRequestDeadline};
pub use produce::{Producer, PublishError, Published};
pub use queue::{QueueOptions, declare_queue};

/// lapin, the AMQP client this crate is built on, for the connection and channels it takes.
pub use lapin;
