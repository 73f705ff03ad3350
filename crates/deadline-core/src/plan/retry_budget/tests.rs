use super::*;
use crate::plan::tests::{ms, origin};
use proptest::prelude::*;

#[test]
fn with_no_requests_only_the_reserve_can_be_drawn() {
    let t0 = origin();
    let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
    assert_eq!(budget.available(t0), 100, "10 a second over 10 s");
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
    let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
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
    let config = RetryBudgetConfig::new(Duration::from_secs(10), 200, 0);
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
    let mut budget = RetryBudget::new(RetryBudgetConfig::new(Duration::ZERO, 0, 0), t0);
    assert_eq!(
        budget.config().window(),
        ms(10),
        "the window is at least 10 ms"
    );
    budget.deposit(t0);
    assert!(!budget.try_withdraw(t0));
    assert_eq!(RetryBudgetConfig::default(), RetryBudgetConfig::DEFAULT);
    assert_eq!(RetryBudgetConfig::DEFAULT.ratio_per_mille(), 200);
    assert_eq!(RetryBudgetConfig::DEFAULT.min_per_second(), 10);
}

/// 100 requests a second to a callee that is down, each wanting two retries: after the first
/// window, calls per request settle at 1 + 0.2 + 10/100.
#[test]
fn an_outage_settles_at_a_fifth_of_requests_plus_the_reserve() {
    let t0 = origin();
    let mut budget = RetryBudget::new(RetryBudgetConfig::DEFAULT, t0);
    let (mut requests, mut calls) = (0u64, 0u64);
    for i in 0..3_000u64 {
        let now = t0 + ms(i * 10);
        budget.deposit(now);
        let retries = (0..2).filter(|_| budget.try_withdraw(now)).count() as u64;
        if i >= 1_000 {
            requests += 1;
            calls += 1 + retries;
        }
    }
    let per_request = calls as f64 / requests as f64;
    assert!(
        (1.25..=1.31).contains(&per_request),
        "calls per request {per_request}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against a log of every event: in each window of ten slots the granted retries stay within
    /// the allowance, and a retry is refused only when its window had used the allowance up.
    #[test]
    fn retries_stay_within_the_window_allowance(
        ratio in 0u32..=1_000,
        min_per_second in 0u32..=20,
        events in proptest::collection::vec((0u64..=300, any::<bool>()), 1..400),
    ) {
        let t0 = origin();
        let config = RetryBudgetConfig::new(Duration::from_secs(1), ratio, min_per_second);
        let mut budget = RetryBudget::new(config, t0);
        let slot_ms = 100u64;
        // (slot, is_retry) of every counted event
        let mut log: Vec<(u64, bool)> = Vec::new();
        let mut now_ms = 0u64;
        for (gap, is_retry) in events {
            now_ms += gap;
            let now = t0 + ms(now_ms);
            let slot = now_ms / slot_ms;
            let in_window = |log: &[(u64, bool)], retry: bool| {
                log.iter().filter(|&&(s, r)| r == retry && s + 10 > slot && s <= slot).count() as u128
            };
            if is_retry {
                let requests = in_window(&log, false);
                let retries = in_window(&log, true);
                let allowance_milli = requests * u128::from(ratio) + u128::from(min_per_second) * 1_000;
                let granted = budget.try_withdraw(now);
                prop_assert_eq!(granted, (retries + 1) * 1_000 <= allowance_milli);
                if granted {
                    log.push((slot, true));
                }
            } else {
                budget.deposit(now);
                log.push((slot, false));
            }
        }
    }
}
