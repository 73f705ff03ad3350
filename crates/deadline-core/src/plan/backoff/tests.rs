use super::*;
use crate::budget::Budget;
use crate::plan::tests::{ms, origin, policies};
use proptest::prelude::*;

#[test]
fn the_ceiling_doubles_from_base_to_max() {
    let backoff = Backoff::DEFAULT;
    let ceilings: Vec<u64> = (1..=7)
        .map(|n| backoff.ceiling(n).as_millis() as u64)
        .collect();
    assert_eq!(ceilings, [0, 25, 50, 100, 200, 250, 250]);
    // Far retries neither overflow nor exceed the cap.
    assert_eq!(backoff.ceiling(40), ms(250));
    assert_eq!(backoff.ceiling(u32::MAX), ms(250));
    let wide = Backoff::new(Duration::from_secs(1), Duration::MAX).unwrap();
    assert_eq!(
        wide.ceiling(u32::MAX),
        Duration::from_secs(u64::from(u32::MAX))
    );
    assert_eq!(Backoff::NONE.ceiling(5), Duration::ZERO);
}

#[test]
fn the_draw_spans_the_whole_range() {
    let backoff = Backoff::DEFAULT;
    assert_eq!(backoff.delay(3, 0), Duration::ZERO);
    assert_eq!(backoff.delay(3, u32::MAX), ms(50));
    let half = backoff.delay(3, u32::MAX / 2);
    assert!(half > ms(24) && half <= ms(25), "{half:?}");
    assert_eq!(
        backoff.delay(1, u32::MAX),
        Duration::ZERO,
        "no delay before attempt 1"
    );
}

#[test]
fn a_cap_below_the_base_is_rejected() {
    assert_eq!(
        Backoff::new(ms(100), ms(50)),
        Err(BackoffError::MaxBelowBase {
            base: ms(100),
            max: ms(50)
        })
    );
    assert_eq!(Backoff::new(ms(25), ms(250)), Ok(Backoff::DEFAULT));
    assert_eq!(Backoff::default(), Backoff::DEFAULT);
}

fn sent(delay: u64, number: u32, wait: u64, budget: u64) -> PacedDecision {
    PacedDecision::Send(Delayed {
        delay: ms(delay),
        attempt: Attempt {
            number,
            wait: ms(wait),
            budget: Budget::from_millis(budget),
        },
    })
}

/// The orders hop of the demo with the default backoff and the largest draw: the second attempt
/// waits 25 ms and is told 865 ms instead of 890; the third would need its 50 ms delay plus
/// 100 ms with 50 ms left, so the caller neither sleeps nor sends it.
#[test]
fn the_orders_hop_with_backoff() {
    let t0 = origin();
    let deadline = Some(Deadline::after_duration(t0, ms(1_890)));
    let mut plan = Plan::new(CallPolicy::new(ms(1_000), 3).unwrap());
    let backoff = Backoff::DEFAULT;
    assert_eq!(
        plan.next_paced(&backoff, deadline, t0, u32::MAX),
        sent(0, 1, 1_000, 950)
    );
    let now = t0 + ms(950);
    assert_eq!(
        plan.next_paced(&backoff, deadline, now, u32::MAX),
        sent(25, 2, 915, 865)
    );
    let now = now + ms(25) + ms(865);
    let stop = plan.next_paced(&backoff, deadline, now, u32::MAX);
    assert_eq!(
        stop,
        PacedDecision::Stop(Stop::NotEnoughTimeAfterBackoff {
            attempt: 3,
            remaining: ms(50),
            delay: ms(50),
            needed: ms(100),
        })
    );
    assert_eq!(plan.sent(), 2);
    let PacedDecision::Stop(stop) = stop else {
        unreachable!()
    };
    assert_eq!(
        stop.to_string(),
        "attempt 3 not sent: 50 ms left, less than its 50 ms backoff plus the 100 ms an attempt needs"
    );
}

#[test]
fn a_retry_that_fits_only_without_its_delay_is_not_sent() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let deadline = Some(Deadline::after_duration(t0, ms(120)));
    // No delay drawn: 120 ms left, the callee gets 70.
    assert_eq!(
        decide_paced(&policy, &Backoff::DEFAULT, 1, deadline, t0, 0),
        sent(0, 2, 120, 70)
    );
    // The whole 25 ms drawn: 95 ms would be left, under the 100 an attempt needs.
    assert!(matches!(
        decide_paced(&policy, &Backoff::DEFAULT, 1, deadline, t0, u32::MAX),
        PacedDecision::Stop(Stop::NotEnoughTimeAfterBackoff { attempt: 2, .. })
    ));
    // Out of time with no delay at all is the plain reason.
    let spent = Some(Deadline::after_duration(t0, ms(10)));
    assert!(matches!(
        decide_paced(&policy, &Backoff::DEFAULT, 1, spent, t0, 0),
        PacedDecision::Stop(Stop::NotEnoughTime { attempt: 2, .. })
    ));
    // Attempts run out before time is considered.
    assert_eq!(
        decide_paced(&policy, &Backoff::DEFAULT, 3, deadline, t0, u32::MAX),
        PacedDecision::Stop(Stop::AttemptsExhausted { attempts: 3 })
    );
}

#[test]
fn without_a_deadline_retries_still_back_off() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(3_500), 3).unwrap();
    assert_eq!(
        decide_paced(&policy, &Backoff::DEFAULT, 2, None, t0, u32::MAX),
        PacedDecision::Send(Delayed {
            delay: ms(50),
            attempt: Attempt {
                number: 3,
                wait: ms(3_500),
                budget: None
            }
        })
    );
}

fn backoffs() -> impl Strategy<Value = Backoff> {
    (0u64..=1_000_000, 0u64..=5_000_000).prop_map(|(base_us, extra_us)| {
        let base = Duration::from_micros(base_us);
        Backoff::new(base, base + Duration::from_micros(extra_us)).expect("max >= base")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The planner's five invariants with backoff delays on a virtual clock, and the two the
    /// delay adds: a caller never sleeps past its deadline, and never sleeps and then sends an
    /// attempt the planner would skip at the moment the sleep ends.
    #[test]
    fn the_invariants_hold_with_delays(
        policy in policies(),
        backoff in backoffs(),
        deadline_us in proptest::option::weighted(0.9, 0u64..=20_000_000),
        start_us in 0u64..=1_000_000,
        shares in proptest::collection::vec(0u32..=1_000, 8),
        draws in proptest::collection::vec(any::<u32>(), 8),
    ) {
        let t0 = origin();
        let deadline = deadline_us.map(|us| Deadline::after_duration(t0, Duration::from_micros(us)));
        let mut now = t0 + Duration::from_micros(start_us);
        let mut plan = Plan::new(policy);
        let mut sent = 0u32;
        loop {
            let draw = draws[sent as usize % draws.len()];
            match plan.next_paced(&backoff, deadline, now, draw) {
                PacedDecision::Stop(stop) => {
                    if let Stop::NotEnoughTimeAfterBackoff { remaining, delay, needed, .. } = stop {
                        // Budgets truncate to whole ms, so "too little" is within a millisecond of `needed`.
                        prop_assert!(remaining < delay + policy.share().needed_for(policy.margin() + policy.min_useful() + ms(2)), "stopped only when the delay leaves too little");
                        prop_assert!(matches!(decide(&policy, sent, deadline, now + delay), Decision::Stop(_)));
                        prop_assert!(!delay.is_zero());
                        prop_assert_eq!(needed, policy.share().needed_for(policy.margin() + policy.min_useful()));
                    }
                    break;
                }
                PacedDecision::Send(Delayed { delay, attempt }) => {
                    sent += 1;
                    prop_assert!(sent <= policy.attempts(), "5: never more than `attempts`");
                    prop_assert_eq!(attempt.number, sent);
                    prop_assert!(delay <= backoff.ceiling(sent), "the delay is within its ceiling");
                    if sent == 1 {
                        prop_assert_eq!(delay, Duration::ZERO, "the first attempt is not delayed");
                    }
                    let after = now + delay;
                    prop_assert_eq!(Decision::Send(attempt), decide(&policy, sent - 1, deadline, after),
                        "what is sent after the sleep is what the planner decides then");
                    match (deadline, policy.propagate()) {
                        (Some(deadline), true) => {
                            let remaining = deadline.remaining(after);
                            let budget = attempt.budget.expect("a deadline is propagated");
                            prop_assert!(after + attempt.wait <= deadline.instant(), "3: sleep and wait end by the deadline");
                            prop_assert!(budget.as_millis() > 0, "1: never spent on arrival");
                            prop_assert!(budget.as_duration() + policy.margin() <= remaining, "2");
                            prop_assert!(budget.as_duration() + policy.margin() <= attempt.wait, "4");
                            prop_assert!(remaining >= policy.min_useful() + policy.margin(), "5");
                        }
                        _ => {
                            prop_assert_eq!(attempt.budget, None);
                            prop_assert_eq!(attempt.wait, policy.timeout());
                        }
                    }
                    let share = shares[(sent as usize - 1) % shares.len()];
                    now = after + attempt.wait.mul_f64(f64::from(share) / 1_000.0);
                }
            }
        }
        if deadline.is_none() || !policy.propagate() {
            prop_assert_eq!(sent, policy.attempts(), "the baseline runs every attempt");
        }
    }
}
