//! The call planner: before every attempt of an outbound call, whether to send it, how long to
//! wait for it, and what budget to tell the callee.
//!
//! [`decide`] is a pure function of a [`CallPolicy`], how many attempts were already sent, the
//! deadline (if any) and `now`. [`Plan`] is the same with the attempt count kept for you. Nothing
//! here reads a clock, so the tests drive it on a virtual one.
//!
//! # The rule
//!
//! With a deadline and propagation on, before attempt *n*:
//!
//! ```text
//! remaining = deadline - now                 (zero once passed)
//! wait      = min(timeout, remaining)        the caller never waits past its own deadline
//! budget    = floor_ms(wait - margin)        the callee's answer has `margin` to travel back
//! send only if n <= attempts and budget >= min_useful
//! ```
//!
//! An attempt whose callee would get less than `min_useful` is never sent: it could not finish,
//! so it would only add load to a service that is probably already struggling. The budget is
//! truncated, never rounded up, and because `min_useful` is at least 1 ms a callee is never told
//! `0` (which reads as expired) and never gets no header (which reads as "no deadline").
//!
//! Without a deadline, or with propagation off (the baseline), every configured attempt is sent
//! with its full timeout and no budget header: exactly what a client without this library does.

use std::fmt;
use std::time::{Duration, Instant};

use crate::budget::{Budget, Deadline};

/// The default transit margin a caller keeps back from the budget it forwards.
pub const DEFAULT_MARGIN: Duration = Duration::from_millis(50);

/// The default smallest budget worth sending a callee.
pub const DEFAULT_MIN_USEFUL: Duration = Duration::from_millis(50);

/// How one outbound call is made: its per-attempt timeout, how many attempts, the margin kept
/// back for transit, the smallest useful callee budget, and whether the deadline propagates.
///
/// Build one with [`CallPolicy::new`] (defaults for the rest) or [`CallPolicy::builder`].
/// Invalid combinations are rejected with a [`PolicyError`] instead of silently never sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallPolicy {
    timeout: Duration,
    attempts: u32,
    margin: Duration,
    min_useful: Duration,
    propagate: bool,
}

/// Why a [`CallPolicy`] was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The per-attempt timeout was zero.
    ZeroTimeout,
    /// The number of attempts was zero: the call could never be made.
    ZeroAttempts,
    /// The minimum useful budget was under 1 ms, so a callee could be told `0`.
    MinUsefulBelowOneMs {
        /// The rejected minimum.
        min_useful: Duration,
    },
    /// The timeout leaves no room for `margin + min_useful`, so under any deadline no attempt
    /// could ever be sent.
    TimeoutTooShort {
        /// The per-attempt timeout.
        timeout: Duration,
        /// The transit margin.
        margin: Duration,
        /// The minimum useful budget.
        min_useful: Duration,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::ZeroTimeout => f.write_str("the attempt timeout must be above zero"),
            PolicyError::ZeroAttempts => f.write_str("a call needs at least one attempt"),
            PolicyError::MinUsefulBelowOneMs { min_useful } => {
                write!(
                    f,
                    "the minimum useful budget must be at least 1 ms, not {min_useful:?}"
                )
            }
            PolicyError::TimeoutTooShort {
                timeout,
                margin,
                min_useful,
            } => write!(
                f,
                "the attempt timeout ({timeout:?}) must be at least margin ({margin:?}) plus \
                 minimum useful budget ({min_useful:?}), or no attempt could ever be sent"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

impl CallPolicy {
    /// A policy with this timeout and attempt count, the default margin and minimum useful
    /// budget (50 ms each), and propagation on.
    pub fn new(timeout: Duration, attempts: u32) -> Result<CallPolicy, PolicyError> {
        CallPolicy::builder()
            .timeout(timeout)
            .attempts(attempts)
            .build()
    }

    /// A builder starting from a 1 s timeout, 1 attempt and the defaults.
    pub fn builder() -> CallPolicyBuilder {
        CallPolicyBuilder(CallPolicy {
            timeout: Duration::from_secs(1),
            attempts: 1,
            margin: DEFAULT_MARGIN,
            min_useful: DEFAULT_MIN_USEFUL,
            propagate: true,
        })
    }

    /// The longest one attempt may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The most attempts the call makes.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time kept back from a forwarded budget for the reply to travel.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The smallest budget worth sending.
    pub fn min_useful(&self) -> Duration {
        self.min_useful
    }

    /// Whether the deadline propagates (off: the baseline without the library).
    pub fn propagate(&self) -> bool {
        self.propagate
    }

    /// The same policy with propagation switched.
    #[must_use = "this returns a new policy; the original is unchanged"]
    pub fn with_propagate(mut self, propagate: bool) -> CallPolicy {
        self.propagate = propagate;
        self
    }
}

/// Builds a [`CallPolicy`]; [`CallPolicyBuilder::build`] validates it.
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct CallPolicyBuilder(CallPolicy);

impl CallPolicyBuilder {
    /// The per-attempt timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.0.timeout = timeout;
        self
    }

    /// The most attempts (the first one included).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.0.attempts = attempts;
        self
    }

    /// Time kept back from a forwarded budget for the reply to travel (default 50 ms).
    pub fn margin(mut self, margin: Duration) -> Self {
        self.0.margin = margin;
        self
    }

    /// The smallest budget worth sending a callee (default 50 ms, at least 1 ms).
    pub fn min_useful(mut self, min_useful: Duration) -> Self {
        self.0.min_useful = min_useful;
        self
    }

    /// Whether to propagate the deadline (default on). Off is the baseline: no header, full
    /// timeouts, every attempt.
    pub fn propagate(mut self, propagate: bool) -> Self {
        self.0.propagate = propagate;
        self
    }

    /// Checks and returns the policy.
    pub fn build(self) -> Result<CallPolicy, PolicyError> {
        let p = self.0;
        if p.timeout.is_zero() {
            return Err(PolicyError::ZeroTimeout);
        }
        if p.attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if p.min_useful < Duration::from_millis(1) {
            return Err(PolicyError::MinUsefulBelowOneMs {
                min_useful: p.min_useful,
            });
        }
        if p.timeout < p.margin.saturating_add(p.min_useful) {
            return Err(PolicyError::TimeoutTooShort {
                timeout: p.timeout,
                margin: p.margin,
                min_useful: p.min_useful,
            });
        }
        Ok(p)
    }
}

/// One attempt the planner says to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Which attempt this is, from 1.
    pub number: u32,
    /// The longest to wait for its answer: `min(timeout, remaining)`.
    pub wait: Duration,
    /// What to send in `Deadline-Budget-Ms`; `None` when there is no deadline or propagation is
    /// off.
    pub budget: Option<Budget>,
}

/// Why the planner says not to send another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// Every configured attempt was already sent.
    AttemptsExhausted {
        /// The configured attempts.
        attempts: u32,
    },
    /// The attempt could not finish: its callee would get less than the minimum useful budget.
    NotEnoughTime {
        /// The attempt that was not sent, from 1.
        attempt: u32,
        /// Time left before the caller's deadline.
        remaining: Duration,
        /// Time an attempt needs: margin plus the minimum useful budget.
        needed: Duration,
    },
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::AttemptsExhausted { attempts } => write!(f, "all {attempts} attempts were used"),
            Stop::NotEnoughTime {
                attempt,
                remaining,
                needed,
            } => write!(
                f,
                "attempt {attempt} not sent: {} ms left, an attempt needs at least {} ms",
                remaining.as_millis(),
                needed.as_millis()
            ),
        }
    }
}

/// What to do before an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this attempt.
    Send(Attempt),
    /// Send nothing more.
    Stop(Stop),
}

/// Decides attempt `sent + 1` of a call under `policy`, given the caller's `deadline` (if any)
/// at `now`. Pure: same inputs, same answer.
pub fn decide(
    policy: &CallPolicy,
    sent: u32,
    deadline: Option<Deadline>,
    now: Instant,
) -> Decision {
    if sent >= policy.attempts {
        return Decision::Stop(Stop::AttemptsExhausted {
            attempts: policy.attempts,
        });
    }
    let number = sent + 1;
    let deadline = match deadline {
        Some(deadline) if policy.propagate => deadline,
        _ => {
            return Decision::Send(Attempt {
                number,
                wait: policy.timeout,
                budget: None,
            });
        }
    };
    let remaining = deadline.remaining(now);
    let wait = policy.timeout.min(remaining);
    match Budget::from_duration(wait.saturating_sub(policy.margin)) {
        Some(budget) if budget.as_duration() >= policy.min_useful => Decision::Send(Attempt {
            number,
            wait,
            budget: Some(budget),
        }),
        _ => Decision::Stop(Stop::NotEnoughTime {
            attempt: number,
            remaining,
            needed: policy.margin.saturating_add(policy.min_useful),
        }),
    }
}

/// The planner for one call: [`decide`] with the count of attempts sent kept for you.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    policy: CallPolicy,
    sent: u32,
}

impl Plan {
    /// A fresh plan: no attempt sent yet.
    pub fn new(policy: CallPolicy) -> Plan {
        Plan { policy, sent: 0 }
    }

    /// Decides the next attempt; a `Send` counts as sent.
    pub fn next(&mut self, deadline: Option<Deadline>, now: Instant) -> Decision {
        let decision = decide(&self.policy, self.sent, deadline, now);
        if let Decision::Send(_) = decision {
            self.sent += 1;
        }
        decision
    }

    /// Attempts sent so far.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// The policy being followed.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn origin() -> Instant {
        #[allow(clippy::disallowed_methods)] // one arbitrary origin for the virtual clock
        Instant::now()
    }

    fn ms(n: u64) -> Duration {
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

    fn policies() -> impl Strategy<Value = CallPolicy> {
        (
            0u64..=500_000,
            1u64..=500_000,
            0u64..=10_000_000,
            1u32..=8,
            any::<bool>(),
        )
            .prop_map(|(margin_us, min_us, extra_us, attempts, propagate)| {
                let margin = Duration::from_micros(margin_us);
                let min_useful = Duration::from_micros(min_us.max(1_000));
                let timeout = margin + min_useful + Duration::from_micros(extra_us);
                CallPolicy::builder()
                    .timeout(timeout)
                    .attempts(attempts)
                    .margin(margin)
                    .min_useful(min_useful)
                    .propagate(propagate)
                    .build()
                    .expect("generated policies are valid")
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// The planner's five invariants (see the module docs), on a virtual clock: random policies and deadlines, and
        /// callees that answer after a random share of each wait.
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
}
