//! Consuming: expired messages discarded unworked, the handler's deadline, malformed headers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use deadline::absolute::{SkewGuard, WallInstant};
use deadline_http::metrics::{DeadlineMetrics, Registry, encode};
use deadline_lapin::lapin::types::{AMQPValue, FieldTable};
use deadline_lapin::stamp::EXPIRES_AT;
use deadline_lapin::{Consumer, Expiry, Handled, JobMetrics, Producer, QueueOptions};

use crate::support::{Queues, header};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn wall_now() -> WallInstant {
    #[allow(clippy::disallowed_methods)] // stamping a header as a foreign producer would
    let now = SystemTime::now();
    WallInstant::from_system_time(now)
}

/// The next delivery, handled by a handler that records the payloads it worked on and sleeps
/// as long as a payload starting with `slow` asks (`slow:MS`).
async fn next(consumer: &mut Consumer, worked: &Arc<Mutex<Vec<String>>>) -> Handled {
    let worked = worked.clone();
    let handled = tokio::time::timeout(
        Duration::from_secs(30),
        consumer.next(move |message| async move {
            let text = String::from_utf8_lossy(&message.data).into_owned();
            worked.lock().unwrap().push(text.clone());
            if let Some(sleep) = text.strip_prefix("slow:") {
                tokio::time::sleep(ms(sleep.parse().unwrap())).await;
            }
            if text == "fail" {
                return Err("the handler failed");
            }
            Ok(())
        }),
    )
    .await
    .expect("a delivery within 30 s");
    handled
        .expect("the broker connection")
        .expect("the consumption goes on")
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Messages that expire while waiting in the consumer's prefetch window (out of the broker's
/// reach, so its TTL cannot drop them) are discarded before any work, acknowledged (never
/// redelivered) and counted; the live ones around them are worked on.
#[tokio::test]
async fn expired_messages_are_discarded_unworked() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("expired", QueueOptions::default()).await;
    let mut registry = Registry::default();
    let _http = DeadlineMetrics::register(&mut registry).service("worker");
    let metrics = JobMetrics::register(&mut registry, "worker");
    let producer = Producer::new(&queues.connection)
        .await
        .unwrap()
        .record_metrics(&metrics);

    // The first message holds the only worker for 4 s; three others expire after 2 s meanwhile.
    producer
        .publish(&queue, b"slow:4000", Expiry::Never)
        .await
        .unwrap();
    for n in 0..3 {
        let payload = format!("short-{n}");
        producer
            .publish(&queue, payload.as_bytes(), Expiry::Lifetime(ms(2_000)))
            .await
            .unwrap();
    }
    producer
        .publish(&queue, b"live", Expiry::Lifetime(ms(60_000)))
        .await
        .unwrap();
    let mut consumer = Consumer::new(&queues.connection, &queue, 10)
        .await
        .unwrap()
        .record_metrics(&metrics);

    let worked = Arc::new(Mutex::new(Vec::new()));
    assert!(matches!(
        next(&mut consumer, &worked).await,
        Handled::Worked { budget: None, .. }
    ));
    for _ in 0..3 {
        let handled = next(&mut consumer, &worked).await;
        let Handled::Expired { by, age } = handled else {
            panic!("an expired message was {handled:?}");
        };
        assert!(by > ms(0) && age.unwrap() >= ms(3_900), "{by:?} {age:?}");
    }
    let live = next(&mut consumer, &worked).await;
    assert!(
        matches!(
            live,
            Handled::Worked {
                budget: Some(_),
                ..
            }
        ),
        "{live:?}"
    );
    assert_eq!(*worked.lock().unwrap(), ["slow:4000", "live"]);

    consumer.close().await.unwrap();
    assert_eq!(
        queues.drain(&queue).await,
        0,
        "every message was acknowledged"
    );
    let text = encode(&registry).unwrap();
    let series = |outcome: &str| {
        format!(
            "deadline_messages_consumed_total{{service=\"worker\",queue=\"{queue}\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(metric(&text, &series("expired")), 3.0);
    assert_eq!(metric(&text, &series("ok")), 2.0);
    assert_eq!(
        metric(
            &text,
            &format!("deadline_messages_produced_total{{service=\"worker\",queue=\"{queue}\"}}")
        ),
        5.0
    );
    assert_eq!(
        metric(
            &text,
            &format!("deadline_message_age_seconds_count{{service=\"worker\",queue=\"{queue}\"}}")
        ),
        5.0
    );
    assert!(
        text.contains("deadline_requests_total"),
        "the HTTP set is still there"
    );
    queues.delete().await;
}

/// A producer that stamps only the header (no broker TTL) is caught by the consumer, through
/// its skew guard: to a consumer assuming 5 s of clock skew, a message 3 s from its expiry is
/// already expired, and one 30 s from it has 25 s left.
#[tokio::test]
async fn header_only_expiry_is_checked_through_the_skew_guard() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("skew", QueueOptions::default()).await;
    let soon = wall_now().after(ms(3_000)).to_rfc3339_millis().unwrap();
    queues
        .publish_raw(&queue, b"soon", header(EXPIRES_AT, &soon))
        .await;
    let later = wall_now().after(ms(30_000)).to_rfc3339_millis().unwrap();
    queues
        .publish_raw(&queue, b"later", header(EXPIRES_AT, &later))
        .await;

    let mut consumer = Consumer::new(&queues.connection, &queue, 1)
        .await
        .unwrap()
        .skew_guard(SkewGuard::new(ms(5_000), ms(60_000)));
    let worked = Arc::new(Mutex::new(Vec::new()));
    let first = next(&mut consumer, &worked).await;
    assert!(matches!(first, Handled::Expired { .. }), "{first:?}");
    let second = next(&mut consumer, &worked).await;
    let Handled::Worked {
        budget: Some(budget),
        ..
    } = second
    else {
        panic!("the live message was {second:?}");
    };
    assert!(
        budget.as_millis() <= 25_000 && budget.as_millis() > 15_000,
        "the assumed skew is kept back: {budget}"
    );
    assert_eq!(*worked.lock().unwrap(), ["later"]);
    consumer.close().await.unwrap();
    queues.delete().await;
}

/// The handler runs with the message's deadline as the current deadline (what outbound calls
/// and queries read); a message without expiry runs with none; a handler still working at the
/// deadline is stopped and its message acknowledged.
#[tokio::test]
async fn the_handler_runs_with_the_messages_deadline() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("handler", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();
    producer
        .publish(&queue, b"timed", Expiry::Lifetime(ms(5_000)))
        .await
        .unwrap();
    producer
        .publish(&queue, b"untimed", Expiry::Never)
        .await
        .unwrap();
    producer
        .publish(&queue, b"overrun", Expiry::Lifetime(ms(1_500)))
        .await
        .unwrap();
    let mut consumer = Consumer::new(&queues.connection, &queue, 1).await.unwrap();

    let seen = Arc::new(Mutex::new(Vec::new()));
    for _ in 0..2 {
        let seen = seen.clone();
        let handled = consumer
            .next(move |message| async move {
                let current = deadline_http::current_deadline();
                let remaining =
                    deadline_http::DeadlineContext::current().and_then(|c| c.remaining());
                assert_eq!(current, message.deadline);
                seen.lock().unwrap().push((message.data, remaining));
                Ok::<(), String>(())
            })
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(handled, Handled::Worked { .. }), "{handled:?}");
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen[0].0, b"timed");
    let remaining = seen[0]
        .1
        .expect("the timed message's handler has a deadline");
    // 5 s less the 50 ms skew allowance, less the few ms between the publish and the
    // handler: about 4,950 ms; at least half that.
    assert!(
        remaining <= ms(4_950) && remaining >= ms(2_475),
        "5 s less the skew and the wait: {remaining:?}"
    );
    assert_eq!(
        seen[1],
        (b"untimed".to_vec(), None),
        "no expiry, no deadline"
    );

    let started = tokio::time::Instant::now();
    let overrun = consumer
        .next(|_message| async {
            tokio::time::sleep(ms(20_000)).await;
            Ok::<(), String>(())
        })
        .await
        .unwrap()
        .unwrap();
    let took = tokio::time::Instant::now().saturating_duration_since(started);
    assert!(
        matches!(overrun, Handled::DeadlineExceeded { .. }),
        "{overrun:?}"
    );
    // The message expires 1.5 s after it was published, before this consumer started on it:
    // its handler is cut within that, not after its 20 s of work.
    assert!(
        took <= ms(1_500 + 200),
        "stopped at the deadline, not after the work: {took:?}"
    );
    consumer.close().await.unwrap();
    assert_eq!(
        queues.drain(&queue).await,
        0,
        "the overrun message was acknowledged"
    );
    queues.delete().await;
}

/// A malformed expiry header is never worked on and never panics: the message is rejected
/// without requeue, so it lands in the dead-letter queue, and counted. A handler error goes the
/// same way. A good message after them is worked on.
#[tokio::test]
async fn a_malformed_expiry_is_dead_lettered_and_never_worked() {
    let mut queues = Queues::new().await;
    let dead = queues
        .declare("dead-letters", QueueOptions::default())
        .await;
    let queue = queues
        .declare(
            "malformed",
            QueueOptions::default().dead_letter_queue(&dead),
        )
        .await;
    let mut registry = Registry::default();
    let metrics = JobMetrics::register(&mut registry, "worker");

    queues
        .publish_raw(&queue, b"text", header(EXPIRES_AT, "tomorrow"))
        .await;
    let mut number = FieldTable::default();
    number.insert(EXPIRES_AT.into(), AMQPValue::LongLongInt(1_768_473_045));
    queues.publish_raw(&queue, b"number", number).await;
    queues
        .publish_raw(
            &queue,
            b"bytes",
            header(EXPIRES_AT, "2026-13-45T99:99:99.000Z\u{7f}"),
        )
        .await;
    queues
        .publish_raw(&queue, b"fail", FieldTable::default())
        .await;
    queues
        .publish_raw(&queue, b"good", FieldTable::default())
        .await;

    let mut consumer = Consumer::new(&queues.connection, &queue, 10)
        .await
        .unwrap()
        .record_metrics(&metrics);
    let worked = Arc::new(Mutex::new(Vec::new()));
    for shown in ["\"tomorrow\"", "LongLongInt", "\\x7f"] {
        let handled = next(&mut consumer, &worked).await;
        let Handled::Malformed { error, .. } = &handled else {
            panic!("a malformed header was {handled:?}");
        };
        assert!(error.to_string().contains(shown), "{error}");
    }
    assert!(matches!(
        next(&mut consumer, &worked).await,
        Handled::Failed { .. }
    ));
    assert!(matches!(
        next(&mut consumer, &worked).await,
        Handled::Worked { .. }
    ));
    assert_eq!(
        *worked.lock().unwrap(),
        ["fail", "good"],
        "malformed messages never run"
    );
    consumer.close().await.unwrap();

    assert_eq!(queues.drain(&queue).await, 0, "nothing is redelivered");
    // Dead-lettering is asynchronous in the broker: give it a moment.
    let mut dead_letters = 0;
    for _ in 0..50 {
        dead_letters += queues.drain(&dead).await;
        if dead_letters >= 4 {
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    assert_eq!(
        dead_letters, 4,
        "three malformed and one failed message dead-lettered"
    );
    let text = encode(&registry).unwrap();
    let series = |outcome: &str| {
        format!(
            "deadline_messages_consumed_total{{service=\"worker\",queue=\"{queue}\",outcome=\"{outcome}\"}}"
        )
    };
    assert_eq!(metric(&text, &series("malformed")), 3.0);
    assert_eq!(metric(&text, &series("error")), 1.0);
    assert_eq!(metric(&text, &series("ok")), 1.0);
    assert_eq!(metric(&text, &series("expired")), 0.0);
    queues.delete().await;
}

/// A consumer that needs 5 s of work does not begin on a message with 2 s left: it is
/// discarded (and acknowledged) as an expired one is, and the next one, with a minute left, is
/// worked on.
#[tokio::test]
async fn work_that_cannot_finish_in_time_is_not_begun() {
    let mut queues = Queues::new().await;
    let queue = queues.declare("min-budget", QueueOptions::default()).await;
    let producer = Producer::new(&queues.connection).await.unwrap();
    producer
        .publish(&queue, b"short", Expiry::Lifetime(ms(2_000)))
        .await
        .unwrap();
    producer
        .publish(&queue, b"long", Expiry::Lifetime(ms(60_000)))
        .await
        .unwrap();
    let mut consumer = Consumer::new(&queues.connection, &queue, 10)
        .await
        .unwrap()
        .min_budget(ms(5_000));
    let worked = Arc::new(Mutex::new(Vec::new()));
    let first = next(&mut consumer, &worked).await;
    let Handled::NotEnoughTime { left, .. } = first else {
        panic!("a message with 2 s left for 5 s of work was {first:?}");
    };
    assert!(left.as_millis() <= 1_950, "{left}");
    let second = next(&mut consumer, &worked).await;
    assert!(matches!(second, Handled::Worked { .. }), "{second:?}");
    assert_eq!(*worked.lock().unwrap(), ["long"]);
    consumer.close().await.unwrap();
    assert_eq!(
        queues.drain(&queue).await,
        0,
        "the short message was acknowledged"
    );
    queues.delete().await;
}
