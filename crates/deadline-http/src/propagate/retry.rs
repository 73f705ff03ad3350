//! Retries between attempts: the backoff's random draws, the retry budgets shared by a
//! client's clones, and what a failed answer says about retrying it.
//!
//! The planner decides ([`Plan::next_retry`]); this module gives it its inputs. The random
//! draw comes from a SplitMix64 sequence on one atomic counter per client, seeded from the
//! standard library's `RandomState` (the per-process random keys of `HashMap`): no dependency,
//! no lock, a few nanoseconds a draw, and good enough to spread retries (nothing here needs
//! unpredictability).
//!
//! With propagation off (the baseline without the library) none of this applies: retries are
//! sent at once and no budget is drawn from, exactly as a client without the library does.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use deadline::plan::backoff::{Backoff, Delayed, PacedDecision};
use deadline::plan::hedge::{HedgeDelay, Latencies};
use deadline::plan::retry::{Callee504, LastAnswer, RetryRules, is_idempotent};
use deadline::plan::retry_budget::{RetryBudget, RetryBudgetConfig};
use deadline::{CallPolicy, Deadline, Plan, Stop};
use http::Request;
use tokio::time::Instant;

use super::attempt::AttemptRequests;

/// Targets a client keeps a retry budget for; calls to further targets share one more.
const MAX_BUDGETS: usize = 256;

/// How a client retries: the backoff, the callee-504 rule and the retry budget's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrySettings {
    rules: RetryRules,
    budget: Option<RetryBudgetConfig>,
    hedge: Option<HedgeDelay>,
}

impl Default for RetrySettings {
    /// Backoff 25 ms doubling to 250 ms with full jitter, a callee's 504 retried with at least
    /// half its budget, and the default retry budget ([`RetryBudgetConfig::DEFAULT`]: 20 % of
    /// requests plus 10 per 10 s window, and a bucket of 5 tokens that failed retries empty).
    fn default() -> RetrySettings {
        RetrySettings {
            rules: RetryRules::default(),
            budget: Some(RetryBudgetConfig::DEFAULT),
            hedge: None,
        }
    }
}

impl RetrySettings {
    /// The backoff before retries.
    pub fn backoff(&self) -> Backoff {
        self.rules.backoff
    }

    /// The rule for retrying a callee's 504.
    pub fn callee_504(&self) -> Callee504 {
        self.rules.callee_504
    }

    /// The retry budget's settings; `None` when retries are not budgeted.
    pub fn retry_budget(&self) -> Option<RetryBudgetConfig> {
        self.budget
    }

    /// When calls are hedged; `None` (the default) when they are not.
    pub fn hedge(&self) -> Option<HedgeDelay> {
        self.hedge
    }

    pub(super) fn with_hedge(mut self, hedge: Option<HedgeDelay>) -> RetrySettings {
        self.hedge = hedge;
        self
    }

    pub(super) fn with_backoff(mut self, backoff: Backoff) -> RetrySettings {
        self.rules.backoff = backoff;
        self
    }

    pub(super) fn with_callee_504(mut self, rule: Callee504) -> RetrySettings {
        self.rules.callee_504 = rule;
        self
    }

    pub(super) fn with_budget(mut self, budget: Option<RetryBudgetConfig>) -> RetrySettings {
        self.budget = budget;
        self
    }
}

/// What every clone of one client shares: its settings, its draws and its retry budgets.
#[derive(Debug)]
pub(super) struct Retries {
    settings: RetrySettings,
    draws: Draws,
    /// One budget per target, made at its first call.
    budgets: Mutex<HashMap<Arc<str>, Arc<Mutex<RetryBudget>>>>,
    /// The first target that called and the budget the map gave it, so the calls of a client
    /// to one target (the usual case) reach their budget with neither the map's lock nor a hash.
    first: OnceLock<(Arc<str>, TargetBudget)>,
    /// Latencies of hedged calls, for a percentile hedge delay.
    latencies: Mutex<Latencies>,
}

impl Retries {
    pub(super) fn new(settings: RetrySettings) -> Arc<Retries> {
        Arc::new(Retries {
            settings,
            draws: Draws::seeded(),
            budgets: Mutex::new(HashMap::new()),
            first: OnceLock::new(),
            latencies: Mutex::new(Latencies::new()),
        })
    }

    pub(super) fn settings(&self) -> RetrySettings {
        self.settings
    }

    /// The next decision of the call to `target` at `now`: the planner's, its retries drawn
    /// from the target's budget. Stops as the attempts run out when `requests` allows no more
    /// (a request that must not be sent twice).
    pub(super) fn plan<B: Clone>(
        &self,
        requests: &AttemptRequests<B>,
        plan: &mut Plan,
        deadline: Option<Deadline>,
        now: Instant,
        last: &LastAnswer,
        budget: &TargetBudget,
    ) -> PacedDecision {
        if let Some(stop) = exhausted(requests, plan) {
            return stop;
        }
        let std_now = crate::time::to_std(now);
        if !plan.policy().propagate() {
            // The baseline: no backoff, no budget, the callee's answer not read.
            return plan.next_retry(
                &RetryRules::IMMEDIATE,
                deadline,
                std_now,
                0,
                &LastAnswer::default(),
                |_| true,
            );
        }
        let draw = self.draws.next();
        let config = self.settings.budget;
        let first = plan.sent() == 0;
        // A shed is retried only with a bucket's permission (`deadline::plan::retry`, "A shed").
        let shed = last.is_shed();
        let decision = plan.next_retry(&self.settings.rules, deadline, std_now, draw, last, {
            |_: &Delayed| match config {
                None => !shed,
                Some(config) if shed && config.retry_bucket().is_none() => false,
                Some(_) => budget.with(|b| b.try_withdraw(std_now)).unwrap_or(true),
            }
        });
        if first && matches!(decision, PacedDecision::Send(_)) {
            budget.with(|b| b.deposit(std_now));
        }
        decision
    }

    /// The hedge delay for a call of `request` under `policy`, when it is hedged: the client
    /// hedges, propagation is on, more than one attempt is allowed, the method is idempotent
    /// and the request can be sent more than once (`repeatable`: its body can be copied).
    pub(super) fn hedge_for<B>(
        &self,
        request: &Request<B>,
        policy: &CallPolicy,
        repeatable: bool,
    ) -> Option<HedgeDelay> {
        let idempotent = is_idempotent(request.method());
        self.settings
            .hedge
            .filter(|_| idempotent && repeatable && policy.propagate() && policy.attempts() > 1)
    }

    /// How long to wait before hedging now; `None` while a percentile has too few samples.
    pub(super) fn hedge_delay(&self, delay: HedgeDelay) -> Option<Duration> {
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        delay.resolve(&mut latencies)
    }

    /// Counts a hedged call's latency.
    pub(super) fn observe(&self, latency: Duration) {
        let mut latencies = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        latencies.record(latency);
    }

    /// The hedge of the call to `target` at `now`: the planner's decision at that instant, drawn
    /// from the target's retry budget. No backoff: the hedge delay is the wait.
    pub(super) fn plan_hedge<B: Clone>(
        &self,
        requests: &AttemptRequests<B>,
        plan: &mut Plan,
        deadline: Option<Deadline>,
        now: Instant,
        budget: &TargetBudget,
    ) -> PacedDecision {
        if let Some(stop) = exhausted(requests, plan) {
            return stop;
        }
        let std_now = crate::time::to_std(now);
        match plan.next_hedge(deadline, std_now, |_| {
            budget.with(|b| b.try_withdraw(std_now)).unwrap_or(true)
        }) {
            deadline::Decision::Send(attempt) => PacedDecision::Send(Delayed {
                delay: Duration::ZERO,
                attempt,
            }),
            deadline::Decision::Stop(stop) => PacedDecision::Stop(stop),
        }
    }

    /// The retry budget of the calls to `target` under `policy`, made at its first call (the
    /// key is copied only then, so a call to a known target allocates nothing): none without a
    /// budget, or with propagation off (the baseline draws from no budget).
    ///
    /// The first target to call is kept beside the map with its budget; a later call to the
    /// same name gets that budget by comparing the name, without the map's lock or a hash. Any
    /// other name is looked up in the map: the result is the same either way.
    pub(super) fn budget(&self, target: &str, policy: &CallPolicy, now: Instant) -> TargetBudget {
        let Some(config) = self.settings.budget.filter(|_| policy.propagate()) else {
            return TargetBudget(None);
        };
        if let Some((name, budget)) = self.first.get() {
            if **name == *target {
                return budget.clone();
            }
            return self.look_up(target, config, now);
        }
        let budget = self.look_up(target, config, now);
        // Another call may have kept its name first; this one's budget is still the map's.
        let _ = self.first.set((Arc::from(target), budget.clone()));
        budget
    }

    /// The budget of `target` in the map, made with `config` at `now` if it has none yet (past
    /// [`MAX_BUDGETS`] targets, the one shared by the rest).
    fn look_up(&self, target: &str, config: RetryBudgetConfig, now: Instant) -> TargetBudget {
        // A poisoned lock only means another call panicked mid-update of plain counters.
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(budget) = budgets.get(target) {
            return TargetBudget(Some(Arc::clone(budget)));
        }
        let key = if budgets.len() < MAX_BUDGETS {
            target
        } else {
            ""
        };
        let now = crate::time::to_std(now);
        let budget = budgets
            .entry(Arc::from(key))
            .or_insert_with(|| Arc::new(Mutex::new(RetryBudget::new(config, now))));
        TargetBudget(Some(Arc::clone(budget)))
    }
}

/// One target's retry budget, looked up once per call ([`Retries::budget`]): the call's
/// deposit, withdrawals and refunds then lock only this budget, and hash no name.
#[derive(Clone, Debug)]
pub(super) struct TargetBudget(Option<Arc<Mutex<RetryBudget>>>);

impl TargetBudget {
    /// The call's first attempt, or attempt `number` after failed ones, succeeded, and `lost`
    /// hedges lost the race to it: the target's budget gets its tokens back.
    pub(super) fn succeeded(&self, number: u32, lost: usize) {
        self.with(|b| {
            if number <= 1 {
                b.first_attempt_succeeded();
            } else {
                b.refund();
            }
            for _ in 0..lost {
                b.refund();
            }
        });
    }

    /// Runs `f` on the budget, if the calls have one.
    fn with<T>(&self, f: impl FnOnce(&mut RetryBudget) -> T) -> Option<T> {
        let budget = self.0.as_ref()?;
        // A poisoned lock only means another call panicked mid-update of plain counters.
        let mut budget = budget.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut budget))
    }
}

/// The stop when `requests` allows no further attempt (every allowed one was sent, or the
/// request must not be sent twice).
fn exhausted<B: Clone>(requests: &AttemptRequests<B>, plan: &Plan) -> Option<PacedDecision> {
    (requests.is_last(plan.sent()) || requests.is_spent()).then(|| {
        PacedDecision::Stop(Stop::AttemptsExhausted {
            attempts: requests.allowed(),
        })
    })
}

/// A decision ready to act on: an attempt to send from `start`, or a stop.
pub(super) struct Paced {
    pub(super) decision: PacedDecision,
    /// When the attempt goes out: the end of its delay, or the late wake-up.
    pub(super) start: Instant,
    /// 1 when the attempt planned before the delay is no longer sent after it.
    pub(super) unsent: u32,
}

/// Sleeps `decision`'s delay (the backoff, or the callee's pushback) when it has one: the
/// planner already spent it from the budget and planned the attempt as of when it ends, and a
/// late wake-up plans again ([`after_sleep`]).
pub(super) async fn pace(
    policy: &CallPolicy,
    decision: PacedDecision,
    now: Instant,
    deadline: Option<Deadline>,
) -> Paced {
    let delay = match decision {
        PacedDecision::Send(Delayed { delay, .. }) if !delay.is_zero() => delay,
        _ => {
            return Paced {
                decision,
                start: now,
                unsent: 0,
            };
        }
    };
    let at = now + delay;
    tokio::time::sleep_until(at).await;
    let woke = Instant::now();
    let decision = after_sleep(policy, decision, at, woke, deadline);
    Paced {
        unsent: u32::from(matches!(decision, PacedDecision::Stop(_))),
        decision,
        start: at.max(woke),
    }
}

/// After sleeping a delay until `at`, the attempt as the planner plans it at the actual wake-up
/// `woke` (the same as planned, unless the runtime woke the call late): a late wake-up must not
/// send a budget that is no longer true, or send an attempt that no longer fits. Returns the
/// attempt to send from `woke`, or why none can be.
pub(super) fn after_sleep(
    policy: &CallPolicy,
    planned: PacedDecision,
    at: Instant,
    woke: Instant,
    deadline: Option<Deadline>,
) -> PacedDecision {
    let PacedDecision::Send(Delayed { attempt, .. }) = planned else {
        return planned;
    };
    if woke <= at {
        return planned;
    }
    let sent_before = attempt.number.saturating_sub(1);
    match deadline::plan::decide(policy, sent_before, deadline, crate::time::to_std(woke)) {
        deadline::Decision::Send(fresh) => PacedDecision::Send(Delayed {
            delay: Duration::ZERO,
            attempt: fresh,
        }),
        deadline::Decision::Stop(stop) => PacedDecision::Stop(stop),
    }
}

/// The random draws backoff jitter is taken from: SplitMix64 over one atomic counter, each draw
/// adding the golden gamma and mixing; no lock, no dependency, a few nanoseconds a draw (nothing
/// here needs unpredictability). Shared by every clone of a client; for other clients built on
/// the planner too.
#[derive(Debug)]
pub struct Draws(AtomicU64);

impl Draws {
    /// A sequence seeded from the standard library's per-process random keys.
    pub fn seeded() -> Draws {
        Draws(AtomicU64::new(RandomState::new().hash_one(0x5eed_u64)))
    }

    /// The next draw, uniform over `u32`.
    pub fn next(&self) -> u32 {
        const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut z = self
            .0
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_spread_over_the_whole_range() {
        let draws = Draws(AtomicU64::new(0));
        let mut buckets = [0u32; 8];
        for _ in 0..80_000 {
            buckets[(draws.next() >> 29) as usize] += 1;
        }
        for count in buckets {
            assert!((9_000..11_000).contains(&count), "{buckets:?}");
        }
    }

    fn same(a: &TargetBudget, b: &TargetBudget) -> bool {
        match (&a.0, &b.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The kept target's budget is the map's, however often it is reached, and each name has
    /// its own; the baseline and an unbudgeted client draw from none.
    #[tokio::test(start_paused = true)]
    async fn the_kept_target_reaches_the_same_budget_as_its_name() {
        let policy = CallPolicy::new(std::time::Duration::from_secs(1), 3).unwrap();
        let retries = Retries::new(RetrySettings::default());
        let now = Instant::now();
        let kept = retries.budget("inventory", &policy, now);
        let again = retries.budget("inventory", &policy, now);
        let by_name = retries.budget("inventory", &policy, now);
        let by_other_arc = retries.budget("inventory", &policy, now);
        assert!(same(&kept, &again) && same(&kept, &by_name) && same(&kept, &by_other_arc));
        let orders_budget = retries.budget("orders", &policy, now);
        assert!(orders_budget.0.is_some() && !same(&kept, &orders_budget));

        let baseline = policy.with_propagate(false);
        assert!(retries.budget("inventory", &baseline, now).0.is_none());
        let unbudgeted = Retries::new(RetrySettings::default().with_budget(None));
        assert!(unbudgeted.budget("inventory", &policy, now).0.is_none());
    }

    /// A target that is kept when the map is full shares the budget of the targets past the
    /// cap, as a lookup by its name would give.
    #[tokio::test(start_paused = true)]
    async fn a_target_kept_past_the_cap_shares_the_last_budget() {
        let policy = CallPolicy::new(std::time::Duration::from_secs(1), 3).unwrap();
        let retries = Retries::new(RetrySettings::default());
        let now = Instant::now();
        for n in 0..MAX_BUDGETS {
            retries.budget(&format!("target-{n}"), &policy, now);
        }
        let kept = retries.budget("late", &policy, now);
        let shared = retries.budget("another-late", &policy, now);
        let by_name = retries.budget("late", &policy, now);
        assert!(same(&kept, &shared) && same(&kept, &by_name));
        assert!(same(&kept, &retries.budget("late", &policy, now)));
    }

    /// Once kept, a target's budget is reached without the map's lock: a call made
    /// while another holds that lock does not wait for it.
    #[test]
    fn a_kept_target_does_not_take_the_maps_lock() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let policy = CallPolicy::new(std::time::Duration::from_secs(1), 3).unwrap();
        let retries = Retries::new(RetrySettings::default());
        let now = Instant::now();
        let kept = retries.budget("inventory", &policy, now);

        let held = retries.budgets.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let caller = Arc::clone(&retries);
        std::thread::spawn(move || {
            let _ = tx.send(caller.budget("inventory", &policy, now));
        });
        let reached = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        assert!(same(
            &kept,
            &reached.expect("reached while the map was locked")
        ));
    }

    /// A call woken late from its backoff sends what is true when it wakes, or nothing.
    #[test]
    fn a_late_wake_up_plans_again() {
        use std::time::Duration;
        let policy = CallPolicy::new(Duration::from_secs(1), 3).unwrap();
        let t0 = Instant::now();
        let deadline = Some(Deadline::after_duration(
            t0.into_std(),
            Duration::from_millis(300),
        ));
        let at = t0 + Duration::from_millis(20);
        let planned = match deadline::plan::decide(&policy, 1, deadline, at.into_std()) {
            deadline::Decision::Send(attempt) => PacedDecision::Send(Delayed {
                delay: Duration::from_millis(20),
                attempt,
            }),
            deadline::Decision::Stop(_) => unreachable!(),
        };
        assert_eq!(after_sleep(&policy, planned, at, at, deadline), planned);
        let late = at + Duration::from_millis(30);
        let PacedDecision::Send(fresh) = after_sleep(&policy, planned, at, late, deadline) else {
            panic!("still fits");
        };
        assert_eq!(
            fresh.attempt.budget.unwrap().as_millis(),
            200,
            "300 - 50 late - 50 margin"
        );
        let too_late = t0 + Duration::from_millis(250);
        assert!(matches!(
            after_sleep(&policy, planned, at, too_late, deadline),
            PacedDecision::Stop(Stop::NotEnoughTime { attempt: 2, .. })
        ));
    }
}
