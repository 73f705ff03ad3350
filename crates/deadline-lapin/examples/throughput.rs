//! What the expiry rules cost a message, side by side with plain lapin on the same broker:
//! messages a second, publishing and consuming, the two ways alternated round by round.
//!
//! ```text
//! cargo run --release -p deadline-lapin --example throughput -- [N] [URL]
//! ```
//!
//! Each round publishes N messages (16 bytes each) to a fresh durable queue and then consumes
//! them, the plain ways on one connection and `deadline-lapin` on another:
//!
//! - plain lapin: a channel with publisher confirms, each message published persistent and
//!   `mandatory` and its confirmation awaited before the next; consumed with manual
//!   acknowledgements (prefetch 10), each message acknowledged (and the acknowledgement
//!   awaited) before the next is taken;
//! - plain lapin with the broker's per-message TTL: the same, each message carrying an
//!   `expiration` of a minute (what the crate sets), so the broker's own cost of a TTL is
//!   seen apart from the crate's;
//! - `deadline-lapin`: [`Producer::publish`] with a lifetime of a minute (the same confirms,
//!   persistence and `mandatory`, plus the two stamps and the broker TTL), consumed with
//!   [`Consumer::next`] (prefetch 10): the check before work, the handler run under the
//!   message's deadline, the acknowledgement awaited.
//!
//! Every message is read back and counted; a way that loses one fails the run. The ratio line
//! divides `deadline-lapin`'s median round by plain lapin's. Beside the rate, the client's CPU
//! time per message (every thread of this process, from `/proc/self/task/*/schedstat`; Linux
//! only): what the machine's load moves far less than the rate, and what says whether the
//! client's own work is what differs. Queues are deleted at the end of
//! each round (and by the broker after a minute unused if the run is stopped).

use std::time::Duration;

use deadline_lapin::{Consumer, Expiry, Handled, Producer, QueueOptions, declare_queue};
use futures_core::Stream;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::time::Instant;

const ROUNDS: usize = 5;
const PREFETCH: u16 = 10;
const PAYLOAD: &[u8] = b"resize photo-017";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(2_000), |a| a.parse())?;
    if n == 0 {
        return Err("N must be at least 1".into());
    }
    let url = args
        .next()
        .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let plain = Connection::connect(&url, ConnectionProperties::default()).await?;
    let wrapped = Connection::connect(&url, ConnectionProperties::default()).await?;
    let admin = plain.create_channel().await?;

    let names = ["plain lapin", "plain lapin, TTL", "deadline-lapin, expiry"];
    // Messages a second, per way: publishing, consuming; and the client's CPU µs a message.
    let mut publish: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut consume: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut publish_cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut consume_cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..ROUNDS {
        // Forwards, then backwards: a drift in the machine's load is shared out.
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for way in order {
            let queue = format!("deadline-lapin-cost-{}-{round}-{way}", std::process::id());
            declare_queue(
                &admin,
                &queue,
                QueueOptions::default().delete_when_idle_for(60_000),
            )
            .await?;
            let (Phase(sent, sent_cpu), Phase(taken, taken_cpu)) = match way {
                0 => plain_way(&plain, &queue, n, None).await?,
                1 => plain_way(&plain, &queue, n, Some(TTL_MS)).await?,
                _ => wrapped_way(&wrapped, &queue, n).await?,
            };
            admin
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await?;
            publish[way].push(n as f64 / sent.as_secs_f64());
            consume[way].push(n as f64 / taken.as_secs_f64());
            if let (Some(sent_cpu), Some(taken_cpu)) = (sent_cpu, taken_cpu) {
                publish_cpu[way].push(sent_cpu.as_secs_f64() * 1e6 / n as f64);
                consume_cpu[way].push(taken_cpu.as_secs_f64() * 1e6 / n as f64);
            }
        }
    }
    println!(
        "{n} messages of {} bytes per round, {ROUNDS} rounds, median round (messages a second):",
        PAYLOAD.len()
    );
    for (phase, figures) in [("publish", &mut publish), ("consume", &mut consume)] {
        let medians = sorted_medians(figures);
        for ((name, rounds), median) in names.iter().zip(figures.iter()).zip(&medians) {
            println!(
                "  {phase} {name:<26} {median:>9.0} /s   (min {:.0}, max {:.0})",
                rounds[0],
                rounds[rounds.len() - 1]
            );
        }
        println!(
            "  {phase}: deadline-lapin / plain lapin = {:.3}, / plain lapin with the TTL = {:.3}",
            medians[2] / medians[0],
            medians[2] / medians[1]
        );
    }
    if publish_cpu[0].is_empty() {
        println!("(no CPU times: /proc/self/task/*/schedstat could not be read)");
        return Ok(());
    }
    println!("client CPU per message, median round (µs, every thread of this process):");
    for (phase, figures) in [("publish", &mut publish_cpu), ("consume", &mut consume_cpu)] {
        let medians = sorted_medians(figures);
        for (name, median) in names.iter().zip(&medians) {
            println!("  {phase} {name:<26} {median:>9.1} µs");
        }
        println!(
            "  {phase}: deadline-lapin - plain lapin = {:+.1} µs",
            medians[2] - medians[0]
        );
    }
    Ok(())
}

/// Sorts each way's rounds and gives each way's median round.
fn sorted_medians(ways: &mut [Vec<f64>]) -> Vec<f64> {
    ways.iter_mut()
        .map(|rounds| {
            rounds.sort_by(f64::total_cmp);
            rounds[rounds.len() / 2]
        })
        .collect()
}

/// How long a phase took, and the CPU time this process spent in it (if it can be read).
struct Phase(Duration, Option<Duration>);

/// The CPU time every thread of this process has used so far: the first field of each
/// thread's `schedstat` (ns on the CPU). `None` where it cannot be read.
fn process_cpu() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended since the listing has no file: its time is lost, not an error.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// The time and CPU time from `start` (and `cpu`, read with it) to now.
fn phase_since(start: Instant, cpu: Option<Duration>) -> Phase {
    let took = Instant::now().saturating_duration_since(start);
    let used = cpu
        .zip(process_cpu())
        .map(|(before, after)| after.saturating_sub(before));
    Phase(took, used)
}

/// The lifetime `deadline-lapin` gives its messages here, as the broker TTL in ms.
const TTL_MS: u64 = 60_000;

/// Plain lapin: publishes `n` messages with confirms (each with the broker TTL `ttl_ms`, if
/// any), then consumes them with acknowledgements; how long each phase took.
async fn plain_way(
    connection: &Connection,
    queue: &str,
    n: usize,
    ttl_ms: Option<u64>,
) -> Result<(Phase, Phase), Box<dyn std::error::Error>> {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(ms) = ttl_ms {
        properties = properties.with_expiration(ShortString::from(ms.to_string()));
    }
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let (start, cpu) = (Instant::now(), process_cpu());
    for _ in 0..n {
        let confirm = channel
            .basic_publish(
                ShortString::default(),
                queue.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                PAYLOAD,
                properties.clone(),
            )
            .await?
            .await?;
        if !matches!(confirm, Confirmation::Ack(None)) {
            return Err(format!("plain lapin: a publish was not confirmed: {confirm:?}").into());
        }
    }
    let sent = phase_since(start, cpu);

    let (start, cpu) = (Instant::now(), process_cpu());
    let taken = consume_plain(&channel, queue, n).await?;
    let took = phase_since(start, cpu);
    channel.close(200, "done".into()).await?;
    if taken != n {
        return Err(format!("plain lapin: {taken} of {n} messages consumed").into());
    }
    Ok((sent, took))
}

/// Consumes `n` messages of `queue` on `channel`, acknowledging each; how many came.
async fn consume_plain(
    channel: &Channel,
    queue: &str,
    n: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let mut deliveries = channel
        .basic_consume(
            queue.into(),
            ShortString::default(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mut taken = 0;
    while taken < n {
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut deliveries).poll_next(cx));
        let Some(delivery) = tokio::time::timeout(Duration::from_secs(10), next).await? else {
            break;
        };
        let delivery = delivery?;
        if delivery.data != PAYLOAD {
            return Err("plain lapin: a message came back changed".into());
        }
        delivery.ack(BasicAckOptions::default()).await?;
        taken += 1;
    }
    Ok(taken)
}

/// `deadline-lapin`: publishes `n` messages with a minute's lifetime, then consumes them with
/// the check before work; how long each phase took.
async fn wrapped_way(
    connection: &Connection,
    queue: &str,
    n: usize,
) -> Result<(Phase, Phase), Box<dyn std::error::Error>> {
    let producer = Producer::new(connection).await?;
    let (start, cpu) = (Instant::now(), process_cpu());
    for _ in 0..n {
        producer
            .publish(
                queue,
                PAYLOAD,
                Expiry::Lifetime(Duration::from_millis(TTL_MS)),
            )
            .await?;
    }
    let sent = phase_since(start, cpu);

    let mut consumer = Consumer::new(connection, queue, PREFETCH).await?;
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut worked = 0;
    while worked < n {
        let next = consumer.next(|message| async move {
            if message.data == PAYLOAD {
                Ok(())
            } else {
                Err("a message came back changed")
            }
        });
        match tokio::time::timeout(Duration::from_secs(10), next).await?? {
            Some(Handled::Worked { .. }) => worked += 1,
            Some(other) => {
                return Err(
                    format!("deadline-lapin: a message was not worked on: {other:?}").into(),
                );
            }
            None => break,
        }
    }
    let took = phase_since(start, cpu);
    consumer.close().await?;
    if worked != n {
        return Err(format!("deadline-lapin: {worked} of {n} messages consumed").into());
    }
    Ok((sent, took))
}
