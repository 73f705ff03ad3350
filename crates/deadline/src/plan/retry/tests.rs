use super::*;
use crate::plan::tests::{ms, origin, policies};
use crate::plan::{Attempt, decide_paced};
use proptest::prelude::*;

#[test]
fn retry_after_reads_delta_seconds_only() {
    assert_eq!(parse_retry_after(b"0"), Some(Duration::ZERO));
    assert_eq!(parse_retry_after(b" 120 "), Some(Duration::from_secs(120)));
    assert_eq!(parse_retry_after(b"007"), Some(Duration::from_secs(7)));
    assert_eq!(
        parse_retry_after(b"99999999999999999999999"),
        Some(Duration::from_secs(86_400))
    );
    for bad in [
        &b""[..],
        b"+5",
        b"-1",
        b"1.5",
        b"Wed, 21 Oct 2015 07:28:00 GMT",
        b"5s",
    ] {
        assert_eq!(parse_retry_after(bad), None, "{bad:?}");
    }
}

#[test]
fn grpc_pushback_reads_milliseconds_and_negative_means_no() {
    assert_eq!(parse_grpc_pushback(b"250"), Some(Pushback::After(ms(250))));
    assert_eq!(parse_grpc_pushback(b"-1"), Some(Pushback::DoNotRetry));
    assert_eq!(parse_grpc_pushback(b"-0"), Some(Pushback::DoNotRetry));
    assert_eq!(
        parse_grpc_pushback(b"123456789012345678901234567890"),
        Some(Pushback::After(Duration::from_secs(86_400)))
    );
    for bad in [&b""[..], b"-", b"+5", b"1e3", b"--1", b"5 ms"] {
        assert_eq!(parse_grpc_pushback(bad), None, "{bad:?}");
    }
}

fn send(delay: u64, number: u32, wait: u64, budget: u64) -> PacedDecision {
    PacedDecision::Send(Delayed {
        delay: ms(delay),
        attempt: Attempt {
            number,
            wait: ms(wait),
            budget: Budget::from_millis(budget),
        },
    })
}

fn pushback(d: u64) -> LastAnswer {
    LastAnswer {
        pushback: Pushback::After(ms(d)),
        deadline_504: None,
    }
}

#[test]
fn pushback_is_a_floor_on_the_delay_and_is_spent_from_the_budget() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let rules = RetryRules::default();
    let deadline = Some(Deadline::after_duration(t0, ms(1_000)));
    // 300 ms pushback, a 25 ms jitter ceiling: the pushback wins, the retry is planned after it.
    assert_eq!(
        decide_retry(&policy, &rules, 1, deadline, t0, u32::MAX, &pushback(300)),
        send(300, 2, 700, 650)
    );
    // A pushback shorter than the drawn jitter changes nothing.
    assert_eq!(
        decide_retry(&policy, &rules, 1, deadline, t0, u32::MAX, &pushback(10)),
        decide_paced(&policy, &rules.backoff, 1, deadline, t0, u32::MAX)
    );
    // A pushback the budget cannot cover ends the call now.
    assert_eq!(
        decide_retry(&policy, &rules, 1, deadline, t0, 0, &pushback(950)),
        PacedDecision::Stop(Stop::PushbackTooLong {
            attempt: 2,
            remaining: ms(1_000),
            pushback: ms(950)
        })
    );
    // Without a deadline a pushback is slept up to the attempts' whole configured time...
    assert_eq!(
        decide_retry(&policy, &rules, 1, None, t0, 0, &pushback(3_000)),
        PacedDecision::Send(Delayed {
            delay: ms(3_000),
            attempt: Attempt {
                number: 2,
                wait: ms(1_000),
                budget: None
            }
        })
    );
    // ...and no longer: a longer one ends the call now (regression: `Retry-After: 86400` was
    // slept, clamped to a day, by a call of 3 × 1 s attempts without a budget).
    for huge in [3_001, 86_400_000, u64::MAX] {
        assert_eq!(
            decide_retry(&policy, &rules, 1, None, t0, 0, &pushback(huge)),
            PacedDecision::Stop(Stop::PushbackTooLong {
                attempt: 2,
                remaining: Duration::MAX,
                pushback: ms(huge)
            }),
            "{huge}"
        );
    }
    assert_eq!(max_pushback(&policy), ms(3_000));
    // Attempts run out before the pushback is considered.
    assert_eq!(
        decide_retry(&policy, &rules, 3, deadline, t0, 0, &pushback(950)),
        PacedDecision::Stop(Stop::AttemptsExhausted { attempts: 3 })
    );
}

#[test]
fn a_negative_pushback_ends_the_call() {
    let t0 = origin();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let last = LastAnswer {
        pushback: Pushback::DoNotRetry,
        deadline_504: None,
    };
    let stop = decide_retry(&policy, &RetryRules::default(), 1, None, t0, 0, &last);
    assert_eq!(stop, PacedDecision::Stop(Stop::DoNotRetry { attempt: 2 }));
    // It does not apply to a first attempt.
    assert_eq!(
        decide_retry(&policy, &RetryRules::default(), 0, None, t0, 0, &last),
        send(0, 1, 1_000, 0).with_budget(None)
    );
}

impl PacedDecision {
    fn with_budget(self, budget: Option<Budget>) -> PacedDecision {
        match self {
            PacedDecision::Send(mut d) => {
                d.attempt.budget = budget;
                PacedDecision::Send(d)
            }
            stop => stop,
        }
    }
}

/// The demo's two hops: orders retrying inventory's 504 with most of its budget left (sent),
/// the gateway retrying orders' 504 with 57 ms left for it (not sent).
#[test]
fn a_callee_504_is_retried_only_with_half_its_budget() {
    let t0 = origin();
    let rules = RetryRules {
        backoff: Backoff::NONE,
        ..RetryRules::default()
    };
    let orders = CallPolicy::new(ms(1_000), 3).unwrap();
    let deadline = Some(Deadline::after_duration(t0, ms(1_890)));
    let inventory_504 = LastAnswer {
        pushback: Pushback::None,
        deadline_504: Budget::from_millis(950),
    };
    assert_eq!(
        decide_retry(
            &orders,
            &rules,
            1,
            deadline,
            t0 + ms(950),
            0,
            &inventory_504
        ),
        send(0, 2, 940, 890)
    );

    let gateway = CallPolicy::new(ms(3_500), 3).unwrap();
    let deadline = Some(Deadline::after_duration(t0, ms(1_950)));
    let orders_504 = LastAnswer {
        pushback: Pushback::None,
        deadline_504: Budget::from_millis(1_900),
    };
    let now = t0 + ms(1_843);
    assert_eq!(
        decide_retry(&gateway, &rules, 1, deadline, now, 0, &orders_504),
        PacedDecision::Stop(Stop::CalleeOutOfTime {
            attempt: 2,
            spent: Budget::from_millis(1_900).unwrap(),
            next: Budget::from_millis(57).unwrap(),
        })
    );
    // With the rule off, the planner alone decides (and it would send it).
    let always = RetryRules {
        callee_504: Callee504::ALWAYS,
        ..rules
    };
    assert_eq!(
        decide_retry(&gateway, &always, 1, deadline, now, 0, &orders_504),
        send(0, 2, 107, 57)
    );
    assert_eq!(Callee504::new(5_000).per_mille(), 1_000);
}

#[test]
fn every_reason_has_its_own_name_and_span_word() {
    let names: std::collections::HashSet<_> =
        StopReason::ALL.iter().map(StopReason::as_str).collect();
    assert_eq!(names.len(), StopReason::ALL.len());
    let words: Vec<_> = StopReason::ALL
        .iter()
        .filter_map(StopReason::span_outcome)
        .collect();
    assert_eq!(words.len(), StopReason::ALL.len() - 1);
    for word in words {
        assert_eq!(
            crate::trace::sanitize_name(word, crate::trace::MAX_OUTCOME_LEN),
            word
        );
    }
    assert_eq!(
        Stop::Throttled { attempt: 2 }.reason().span_outcome(),
        Some("throttled")
    );
}

#[test]
fn a_refused_retry_is_throttled_and_not_counted() {
    let t0 = origin();
    let mut plan = Plan::new(CallPolicy::new(ms(1_000), 3).unwrap());
    let rules = RetryRules::default();
    let none = LastAnswer::default();
    // The first attempt is never offered to the budget.
    let first = plan.next_retry(&rules, None, t0, 0, &none, |_| unreachable!());
    assert!(matches!(first, PacedDecision::Send(_)));
    assert_eq!(
        plan.next_retry(&rules, None, t0, 0, &none, |_| false),
        PacedDecision::Stop(Stop::Throttled { attempt: 2 })
    );
    assert_eq!(plan.sent(), 1);
    let mut offered = None;
    let second = plan.next_retry(&rules, None, t0, 0, &none, |d| {
        offered = Some(d.attempt.number);
        true
    });
    assert!(matches!(second, PacedDecision::Send(_)));
    assert_eq!((offered, plan.sent()), (Some(2), 2));
}

fn backoffs() -> impl Strategy<Value = Backoff> {
    (0u64..=500_000, 0u64..=2_000_000).prop_map(|(base_us, extra_us)| {
        let base = Duration::from_micros(base_us);
        Backoff::new(base, base + Duration::from_micros(extra_us)).expect("max >= base")
    })
}

fn answers() -> impl Strategy<Value = LastAnswer> {
    (
        prop_oneof![
            4 => Just(Pushback::None),
            4 => (0u64..=3_000_000).prop_map(|us| Pushback::After(Duration::from_micros(us))),
            1 => Just(Pushback::DoNotRetry),
        ],
        proptest::option::weighted(0.3, 1u64..=5_000),
    )
        .prop_map(|(pushback, spent)| LastAnswer {
            pushback,
            deadline_504: spent.and_then(Budget::from_millis),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The planner's invariants with backoff, pushback and the callee-504 rule: whatever the
    /// callees answer, a caller never sleeps past its deadline, never sleeps and then sends an
    /// attempt the planner would skip when the sleep ends, sleeps at least every pushback, never
    /// retries after "do not retry", and never retries a 504 with less than the rule's share.
    #[test]
    fn the_invariants_hold_with_pushback(
        policy in policies(),
        backoff in backoffs(),
        per_mille in 0u32..=1_000,
        deadline_us in proptest::option::weighted(0.9, 0u64..=20_000_000),
        start_us in 0u64..=1_000_000,
        shares in proptest::collection::vec(0u32..=1_000, 8),
        draws in proptest::collection::vec(any::<u32>(), 8),
        answers in proptest::collection::vec(answers(), 8),
    ) {
        let rules = RetryRules { backoff, callee_504: Callee504::new(per_mille) };
        let t0 = origin();
        let deadline = deadline_us.map(|us| Deadline::after_duration(t0, Duration::from_micros(us)));
        let mut now = t0 + Duration::from_micros(start_us);
        let mut sent = 0u32;
        let mut last = LastAnswer::default();
        loop {
            let draw = draws[sent as usize % draws.len()];
            match decide_retry(&policy, &rules, sent, deadline, now, draw, &last) {
                PacedDecision::Stop(stop) => {
                    match stop {
                        Stop::DoNotRetry { .. } => prop_assert_eq!(last.pushback, Pushback::DoNotRetry),
                        Stop::PushbackTooLong { pushback, .. } => {
                            prop_assert_eq!(last.pushback, Pushback::After(pushback));
                            // Longer than the attempts' whole configured time, or too long for
                            // the deadline.
                            let too_long_for_the_deadline = deadline.is_some_and(|d| {
                                matches!(decide(&policy, sent, Some(d), now + pushback), Decision::Stop(_))
                            });
                            prop_assert!(pushback > max_pushback(&policy) || too_long_for_the_deadline);
                        }
                        Stop::CalleeOutOfTime { spent, next, .. } => {
                            prop_assert_eq!(last.deadline_504, Some(spent));
                            prop_assert!(next.as_millis() * 1_000 < spent.as_millis() * u64::from(per_mille));
                        }
                        _ => {}
                    }
                    break;
                }
                PacedDecision::Send(Delayed { delay, attempt }) => {
                    sent += 1;
                    prop_assert!(sent <= policy.attempts(), "never more than `attempts`");
                    prop_assert_eq!(attempt.number, sent);
                    if sent == 1 {
                        prop_assert_eq!(delay, Duration::ZERO, "the first attempt is not delayed");
                    } else {
                        prop_assert!(last.pushback != Pushback::DoNotRetry);
                        if let Pushback::After(p) = last.pushback {
                            prop_assert!(delay >= p, "at least the pushback");
                            // A pushback past attempts × timeout is never what is slept.
                            prop_assert!(p <= max_pushback(&policy) || delay <= backoff.ceiling(sent));
                        }
                        let floor = match last.pushback { Pushback::After(p) => p, _ => Duration::ZERO };
                        prop_assert!(delay <= backoff.ceiling(sent).max(floor));
                        if let (Some(spent), Some(next)) = (last.deadline_504, attempt.budget) {
                            prop_assert!(next.as_millis() * 1_000 >= spent.as_millis() * u64::from(per_mille));
                        }
                    }
                    let after = now + delay;
                    prop_assert_eq!(Decision::Send(attempt), decide(&policy, sent - 1, deadline, after),
                        "what is sent after the sleep is what the planner decides then");
                    if let (Some(deadline), true) = (deadline, policy.propagate()) {
                        let budget = attempt.budget.expect("a deadline is propagated");
                        prop_assert!(after + attempt.wait <= deadline.instant(), "sleep and wait end by the deadline");
                        prop_assert!(budget.as_millis() > 0);
                        prop_assert!(budget.as_duration() + policy.margin() <= attempt.wait);
                        prop_assert!(budget.as_duration() >= policy.min_useful());
                    }
                    let share = shares[(sent as usize - 1) % shares.len()];
                    now = after + attempt.wait.mul_f64(f64::from(share) / 1_000.0);
                    last = answers[(sent as usize - 1) % answers.len()];
                    if last.deadline_504.is_some() {
                        // A 504 comes back from a callee told this attempt's budget.
                        last.deadline_504 = attempt.budget.or(last.deadline_504);
                    }
                }
            }
        }
    }
}

fn response(status: u16, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap) {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    (StatusCode::from_u16(status).unwrap(), map)
}

fn pushback_in(answer: &(StatusCode, HeaderMap)) -> Pushback {
    pushback_of(answer.0, &answer.1)
}

fn retryable_4xx_in(answer: &(StatusCode, HeaderMap)) -> bool {
    retryable_4xx(answer.0, &answer.1)
}

fn last_answer_in(answer: &(StatusCode, HeaderMap), budget: Option<Budget>) -> LastAnswer {
    LastAnswer::of(answer.0, &answer.1, budget)
}

#[test]
fn pushback_is_read_where_it_means_something() {
    let after = |s| Pushback::After(std::time::Duration::from_secs(s));
    assert_eq!(
        pushback_in(&response(503, &[("retry-after", "2")])),
        after(2)
    );
    assert_eq!(
        pushback_in(&response(429, &[("retry-after", "1")])),
        after(1)
    );
    // Retry-After on a 500 or a date: not read.
    assert_eq!(
        pushback_in(&response(500, &[("retry-after", "2")])),
        Pushback::None
    );
    assert_eq!(
        pushback_in(&response(
            503,
            &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]
        )),
        Pushback::None
    );
    assert_eq!(
        pushback_in(&response(500, &[(GRPC_RETRY_PUSHBACK_HEADER, "-1")])),
        Pushback::DoNotRetry
    );
    assert!(retryable_4xx_in(&response(429, &[("retry-after", "1")])));
    assert!(!retryable_4xx_in(&response(429, &[])));
    assert!(!retryable_4xx_in(&response(404, &[("retry-after", "1")])));
    let budget = Budget::from_millis(900);
    assert_eq!(
        last_answer_in(&response(504, &[]), budget).deadline_504,
        budget
    );
    assert_eq!(last_answer_in(&response(504, &[]), None).deadline_504, None);
    assert_eq!(
        last_answer_in(&response(503, &[]), budget).deadline_504,
        None
    );
}
