use super::*;
use crate::plan::tests::{ms, origin};
use proptest::prelude::*;

/// The ratio cap alone over 10 s: `ratio_per_mille` and `min_per_window`.
fn ratio_only(ratio_per_mille: u32, min_per_window: u32) -> RetryBudgetConfig {
    RetryBudgetConfig::ratio_cap(Duration::from_secs(10), ratio_per_mille, min_per_window)
}

/// What one simulated call did.
#[derive(Clone, Copy, Debug, Default)]
struct Calls {
    requests: u64,
    calls: u64,
    /// Requests whose first attempt failed and that were never retried.
    failed_unretried: u64,
}

impl Calls {
    fn per_request(&self) -> f64 {
        self.calls as f64 / self.requests as f64
    }
}

/// `rate` requests a second for `seconds`, each with up to `attempts` attempts one after the
/// other at its arrival instant; `fails(request, attempt)` says whether that attempt fails. The
/// budget sees every event as the HTTP client reports it. Counts the requests (and their calls)
/// arriving in `counted` (seconds from the start).
fn simulate(
    config: RetryBudgetConfig,
    rate: f64,
    seconds: f64,
    attempts: u32,
    counted: std::ops::Range<f64>,
    mut fails: impl FnMut(u64, u32) -> bool,
) -> Calls {
    let t0 = origin();
    let mut budget = RetryBudget::new(config, t0);
    let mut out = Calls::default();
    let total = (rate * seconds).round() as u64;
    for i in 0..total {
        let at = i as f64 / rate;
        let now = t0 + Duration::from_secs_f64(at);
        budget.deposit(now);
        let mut calls = 1;
        let mut attempt = 1;
        let mut failed = fails(i, attempt);
        if !failed {
            budget.first_attempt_succeeded();
        }
        while failed && attempt < attempts {
            if !budget.try_withdraw(now) {
                break;
            }
            attempt += 1;
            calls += 1;
            failed = fails(i, attempt);
            if !failed {
                budget.refund();
            }
        }
        if counted.contains(&at) {
            out.requests += 1;
            out.calls += calls;
            out.failed_unretried += u64::from(calls == 1 && fails(i, 1));
        }
    }
    out
}

#[test]
fn with_no_requests_only_the_window_constant_can_be_drawn() {
    let t0 = origin();
    let mut budget = RetryBudget::new(ratio_only(200, 100), t0);
    assert_eq!(budget.available(t0), 100, "100 per window");
    for _ in 0..100 {
        assert!(budget.try_withdraw(t0));
    }
    assert!(
        !budget.try_withdraw(t0),
        "the 101st retry in the window is refused"
    );
    assert_eq!(budget.available(t0), 0);
}

#[test]
fn requests_add_a_fifth_of_a_retry_each() {
    let t0 = origin();
    let mut budget = RetryBudget::new(ratio_only(200, 100), t0);
    for _ in 0..1_000 {
        budget.deposit(t0);
    }
    assert_eq!(budget.available(t0), 300);
    let granted = (0..1_000).filter(|_| budget.try_withdraw(t0)).count();
    assert_eq!(granted, 300);
    // Four more requests make up one more retry.
    for _ in 0..4 {
        budget.deposit(t0);
    }
    assert!(!budget.try_withdraw(t0), "0.8 of a retry is not one");
    budget.deposit(t0);
    assert!(budget.try_withdraw(t0));
}

#[test]
fn the_window_slides_a_tenth_at_a_time() {
    let t0 = origin();
    let config = ratio_only(200, 0);
    let mut budget = RetryBudget::new(config, t0);
    for _ in 0..50 {
        budget.deposit(t0);
    }
    assert_eq!(budget.available(t0), 10);
    assert_eq!(budget.available(t0 + ms(9_999)), 10, "still in the window");
    assert_eq!(budget.available(t0 + ms(10_000)), 0, "its slot has left");
    // Retries drawn leave the window with their slot too.
    let mut budget = RetryBudget::new(config, t0);
    for _ in 0..50 {
        budget.deposit(t0);
    }
    let t1 = t0 + ms(5_000);
    for _ in 0..10 {
        assert!(budget.try_withdraw(t1));
    }
    assert!(!budget.try_withdraw(t1));
    for _ in 0..50 {
        budget.deposit(t0 + ms(10_500));
    }
    // At 10.5 s the first slot's deposits are gone but the retries at 5 s still count.
    assert_eq!(budget.available(t0 + ms(10_500)), 0);
    assert_eq!(budget.available(t0 + ms(15_000)), 10);
}

#[test]
fn a_zero_budget_refuses_every_retry() {
    let t0 = origin();
    let mut budget = RetryBudget::new(RetryBudgetConfig::ratio_cap(Duration::ZERO, 0, 0), t0);
    assert_eq!(
        budget.config().window(),
        ms(10),
        "the window is at least 10 ms"
    );
    budget.deposit(t0);
    assert!(!budget.try_withdraw(t0));
    // An empty bucket refuses too, whatever the window allows.
    let config = ratio_only(1_000, 100).bucket(Some(RetryBucket::new(0, 500)));
    let mut budget = RetryBudget::new(config, t0);
    budget.first_attempt_succeeded();
    budget.refund();
    assert!(!budget.try_withdraw(t0), "a bucket of 0 tokens stays empty");
    assert_eq!(RetryBudgetConfig::default(), RetryBudgetConfig::DEFAULT);
    assert_eq!(RetryBucket::default(), RetryBucket::DEFAULT);
    assert_eq!(RetryBudgetConfig::DEFAULT.ratio_per_mille(), 200);
    assert_eq!(RetryBudgetConfig::DEFAULT.min_per_window(), 10);
    assert_eq!(
        RetryBudgetConfig::DEFAULT.retry_bucket(),
        Some(RetryBucket::new(5, 500))
    );
    assert_eq!(RetryBudgetConfig::FINAGLE.min_per_window(), 100);
    assert_eq!(RetryBudgetConfig::FINAGLE.retry_bucket(), None);
}

#[test]
fn failed_retries_empty_the_bucket_and_successes_fill_it() {
    let t0 = origin();
    let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
    assert_eq!(budget.tokens_milli(), 5_000, "starts full");
    for _ in 0..100 {
        budget.deposit(t0);
    }
    for _ in 0..5 {
        assert!(budget.try_withdraw(t0));
    }
    assert!(!budget.try_withdraw(t0), "five failed retries empty it");
    assert_eq!(budget.available(t0), 0);
    budget.first_attempt_succeeded();
    assert!(!budget.try_withdraw(t0), "half a token is not one");
    budget.first_attempt_succeeded();
    assert!(budget.try_withdraw(t0), "two successes make a token");
    budget.refund();
    assert_eq!(
        budget.tokens_milli(),
        1_000,
        "a retry that worked costs nothing"
    );
    for _ in 0..20 {
        budget.first_attempt_succeeded();
    }
    assert_eq!(budget.tokens_milli(), 5_000, "never above its size");
    // Ten seconds of nothing add nothing.
    assert_eq!(budget.available(t0 + ms(60_000)), 5);
}

/// 100 requests a second to a callee that is down, each wanting two retries, with the ratio cap
/// alone (Finagle's defaults): after the first window, calls per request settle at 1 + 0.2 +
/// 10/100.
#[test]
fn an_outage_under_the_ratio_cap_alone_settles_at_a_fifth_plus_the_reserve() {
    let calls = simulate(
        RetryBudgetConfig::FINAGLE,
        100.0,
        30.0,
        3,
        10.0..30.0,
        |_, _| true,
    );
    let per_request = calls.per_request();
    assert!(
        (1.25..=1.31).contains(&per_request),
        "calls per request {per_request}"
    );
}

/// The reference outage (down from 5 s to 10 s of a 15 s load, 3 attempts) at 30 and 3,000
/// requests a second: with the bucket, the calls per request during the outage are 1 + 5 /
/// requests; the ratio cap alone gives 2.07 and 1.41.
#[test]
fn a_full_outage_costs_one_call_per_request_plus_the_bucket() {
    for (rate, finagle_at_least) in [(30.0, 2.0), (3_000.0, 1.4)] {
        let down = |i: u64, _| {
            let at = i as f64 / rate;
            (5.0..10.0).contains(&at)
        };
        let new = simulate(RetryBudgetConfig::DEFAULT, rate, 15.0, 3, 5.0..10.0, down);
        let floor = 1.0 + 5.0 / new.requests as f64;
        assert!(
            (new.per_request() - floor).abs() < 1e-9,
            "{rate}/s: {} calls per request, floor {floor}",
            new.per_request()
        );
        let old = simulate(RetryBudgetConfig::FINAGLE, rate, 15.0, 3, 5.0..10.0, down);
        assert!(
            old.per_request() >= finagle_at_least,
            "{rate}/s: the ratio cap alone gives {}",
            old.per_request()
        );
        // Successes fill the bucket again: from half a second after the outage (15 requests at
        // 30/s), a failure that a retry fixes is retried again.
        let after = simulate(
            RetryBudgetConfig::DEFAULT,
            rate,
            15.0,
            3,
            10.5..15.0,
            |i, n| down(i, n) || (i as f64 / rate >= 10.0 && i % 7 == 0 && n == 1),
        );
        assert_eq!(after.failed_unretried, 0, "{rate}/s: {after:?}");
    }
}

/// One request every ten seconds (0.1 a second), a third of them failing once and then working:
/// every failure is retried, for an hour.
#[test]
fn isolated_failures_are_retried_at_a_tenth_of_a_request_a_second() {
    let calls = simulate(
        RetryBudgetConfig::DEFAULT,
        0.1,
        3_600.0,
        3,
        0.0..3_600.0,
        |i, n| i % 3 == 0 && n == 1,
    );
    assert_eq!(calls.requests, 360);
    assert_eq!(calls.failed_unretried, 0, "{calls:?}");
    assert_eq!(calls.calls, 360 + 120);
}

/// A callee that fails every third attempt, at 100 requests a second: the bucket stays full (two
/// retries in three work), and the ratio cap is what bounds the retries, at a fifth of the
/// requests plus the constant.
#[test]
fn a_partial_failure_of_a_third_is_capped_by_the_ratio() {
    let t0 = origin();
    let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
    let (mut requests, mut retries, mut refused_with_tokens) = (0u64, 0u64, 0u64);
    let mut attempt_count = 0u64;
    let mut fails = || {
        attempt_count += 1;
        attempt_count % 3 == 0
    };
    for i in 0..6_000u64 {
        let now = t0 + ms(i * 10);
        budget.deposit(now);
        let mut failed = fails();
        if !failed {
            budget.first_attempt_succeeded();
        }
        let mut attempt = 1;
        while failed && attempt < 3 {
            if !budget.try_withdraw(now) {
                refused_with_tokens += u64::from(budget.tokens_milli() >= 1_000);
                break;
            }
            attempt += 1;
            failed = fails();
            if !failed {
                budget.refund();
            }
            if i >= 1_000 {
                retries += 1;
            }
        }
        if i >= 1_000 {
            requests += 1;
        }
    }
    let share = retries as f64 / requests as f64;
    assert!(
        (0.19..=0.22).contains(&share),
        "retries per request {share}"
    );
    assert!(refused_with_tokens > 0, "the ratio refused, not the bucket");
    // Without the cap, a third of the requests would have been retried at least once.
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against a log of every event and a model bucket: a retry is granted exactly when its
    /// window is under the allowance and the bucket holds a token, and the bucket moves as the
    /// rule says (never above its size, never below empty).
    #[test]
    fn retries_stay_within_the_window_allowance_and_the_bucket(
        ratio in 0u32..=1_000,
        min_per_window in 0u32..=20,
        bucket in proptest::option::of((0u32..=8, 0u32..=1_500)),
        events in proptest::collection::vec((0u64..=300, 0u8..4), 1..400),
    ) {
        let t0 = origin();
        let bucket = bucket.map(|(tokens, top_up)| RetryBucket::new(tokens, top_up));
        let config = RetryBudgetConfig::ratio_cap(Duration::from_secs(1), ratio, min_per_window)
            .bucket(bucket);
        let mut budget = RetryBudget::new(config, t0);
        let slot_ms = 100u64;
        let capacity = bucket.map_or(0, |b| u64::from(b.tokens()) * 1_000);
        let mut tokens = capacity;
        // (slot, is_retry) of every counted event
        let mut log: Vec<(u64, bool)> = Vec::new();
        let mut now_ms = 0u64;
        for (gap, kind) in events {
            now_ms += gap;
            let now = t0 + ms(now_ms);
            let slot = now_ms / slot_ms;
            let in_window = |log: &[(u64, bool)], retry: bool| {
                log.iter().filter(|&&(s, r)| r == retry && s + 10 > slot && s <= slot).count() as u128
            };
            match kind {
                0 => {
                    budget.deposit(now);
                    log.push((slot, false));
                }
                1 => {
                    let requests = in_window(&log, false);
                    let retries = in_window(&log, true);
                    let allowance_milli = requests * u128::from(ratio) + u128::from(min_per_window) * 1_000;
                    let has_token = bucket.is_none() || tokens >= 1_000;
                    let granted = budget.try_withdraw(now);
                    prop_assert_eq!(granted, (retries + 1) * 1_000 <= allowance_milli && has_token);
                    if granted {
                        log.push((slot, true));
                        if bucket.is_some() {
                            tokens -= 1_000;
                        }
                    }
                }
                2 => {
                    budget.first_attempt_succeeded();
                    tokens = (tokens + bucket.map_or(0, |b| u64::from(b.top_up_per_mille()))).min(capacity);
                }
                _ => {
                    budget.refund();
                    tokens = (tokens + 1_000).min(capacity);
                }
            }
            prop_assert_eq!(budget.tokens_milli(), tokens);
            prop_assert!(budget.tokens_milli() <= capacity);
        }
    }

    /// Whatever happened before, once every attempt fails (a full outage: no success, so no
    /// token comes back) at most the bucket's size of retries is granted, whatever the rate and
    /// however long it lasts: the calls per request tend to 1 + tokens / requests.
    #[test]
    fn in_a_full_outage_at_most_the_bucket_is_retried(
        before in proptest::collection::vec((0u64..=2_000, 0u8..4), 0..200),
        outage in proptest::collection::vec((0u64..=2_000, 0u32..=3), 1..400),
    ) {
        let t0 = origin();
        let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
        let mut now_ms = 0u64;
        for (gap, kind) in before {
            now_ms += gap;
            let now = t0 + ms(now_ms);
            match kind {
                0 => budget.deposit(now),
                1 => { budget.try_withdraw(now); }
                2 => budget.first_attempt_succeeded(),
                _ => budget.refund(),
            }
        }
        let (mut requests, mut calls) = (0u64, 0u64);
        for (gap, retries_wanted) in outage {
            now_ms += gap;
            let now = t0 + ms(now_ms);
            budget.deposit(now);
            requests += 1;
            calls += 1 + (0..retries_wanted).take_while(|_| budget.try_withdraw(now)).count() as u64;
        }
        prop_assert!(calls <= requests + 5, "{} calls for {} requests", calls, requests);
    }

    /// Failures that a retry then fixes, at any rate down to one request a minute and up to
    /// 10 failures in any 10 s: every one is retried.
    #[test]
    fn isolated_failures_are_always_retried(
        events in proptest::collection::vec((0u64..=60_000, any::<bool>()), 1..300),
    ) {
        let t0 = origin();
        let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
        let mut now_ms = 0u64;
        let mut failures: Vec<u64> = Vec::new();
        for (gap, fails) in events {
            now_ms += gap;
            let now = t0 + ms(now_ms);
            budget.deposit(now);
            // At most 10 failures in any 10 s: a busier failing stretch is not isolated.
            let recent = failures.iter().filter(|&&t| t + 11_000 > now_ms).count();
            if fails && recent < 10 {
                failures.push(now_ms);
                prop_assert!(budget.try_withdraw(now), "failure at {} ms not retried", now_ms);
                budget.refund();
            } else {
                budget.first_attempt_succeeded();
            }
        }
    }
}
