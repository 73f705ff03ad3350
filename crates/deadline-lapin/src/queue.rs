//! Declaring a queue fit for expiring work.

use std::io;

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Queue};

/// `name` as an AMQP short string; an error naming the limit when it is longer than 255 bytes.
pub(crate) fn name(name: &str) -> Result<ShortString, lapin::Error> {
    ShortString::try_new(name).map_err(|_| {
        lapin::Error::from(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "an AMQP name is at most 255 bytes; this one is {}",
                name.len()
            ),
        ))
    })
}

/// How to declare a queue with [`declare_queue`].
#[derive(Clone, Debug, Default)]
pub struct QueueOptions {
    dead_letter_queue: Option<String>,
    idle_expiry_ms: Option<u32>,
}

impl QueueOptions {
    /// Messages rejected by the consumer (malformed expiry, handler error) are routed to
    /// `queue` through the default exchange (`x-dead-letter-exchange = ""`,
    /// `x-dead-letter-routing-key = queue`), instead of being dropped. Messages the broker
    /// drops at their TTL are dead-lettered there too: RabbitMQ dead-letters expired messages
    /// to the same place.
    pub fn dead_letter_queue(mut self, queue: impl Into<String>) -> QueueOptions {
        self.dead_letter_queue = Some(queue.into());
        self
    }

    /// The broker deletes the queue after `ms` milliseconds without consumers or use
    /// (`x-expires`): for temporary queues such as a test's or a benchmark's.
    pub fn delete_when_idle_for(mut self, ms: u32) -> QueueOptions {
        self.idle_expiry_ms = Some(ms);
        self
    }
}

/// Declares the durable queue `name` (idempotent when it exists with the same arguments):
/// with persistent messages (which the [`Producer`](crate::Producer) sends) it keeps its
/// messages across a broker restart.
pub async fn declare_queue(
    channel: &Channel,
    name: &str,
    options: QueueOptions,
) -> Result<Queue, lapin::Error> {
    let queue = self::name(name)?;
    let mut arguments = FieldTable::default();
    if let Some(dead_letter) = &options.dead_letter_queue {
        let routing = self::name(dead_letter)?;
        arguments.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(LongString::from("")),
        );
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(LongString::from(routing.as_str())),
        );
    }
    if let Some(ms) = options.idle_expiry_ms {
        arguments.insert("x-expires".into(), AMQPValue::LongUInt(ms));
    }
    channel
        .queue_declare(queue, QueueDeclareOptions::durable(), arguments)
        .await
}
