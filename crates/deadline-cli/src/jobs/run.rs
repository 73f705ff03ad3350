//! One run of `deadline jobs`: a queue of its own, a producer on a schedule, slow consumers,
//! and a sampler of the broker's backlog, until every message is accounted for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use deadline_lapin::lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use deadline_lapin::lapin::types::FieldTable;
use deadline_lapin::lapin::{Channel, Connection, ConnectionProperties};
use deadline_lapin::{Consumer, Expiry, Handled, Producer, QueueOptions, declare_queue};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::holds::wall_now;

use super::Settings;
use super::report::{RunReport, Sample, WorkRecord, redacted};

/// How often the broker's backlog is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// A connection to the broker, or an error that says how to get one.
pub(crate) async fn connect(url: &str) -> anyhow::Result<Connection> {
    let shown = redacted(url);
    let hint = "start one with scripts/ensure-rabbitmq.sh, or give --broker";
    match tokio::time::timeout(
        Duration::from_secs(15),
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(err)) => Err(anyhow!("cannot reach RabbitMQ at {shown}: {err} ({hint})")),
        Err(_) => Err(anyhow!(
            "RabbitMQ at {shown} did not answer within 15 s ({hint})"
        )),
    }
}

/// What the workers did, shared by the consumer tasks.
#[derive(Default)]
struct Tally {
    worked: AtomicU64,
    discarded: AtomicU64,
    cut: AtomicU64,
    other: AtomicU64,
    records: Mutex<Vec<WorkRecord>>,
}

impl Tally {
    fn settled(&self) -> u64 {
        self.worked.load(Ordering::Relaxed)
            + self.discarded.load(Ordering::Relaxed)
            + self.cut.load(Ordering::Relaxed)
            + self.other.load(Ordering::Relaxed)
    }

    fn record(&self, record: WorkRecord) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }
}

/// Records one piece of work when it ends, however it ends: finished, or dropped at the
/// message's deadline.
struct Working {
    tally: Arc<Tally>,
    began: Instant,
    began_ms: f64,
    age_ms: f64,
    expired: bool,
}

impl Drop for Working {
    fn drop(&mut self) {
        let work_ms = Instant::now()
            .saturating_duration_since(self.began)
            .as_secs_f64()
            * 1e3;
        self.tally.record(WorkRecord {
            began_ms: self.began_ms,
            age_ms: self.age_ms,
            work_ms,
            expired: self.expired,
        });
    }
}

/// Runs one of the two runs, with expiry or without.
pub(crate) async fn one(
    connection: &Connection,
    settings: &Settings,
    expiry: bool,
) -> anyhow::Result<RunReport> {
    let channel = connection.create_channel().await?;
    let queue = format!(
        "deadline-jobs-{}-{}-{}",
        std::process::id(),
        if expiry { "with" } else { "without" },
        wall_now().unix_nanos()
    );
    let dropped_queue = format!("{queue}-dropped");
    // Deleted at the end; the broker deletes them after ten idle minutes if this process dies.
    let idle = 600_000;
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

    let result = drive(
        connection,
        &channel,
        settings,
        expiry,
        &queue,
        &dropped_queue,
    )
    .await;
    for name in [&queue, &dropped_queue] {
        let _ = channel
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = channel.close(200, "run done".into()).await;
    result
}

async fn ready_messages(channel: &Channel, queue: &str) -> anyhow::Result<u64> {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await?;
    Ok(u64::from(declared.message_count()))
}

async fn drive(
    connection: &Connection,
    channel: &Channel,
    settings: &Settings,
    expiry: bool,
    queue: &str,
    dropped_queue: &str,
) -> anyhow::Result<RunReport> {
    let tally = Arc::new(Tally::default());
    let (stop, stopped) = watch::channel(false);
    let start = Instant::now();

    let mut consumers = Vec::new();
    for _ in 0..settings.consumers {
        let mut consumer = Consumer::new(connection, queue, settings.prefetch).await?;
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

    let producer = Producer::new(connection).await?;
    let sampler_channel = connection.create_channel().await?;
    let samples = tokio::spawn(sample(
        sampler_channel,
        queue.to_owned(),
        start,
        stopped.clone(),
    ));

    let policy = if expiry {
        Expiry::Lifetime(settings.expiry)
    } else {
        Expiry::Never
    };
    let interval = Duration::from_secs_f64(1.0 / settings.rate);
    let total = (settings.rate * settings.seconds).round() as u64;
    let mut produced = 0u64;
    for n in 0..total {
        tokio::time::sleep_until(start + interval.mul_f64(n as f64)).await;
        producer
            .publish(queue, n.to_string().as_bytes(), policy)
            .await
            .context("publishing")?;
        produced += 1;
    }
    let produced_for_ms = Instant::now().saturating_duration_since(start);

    // Every message ends worked, discarded by a consumer, or dropped by the broker (which
    // dead-letters it to the second queue, where it is counted).
    let backlog_bound = Duration::from_secs_f64(produced as f64 / settings.capacity());
    let give_up = Instant::now() + backlog_bound + settings.expiry + Duration::from_secs(60);
    let dropped = loop {
        let dropped = ready_messages(channel, dropped_queue).await?;
        if tally.settled() + dropped >= produced {
            break dropped;
        }
        if Instant::now() >= give_up {
            let _ = stop.send(true);
            bail!(
                "after {:.0} s, {} of {produced} messages are still unaccounted for",
                Instant::now()
                    .saturating_duration_since(start)
                    .as_secs_f64(),
                produced - tally.settled() - dropped
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = Instant::now().saturating_duration_since(start);
    let _ = stop.send(true);
    for consumer in consumers {
        consumer.await.context("a consumer task")??;
    }
    let samples = samples.await.context("the sampler task")?;

    let records =
        std::mem::take(&mut *tally.records.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(RunReport::new(
        expiry,
        produced,
        tally.worked.load(Ordering::Relaxed),
        tally.discarded.load(Ordering::Relaxed),
        dropped,
        tally.cut.load(Ordering::Relaxed),
        tally.other.load(Ordering::Relaxed),
        records,
        samples,
        produced_for_ms,
        took,
    ))
}

/// One consumer: works `--work` ms per message until told to stop.
async fn consume(
    mut consumer: Consumer,
    tally: Arc<Tally>,
    mut stopped: watch::Receiver<bool>,
    settings: Settings,
    start: Instant,
) -> anyhow::Result<()> {
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
            handled = consumer.next(handler) => handled,
        };
        let counter = match handled? {
            None => break,
            Some(Handled::Worked { .. }) => &tally.worked,
            Some(Handled::Expired { .. } | Handled::NotEnoughTime { .. }) => &tally.discarded,
            Some(Handled::DeadlineExceeded { .. }) => &tally.cut,
            Some(_) => &tally.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    consumer.close().await?;
    Ok(())
}

/// Samples the broker's count of ready messages until told to stop.
async fn sample(
    channel: Channel,
    queue: String,
    start: Instant,
    mut stopped: watch::Receiver<bool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = start;
    loop {
        if let Ok(ready) = ready_messages(&channel, &queue).await {
            samples.push(Sample {
                at_ms: Instant::now()
                    .saturating_duration_since(start)
                    .as_secs_f64()
                    * 1e3,
                backlog: ready,
            });
        }
        next += SAMPLE_EVERY;
        tokio::select! {
            _ = stopped.changed() => break,
            () = tokio::time::sleep_until(next) => {}
        }
    }
    let _ = channel.close(200, "sampling done".into()).await;
    samples
}
