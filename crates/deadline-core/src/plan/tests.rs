use super::*;
use proptest::prelude::*;

pub(super) fn origin() -> Instant {
    #[allow(clippy::disallowed_methods)] // one arbitrary origin for the virtual clock
    Instant::now()
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn send(number: u32, wait: u64, budget: u64) -> Decision {
    Decision::Send(Attempt {
        number,
        wait: ms(wait),
        budget: Budget::from_millis(budget),
    })
}

/// The reference system's orders hop, decision by decision: a 1,890 ms deadline, 1,000 ms
/// timeout, 3 attempts, 50 ms margin and minimum, each callee using its whole budget.
#[test]
fn the_orders_hop_on_a_virtual_clock() {
    let t0 = origin();
    let deadline = Deadline::after_duration(t0, ms(1_890));
    let mut plan = Plan::new(CallPolicy::new(ms(1_000), 3).unwrap());
    let mut now = t0;

    assert_eq!(plan.next(Some(deadline), now), send(1, 1_000, 950));
    now += ms(950); // inventory used all 950 ms and answered 504
    assert_eq!(plan.next(Some(deadline), now), send(2, 940, 890));
    now += ms(890);
    assert_eq!(now - t0, ms(1_840));
    assert_eq!(
        plan.next(Some(deadline), now),
        Decision::Stop(Stop::NotEnoughTime {
            attempt: 3,
            remaining: ms(50),
            needed: ms(100)
        })
    );
    assert_eq!(plan.sent(), 2);
}

#[test]
fn no_deadline_means_every_attempt_with_its_full_timeout() {
    let t0 = origin();
    let mut plan = Plan::new(CallPolicy::new(ms(3_500), 3).unwrap());
    for n in 1..=3 {
        assert_eq!(
            plan.next(None, t0 + ms(10_000 * u64::from(n))),
            Decision::Send(Attempt {
                number: n,
                wait: ms(3_500),
                budget: None
            })
        );
    }
    assert_eq!(
        plan.next(None, t0),
        Decision::Stop(Stop::AttemptsExhausted { attempts: 3 })
    );
}

#[test]
fn propagation_off_ignores_the_deadline() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap().with_propagate(false);
    let expired = Deadline::at(t0);
    assert_eq!(
        decide(&policy, 2, Some(expired), t0 + ms(5)),
        Decision::Send(Attempt {
            number: 3,
            wait: ms(1_000),
            budget: None
        })
    );
}

#[test]
fn boundaries_of_min_useful_plus_margin() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let d = Deadline::after_duration(t0, ms(100));
    // Exactly min_useful + margin left: the callee gets exactly min_useful.
    assert_eq!(decide(&policy, 0, Some(d), t0), send(1, 100, 50));
    // A microsecond less and the truncated budget is 49: not sent.
    let just_under = t0 + Duration::from_micros(1);
    assert!(matches!(
        decide(&policy, 0, Some(d), just_under),
        Decision::Stop(Stop::NotEnoughTime { .. })
    ));
    // A fraction above truncates down, never up.
    let d = Deadline::after_duration(t0, Duration::from_micros(150_999));
    assert_eq!(
        decide(&policy, 0, Some(d), t0),
        Decision::Send(Attempt {
            number: 1,
            wait: Duration::from_micros(150_999),
            budget: Budget::from_millis(100),
        })
    );
    // A passed deadline sends nothing.
    let d = Deadline::at(t0);
    assert_eq!(
        decide(&policy, 0, Some(d), t0 + ms(1)),
        Decision::Stop(Stop::NotEnoughTime {
            attempt: 1,
            remaining: Duration::ZERO,
            needed: ms(100)
        })
    );
    // Attempts are exhausted before time is even considered.
    assert_eq!(
        decide(&policy, 3, Some(d), t0),
        Decision::Stop(Stop::AttemptsExhausted { attempts: 3 })
    );
}

/// Two calls in a row, each allowed half of what is left: the first leaves the second time.
#[test]
fn a_share_caps_each_call_at_part_of_what_is_left() {
    let t0 = origin();
    let half = Share::new(0.5).unwrap();
    let policy = CallPolicy::builder()
        .timeout(ms(3_500))
        .share(half)
        .build()
        .unwrap();
    assert_eq!(policy.share(), half);
    let d = Deadline::after_duration(t0, ms(1_000));
    assert_eq!(decide(&policy, 0, Some(d), t0), send(1, 500, 450));
    // The second call starts when the first used its whole half.
    assert_eq!(decide(&policy, 0, Some(d), t0 + ms(500)), send(1, 250, 200));
    // With 150 ms left half is 75, under margin + minimum: 200 ms would be needed.
    assert_eq!(
        decide(&policy, 0, Some(d), t0 + ms(850)),
        Decision::Stop(Stop::NotEnoughTime {
            attempt: 1,
            remaining: ms(150),
            needed: ms(200)
        })
    );
    // The timeout still caps a share of a long budget.
    let far = Deadline::after_duration(t0, ms(60_000));
    assert_eq!(decide(&policy, 0, Some(far), t0), send(1, 3_500, 3_450));
}

#[test]
fn timeout_caps_the_wait_when_the_deadline_is_far() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 1).unwrap();
    let d = Deadline::after_duration(t0, ms(60_000));
    assert_eq!(decide(&policy, 0, Some(d), t0), send(1, 1_000, 950));
}

#[test]
fn invalid_policies_are_rejected_with_their_reason() {
    assert_eq!(
        CallPolicy::new(Duration::ZERO, 1),
        Err(PolicyError::ZeroTimeout)
    );
    assert_eq!(
        CallPolicy::new(ms(1_000), 0),
        Err(PolicyError::ZeroAttempts)
    );
    assert_eq!(
        CallPolicy::builder()
            .min_useful(Duration::from_micros(999))
            .build(),
        Err(PolicyError::MinUsefulBelowOneMs {
            min_useful: Duration::from_micros(999)
        })
    );
    assert_eq!(
        CallPolicy::new(ms(99), 1),
        Err(PolicyError::TimeoutTooShort {
            timeout: ms(99),
            margin: ms(50),
            min_useful: ms(50)
        })
    );
    assert!(CallPolicy::new(ms(100), 1).is_ok());
    assert!(
        CallPolicy::builder()
            .timeout(ms(1))
            .margin(Duration::ZERO)
            .min_useful(ms(1))
            .build()
            .is_ok()
    );
    assert!(
        CallPolicy::builder().margin(Duration::MAX).build().is_err(),
        "an overflowing margin is rejected, not wrapped"
    );
    let messages: std::collections::HashSet<String> = [
        PolicyError::ZeroTimeout,
        PolicyError::ZeroAttempts,
        PolicyError::MinUsefulBelowOneMs { min_useful: ms(0) },
        PolicyError::TimeoutTooShort {
            timeout: ms(1),
            margin: ms(1),
            min_useful: ms(1),
        },
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(messages.len(), 4, "each error has its own message");
}

pub(super) fn policies() -> impl Strategy<Value = CallPolicy> {
    (
        0u64..=500_000,
        1u64..=500_000,
        0u64..=10_000_000,
        1u32..=8,
        any::<bool>(),
        proptest::option::of(10_000u32..=1_000_000),
    )
        .prop_map(
            |(margin_us, min_us, extra_us, attempts, propagate, share_ppm)| {
                let margin = Duration::from_micros(margin_us);
                let min_useful = Duration::from_micros(min_us.max(1_000));
                let timeout = margin + min_useful + Duration::from_micros(extra_us);
                CallPolicy::builder()
                    .timeout(timeout)
                    .attempts(attempts)
                    .margin(margin)
                    .min_useful(min_useful)
                    .propagate(propagate)
                    .share(share_ppm.map_or(Share::WHOLE, |ppm| {
                        Share::new(f64::from(ppm) / 1e6).expect("in range")
                    }))
                    .build()
                    .expect("generated policies are valid")
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The planner's five invariants (see the module docs), on a virtual clock: random policies
    /// and deadlines, and callees that answer after a random share of each wait.
    #[test]
    fn the_five_invariants_hold(
        policy in policies(),
        deadline_us in proptest::option::weighted(0.9, 0u64..=20_000_000),
        start_us in 0u64..=1_000_000,
        shares in proptest::collection::vec(0u32..=1_000, 8),
    ) {
        let t0 = origin();
        let deadline = deadline_us.map(|us| Deadline::after_duration(t0, Duration::from_micros(us)));
        let mut now = t0 + Duration::from_micros(start_us);
        let mut plan = Plan::new(policy);
        let mut sent = 0u32;
        loop {
            match plan.next(deadline, now) {
                Decision::Stop(_) => break,
                Decision::Send(attempt) => {
                    sent += 1;
                    prop_assert!(sent <= policy.attempts(), "5: never more than `attempts`");
                    prop_assert_eq!(attempt.number, sent);
                    match (deadline, policy.propagate()) {
                        (Some(deadline), true) => {
                            let remaining = deadline.remaining(now);
                            let budget = attempt.budget.expect("a deadline is propagated");
                            prop_assert!(budget.as_millis() > 0, "1: never spent on arrival");
                            prop_assert!(budget.as_duration() + policy.margin() <= remaining, "2: at most remaining less margin");
                            prop_assert!(now + attempt.wait <= deadline.instant(), "3: never wait past the deadline");
                            prop_assert!(attempt.wait <= policy.share().of(remaining), "the share caps the wait");
                            prop_assert!(budget.as_duration() + policy.margin() <= attempt.wait, "4: the answer fits the wait");
                            prop_assert!(remaining >= policy.min_useful() + policy.margin(), "5: enough left to be useful");
                            prop_assert!(budget.as_duration() >= policy.min_useful());
                        }
                        _ => {
                            prop_assert_eq!(attempt.budget, None, "no deadline, no header");
                            prop_assert_eq!(attempt.wait, policy.timeout(), "the baseline waits the full timeout");
                        }
                    }
                    let share = shares[(sent as usize - 1) % shares.len()];
                    now += attempt.wait.mul_f64(f64::from(share) / 1_000.0);
                }
            }
        }
        if deadline.is_none() || !policy.propagate() {
            prop_assert_eq!(sent, policy.attempts(), "the baseline runs every attempt");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Calls made one after another under a share: each waits at most its share of what is
    /// left, so however long each takes, the calls after it still find at least the rest; and
    /// every attempt keeps the planner's invariants (never past the deadline, the answer fits
    /// the wait, the budget at least the minimum).
    #[test]
    fn serial_calls_under_a_share_leave_time_for_the_ones_after(
        policy in policies(),
        deadline_us in 0u64..=20_000_000,
        uses in proptest::collection::vec(0u32..=1_000, 6),
    ) {
        let t0 = origin();
        let deadline = Deadline::after_duration(t0, Duration::from_micros(deadline_us));
        let mut now = t0;
        for used in uses {
            let remaining = deadline.remaining(now);
            match decide(&policy, 0, Some(deadline), now) {
                Decision::Send(attempt) if policy.propagate() => {
                    let share = policy.share().of(remaining);
                    prop_assert!(attempt.wait <= share, "the share caps the call");
                    prop_assert!(now + attempt.wait <= deadline.instant());
                    let budget = attempt.budget.expect("propagated").as_duration();
                    prop_assert!(budget + policy.margin() <= attempt.wait);
                    prop_assert!(budget >= policy.min_useful());
                    now += attempt.wait.mul_f64(f64::from(used) / 1_000.0);
                    // What the next call finds: at least the part this one could not take.
                    prop_assert!(deadline.remaining(now) >= remaining - share);
                }
                Decision::Send(attempt) => {
                    prop_assert_eq!(attempt.budget, None);
                    break;
                }
                Decision::Stop(Stop::NotEnoughTime { .. }) => {
                    // Refused only when the share of what is left (capped by the timeout) could
                    // not hold the margin and a whole-ms budget of at least the minimum.
                    let room = policy.timeout().min(policy.share().of(remaining)).saturating_sub(policy.margin());
                    let budget = Budget::from_duration(room).map_or(Duration::ZERO, Budget::as_duration);
                    prop_assert!(budget < policy.min_useful());
                    break;
                }
                Decision::Stop(other) => prop_assert!(false, "unexpected stop {:?}", other),
            }
        }
    }
}
