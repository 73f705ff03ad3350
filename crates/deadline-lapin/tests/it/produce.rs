//! Producing: the expiry header, the broker's TTL, the explicit policy.

use std::time::{Duration, SystemTime};

use deadline::Deadline;
use deadline::absolute::WallInstant;
use deadline_lapin::lapin::types::AMQPValue;
use deadline_lapin::stamp::{self, EXPIRES_AT, ExpiryStamp, PRODUCED_AT_HEADER};
use deadline_lapin::{Expiry, Producer, PublishError, QueueOptions};

use crate::support::Queues;

fn wall_now() -> WallInstant {
    #[allow(clippy::disallowed_methods)] // the test brackets the producer's wall-clock read
    let now = SystemTime::now();
    WallInstant::from_system_time(now)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The header holds the instant the publish reported, in RFC 3339 with milliseconds, and it
/// reads back through the crate's reader; the produced-at header brackets the publish.
#[tokio::test]
async fn the_expiry_is_stamped_as_an_absolute_instant_and_reads_back() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("stamp", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();

    let before = wall_now();
    let published = producer
        .publish(&queue, b"job", Expiry::Lifetime(ms(30_000)))
        .await
        .unwrap();
    let after = wall_now();

    let message = queues
        .get(&queue)
        .await
        .expect("the message is on the queue");
    let headers = message.delivery.properties.headers().as_ref();
    let raw = &headers.unwrap().inner()[EXPIRES_AT];
    let AMQPValue::LongString(text) = raw else {
        panic!("the expiry header is {raw:?}, not a long string");
    };
    let text = std::str::from_utf8(text.as_bytes()).unwrap();
    assert_eq!(text.len(), "2026-01-15T10:30:45.123Z".len(), "{text}");
    assert!(text.ends_with('Z') && text.as_bytes()[19] == b'.', "{text}");

    let at = published.expires_at.expect("an expiry");
    assert_eq!(
        stamp::read_expiry(headers),
        ExpiryStamp::At(deadline::expiry::MessageExpiry::at(at))
    );
    assert!(
        at >= before.after(ms(29_999)) && at <= after.after(ms(30_000)),
        "{at} is not 30 s after the publish ({before} .. {after})"
    );
    let produced = stamp::read_produced_at(headers).expect("a produced-at header");
    assert!(headers.unwrap().inner().contains_key(PRODUCED_AT_HEADER));
    assert!(
        // Truncated to the millisecond.
        produced > WallInstant::from_unix_nanos(before.unix_nanos() - 1_000_000)
            && produced <= after,
        "produced {produced} outside {before} .. {after}"
    );
    assert_eq!(
        message.delivery.properties.delivery_mode(),
        &Some(2),
        "persistent"
    );
    queues.delete().await;
}

/// The `expiration` property holds the message's TTL in ms, and the broker acts on it: a
/// message left on the queue past it is gone.
#[tokio::test]
async fn the_broker_ttl_is_set_and_the_broker_drops_the_message() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("ttl", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();

    let published = producer
        .publish(&queue, b"job", Expiry::Lifetime(ms(10_000)))
        .await
        .unwrap();
    assert_eq!(published.ttl, Some(ms(10_000)));
    let message = queues.get(&queue).await.expect("the message");
    assert_eq!(
        message
            .delivery
            .properties
            .expiration()
            .as_ref()
            .map(|e| e.as_str()),
        Some("10000")
    );

    producer
        .publish(&queue, b"short", Expiry::Lifetime(ms(200)))
        .await
        .unwrap();
    tokio::time::sleep(ms(800)).await;
    assert!(
        queues.get(&queue).await.is_none(),
        "the broker dropped the message at its TTL"
    );

    let none = producer
        .publish(&queue, b"forever", Expiry::Never)
        .await
        .unwrap();
    assert_eq!((none.expires_at, none.ttl), (None, None));
    let message = queues.get(&queue).await.expect("the message");
    assert_eq!(message.delivery.properties.expiration(), &None);
    assert_eq!(
        stamp::read_expiry(message.delivery.properties.headers().as_ref()),
        ExpiryStamp::Absent
    );
    queues.delete().await;
}

/// Inside a request's work, only `Expiry::OfRequest` takes the request's deadline; a lifetime
/// of its own is kept whole; outside a request, `OfRequest` is an error and nothing is sent.
#[tokio::test]
async fn the_expiry_policy_is_explicit() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("policy", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();

    let now = tokio::time::Instant::now();
    let request = Deadline::after_duration(now.into_std(), ms(800));
    let before = wall_now();
    let (of_request, own, never) = deadline_http::with_deadline(request, async {
        (
            producer
                .publish(&queue, b"a", Expiry::OfRequest)
                .await
                .unwrap(),
            producer
                .publish(&queue, b"b", Expiry::Lifetime(ms(3_600_000)))
                .await
                .unwrap(),
            producer.publish(&queue, b"c", Expiry::Never).await.unwrap(),
        )
    })
    .await;

    let of_request = of_request.expires_at.unwrap();
    assert!(
        of_request <= before.after(ms(800)) && of_request > before.after(ms(300)),
        "the request's deadline: {of_request} is not within 800 ms of {before}"
    );
    let own = own.expires_at.unwrap();
    assert!(
        own >= before.after(ms(3_599_000)),
        "a lifetime of its own is not shortened by the request: {own}, {before}"
    );
    assert_eq!(
        never.expires_at, None,
        "never is not given the request's deadline"
    );

    let outside = producer.publish(&queue, b"d", Expiry::OfRequest).await;
    assert!(
        matches!(outside, Err(PublishError::NoRequestDeadline(_))),
        "{outside:?}"
    );
    assert_eq!(
        queues.drain(&queue).await,
        3,
        "the failed publish sent nothing"
    );
    queues.delete().await;
}

/// A message already expired is not sent, and one no queue takes is an error, not a loss.
#[tokio::test]
async fn expired_and_unroutable_publishes_are_errors() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("refused", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();

    let past = wall_now().after(ms(0));
    let late = producer.publish(&queue, b"late", Expiry::At(past)).await;
    assert!(
        matches!(late, Err(PublishError::AlreadyExpired { .. })),
        "{late:?}"
    );
    assert!(queues.get(&queue).await.is_none());

    let nowhere = super::support::unique("no-such-queue");
    let lost = producer.publish(&nowhere, b"x", Expiry::Never).await;
    assert!(
        matches!(lost, Err(PublishError::Unroutable { .. })),
        "{lost:?}"
    );

    let long = "q".repeat(256);
    let bad = producer.publish(&long, b"x", Expiry::Never).await;
    assert!(
        matches!(bad, Err(PublishError::RoutingKeyTooLong { len: 256 })),
        "{bad:?}"
    );
    queues.delete().await;
}
