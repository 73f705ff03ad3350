//! One run of `deadline jobs`: a queue of its own, a producer on a schedule, slow consumers,
//! and a sampler of the broker's backlog, until every message is accounted for.
//!
//! Everything goes through one [`Broker`] per run, a connection re-dialled when it drops:
//! publishes wait for the broker's confirmation (and are sent again when it was lost with the
//! connection), consumers acknowledge only after the work (and subscribe again after a
//! re-dial), and the sampler and the accounting take fresh channels. So a broker restart in the
//! middle of a run loses no live message, and the run counts what it cost. Delivery is then
//! at least once, so each message is accounted for once, by its id (the payload), and any
//! further copy of it is counted as a duplicate.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use deadline_lapin::lapin::options::{
    BasicAckOptions, BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use deadline_lapin::lapin::types::FieldTable;
use deadline_lapin::lapin::{Channel, Connection, ConnectionProperties};
use deadline_lapin::{
    Broker, Consumer, Expiry, Handled, PublishError, QueueOptions, declare_queue,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::holds::wall_now;

use super::Settings;
use super::report::{RunReport, Sample};
use super::tally::{Outcome, Tally, Working};
use crate::redact::redacted;

/// How often the broker's backlog is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// How long one look at the broker by the sampler or the accounting may take (a new channel
/// included): longer, and the broker is taken to be down for now and looked at again later.
const LOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// Checks that the broker at `url` accepts a connection, or says how to get one. (A
/// [`Broker`] would keep dialling an unreachable broker for a minute before saying anything.)
pub(crate) async fn probe(url: &str) -> anyhow::Result<()> {
    let shown = redacted(url);
    let hint = "start one with scripts/ensure-rabbitmq.sh, or give --broker";
    match tokio::time::timeout(
        Duration::from_secs(15),
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(connection)) => {
            let _ = connection.close(200, "probe done".into()).await;
            Ok(())
        }
        Ok(Err(err)) => Err(anyhow!("cannot reach RabbitMQ at {shown}: {err} ({hint})")),
        Err(_) => Err(anyhow!(
            "RabbitMQ at {shown} did not answer within 15 s ({hint})"
        )),
    }
}

/// Runs one of the two runs, with expiry or without, on a broker connection of its own (so
/// its re-dials are its own).
pub(crate) async fn one(settings: &Settings, expiry: bool) -> anyhow::Result<RunReport> {
    let broker = Broker::connect(&settings.broker)
        .await
        .with_context(|| format!("cannot reach RabbitMQ at {}", redacted(&settings.broker)))?;
    let queue = format!(
        "deadline-jobs-{}-{}-{}",
        std::process::id(),
        if expiry { "with" } else { "without" },
        wall_now().unix_nanos()
    );
    let dropped_queue = format!("{queue}-dropped");
    // Deleted at the end; the broker deletes them after ten idle minutes if this process dies.
    let idle = 600_000;
    let channel = broker.new_channel().await?;
    declare_queue(
        &channel,
        &dropped_queue,
        QueueOptions::default().delete_when_idle_for(idle),
    )
    .await?;
    declare_queue(
        &channel,
        &queue,
        QueueOptions::default()
            .dead_letter_queue(&dropped_queue)
            .delete_when_idle_for(idle),
    )
    .await?;
    let _ = channel.close(200, "declared".into()).await;

    let result = drive(&broker, settings, expiry, &queue, &dropped_queue).await;
    let delete = async {
        let channel = broker.new_channel().await?;
        for name in [&queue, &dropped_queue] {
            channel
                .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await?;
        }
        channel.close(200, "run done".into()).await
    };
    // A broker that is down now keeps the queues until they have been idle ten minutes.
    let _ = tokio::time::timeout(Duration::from_secs(10), delete).await;
    result
}

/// The broker's count of ready messages on `queue`.
async fn ready_messages(
    channel: &Channel,
    queue: &str,
) -> Result<u64, deadline_lapin::lapin::Error> {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await?;
    Ok(u64::from(declared.message_count()))
}

/// Takes every message off `dropped_queue` (those the broker dropped at their TTL) and
/// accounts for each once its acknowledgement is sent (one whose acknowledgement is lost
/// comes back, and is accounted for then).
async fn drain_dropped(
    channel: &Channel,
    dropped_queue: &str,
    tally: &Tally,
) -> Result<(), deadline_lapin::lapin::Error> {
    while let Some(message) = channel
        .basic_get(dropped_queue.into(), BasicGetOptions { no_ack: false })
        .await?
    {
        message.delivery.ack(BasicAckOptions::default()).await?;
        tally.account(&message.delivery.data, Outcome::DiscardedByBroker);
    }
    Ok(())
}

/// `look` on a channel of `broker`, taken anew when `channel` is `None`; the channel is
/// dropped when the look fails or takes longer than [`LOOK_TIMEOUT`] (the broker is
/// restarting, most likely), so the next look takes a new one.
async fn look_at_broker<T, F, Fut>(
    broker: &Broker,
    channel: &mut Option<Channel>,
    look: F,
) -> Option<T>
where
    F: FnOnce(Channel) -> Fut,
    Fut: std::future::Future<Output = Result<T, deadline_lapin::lapin::Error>>,
{
    let attempt = async {
        let current = match channel.as_ref() {
            Some(current) => current.clone(),
            None => {
                let fresh = broker.new_channel().await?;
                *channel = Some(fresh.clone());
                fresh
            }
        };
        look(current).await
    };
    match tokio::time::timeout(LOOK_TIMEOUT, attempt).await {
        Ok(Ok(found)) => Some(found),
        Ok(Err(_)) | Err(_) => {
            if let Some(dead) = channel.take() {
                // Closing a channel of a dead connection can hang; its connection's end frees it.
                drop(tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(LOOK_TIMEOUT, dead.close(200, "looking again".into()))
                            .await;
                }));
            }
            None
        }
    }
}

/// The run on `queue`: consumers and the sampler started, the messages produced, every one
/// accounted for, then the report.
async fn drive(
    broker: &Broker,
    settings: &Settings,
    expiry: bool,
    queue: &str,
    dropped_queue: &str,
) -> anyhow::Result<RunReport> {
    let total = (settings.rate * settings.seconds).round() as u64;
    let tally = Arc::new(Tally::new(total));
    let (stop, stopped) = watch::channel(false);
    let start = Instant::now();

    let mut consumers = consumers(broker, settings, expiry, queue, &tally, &stopped, start).await?;
    let samples = tokio::spawn(sample(
        broker.clone(),
        queue.to_owned(),
        start,
        stopped.clone(),
    ));

    let produced = produce(broker, settings, expiry, queue, &tally, start).await;
    let produced = match produced {
        Ok(produced) => produced,
        Err(err) => {
            let _ = stop.send(true);
            return Err(err);
        }
    };
    let produced_for = Instant::now().saturating_duration_since(start);

    // Every message ends worked, discarded (by a consumer; by the broker, which dead-letters
    // it to the second queue, drained here; or by the producer, when it expired before a broker
    // confirmed it), or cut at its deadline.
    let backlog_bound = Duration::from_secs_f64(produced as f64 / settings.capacity());
    let give_up = Instant::now() + backlog_bound + settings.expiry + Duration::from_secs(60);
    settle(
        broker,
        dropped_queue,
        &tally,
        &mut consumers,
        &stop,
        produced,
        (start, give_up),
    )
    .await?;
    let took = Instant::now().saturating_duration_since(start);
    let _ = stop.send(true);
    let mut resubscribed = 0;
    for consumer in consumers {
        resubscribed += consumer.await.context("a consumer task")??;
    }
    let samples = samples.await.context("the sampler task")?;

    let mut counts = tally.counts();
    counts.reconnects = broker.reconnects();
    counts.republished = broker.republished();
    counts.resubscribed = resubscribed;
    counts.redelivered = tally.redelivered.load(Ordering::Relaxed);
    let records = tally.take_records();
    Ok(RunReport::new(
        expiry,
        produced,
        counts,
        records,
        samples,
        produced_for,
        took,
    ))
}

/// The run's `--consumers` consumers on `queue`, each on a task of its own (with expiry, each
/// begins only work that can finish before its requester gives up).
async fn consumers(
    broker: &Broker,
    settings: &Settings,
    expiry: bool,
    queue: &str,
    tally: &Arc<Tally>,
    stopped: &watch::Receiver<bool>,
    start: Instant,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<u64>>>> {
    let mut consumers = Vec::new();
    for _ in 0..settings.consumers {
        let mut consumer = Consumer::on(broker, queue, settings.prefetch).await?;
        if expiry {
            // Work that cannot finish before the requester gives up is not begun.
            consumer = consumer.min_budget(settings.work);
        }
        consumers.push(tokio::spawn(consume(
            consumer,
            tally.clone(),
            stopped.clone(),
            settings.clone(),
            start,
        )));
    }
    Ok(consumers)
}

/// Waits until every one of the `produced` messages is accounted for, draining what the
/// broker dropped to `dropped_queue` as it goes; fails (telling every task to stop) when a
/// consumer ends first or at `give_up`.
async fn settle(
    broker: &Broker,
    dropped_queue: &str,
    tally: &Arc<Tally>,
    consumers: &mut Vec<JoinHandle<anyhow::Result<u64>>>,
    stop: &watch::Sender<bool>,
    produced: u64,
    (start, give_up): (Instant, Instant),
) -> anyhow::Result<()> {
    let mut channel = None;
    loop {
        let _ = look_at_broker(broker, &mut channel, |channel| {
            let tally = tally.clone();
            async move { drain_dropped(&channel, dropped_queue, &tally).await }
        })
        .await;
        if tally.settled() >= produced {
            break;
        }
        if let Some(ended) = consumers.iter().position(JoinHandle::is_finished) {
            let _ = stop.send(true);
            let outcome = consumers
                .swap_remove(ended)
                .await
                .context("a consumer task")?;
            outcome.context("a consumer")?;
            bail!("a consumer stopped before every message was accounted for");
        }
        if Instant::now() >= give_up {
            let _ = stop.send(true);
            bail!(
                "after {:.0} s, {} of {produced} messages are still unaccounted for",
                Instant::now()
                    .saturating_duration_since(start)
                    .as_secs_f64(),
                produced - tally.settled()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(channel) = channel {
        let _ = tokio::time::timeout(LOOK_TIMEOUT, channel.close(200, "accounted".into())).await;
    }
    Ok(())
}

/// Publishes the run's messages on schedule (ids `0..`, the payload), each confirmed by the
/// broker; returns how many were produced.
async fn produce(
    broker: &Broker,
    settings: &Settings,
    expiry: bool,
    queue: &str,
    tally: &Tally,
    start: Instant,
) -> anyhow::Result<u64> {
    let policy = if expiry {
        Expiry::Lifetime(settings.expiry)
    } else {
        Expiry::Never
    };
    let total = (settings.rate * settings.seconds).round() as u64;
    for n in 0..total {
        // Within `--seconds` of the start (n < rate × seconds), however small the rate: a
        // whole interval of 1 / rate may not fit in a `Duration`.
        let due = Duration::from_secs_f64(n as f64 / settings.rate);
        tokio::time::sleep_until(start + due).await;
        let id = n.to_string();
        match broker.publish(queue, id.as_bytes(), policy).await {
            Ok(_) => {}
            // The broker was unreachable until the message's expiry passed (it is published
            // again after a re-dial with the same expiry instant): no broker confirmed it, and
            // its requester has given up. A copy the first broker kept comes as a duplicate.
            // The same when the expiry passed while the broker confirmed nothing (a resource
            // alarm blocking the connection).
            Err(PublishError::AlreadyExpired { .. } | PublishError::ExpiredUnconfirmed { .. }) => {
                tally.account(id.as_bytes(), Outcome::DiscardedByProducer);
            }
            Err(err) => return Err(err).context("publishing"),
        }
    }
    Ok(total)
}

/// One consumer: works `--work` ms per message until told to stop; says how many times it
/// subscribed again after its connection dropped.
async fn consume(
    mut consumer: Consumer,
    tally: Arc<Tally>,
    mut stopped: watch::Receiver<bool>,
    settings: Settings,
    start: Instant,
) -> anyhow::Result<u64> {
    loop {
        let work_tally = tally.clone();
        let handler = move |message: deadline_lapin::Message| async move {
            let began = Instant::now();
            let age = message
                .produced_at
                .map(|at| wall_now().nanos_since(at).max(0) as f64 / 1e6);
            let age_ms = age.unwrap_or(0.0);
            let _working = Working {
                tally: work_tally,
                began,
                began_ms: began.saturating_duration_since(start).as_secs_f64() * 1e3,
                age_ms,
                expired: age_ms >= settings.expiry.as_secs_f64() * 1e3,
            };
            tokio::time::sleep(settings.work).await;
            Ok::<(), std::convert::Infallible>(())
        };
        let handled = tokio::select! {
            _ = stopped.changed() => break,
            handled = consumer.next_delivery(handler) => handled,
        };
        let Some((handled, delivered)) = handled.context("consuming")? else {
            break;
        };
        if delivered.redelivered {
            tally.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let outcome = match handled {
            Handled::Worked { .. } => Outcome::Worked,
            Handled::Expired { .. } | Handled::NotEnoughTime { .. } => Outcome::DiscardedByConsumer,
            Handled::DeadlineExceeded { .. } => Outcome::Cut,
            _ => Outcome::Other,
        };
        tally.account(&delivered.data, outcome);
    }
    let resubscribed = consumer.resubscribed();
    // Unsettled deliveries go back to the queue when the channel closes, whichever way.
    let _ = tokio::time::timeout(LOOK_TIMEOUT, consumer.close()).await;
    Ok(resubscribed)
}

/// Samples the broker's count of ready messages until told to stop; while the broker is
/// unreachable, no sample is taken.
async fn sample(
    broker: Broker,
    queue: String,
    start: Instant,
    mut stopped: watch::Receiver<bool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut channel = None;
    let mut next = start;
    loop {
        let look = look_at_broker(&broker, &mut channel, |channel| {
            let queue = queue.clone();
            async move { ready_messages(&channel, &queue).await }
        });
        let ready = tokio::select! {
            _ = stopped.changed() => break,
            ready = look => ready,
        };
        if let Some(ready) = ready {
            samples.push(Sample {
                at_ms: Instant::now()
                    .saturating_duration_since(start)
                    .as_secs_f64()
                    * 1e3,
                backlog: ready,
            });
        }
        // After a look that took long (the broker was down), go on from now.
        next = (next + SAMPLE_EVERY).max(Instant::now());
        tokio::select! {
            _ = stopped.changed() => break,
            () = tokio::time::sleep_until(next) => {}
        }
    }
    if let Some(channel) = channel {
        let _ =
            tokio::time::timeout(LOOK_TIMEOUT, channel.close(200, "sampling done".into())).await;
    }
    samples
}
