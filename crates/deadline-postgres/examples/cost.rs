//! What the deadline rules cost per statement, side by side with plain tokio-postgres on the
//! same server: N statements each way, the ways alternated round by round, the median round
//! reported.
//!
//! ```text
//! cargo run --release -p deadline-postgres --example cost -- [N] [URL]
//! ```
//!
//! First, one statement after the other, all under one deadline a minute long, each `SELECT 1`
//! on one connection:
//! - plain tokio-postgres, `&str` (a prepare and an execute: two round trips);
//! - plain tokio-postgres, a prepared `Statement` (one round trip);
//! - `deadline-postgres` under a deadline, `&str` (a prepare, then the statement: two round
//!   trips; the connection's limit set once and reused);
//! - `deadline-postgres` under a deadline, a prepared `Statement` (one round trip);
//! - `deadline-postgres` outside any deadline, `&str` (plain, through the wrapper).
//!
//! Then as a service sees them: requests of 10 statements (a prepared `SELECT 1`), each request
//! under a deadline of its own, its budget drawn around 1 s with a spread of 0, ±2 %, ±10 % or
//! ±50 % (the same draws for every way):
//! - plain tokio-postgres (no limit at all);
//! - a `SET statement_timeout`, the statement and a `RESET` pipelined for every statement, on
//!   plain tokio-postgres: what `deadline-postgres` sent before it kept the limit on the
//!   connection;
//! - `deadline-postgres` under the request's deadline, for each spread.
//!
//! The ratio line divides each way's median round by plain tokio-postgres's.
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

    requests(&plain, &plain_statement, &wrapped, &wrapped_statement, n).await?;
    Ok(())
}

/// Statements in one request.
const PER_REQUEST: usize = 10;
/// The budgets' middle, in ms.
const BUDGET_MS: u64 = 1_000;
/// The budget spreads, in percent either side of [`BUDGET_MS`].
const SPREADS: [u64; 4] = [0, 2, 10, 50];

/// Requests of [`PER_REQUEST`] prepared statements, each under its own deadline, every way
/// alternated round by round.
async fn requests(
    plain: &tokio_postgres::Client,
    plain_statement: &tokio_postgres::Statement,
    wrapped: &deadline_postgres::Connection,
    wrapped_statement: &tokio_postgres::Statement,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let count = (n / PER_REQUEST).max(1);
    let mut names = vec![
        "plain tokio-postgres".to_owned(),
        "SET + statement + RESET, every statement".to_owned(),
    ];
    names.extend(
        SPREADS
            .iter()
            .map(|spread| format!("deadline-postgres, budgets ±{spread} %")),
    );
    let mut per_statement: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        for (way, times) in per_statement.iter_mut().enumerate() {
            let mut draws = Draws::new();
            let start = Instant::now();
            for _ in 0..count {
                match way {
                    0 => {
                        for _ in 0..PER_REQUEST {
                            plain.query(plain_statement, &[]).await?;
                        }
                    }
                    1 => {
                        let budget = draws.budget(0);
                        for _ in 0..PER_REQUEST {
                            // The limit the crate used to send: what is left less the margin.
                            let set = format!("SET statement_timeout = {}", budget - 50);
                            let (set, result, reset) = tokio::join!(
                                biased;
                                plain.batch_execute(&set),
                                plain.query(plain_statement, &[]),
                                plain.batch_execute("RESET statement_timeout"),
                            );
                            set?;
                            result?;
                            reset?;
                        }
                    }
                    _ => {
                        let budget = draws.budget(SPREADS[way - 2]);
                        let now = Instant::now();
                        let deadline =
                            Deadline::after_duration(now.into_std(), Duration::from_millis(budget));
                        DeadlineContext::new(Some(deadline), Duration::ZERO, now)
                            .scope(async {
                                for _ in 0..PER_REQUEST {
                                    wrapped.query(wrapped_statement, &[]).await?;
                                }
                                Ok::<_, deadline_postgres::Error>(())
                            })
                            .await?;
                    }
                }
            }
            let took = Instant::now().saturating_duration_since(start);
            times.push(took.as_secs_f64() * 1e6 / (count * PER_REQUEST) as f64);
        }
    }
    println!(
        "{count} requests of {PER_REQUEST} prepared statements per round, budgets around \
         {BUDGET_MS} ms, {ROUNDS} rounds, median round (µs per statement):"
    );
    let medians: Vec<f64> = per_statement
        .iter_mut()
        .map(|times| {
            times.sort_by(f64::total_cmp);
            times[times.len() / 2]
        })
        .collect();
    for ((name, times), median) in names.iter().zip(&per_statement).zip(&medians) {
        println!(
            "  {name:<40} {median:>8.1} µs   (min {:.1}, max {:.1})   {:.3} x plain",
            times[0],
            times[times.len() - 1],
            median / medians[0]
        );
    }
    Ok(())
}

/// Budgets drawn the same way for every way: a fixed linear congruential sequence, so each way
/// sees the same budgets in the same order.
struct Draws(u64);

impl Draws {
    fn new() -> Draws {
        Draws(0x2545_f491_4f6c_dd1d)
    }

    /// A budget in ms, uniform within `spread` percent either side of [`BUDGET_MS`].
    fn budget(&mut self, spread: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let width = BUDGET_MS * spread / 100;
        let offset = if width == 0 {
            0
        } else {
            (self.0 >> 33) % (2 * width + 1)
        };
        BUDGET_MS - width + offset
    }
}
