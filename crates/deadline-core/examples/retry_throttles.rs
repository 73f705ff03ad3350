//! Where each retry throttle lands in the reference outage, on a virtual clock.
//!
//! One client (the orders hop) calls one callee (inventory) with up to 3 attempts, backing off
//! with full jitter (`[0, min(250, 25 × 2^(n−2))]` ms) between them. Users arrive at a steady
//! `rate` for 15 s; from 5 s to 10 s every attempt fails at once (a 503 after 1 ms), otherwise an
//! attempt works after 100 ms. Six ways of limiting retries see the same events:
//!
//! - **none**: every failed attempt is retried until the attempts run out;
//! - **Finagle** (the ratio cap alone, this library's rule before the bucket): retries within
//!   20 % of the requests of a sliding 10 s window plus 10 a second;
//! - **gRPC** retry throttling (`maxTokens` 10, `tokenRatio` 0.1): every failed attempt takes a
//!   token, every success gives back 0.1, retries only while more than half the tokens are left;
//! - **AWS SDK** retry quota (standard mode): 500 units, a retry costs 5 and gets them back when
//!   it works, a request that worked at once adds 1;
//! - **Envoy** retry budget: retries in flight at most 20 % of the requests in flight, and at
//!   least 3;
//! - **bucket** ([`RetryBudgetConfig::DEFAULT`]): the ratio cap (20 % plus 10 per window) and a
//!   bucket of 5 tokens that failed retries empty, retries that work refill and first attempts
//!   that work top up by half a token, with no refill by time.
//!
//! The same outage at 3,000/s, and two scenarios that show what a cheap outage must not cost: a
//! partial failure (each attempt fails with probability 1/3, 30/s for 60 s), and isolated
//! failures at 0.1 requests a second (a third of the requests fail once, for an hour).
//!
//! `cargo run -p deadline-core --example retry_throttles` prints the table (deterministic: a fixed
//! seed).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use deadline_core::plan::retry_budget::{RetryBudget, RetryBudgetConfig};

const ATTEMPTS: u32 = 3;
const FAIL_US: u64 = 1_000;
const WORK_US: u64 = 100_000;

/// Makes a throttle whose clock starts at the given instant.
type MakeThrottle = fn(Instant) -> Box<dyn Throttle>;

/// A retry throttle as the simulated client sees it.
trait Throttle {
    /// A request's first attempt goes out.
    fn request(&mut self, now: Instant);
    /// May a retry go out now?
    fn allow_retry(&mut self, now: Instant) -> bool;
    /// Attempt `number` ended: `worked`, or failed.
    fn ended(&mut self, number: u32, worked: bool);
}

struct Unlimited;

impl Throttle for Unlimited {
    fn request(&mut self, _: Instant) {}
    fn allow_retry(&mut self, _: Instant) -> bool {
        true
    }
    fn ended(&mut self, _: u32, _: bool) {}
}

/// The core's budget: the ratio cap alone (Finagle) or with the bucket.
struct Core(RetryBudget);

impl Throttle for Core {
    fn request(&mut self, now: Instant) {
        self.0.deposit(now);
    }
    fn allow_retry(&mut self, now: Instant) -> bool {
        self.0.try_withdraw(now)
    }
    fn ended(&mut self, number: u32, worked: bool) {
        match (worked, number) {
            (true, 1) => self.0.first_attempt_succeeded(),
            (true, _) => self.0.refund(),
            (false, _) => {}
        }
    }
}

/// gRPC: tokens in thousandths, 10 at most, retries while above 5.
struct Grpc {
    milli: u64,
}

impl Throttle for Grpc {
    fn request(&mut self, _: Instant) {}
    fn allow_retry(&mut self, _: Instant) -> bool {
        self.milli > 5_000
    }
    fn ended(&mut self, _: u32, worked: bool) {
        self.milli = if worked {
            (self.milli + 100).min(10_000)
        } else {
            self.milli.saturating_sub(1_000)
        };
    }
}

/// AWS SDK standard retry quota: 500, 5 a retry, refunded when it works, +1 for a first try.
struct Aws {
    units: u64,
}

impl Throttle for Aws {
    fn request(&mut self, _: Instant) {}
    fn allow_retry(&mut self, _: Instant) -> bool {
        if self.units < 5 {
            return false;
        }
        self.units -= 5;
        true
    }
    fn ended(&mut self, number: u32, worked: bool) {
        if worked {
            self.units = (self.units + if number == 1 { 1 } else { 5 }).min(500);
        }
    }
}

/// Envoy: retries in flight ≤ max(3, 20 % of attempts in flight).
#[derive(Default)]
struct Envoy {
    in_flight: u64,
    retries_in_flight: u64,
}

impl Throttle for Envoy {
    fn request(&mut self, _: Instant) {
        self.in_flight += 1;
    }
    fn allow_retry(&mut self, _: Instant) -> bool {
        let allowed = (self.in_flight / 5).max(3);
        if self.retries_in_flight >= allowed {
            return false;
        }
        self.retries_in_flight += 1;
        self.in_flight += 1;
        true
    }
    fn ended(&mut self, number: u32, _: bool) {
        self.in_flight -= 1;
        if number > 1 {
            self.retries_in_flight -= 1;
        }
    }
}

/// How attempts fail.
#[derive(Clone, Copy)]
enum Failures {
    /// Every attempt sent from 5 s to 10 s.
    Outage,
    /// Each attempt with probability 1/3.
    Third,
    /// A third of the requests fail their first attempt only.
    Isolated,
}

/// SplitMix64, for the backoff draws and the partial failures.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// User `request` arrives.
    Arrive { request: u64 },
    /// Attempt `number` of `request` goes out (after its backoff).
    Send { request: u64, number: u32 },
    /// It ended.
    End {
        request: u64,
        number: u32,
        worked: bool,
    },
}

/// What a run gave.
#[derive(Default)]
struct Figures {
    /// Requests and attempts counted (those in the outage, or all).
    requests: u64,
    calls: u64,
    /// Counted requests whose last attempt failed.
    failed: u64,
}

fn run(throttle: &mut dyn Throttle, rate: f64, seconds: f64, failures: Failures) -> Figures {
    #[allow(clippy::disallowed_methods)] // one arbitrary origin for the virtual clock
    let t0 = Instant::now();
    let mut draws = Draws(29);
    let total = (rate * seconds).round() as u64;
    let counted = |request: u64| match failures {
        Failures::Outage => (5.0..10.0).contains(&(request as f64 / rate)),
        Failures::Third | Failures::Isolated => true,
    };
    let mut queue: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |queue: &mut BinaryHeap<_>, at_us: u64, event: Event| {
        seq += 1;
        queue.push(Reverse((at_us, seq, event)));
    };
    for request in 0..total {
        let at = (request as f64 / rate * 1e6) as u64;
        push(&mut queue, at, Event::Arrive { request });
    }
    let mut figures = Figures::default();
    while let Some(Reverse((at_us, _, event))) = queue.pop() {
        let now = t0 + Duration::from_micros(at_us);
        let (request, number) = match event {
            Event::Arrive { request } => {
                throttle.request(now);
                if counted(request) {
                    figures.requests += 1;
                }
                (request, 1)
            }
            Event::Send { request, number } => (request, number),
            Event::End {
                request,
                number,
                worked,
            } => {
                throttle.ended(number, worked);
                if worked {
                    continue;
                }
                if number == ATTEMPTS || !throttle.allow_retry(now) {
                    figures.failed += u64::from(counted(request));
                    continue;
                }
                let cap_ms = (25u64 << (number - 1)).min(250);
                let backoff_us = draws.next() % (cap_ms * 1_000 + 1);
                push(
                    &mut queue,
                    at_us + backoff_us,
                    Event::Send {
                        request,
                        number: number + 1,
                    },
                );
                continue;
            }
        };
        if counted(request) {
            figures.calls += 1;
        }
        let fails = match failures {
            Failures::Outage => (5.0..10.0).contains(&(at_us as f64 / 1e6)),
            Failures::Third => draws.next() % 3 == 0,
            Failures::Isolated => number == 1 && request % 3 == 0,
        };
        let (latency, worked) = if fails {
            (FAIL_US, false)
        } else {
            (WORK_US, true)
        };
        push(
            &mut queue,
            at_us + latency,
            Event::End {
                request,
                number,
                worked,
            },
        );
    }
    figures
}

fn main() {
    #[allow(clippy::disallowed_methods)] // the budgets' origin: any instant will do
    let start = Instant::now();
    let throttles: [(&str, MakeThrottle); 6] = [
        ("none", |_| Box::new(Unlimited)),
        ("Finagle: 20 % + 10/s", |t| {
            Box::new(Core(RetryBudget::new(RetryBudgetConfig::FINAGLE, t)))
        }),
        ("gRPC: 10 tokens, 0.1", |_| Box::new(Grpc { milli: 10_000 })),
        ("AWS SDK: quota 500", |_| Box::new(Aws { units: 500 })),
        ("Envoy: 20 %, min 3", |_| Box::new(Envoy::default())),
        ("bucket 5 + 20 % + 10/window", |t| {
            Box::new(Core(RetryBudget::new(RetryBudgetConfig::DEFAULT, t)))
        }),
    ];
    println!(
        "| throttle | outage 30/s: calls per request | outage 3,000/s | a third of attempts fail, 30/s: calls per request, requests failed | isolated failures, 0.1/s: requests failed |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, make) in throttles {
        let low = run(&mut *make(start), 30.0, 15.0, Failures::Outage);
        let high = run(&mut *make(start), 3_000.0, 15.0, Failures::Outage);
        let third = run(&mut *make(start), 30.0, 60.0, Failures::Third);
        let isolated = run(&mut *make(start), 0.1, 3_600.0, Failures::Isolated);
        let per = |f: &Figures| f.calls as f64 / f.requests as f64;
        println!(
            "| {name} | {:.2} | {:.3} | {:.2}, {:.1} % | {} of {} |",
            per(&low),
            per(&high),
            per(&third),
            100.0 * third.failed as f64 / third.requests as f64,
            isolated.failed,
            isolated.requests,
        );
    }
}
