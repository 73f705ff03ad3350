use super::*;
use proptest::prelude::*;

fn origin() -> Instant {
    #[allow(clippy::disallowed_methods)] // one arbitrary origin for the virtual clock
    Instant::now()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn slots(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

fn busy(ahead: usize, n: u32) -> QueueState {
    QueueState {
        free_slot: false,
        ahead,
        slots: slots(n),
    }
}

fn estimate_of(mean: Duration) -> WorkTimeEstimate {
    let mut estimate = WorkTimeEstimate::new();
    estimate.observe(mean);
    estimate
}

#[test]
fn expected_wait_counts_whole_rounds_of_the_slots() {
    // Inventory's shape: 8 slots, 100 ms of work.
    for (ahead, rounds) in [(0, 1), (1, 1), (7, 1), (8, 2), (15, 2), (16, 3), (79, 10)] {
        assert_eq!(
            expected_wait(ahead, slots(8), ms(100)),
            ms(100 * rounds),
            "{ahead} ahead"
        );
    }
    assert_eq!(expected_wait(0, slots(1), ms(100)), ms(100));
    assert_eq!(expected_wait(3, slots(1), ms(100)), ms(400));
    // Saturates instead of overflowing.
    assert_eq!(
        expected_wait(usize::MAX, slots(1), Duration::MAX),
        Duration::MAX
    );
}

#[test]
fn nothing_is_shed_with_a_free_slot_without_samples_or_without_a_deadline() {
    let t0 = origin();
    let nearly_spent = Some(Deadline::after_duration(t0, ms(1)));
    let free = QueueState {
        free_slot: true,
        ahead: 0,
        slots: slots(8),
    };
    let slow = estimate_of(ms(10_000));
    assert_eq!(
        admit(free, &slow, nearly_spent, ms(50), t0),
        Admission::Admit
    );
    assert_eq!(
        admit(
            busy(100, 8),
            &WorkTimeEstimate::new(),
            nearly_spent,
            ms(50),
            t0
        ),
        Admission::Admit
    );
    assert_eq!(
        admit(busy(100, 8), &slow, None, ms(50), t0),
        Admission::Admit
    );
}

#[test]
fn the_boundary_is_expected_wait_plus_min_useful() {
    let t0 = origin();
    let estimate = estimate_of(ms(100));
    // 8 ahead on 8 slots: two rounds, 200 ms; with 50 ms minimum the request needs 250 ms.
    let exactly = Some(Deadline::after_duration(t0, ms(250)));
    assert_eq!(
        admit(busy(8, 8), &estimate, exactly, ms(50), t0),
        Admission::Admit
    );
    let short = Some(Deadline::after_duration(
        t0,
        ms(250) - Duration::from_nanos(1),
    ));
    let Admission::Shed(shed) = admit(busy(8, 8), &estimate, short, ms(50), t0) else {
        panic!("a request a nanosecond short of the bound is shed");
    };
    assert_eq!(shed.expected_wait(), ms(200));
    assert_eq!(shed.min_useful(), ms(50));
    assert_eq!(shed.remaining(), ms(250) - Duration::from_nanos(1));
    assert_eq!(
        shed.to_string(),
        "shed: 249 ms left, expected wait for a worker 200 ms, work needs at least 50 ms"
    );
}

#[test]
fn an_expired_request_in_a_busy_queue_is_shed() {
    let t0 = origin();
    let deadline = Some(Deadline::after_duration(t0, ms(100)));
    let later = t0 + ms(500);
    let Admission::Shed(shed) = admit(busy(0, 8), &estimate_of(ms(1)), deadline, ms(1), later)
    else {
        panic!("an expired request cannot finish");
    };
    assert_eq!(shed.remaining(), Duration::ZERO);
}

#[test]
fn the_grant_recheck_uses_the_real_time_left() {
    let t0 = origin();
    let deadline = Some(Deadline::after_duration(t0, ms(300)));
    assert_eq!(
        admit_at_grant(deadline, ms(50), t0 + ms(250)),
        Admission::Admit
    );
    assert_eq!(
        admit_at_grant(deadline, ms(50), t0 + ms(251)),
        Admission::Shed(Shed {
            remaining: ms(49),
            expected_wait: Duration::ZERO,
            min_useful: ms(50),
            max_wait: None,
            lag: None,
        })
    );
    assert_eq!(
        admit_at_grant(None, ms(50), t0 + ms(10_000)),
        Admission::Admit
    );
}

#[test]
fn the_estimate_moves_an_eighth_of_the_way_to_each_sample() {
    let mut estimate = WorkTimeEstimate::new();
    assert_eq!(estimate.mean(), None);
    estimate.observe(ms(100));
    assert_eq!(estimate.mean(), Some(ms(100)));
    estimate.observe(ms(900)); // one slow request: +800 / 8
    assert_eq!(estimate.mean(), Some(ms(200)));
    estimate.observe(ms(40)); // -160 / 8
    assert_eq!(estimate.mean(), Some(ms(180)));
    for _ in 0..200 {
        estimate.observe(ms(100));
    }
    // Converges to the new level within a few dozen samples (integer steps stop short by < 8 ns).
    let mean = estimate.mean().expect("observed");
    assert!(
        mean >= ms(100) && mean < ms(100) + Duration::from_nanos(8),
        "{mean:?}"
    );
    // Samples beyond u64 nanoseconds saturate instead of wrapping.
    estimate.observe(Duration::MAX);
    assert!(estimate.mean().expect("observed") > Duration::from_secs(60 * 60 * 24 * 365));
}

/// When a request starts in a first-in-first-out queue: `remaining[i]` is how long busy worker
/// `i` still works, `work[j]` how long the `j`-th waiter ahead will work.
fn simulated_start(remaining: &[Duration], work: &[Duration]) -> Duration {
    let mut free_at = remaining.to_vec();
    for w in work {
        let (i, start) = free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one slot");
        free_at[i] = start + *w;
    }
    free_at.into_iter().min().expect("at least one slot")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// A request the rule admits starts in time whenever the estimate holds (every busy worker
    /// and every waiter ahead works at most the mean), and the bound is reached, so a request it
    /// sheds could really miss.
    #[test]
    fn the_expected_wait_bounds_the_real_wait_and_is_reached(
        n_slots in 1u32..=16,
        mean_ms in 1u64..=2_000,
        shares in proptest::collection::vec(0u32..=1_000, 16 + 64),
        ahead in 0usize..=64,
    ) {
        let mean = ms(mean_ms);
        let part = |share: u32| mean.mul_f64(f64::from(share) / 1_000.0);
        let remaining: Vec<Duration> =
            shares[..n_slots as usize].iter().map(|&s| part(s)).collect();
        let work: Vec<Duration> = shares[16..16 + ahead].iter().map(|&s| part(s)).collect();
        let bound = expected_wait(ahead, slots(n_slots), mean);
        prop_assert!(simulated_start(&remaining, &work) <= bound);
        let worst = simulated_start(&vec![mean; n_slots as usize], &vec![mean; ahead]);
        prop_assert_eq!(worst, bound);
    }

    /// More time left never turns an admission into a shed; more waiters ahead never turn a
    /// shed into an admission.
    #[test]
    fn admission_is_monotone(
        n_slots in 1u32..=16,
        mean_ms in 1u64..=2_000,
        ahead in 0usize..=200,
        more_ahead in 0usize..=200,
        budget_ms in 0u64..=20_000,
        more_ms in 0u64..=20_000,
        min_useful_ms in 1u64..=200,
    ) {
        let t0 = origin();
        let estimate = estimate_of(ms(mean_ms));
        let min_useful = ms(min_useful_ms);
        let at = |budget: u64, ahead: usize| {
            admit(busy(ahead, n_slots), &estimate, Some(Deadline::after_duration(t0, ms(budget))), min_useful, t0)
        };
        if at(budget_ms, ahead) == Admission::Admit {
            prop_assert_eq!(at(budget_ms + more_ms, ahead), Admission::Admit);
        } else {
            prop_assert!(matches!(at(budget_ms, ahead + more_ahead), Admission::Shed(_)));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// A request whose budget covers the worst case the estimate allows (every busy worker and
    /// every waiter ahead working the full mean, then its own `min_useful`) is never shed, and
    /// one that is shed would really miss in that worst case.
    #[test]
    fn a_request_that_would_certainly_finish_is_never_shed(
        n_slots in 1u32..=16,
        mean_ms in 1u64..=2_000,
        ahead in 0usize..=200,
        min_useful_ms in 1u64..=500,
        slack_ms in 0u64..=5_000,
        short_ms in 1u64..=5_000,
    ) {
        let t0 = origin();
        let (mean, min_useful) = (ms(mean_ms), ms(min_useful_ms));
        let estimate = estimate_of(mean);
        let worst_start = simulated_start(&vec![mean; n_slots as usize], &vec![mean; ahead]);
        let certain = worst_start + min_useful + ms(slack_ms);
        let deadline = Some(Deadline::after_duration(t0, certain));
        prop_assert_eq!(admit(busy(ahead, n_slots), &estimate, deadline, min_useful, t0), Admission::Admit);
        let short = (worst_start + min_useful).saturating_sub(ms(short_ms));
        let deadline = Some(Deadline::after_duration(t0, short));
        prop_assert!(matches!(admit(busy(ahead, n_slots), &estimate, deadline, min_useful, t0), Admission::Shed(_)));
    }
}

/// What a simulated overload run did: inventory's shape (8 slots, every request 100 ms of work,
/// `min_useful` 100 ms, 1000 ms budgets), arrivals evenly spaced, a first-in-first-out queue,
/// and admission fed a work-time estimate `bias` times the real work time.
#[derive(Debug, Default)]
struct Simulated {
    in_time: u64,
    shed_on_arrival: u64,
    shed_at_grant: u64,
    /// Refused on arrival although, served in order, it would have started in time.
    shed_needlessly: u64,
    missed_after_starting: u64,
    seconds: f64,
    /// How long each request answered in time waited for its slot.
    waits: Vec<Duration>,
}

impl Simulated {
    /// Requests answered in time per second, as a share of the 80/s capacity.
    fn goodput_share(&self) -> f64 {
        self.in_time as f64 / self.seconds / 80.0
    }

    /// The median wait of the requests answered in time.
    fn wait_p50(&self) -> Duration {
        let mut waits = self.waits.clone();
        waits.sort();
        waits.get(waits.len() / 2).copied().unwrap_or_default()
    }
}

fn simulate(load: f64, bias: f64) -> Simulated {
    simulate_capped(load, bias, None)
}

/// [`simulate`] with admission's cap on the expected wait.
fn simulate_capped(load: f64, bias: f64, max_wait: Option<Duration>) -> Simulated {
    const SLOTS: usize = 8;
    let work = ms(100);
    let (budget, min_useful) = (ms(1_000), ms(100));
    let t0 = origin();
    let mut estimate = WorkTimeEstimate::new();
    let mut free_at = vec![t0; SLOTS];
    let mut queue: std::collections::VecDeque<(Instant, Deadline)> = Default::default();
    let mut out = Simulated::default();
    let arrivals = (80.0 * load * 10.0) as u32; // ten seconds
    let period = Duration::from_secs_f64(1.0 / (80.0 * load));
    // Starts every queued request a slot frees for by `until`.
    let serve = |queue: &mut std::collections::VecDeque<(Instant, Deadline)>,
                 free_at: &mut Vec<Instant>,
                 estimate: &mut WorkTimeEstimate,
                 out: &mut Simulated,
                 until: Instant| {
        while let Some(&(arrived, deadline)) = queue.front() {
            let (slot, free) = free_at
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(_, t)| t)
                .expect("slots");
            let start = free.max(arrived);
            if start > until {
                break;
            }
            queue.pop_front();
            if let Admission::Shed(_) = admit_at_grant(Some(deadline), min_useful, start) {
                out.shed_at_grant += 1;
                continue;
            }
            free_at[slot] = start + work;
            estimate.observe(work.mul_f64(bias));
            if start + work <= deadline.instant() {
                out.in_time += 1;
                out.waits.push(start - arrived);
            } else {
                out.missed_after_starting += 1;
            }
        }
    };
    for i in 0..arrivals {
        let now = t0 + period * i;
        serve(&mut queue, &mut free_at, &mut estimate, &mut out, now);
        let deadline = Deadline::after_duration(now, budget);
        let state = QueueState {
            free_slot: queue.is_empty() && free_at.iter().any(|&t| t <= now),
            ahead: queue.len(),
            slots: slots(SLOTS as u32),
        };
        let decision = admit_capped(
            state,
            &estimate,
            Some(deadline),
            Some(min_useful),
            max_wait,
            now,
        );
        match decision {
            Admission::Admit => queue.push_back((now, deadline)),
            Admission::Shed(_) => {
                out.shed_on_arrival += 1;
                // Served in order behind the queue, when would it have started?
                let mut free = free_at.clone();
                for _ in 0..=queue.len() {
                    let (slot, t) = free
                        .iter()
                        .copied()
                        .enumerate()
                        .min_by_key(|&(_, t)| t)
                        .expect("slots");
                    free[slot] = t.max(now) + work;
                }
                let start = free.iter().copied().max().expect("slots") - work;
                if start + min_useful <= deadline.instant() {
                    out.shed_needlessly += 1;
                }
            }
        }
    }
    serve(
        &mut queue,
        &mut free_at,
        &mut estimate,
        &mut out,
        t0 + ms(3_600_000),
    );
    out.seconds = 10.0;
    out
}

#[test]
fn simulated_overload_keeps_goodput_at_capacity_even_with_an_estimate_wrong_by_two() {
    for load in [2.0, 4.0] {
        for bias in [0.5, 1.0, 2.0] {
            let run = simulate(load, bias);
            // Nothing started is cut: the grant re-check refuses what could not finish.
            assert_eq!(
                run.missed_after_starting, 0,
                "{load}x, bias {bias}: {run:?}"
            );
            assert!(run.goodput_share() >= 0.95, "{load}x, bias {bias}: {run:?}");
            if bias <= 1.0 {
                assert_eq!(run.shed_needlessly, 0, "{load}x, bias {bias}: {run:?}");
            }
        }
        // An estimate twice too high refuses on arrival requests that would have started in
        // time, but the queue it keeps (half as deep) still keeps every worker busy.
        let high = simulate(load, 2.0);
        assert!(high.shed_needlessly > 0, "{high:?}");
        // An estimate twice too low admits requests that then wait and are refused only at
        // the grant: those are the slow refusals.
        let low = simulate(load, 0.5);
        assert!(low.shed_at_grant > 0, "{low:?}");
        assert_eq!(simulate(load, 1.0).shed_at_grant, 0);
    }
}

#[test]
fn below_capacity_nothing_is_shed_whatever_the_estimate() {
    for bias in [0.5, 1.0, 2.0] {
        let run = simulate(0.9, bias);
        assert_eq!(
            (
                run.shed_on_arrival,
                run.shed_at_grant,
                run.missed_after_starting
            ),
            (0, 0, 0),
            "bias {bias}: {run:?}"
        );
    }
}

/// The reference overload (8 slots, 100 ms, 1 s budgets) with a cap of 200 ms on the expected
/// wait: at 2x and 4x the requests answered in time waited at most the cap (the queue settles
/// at the cap, so about the cap; without it, most of the 1 s budget), with the same goodput;
/// nothing admitted is refused later. At exactly 1x (evenly spaced arrivals) the cap costs
/// nothing.
#[test]
fn a_cap_on_the_wait_keeps_the_queue_short_at_the_same_goodput() {
    for load in [2.0, 4.0] {
        let uncapped = simulate(load, 1.0);
        let capped = simulate_capped(load, 1.0, Some(ms(200)));
        assert!(uncapped.wait_p50() >= ms(700), "{load}x: {uncapped:?}");
        assert!(
            capped.wait_p50() <= ms(200),
            "{load}x: {:?}",
            capped.wait_p50()
        );
        let longest = capped.waits.iter().max().copied().unwrap_or_default();
        assert!(longest <= ms(200), "{load}x: waited {longest:?}");
        assert!(capped.goodput_share() >= 0.95, "{load}x: {capped:?}");
        assert_eq!(
            (capped.shed_at_grant, capped.missed_after_starting),
            (0, 0),
            "{load}x"
        );
    }
    let at_capacity = simulate_capped(1.0, 1.0, Some(ms(200)));
    assert_eq!(at_capacity.shed_on_arrival, 0, "{at_capacity:?}");
}

#[test]
fn the_cap_sheds_on_the_expected_wait_alone() {
    let t0 = origin();
    let estimate = estimate_of(ms(100));
    let long = Some(Deadline::after_duration(t0, ms(10_000)));
    // 8 slots, 100 ms: 15 ahead is two rounds (200 ms), 16 ahead is three.
    assert_eq!(
        admit_capped(busy(15, 8), &estimate, long, None, Some(ms(200)), t0),
        Admission::Admit
    );
    let Admission::Shed(shed) = admit_capped(busy(16, 8), &estimate, long, None, Some(ms(200)), t0)
    else {
        panic!("three rounds is above the cap");
    };
    assert_eq!(shed.max_wait(), Some(ms(200)));
    assert_eq!(shed.expected_wait(), ms(300));
    assert_eq!(
        shed.to_string(),
        "shed: expected wait for a worker 300 ms, above the cap of 200 ms"
    );
    // Not without a deadline, a sample, or with a free slot; and the budget rule still holds.
    assert_eq!(
        admit_capped(busy(16, 8), &estimate, None, None, Some(ms(200)), t0),
        Admission::Admit
    );
    assert_eq!(
        admit_capped(
            busy(16, 8),
            &WorkTimeEstimate::new(),
            long,
            None,
            Some(ms(200)),
            t0
        ),
        Admission::Admit
    );
    let short = Some(Deadline::after_duration(t0, ms(150)));
    let Admission::Shed(shed) = admit_capped(
        busy(0, 8),
        &estimate,
        short,
        Some(ms(100)),
        Some(ms(200)),
        t0,
    ) else {
        panic!("100 ms of wait and 100 ms of work do not fit 150 ms");
    };
    assert_eq!(shed.max_wait(), None);
    assert_eq!(
        admit_capped(busy(16, 8), &estimate, long, Some(ms(100)), None, t0),
        admit(busy(16, 8), &estimate, long, ms(100), t0)
    );
}

/// The simulation's figures for the documentation, one row per load and estimate bias:
/// `cargo test -p deadline-core --lib simulated_overload_figures -- --nocapture` prints them. Each
/// row's requests are all accounted for.
#[test]
fn simulated_overload_figures() {
    println!(
        "load  estimate  in time  shed on arrival (needlessly)  shed at grant  missed after starting"
    );
    for load in [2.0, 4.0] {
        for bias in [1.0, 0.5, 2.0] {
            let run = simulate(load, bias);
            println!(
                "{load:>3}x  {bias:>5}x    {:>6}  {:>15} ({:>10})  {:>13}  {:>21}",
                run.in_time,
                run.shed_on_arrival,
                run.shed_needlessly,
                run.shed_at_grant,
                run.missed_after_starting
            );
            let arrivals = (80.0 * load * 10.0) as u64;
            assert_eq!(
                run.in_time + run.shed_on_arrival + run.shed_at_grant + run.missed_after_starting,
                arrivals,
                "{load}x, bias {bias}: {run:?}"
            );
        }
    }
}

#[test]
fn the_lag_rule_sheds_from_its_bound_on_whatever_the_deadline() {
    let max_lag = ms(20);
    for remaining in [None, Some(ms(1)), Some(ms(10_000))] {
        assert_eq!(admit_on_lag(ms(0), max_lag, remaining), Admission::Admit);
        assert_eq!(admit_on_lag(ms(19), max_lag, remaining), Admission::Admit);
        for lag in [ms(20), ms(21), Duration::MAX] {
            let Admission::Shed(shed) = admit_on_lag(lag, max_lag, remaining) else {
                panic!("{lag:?} late admitted with {remaining:?} left");
            };
            assert_eq!(shed.lag(), Some((lag, max_lag)));
            assert_eq!(shed.max_wait(), None);
            assert_eq!(shed.remaining(), remaining.unwrap_or(Duration::MAX));
        }
    }
    let Admission::Shed(shed) = admit_on_lag(ms(35), max_lag, None) else {
        panic!("35 ms late admitted");
    };
    assert_eq!(
        shed.to_string(),
        "shed: the service runs 35 ms late, more than the 20 ms it allows"
    );
}

proptest! {
    /// The lag rule's one property: it sheds exactly from its bound on, and nothing else matters.
    #[test]
    fn the_lag_rule_is_a_bound_on_the_lag(lag in 0u64..10_000, max in 1u64..10_000, left in proptest::option::of(0u64..10_000)) {
        let decision = admit_on_lag(ms(lag), ms(max), left.map(ms));
        prop_assert_eq!(matches!(decision, Admission::Shed(_)), lag >= max);
    }
}
