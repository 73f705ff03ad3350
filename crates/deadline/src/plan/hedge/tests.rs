use super::*;
use crate::budget::Budget;
use crate::plan::tests::{ms, origin, policies};
use crate::plan::{Attempt, Plan, Stop};
use proptest::prelude::*;

#[test]
fn percentiles_need_samples_and_follow_them() {
    let mut l = Latencies::new();
    let p95 = HedgeDelay::Percentile { per_mille: 950 };
    for i in 0..19 {
        l.record(ms(i));
    }
    assert_eq!(p95.resolve(&mut l.clone()), None);
    assert_eq!(l.percentile(950), None, "19 samples are too few");
    l.record(ms(19));
    // 0..=19 ms: the 95th percentile by nearest rank is the 19th value, 18 ms.
    assert_eq!(l.percentile(950), Some(ms(18)));
    assert_eq!(l.percentile(1_000), Some(ms(19)));
    assert_eq!(HedgeDelay::Fixed(ms(7)).resolve(&mut l), Some(ms(7)));
    // The ring forgets the oldest: after 512 samples of 100 ms, every percentile is 100 ms.
    for _ in 0..Latencies::CAPACITY {
        l.record(ms(100));
    }
    assert_eq!(l.percentile(10), Some(ms(100)));
}

/// A hedge of the orders hop: 1,890 ms left, the first attempt told 950. A hedge 200 ms later
/// still gets its whole 1 s timeout (told 950); 1,200 ms in, what is left less the margin (640);
/// with 90 ms left, none.
#[test]
fn a_hedge_is_planned_as_of_its_instant() {
    let t0 = origin();
    let deadline = Some(Deadline::after_duration(t0, ms(1_890)));
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let Decision::Send(hedge) = decide_hedge(&policy, 1, deadline, t0 + ms(200)) else {
        panic!("a hedge fits");
    };
    assert_eq!((hedge.number, hedge.wait), (2, ms(1_000)));
    assert_eq!(hedge.budget.unwrap().as_millis(), 950);
    let Decision::Send(late) = decide_hedge(&policy, 1, deadline, t0 + ms(1_200)) else {
        panic!("a hedge fits");
    };
    assert_eq!(late.budget.unwrap().as_millis(), 640);
    assert!(matches!(
        decide_hedge(&policy, 1, deadline, t0 + ms(1_800)),
        Decision::Stop(_)
    ));
}

/// The hedging rule written out on its own, in whole microseconds from the call's start: what
/// the hedge sent at `at_us`, with `sent` attempts already out, must be, and whether it draws
/// one retry from the retry budget (`tokens` left). Shares only [`Share::of`] with the code
/// under test (the share rule has its own tests).
///
/// [`Share::of`]: crate::plan::Share::of
fn model_hedge(
    policy: &CallPolicy,
    sent: u32,
    deadline_us: Option<u64>,
    at_us: u64,
    tokens: u32,
) -> (Decision, bool) {
    let number = sent + 1;
    if sent >= policy.attempts() {
        let stop = Stop::AttemptsExhausted {
            attempts: policy.attempts(),
        };
        return (Decision::Stop(stop), false);
    }
    let (wait, budget) = match deadline_us.filter(|_| policy.propagate()) {
        None => (policy.timeout(), None),
        Some(deadline_us) => {
            let remaining = Duration::from_micros(deadline_us.saturating_sub(at_us));
            let wait = policy.timeout().min(policy.share().of(remaining));
            let room_us = wait.saturating_sub(policy.margin()).as_micros();
            let budget_ms = u64::try_from(room_us / 1_000).unwrap();
            if budget_ms == 0 || Duration::from_millis(budget_ms) < policy.min_useful() {
                // Not enough time: the budget is not asked.
                let needed = policy
                    .share()
                    .needed_for(policy.margin() + policy.min_useful());
                let stop = Stop::NotEnoughTime {
                    attempt: number,
                    remaining,
                    needed,
                };
                return (Decision::Stop(stop), false);
            }
            (wait, Budget::from_millis(budget_ms))
        }
    };
    if tokens == 0 {
        // The planner would send it; the retry budget refuses.
        return (Decision::Stop(Stop::Throttled { attempt: number }), true);
    }
    let attempt = Attempt {
        number,
        wait,
        budget,
    };
    (Decision::Send(attempt), true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Hedged calls on a virtual clock, the hedges at the instants the client's hedged loop uses
    /// (the first attempt at 0, then one every `delay` while every attempt out is still
    /// unanswered, until one is not sent), each decided by [`Plan::next_hedge`] with a retry
    /// budget of `tokens` retries, and compared with [`model_hedge`]: sent or not and why, its
    /// number, its wait and its budget exactly, and a retry drawn only for a hedge the planner
    /// would send. Then, from the figures alone: no hedge past the caller's deadline, never
    /// more than `attempts`, never more hedges than the retry budget held.
    #[test]
    fn hedges_follow_the_hedging_rule(
        policy in policies(),
        delay_us in 1u64..=2_000_000,
        deadline_us in proptest::option::weighted(0.9, 0u64..=20_000_000),
        latencies_us in proptest::collection::vec(0u64..=30_000_000, 8),
        tokens in 0u32..=4,
    ) {
        let t0 = origin();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let deadline = deadline_us.map(|us| Deadline::after_duration(t0, Duration::from_micros(us)));
        let mut plan = Plan::new(policy);
        let Decision::Send(first) = plan.next(deadline, t0) else {
            // No first attempt: nothing to hedge.
            return Ok(());
        };
        // When each attempt out answers (or its wait ends), in µs from the start.
        let mut ends_us = vec![latencies_us[0].min(micros(first.wait))];
        let (mut left, mut drawn, mut hedges) = (tokens, 0u32, 0u32);
        for k in 1u64.. {
            let at_us = k * delay_us;
            if ends_us.iter().any(|&end| end <= at_us) {
                break; // an answer came first: no hedge at this instant
            }
            let (expected, draws) = model_hedge(&policy, plan.sent(), deadline_us, at_us, left);
            let mut asked = 0u32;
            let decision = plan.next_hedge(deadline, at(at_us), |_| {
                asked += 1;
                left > 0
            });
            prop_assert_eq!(decision, expected, "hedge {} at {} µs", k, at_us);
            prop_assert_eq!(asked, u32::from(draws), "the retry budget is asked only for a hedge the planner sends");
            if draws && left > 0 {
                left -= 1;
                drawn += 1;
            }
            let Decision::Send(hedge) = decision else { break };
            hedges += 1;
            prop_assert_eq!(hedge.number, hedges + 1);
            if let (Some(d), true) = (deadline, policy.propagate()) {
                prop_assert!(at(at_us) + hedge.wait <= d.instant(), "a hedge waits past the deadline");
                let budget = hedge.budget.expect("propagated").as_duration();
                prop_assert!(budget >= policy.min_useful() && budget + policy.margin() <= hedge.wait);
            }
            let latency = latencies_us[usize::try_from(k).unwrap() % latencies_us.len()];
            ends_us.push(at_us + latency.min(micros(hedge.wait)));
        }
        prop_assert!(plan.sent() <= policy.attempts());
        prop_assert_eq!(plan.sent(), hedges + 1);
        prop_assert!(hedges <= tokens, "more hedges than the retry budget held");
        prop_assert_eq!(drawn, hedges);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
