//! A connection to the test broker and queues of a test's own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadline_lapin::lapin::options::{BasicGetOptions, ConfirmSelectOptions, QueueDeleteOptions};
use deadline_lapin::lapin::types::{AMQPValue, FieldTable, LongString};
use deadline_lapin::lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties, message::BasicGetMessage,
    options::BasicPublishOptions,
};
use deadline_lapin::{QueueOptions, declare_queue};

/// The broker the tests use.
pub(crate) fn broker_url() -> String {
    std::env::var("DEADLINE_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A connection to the test broker, or a failure that says how to get one.
pub(crate) async fn connect() -> Connection {
    let url = broker_url();
    let attempt = tokio::time::timeout(
        Duration::from_secs(15),
        Connection::connect(&url, ConnectionProperties::default()),
    )
    .await;
    match attempt {
        Ok(Ok(connection)) => connection,
        Ok(Err(err)) => panic!(
            "cannot reach RabbitMQ at {url}: {err}. These tests need a real broker: start one \
             with scripts/ensure-rabbitmq.sh, or point DEADLINE_TEST_AMQP at one"
        ),
        Err(_) => panic!(
            "RabbitMQ at {url} did not answer within 15 s. These tests need a real broker: start \
             one with scripts/ensure-rabbitmq.sh, or point DEADLINE_TEST_AMQP at one"
        ),
    }
}

/// A queue name no other test (or run) uses.
pub(crate) fn unique(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "deadline-lapin-test-{test}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A test's queues on one connection; `delete` removes them.
pub(crate) struct Queues {
    pub(crate) connection: Connection,
    pub(crate) channel: Channel,
    names: Vec<String>,
}

impl Queues {
    pub(crate) async fn new() -> Queues {
        let connection = connect().await;
        let channel = connection.create_channel().await.expect("a channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        Queues {
            connection,
            channel,
            names: Vec::new(),
        }
    }

    /// Declares a fresh queue for `test`, deleted by the broker after a minute unused if the
    /// test never gets to `delete`.
    pub(crate) async fn declare(&mut self, test: &str, options: QueueOptions) -> String {
        let name = unique(test);
        declare_queue(&self.channel, &name, options.delete_when_idle_for(60_000))
            .await
            .expect("declare a queue");
        self.names.push(name.clone());
        name
    }

    /// Takes one message from `queue` without a consumer (acknowledged at once).
    pub(crate) async fn get(&self, queue: &str) -> Option<BasicGetMessage> {
        self.channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
    }

    /// How many messages `queue` holds, counted by taking them.
    pub(crate) async fn drain(&self, queue: &str) -> usize {
        let mut n = 0;
        while self.get(queue).await.is_some() {
            n += 1;
        }
        n
    }

    /// Publishes as a producer outside this crate would: its own headers, no confirms awaited
    /// beyond the channel's.
    pub(crate) async fn publish_raw(&self, queue: &str, payload: &[u8], headers: FieldTable) {
        self.channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                payload,
                BasicProperties::default().with_headers(headers),
            )
            .await
            .expect("publish")
            .await
            .expect("the broker confirms");
    }

    pub(crate) async fn delete(self) {
        for name in &self.names {
            self.channel
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await
                .expect("delete the test's queue");
        }
        let _ = self.connection.close(200, "test done".into()).await;
    }
}

/// A headers table with one string header.
pub(crate) fn header(name: &str, value: &str) -> FieldTable {
    let mut headers = FieldTable::default();
    headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
    headers
}
