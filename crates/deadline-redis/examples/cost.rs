//! What the deadline rules cost per command, side by side with plain redis-rs on the same
//! server: N `GET`s each way, one after the other on one pooled connection, the ways alternated
//! round by round, the median round reported.
//!
//! ```text
//! cargo run --release -p deadline-redis --example cost -- [N] [URL]
//! ```
//!
//! - plain redis-rs: `redis::cmd("GET").query_async` on the deadpool-redis connection;
//! - `deadline-redis` under a deadline a minute long (the planner, a timer at the cutoff, the
//!   `query` span);
//! - `deadline-redis` outside any deadline (plain, through the wrapper).
//!
//! The ratio column divides each way's median round by plain redis-rs's.
use std::time::Duration;

use deadline::Deadline;
use deadline_http::DeadlineContext;
use deadline_redis::DeadlinePool;
use tokio::time::Instant;

const ROUNDS: usize = 7;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());

    let pool = DeadlinePool::connect(&url, 2).await?;
    let mut plain = pool.pool().get().await?;
    let mut wrapped = pool.get().await?;
    let key = format!("deadline_redis_cost_{}", std::process::id());
    redis::cmd("SET")
        .arg(&key)
        .arg("value")
        .query_async::<()>(&mut plain)
        .await?;
    let get = redis::cmd("GET").arg(&key).clone();

    let names = [
        "plain redis-rs",
        "deadline-redis, deadline",
        "deadline-redis, no deadline",
    ];
    let mut per_command: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        for (way, times) in per_command.iter_mut().enumerate() {
            let now = Instant::now();
            let context = DeadlineContext::new(
                Some(Deadline::after_duration(
                    now.into_std(),
                    Duration::from_secs(60),
                )),
                Duration::ZERO,
                now,
            );
            let start = Instant::now();
            match way {
                0 => {
                    for _ in 0..n {
                        get.query_async::<Option<String>>(&mut plain).await?;
                    }
                }
                1 => {
                    context
                        .scope(async {
                            for _ in 0..n {
                                wrapped.query::<Option<String>>(&get).await?;
                            }
                            Ok::<_, deadline_redis::Error>(())
                        })
                        .await?;
                }
                _ => {
                    for _ in 0..n {
                        wrapped.query::<Option<String>>(&get).await?;
                    }
                }
            }
            let took = Instant::now().saturating_duration_since(start);
            times.push(took.as_secs_f64() * 1e6 / n as f64);
        }
    }
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut plain)
        .await?;

    println!("{n} GETs per round, {ROUNDS} rounds, median round (µs per command):");
    let mut plain_median = None;
    for (name, mut times) in names.iter().zip(per_command) {
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let plain_median = *plain_median.get_or_insert(median);
        println!(
            "  {name:<30} {median:>7.1} µs   (min {:.1}, max {:.1})   {:.3} x plain",
            times[0],
            times[times.len() - 1],
            median / plain_median
        );
    }
    Ok(())
}
