//! Micro-benchmarks of the per-request core operations: reading a budget header, formatting
//! one, and one planner decision. Run with `cargo bench -p deadline-core --bench core`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use deadline_core::header::{format_budget, parse_budget, read_budget};
use deadline_core::{Budget, CallPolicy, Deadline, plan::decide};
use http::{HeaderMap, HeaderValue};

fn main() {
    divan::main();
}

#[divan::bench]
fn parse_one_value() -> deadline_core::BudgetValue {
    parse_budget(black_box(b"1950"), Budget::DEFAULT_MAX).expect("valid")
}

#[divan::bench]
fn parse_a_list() -> deadline_core::BudgetValue {
    parse_budget(black_box(b"1950, 900 ,3000"), Budget::DEFAULT_MAX).expect("valid")
}

#[divan::bench]
fn read_from_a_header_map(bencher: divan::Bencher<'_, '_>) {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("orders"));
    headers.insert("x-request-id", HeaderValue::from_static("r-000123"));
    headers.insert(
        deadline_core::BUDGET_HEADER,
        HeaderValue::from_static("1950"),
    );
    bencher.bench(|| read_budget(black_box(&headers), Budget::DEFAULT_MAX));
}

#[divan::bench]
fn format_one_value() -> Option<HeaderValue> {
    format_budget(black_box(Duration::from_micros(1_899_734)))
}

#[divan::bench]
fn one_planner_decision(bencher: divan::Bencher<'_, '_>) {
    #[allow(clippy::disallowed_methods)] // one origin for the virtual clock
    let t0 = Instant::now();
    let policy = CallPolicy::new(Duration::from_millis(1_000), 3).expect("valid");
    let deadline = Some(Deadline::after_duration(t0, Duration::from_millis(1_890)));
    let now = t0 + Duration::from_millis(950);
    bencher.bench(|| {
        decide(
            black_box(&policy),
            black_box(1),
            black_box(deadline),
            black_box(now),
        )
    });
}
