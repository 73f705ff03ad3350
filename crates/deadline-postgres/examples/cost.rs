//! What the deadline rules cost per statement, side by side with plain tokio-postgres on the
//! same server: N statements each way, the ways alternated round by round, the median round
//! reported.
//!
//! ```text
//! cargo run --release -p deadline-postgres --example cost -- [N] [URL]
//! ```
//!
//! Four ways, each `SELECT 1` on one connection, one statement after the other:
//! - plain tokio-postgres, `&str` (a prepare and an execute: two round trips);
//! - plain tokio-postgres, a prepared `Statement` (one round trip);
//! - `deadline-postgres` under a deadline, `&str` (a prepare, then SET + statement + RESET in one
//!   write: two round trips);
//! - `deadline-postgres` under a deadline, a prepared `Statement` (one round trip);
//! - `deadline-postgres` outside any deadline, `&str` (plain, through the wrapper).

use std::time::Duration;

use deadline::Deadline;
use deadline_http::DeadlineContext;
use deadline_postgres::DeadlinePool;
use tokio::time::Instant;
use tokio_postgres::NoTls;

const ROUNDS: usize = 7;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(2_000), |a| a.parse())?;
    let url = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());

    let (plain, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    let pool = DeadlinePool::connect(&url, 1).await?;
    let wrapped = pool.get().await?;
    let plain_statement = plain.prepare("SELECT 1").await?;
    let wrapped_statement = wrapped.client().prepare("SELECT 1").await?;

    let names = [
        "plain tokio-postgres, &str",
        "plain tokio-postgres, Statement",
        "deadline-postgres, deadline, &str",
        "deadline-postgres, deadline, Statement",
        "deadline-postgres, no deadline, &str",
    ];
    let mut per_statement: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        for (way, times) in per_statement.iter_mut().enumerate() {
            // One request context per round, with a minute to go.
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
                        plain.query("SELECT 1", &[]).await?;
                    }
                }
                1 => {
                    for _ in 0..n {
                        plain.query(&plain_statement, &[]).await?;
                    }
                }
                2 => {
                    context
                        .clone()
                        .scope(async {
                            for _ in 0..n {
                                wrapped.query("SELECT 1", &[]).await?;
                            }
                            Ok::<_, deadline_postgres::Error>(())
                        })
                        .await?;
                }
                3 => {
                    context
                        .clone()
                        .scope(async {
                            for _ in 0..n {
                                wrapped.query(&wrapped_statement, &[]).await?;
                            }
                            Ok::<_, deadline_postgres::Error>(())
                        })
                        .await?;
                }
                _ => {
                    for _ in 0..n {
                        wrapped.query("SELECT 1", &[]).await?;
                    }
                }
            }
            let took = Instant::now().saturating_duration_since(start);
            times.push(took.as_secs_f64() * 1e6 / n as f64);
            drop(context.take_spans());
        }
    }
    println!("{n} statements per round, {ROUNDS} rounds, median round (µs per statement):");
    for (name, mut times) in names.iter().zip(per_statement) {
        times.sort_by(f64::total_cmp);
        println!(
            "  {name:<40} {:>8.1} µs   (min {:.1}, max {:.1})",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
    Ok(())
}
