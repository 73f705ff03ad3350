//! The broker restarting mid-run loses no live message: publishes are confirmed (and sent
//! again when the confirmation was lost with the connection), messages are persistent on a
//! durable queue, consumers settle only after work (so unsettled deliveries come back), and
//! both sides re-dial and go on. Run against a private node (see `node.rs`), never the shared
//! broker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline_http::metrics::{Registry, encode};
use deadline_lapin::lapin::options::QueueDeleteOptions;
use deadline_lapin::lapin::{BasicProperties, Connection, ConnectionProperties};
use deadline_lapin::{
    Broker, Consumer, Expiry, Handled, JobMetrics, Message, Producer, PublishError, QueueOptions,
    Reconnect, declare_queue,
};
use tokio::time::Instant;

use crate::node::Node;
use crate::support::{Queues, connect};

/// Messages produced in the run.
const MESSAGES: usize = 200;
/// The producer's pace: 50 messages a second, about 4 s of producing without the outage.
const EVERY: Duration = Duration::from_millis(20);
/// The consumer's work per message: slower than the producer, so a backlog waits in the queue
/// and in the prefetch window when the broker stops.
const WORK: Duration = Duration::from_millis(30);

/// Produces 200 messages at a steady rate while a slow consumer works them, stops the broker
/// (cleanly, as a restart does) after about 70 were published, starts it again 1.5 s later on
/// the same data, and checks that every message whose publish returned was worked on at least
/// once, and that the restart did happen under both sides (each re-dialled). Duplicates (a
/// confirmation or an acknowledgement lost with the connection) are counted and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_no_live_message() {
    restart_mid_run(Stop::Clean).await;
}

/// The same run, with the broker killed (SIGKILL: a crash, nothing flushed, no connection
/// closed) instead of stopped: a publish returns only once the broker has the message on
/// disk, so even a crash loses none whose publish returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_crash_loses_no_confirmed_message() {
    restart_mid_run(Stop::Kill).await;
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    Clean,
    Kill,
}

async fn restart_mid_run(stop: Stop) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("RUST_LOG").unwrap_or("deadline_lapin=debug,lapin=info".into()),
        ))
        .with_test_writer()
        .try_init();
    let mut node = Node::start().await;
    let url = node.url();
    let queue = "deadline-lapin-test-restart";
    {
        let setup = Connection::connect(&url, ConnectionProperties::default())
            .await
            .expect("the private node");
        let channel = setup.create_channel().await.expect("a channel");
        declare_queue(&channel, queue, QueueOptions::default())
            .await
            .expect("declare the queue");
        let _ = setup.close(200, "set up".into()).await;
    }
    let reconnect = Reconnect {
        give_up_after: Duration::from_secs(90),
        ..Reconnect::default()
    };
    let mut registry = Registry::default();
    let metrics = JobMetrics::register(&mut registry, "restart");
    metrics.touch(queue);
    let producing = Broker::connect_with(&url, reconnect)
        .await
        .expect("connect")
        .record_metrics(&metrics);
    let consuming = Broker::connect_with(&url, reconnect)
        .await
        .expect("connect")
        .record_metrics(&metrics);

    // Producer: every id whose publish returned Ok is owed at least one piece of work.
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    let producer = tokio::spawn({
        let (broker, confirmed) = (producing.clone(), confirmed.clone());
        async move {
            let mut next = Instant::now();
            for id in 0..MESSAGES {
                let payload = id.to_string();
                broker
                    .publish(
                        queue,
                        payload.as_bytes(),
                        Expiry::Lifetime(Duration::from_secs(600)),
                    )
                    .await
                    .unwrap_or_else(|err| panic!("publish {id}: {err}"));
                confirmed.lock().unwrap().insert(id);
                next += EVERY;
                tokio::time::sleep_until(next).await;
            }
        }
    });

    // Consumer: counts each id's work, until every message has been worked on.
    let worked: Arc<Mutex<BTreeMap<usize, u32>>> = Arc::default();
    let mut consumer = Consumer::on(&consuming, queue, 10)
        .await
        .expect("subscribe");
    let redelivered = Arc::new(AtomicUsize::new(0));
    let consumer = tokio::spawn({
        let (worked, redelivered) = (worked.clone(), redelivered.clone());
        async move {
            while worked.lock().unwrap().len() < MESSAGES {
                let (worked, redelivered) = (worked.clone(), redelivered.clone());
                let handled = consumer
                    .next(|message| async move {
                        let id: usize = String::from_utf8_lossy(&message.data).parse().unwrap();
                        tokio::time::sleep(WORK).await;
                        *worked.lock().unwrap().entry(id).or_default() += 1;
                        if message.redelivered {
                            redelivered.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok::<(), std::convert::Infallible>(())
                    })
                    .await
                    .expect("the consumer goes on across the restart");
                match handled {
                    Some(Handled::Worked { .. }) => {}
                    Some(other) => panic!("a live message was not worked on: {other:?}"),
                    None => panic!("the consumption ended"),
                }
            }
            let resubscribed = consumer.resubscribed();
            let _ = consumer.close().await;
            resubscribed
        }
    });

    // The restart, mid-run: once about 70 publishes were confirmed (about 1.4 s in), waited
    // for (up to 30 s) rather than assumed from the producer's pace.
    let waiting = Instant::now();
    while confirmed.lock().unwrap().len() < 70 {
        assert!(
            Instant::now().saturating_duration_since(waiting) < Duration::from_secs(30),
            "not 70 publishes confirmed within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = confirmed.lock().unwrap().len();
    let worked_before = worked.lock().unwrap().len();
    let stopping = Instant::now();
    match stop {
        Stop::Clean => node.stop().await,
        Stop::Kill => node.kill().await,
    }
    let stopped_in = Instant::now().saturating_duration_since(stopping);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let starting = Instant::now();
    node.start_again().await;
    let started_in = Instant::now().saturating_duration_since(starting);

    let run = async {
        producer.await.expect("the producer");
        consumer.await.expect("the consumer")
    };
    let resubscribed = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| {
            let worked = worked.lock().unwrap();
            let missing: Vec<_> = (0..MESSAGES)
                .filter(|id| !worked.contains_key(id))
                .collect();
            panic!(
                "not every message was worked on within 120 s of the restart: {} missing: \
                 {missing:?}; {} confirmed; producer: {} reconnect(s); consumer: {} \
                 reconnect(s)",
                missing.len(),
                confirmed.lock().unwrap().len(),
                producing.reconnects(),
                consuming.reconnects(),
            )
        });

    let confirmed = confirmed.lock().unwrap().clone();
    let worked = worked.lock().unwrap().clone();
    let lost: Vec<_> = confirmed
        .iter()
        .filter(|id| !worked.contains_key(id))
        .collect();
    let works: u32 = worked.values().sum();
    let duplicates = works as usize - worked.len();
    eprintln!(
        "restart run ({stop:?}): {MESSAGES} produced, {} confirmed ({before} before the stop), {} worked \
         ({worked_before} before the stop), {duplicates} worked twice or more, {} lost; broker \
         stopped in {stopped_in:?}, down 1.5 s, up again in {started_in:?}; producer: {} \
         reconnect(s), {} publish(es) sent again; consumer: {} reconnect(s), {resubscribed} \
         resubscription(s), {} redelivered message(s) worked",
        confirmed.len(),
        worked.len(),
        lost.len(),
        producing.reconnects(),
        producing.republished(),
        consuming.reconnects(),
        redelivered.load(Ordering::Relaxed),
    );
    assert_eq!(confirmed.len(), MESSAGES, "every publish returned Ok");
    assert!(lost.is_empty(), "messages lost in the restart: {lost:?}");
    assert!(
        before > 0 && before < MESSAGES && worked_before < MESSAGES,
        "the broker stopped mid-run ({before} confirmed, {worked_before} worked before)"
    );
    assert!(
        producing.reconnects() >= 1 && consuming.reconnects() >= 1 && resubscribed >= 1,
        "both sides lived through the restart"
    );

    // The run reports it in its metrics too.
    let text = encode(&registry).unwrap();
    let series = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert_eq!(
        series(r#"deadline_broker_reconnects_total{service="restart"}"#),
        producing.reconnects() + consuming.reconnects()
    );
    assert_eq!(
        series(&format!(
            r#"deadline_messages_republished_total{{service="restart",queue="{queue}"}}"#
        )),
        producing.republished()
    );
    assert_eq!(
        series(&format!(
            r#"deadline_messages_produced_total{{service="restart",queue="{queue}"}}"#
        )),
        MESSAGES as u64,
        "each message counted produced once, however often it was sent"
    );

    let cleanup = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("the private node");
    let channel = cleanup.create_channel().await.expect("a channel");
    let _ = channel
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
    let _ = cleanup.close(200, "test done".into()).await;
    drop(node);
}

/// A consumer whose connection dies mid-work (its process crashing) leaves every message it
/// had not settled on the queue: the one it was working on and those waiting in its prefetch
/// window come to the next consumer, flagged redelivered. Manual acknowledgements are what
/// this needs: with automatic ones the broker forgets a message once it is sent. (A broker
/// restart alone does not show it: deliveries already sent wait in the client's buffer.)
#[tokio::test]
async fn a_consumer_dying_mid_work_loses_nothing() {
    let mut queues = Queues::new().await;
    let queue = queues
        .declare("consumer-dies", QueueOptions::default())
        .await;
    let producer = Producer::new(&queues.connection).await.unwrap();
    for id in 0..20_u32 {
        producer
            .publish(
                &queue,
                id.to_string().as_bytes(),
                Expiry::Lifetime(Duration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    let worked: Arc<Mutex<BTreeMap<u32, bool>>> = Arc::default();
    let record = |message: Message| {
        let id = String::from_utf8_lossy(&message.data).parse().unwrap();
        worked.lock().unwrap().insert(id, message.redelivered);
        async { Ok::<(), std::convert::Infallible>(()) }
    };

    let doomed = connect().await;
    let mut consumer = Consumer::new(&doomed, &queue, 10).await.unwrap();
    for _ in 0..3 {
        let handled = tokio::time::timeout(Duration::from_secs(10), consumer.next(record))
            .await
            .expect("a delivery");
        assert!(matches!(handled, Ok(Some(Handled::Worked { .. }))));
    }
    // The fourth message's work never ends: the consumer dies in the middle of it, with the
    // rest of its prefetch window unsettled.
    let stuck = consumer.next(|_| std::future::pending::<Result<(), std::convert::Infallible>>());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stuck)
            .await
            .is_err()
    );
    drop(consumer);
    let _ = doomed.close(320, "the consumer dies".into()).await;

    let mut next = Consumer::new(&queues.connection, &queue, 10).await.unwrap();
    while worked.lock().unwrap().len() < 20 {
        let handled = tokio::time::timeout(Duration::from_secs(10), next.next(record))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "messages lost with the consumer: worked only {:?}",
                    worked.lock().unwrap().keys().collect::<Vec<_>>()
                )
            });
        assert!(matches!(handled, Ok(Some(Handled::Worked { .. }))));
    }
    let redelivered = worked.lock().unwrap().values().filter(|r| **r).count();
    assert!(
        redelivered >= 10,
        "the stuck message and the prefetch window came back redelivered ({redelivered})"
    );
    let _ = next.close().await;
    assert_eq!(queues.drain(&queue).await, 0, "every message settled once");
    queues.delete().await;
}

/// An error that closes only the publishing channel (here the broker refuses a `user-id` that
/// is not the connection's user) is returned at once, not mistaken for a dropped connection and
/// retried until the give-up time; the next publish gets a fresh channel and succeeds.
#[tokio::test]
async fn a_channel_error_is_returned_not_retried() {
    let mut queues = Queues::new().await;
    let queue = queues
        .declare("channel-error", QueueOptions::default())
        .await;
    let broker = Broker::connect(&crate::support::broker_url())
        .await
        .expect("connect");
    let started = Instant::now();
    let refused = broker
        .publish_with(
            &queue,
            b"impostor",
            Expiry::Never,
            BasicProperties::default().with_user_id("not-the-connections-user".into()),
        )
        .await;
    assert!(
        matches!(refused, Err(PublishError::Broker(_))),
        "{refused:?}"
    );
    assert!(
        Instant::now().saturating_duration_since(started) < Duration::from_secs(5),
        "returned at once, not retried"
    );
    assert_eq!((broker.reconnects(), broker.republished()), (0, 0));
    broker
        .publish(&queue, b"honest", Expiry::Never)
        .await
        .expect("the next publish, on a fresh channel");
    assert_eq!(queues.drain(&queue).await, 1);
    queues.delete().await;
}
