use super::*;
use crate::plan::Plan;
use crate::plan::tests::{ms, origin, policies};
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Hedged calls on a virtual clock: every attempt still out is backed up by a hedge each
    /// `delay` until one answers. Whatever the latencies, no attempt (hedge or not) breaks the
    /// invariants, never more than `attempts` are sent, hedges go out only at their instants,
    /// and every wait ends by the caller's deadline.
    #[test]
    fn hedges_keep_the_invariants(
        policy in policies(),
        delay_us in 1u64..=2_000_000,
        deadline_us in proptest::option::weighted(0.9, 0u64..=20_000_000),
        latencies_us in proptest::collection::vec(0u64..=30_000_000, 8),
    ) {
        let t0 = origin();
        let deadline = deadline_us.map(|us| Deadline::after_duration(t0, Duration::from_micros(us)));
        let delay = Duration::from_micros(delay_us);
        let mut plan = Plan::new(policy);
        // (sent at, answer at or wait end) of every attempt out.
        let mut out: Vec<(Instant, Instant)> = Vec::new();
        let mut now = t0;
        let mut next_hedge = None;
        loop {
            let decision = if out.is_empty() || next_hedge == Some(now) {
                plan.next(deadline, now)
            } else {
                break;
            };
            let Decision::Send(attempt) = decision else { break };
            let n = plan.sent() as usize;
            prop_assert!(plan.sent() <= policy.attempts());
            if let (Some(deadline), true) = (deadline, policy.propagate()) {
                let budget = attempt.budget.expect("propagated");
                let remaining = deadline.remaining(now);
                prop_assert!(budget.as_millis() > 0);
                prop_assert!(budget.as_duration() + policy.margin() <= remaining);
                prop_assert!(now + attempt.wait <= deadline.instant(), "the wait ends by the deadline");
                prop_assert!(budget.as_duration() + policy.margin() <= attempt.wait);
                prop_assert!(budget.as_duration() >= policy.min_useful());
            }
            let latency = Duration::from_micros(latencies_us[(n - 1) % latencies_us.len()]);
            let end = now + latency.min(attempt.wait);
            if let Some(&(first, _)) = out.first() {
                prop_assert!(now >= first + delay, "a hedge only after its delay");
            }
            out.push((now, end));
            // The next event: the earliest end among those out, or the next hedge instant.
            let hedge_at = now + delay;
            let earliest = out.iter().map(|(_, e)| *e).min().expect("one is out");
            if hedge_at < earliest {
                now = hedge_at;
                next_hedge = Some(hedge_at);
            } else {
                // An answer (or a wait's end) comes first: the call ends or retries; stop here.
                break;
            }
        }
    }
}
