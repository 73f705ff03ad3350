//! A broker that blocks publishing (a memory alarm) while its connections stay up: a publish
//! ends at its message's expiry, or at the broker's give-up time, with one warning. Run against
//! a private node (see `node.rs`), never the shared broker.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline_lapin::lapin::{Connection, ConnectionProperties};
use deadline_lapin::{
    Broker, Expiry, Producer, PublishError, QueueOptions, Reconnect, declare_queue,
};
use tokio::time::Instant;
use tracing_subscriber::util::SubscriberInitExt;

use crate::node::Node;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The crate's log lines, kept for the test to read.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    fn warnings_with(&self, words: &str) -> usize {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains("WARN") && line.contains(words))
            .count()
    }
}

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Regression: during a broker memory alarm a publish waited the whole alarm (77 s in the
/// attack, past its message's 1 s expiry and past `give_up_after`), with no log line. Now a
/// publish whose message expires in 1 s returns `ExpiredUnconfirmed` at its expiry, a
/// [`Broker`] publish without expiry returns `GaveUp` at its give-up time, each producer logs
/// the block once, publishing works again once the alarm clears, and a second alarm is logged
/// once more.
#[tokio::test]
async fn a_publish_during_a_memory_alarm_ends_at_its_expiry_with_one_log_line() {
    let lines = Lines::default();
    let writer = lines.clone();
    let _log = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("deadline_lapin=debug"))
        .finish()
        .set_default();
    let node = Node::start().await;
    let connection = Connection::connect(&node.url(), ConnectionProperties::default())
        .await
        .expect("the private node accepts a connection");
    let channel = connection.create_channel().await.unwrap();
    let queue = declare_queue(&channel, "alarm", QueueOptions::default())
        .await
        .expect("a queue");
    let queue = queue.name().as_str().to_owned();
    let producer = Producer::new(&connection).await.unwrap();
    producer
        .publish(&queue, b"before", Expiry::Lifetime(ms(5_000)))
        .await
        .expect("a publish before the alarm");
    let broker = Broker::connect_with(
        &node.url(),
        Reconnect {
            give_up_after: ms(2_000),
            ..Reconnect::default()
        },
    )
    .await
    .expect("the broker connects");
    broker
        .publish(&queue, b"before", Expiry::Never)
        .await
        .expect("a broker publish before the alarm");

    node.memory_alarm(true);
    let started = Instant::now();
    let expired = producer
        .publish(&queue, b"during", Expiry::Lifetime(ms(1_000)))
        .await;
    let took = Instant::now().saturating_duration_since(started);
    let broker_started = Instant::now();
    let gave_up = broker.publish(&queue, b"during", Expiry::Never).await;
    let broker_took = Instant::now().saturating_duration_since(broker_started);
    node.memory_alarm(false);

    assert!(
        matches!(
            expired,
            Err(PublishError::ExpiredUnconfirmed { blocked: true, .. })
        ),
        "{expired:?}"
    );
    assert!(
        took >= ms(950) && took < ms(1_600),
        "returned after {took:?}"
    );
    assert!(
        matches!(gave_up, Err(PublishError::GaveUp { blocked: true, .. })),
        "{gave_up:?}"
    );
    assert!(
        broker_took >= ms(1_950) && broker_took < ms(3_000),
        "the broker's publish returned after {broker_took:?}"
    );
    // One line per producer (the plain one and the broker's own), not one per look.
    assert_eq!(lines.warnings_with("blocked publishing"), 2);

    // The alarm cleared: publishing goes on on the same connections.
    producer
        .publish(&queue, b"after", Expiry::Lifetime(ms(5_000)))
        .await
        .expect("a publish after the alarm");
    broker
        .publish(&queue, b"after", Expiry::Never)
        .await
        .expect("a broker publish after the alarm");

    // A second alarm is a new spell: the producer says so again, once.
    node.memory_alarm(true);
    let again = producer
        .publish(&queue, b"again", Expiry::Lifetime(ms(600)))
        .await;
    node.memory_alarm(false);
    assert!(
        matches!(again, Err(PublishError::ExpiredUnconfirmed { .. })),
        "{again:?}"
    );
    assert_eq!(lines.warnings_with("blocked publishing"), 3);
}
