use std::task::Waker;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn deadline_in(now: Instant, after: Duration) -> Option<Deadline> {
    Some(Deadline::after_duration(time::to_std(now), after))
}

fn slots(count: usize, order: QueueOrder, min_useful: Option<Duration>) -> Arc<Slots> {
    Arc::new(Slots::new(count, order, min_useful))
}

fn start(arrival: Arrival) -> Slot {
    match arrival {
        Arrival::Start(slot) => slot,
        Arrival::Wait(_) => panic!("waited with a free slot"),
        Arrival::Shed(shed) => panic!("shed with a free slot: {shed}"),
        Arrival::QueueFull { waiting } => panic!("queue full with a free slot: {waiting}"),
    }
}

fn wait(arrival: Arrival) -> Waiter {
    match arrival {
        Arrival::Wait(waiter) => waiter,
        Arrival::Start(_) => panic!("started with every slot busy"),
        Arrival::Shed(shed) => panic!("shed: {shed}"),
        Arrival::QueueFull { waiting } => panic!("queue full: {waiting} waiting"),
    }
}

/// Polls `waiter` once: the slot if it was handed one.
fn poll(waiter: &mut Waiter) -> Option<Slot> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(waiter).poll(&mut cx) {
        Poll::Ready(slot) => Some(slot),
        Poll::Pending => None,
    }
}

/// Gives back the one busy slot, then each served waiter's slot in turn, and returns the
/// waiters' labels in the order they were served.
fn served_order(busy: Slot, mut waiters: Vec<(&'static str, Waiter)>) -> Vec<&'static str> {
    let mut order = Vec::new();
    let mut current = busy;
    while !waiters.is_empty() {
        drop(current);
        let (index, slot) = waiters
            .iter_mut()
            .enumerate()
            .find_map(|(i, (_, waiter))| poll(waiter).map(|slot| (i, slot)))
            .expect("a slot given back goes to a waiter");
        order.push(waiters.remove(index).0);
        current = slot;
    }
    order
}

#[tokio::test(start_paused = true)]
async fn fifo_serves_in_arrival_order_whatever_the_deadlines() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Fifo, None);
    let busy = start(slots.arrive(None));
    let waiters = vec![
        ("late", wait(slots.arrive(deadline_in(now, ms(900))))),
        ("none", wait(slots.arrive(None))),
        ("soon", wait(slots.arrive(deadline_in(now, ms(100))))),
    ];
    assert_eq!(served_order(busy, waiters), ["late", "none", "soon"]);
    assert_eq!(slots.free(), 1);
}

#[tokio::test(start_paused = true)]
async fn edf_serves_the_earliest_deadline_first_and_the_deadline_less_last_in_arrival_order() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Edf, None);
    let busy = start(slots.arrive(None));
    let waiters = vec![
        ("none-1", wait(slots.arrive(None))),
        ("900", wait(slots.arrive(deadline_in(now, ms(900))))),
        ("100-a", wait(slots.arrive(deadline_in(now, ms(100))))),
        ("none-2", wait(slots.arrive(None))),
        ("300", wait(slots.arrive(deadline_in(now, ms(300))))),
        ("100-b", wait(slots.arrive(deadline_in(now, ms(100))))),
    ];
    assert_eq!(
        served_order(busy, waiters),
        ["100-a", "100-b", "300", "900", "none-1", "none-2"]
    );
    assert_eq!(slots.free(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_the_list_at_once() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Edf, None);
    let busy = start(slots.arrive(None));
    let mut first = wait(slots.arrive(deadline_in(now, ms(100))));
    assert!(poll(&mut first).is_none());
    let second = wait(slots.arrive(deadline_in(now, ms(200))));
    drop(first);
    assert_eq!(
        slots.lock().waiting.len(),
        1,
        "the dropped waiter's entry is gone"
    );
    // The slot goes to the live waiter, not to the one that left.
    assert_eq!(served_order(busy, vec![("second", second)]), ["second"]);
    assert_eq!(slots.free(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_slot_granted_to_a_waiter_dropped_before_it_took_it_passes_on() {
    let slots = slots(1, QueueOrder::Fifo, None);
    let busy = start(slots.arrive(None));
    let granted = wait(slots.arrive(None));
    let mut next = wait(slots.arrive(None));
    drop(busy);
    assert_eq!(slots.lock().granted.len(), 1);
    drop(granted);
    let slot = poll(&mut next).expect("the grant passed on to the next waiter");
    assert!(slots.lock().granted.is_empty());
    drop(slot);
    assert_eq!(slots.free(), 1);
    // And with nobody left to pass it to, it is simply free again.
    let busy = start(slots.arrive(None));
    let granted = wait(slots.arrive(None));
    drop(busy);
    drop(granted);
    assert_eq!(slots.free(), 1);
}

#[tokio::test(start_paused = true)]
async fn admission_sheds_only_when_busy_after_a_sample_and_with_a_deadline() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Fifo, Some(ms(100)));
    let short = deadline_in(now, ms(150));
    // A free slot: never shed, however short the budget.
    let mut busy = start(slots.arrive(deadline_in(now, ms(1))));
    // Busy, but no work time observed yet: queued.
    let early = wait(slots.arrive(short));
    drop(early);
    // One 100 ms piece of work observed.
    busy.begin(|| None, now).expect("started");
    tokio::time::advance(ms(100)).await;
    drop(busy);
    let now = Instant::now();
    let _busy = start(slots.arrive(None));
    // Expected wait 100 ms + 100 ms of work: 150 ms is not enough, 200 ms is.
    match slots.arrive(deadline_in(now, ms(150))) {
        Arrival::Shed(shed) => {
            assert_eq!(shed.expected_wait(), ms(100));
            assert_eq!(shed.remaining(), ms(150));
        }
        _ => panic!("not shed"),
    }
    let _fits = wait(slots.arrive(deadline_in(now, ms(200))));
    // Without a deadline, never.
    let _none = wait(slots.arrive(None));
    // One waiter ahead now (the deadline-less one is behind in EDF, ahead in FIFO): two rounds.
    match slots.arrive(deadline_in(now, ms(350))) {
        Arrival::Shed(shed) => assert_eq!(shed.expected_wait(), ms(300)),
        _ => panic!("not shed"),
    }
}

#[tokio::test(start_paused = true)]
async fn edf_admission_counts_only_the_waiters_served_before() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Edf, Some(ms(100)));
    let mut busy = start(slots.arrive(None));
    busy.begin(|| None, now).expect("started");
    tokio::time::advance(ms(100)).await;
    drop(busy);
    let now = Instant::now();
    let _busy = start(slots.arrive(None));
    let _late = wait(slots.arrive(deadline_in(now, ms(5_000))));
    let _none = wait(slots.arrive(None));
    // Nobody with an earlier deadline is waiting: one round, so 250 ms is enough.
    let _urgent = wait(slots.arrive(deadline_in(now, ms(250))));
}

#[tokio::test(start_paused = true)]
async fn the_grant_re_checks_with_the_time_really_left() {
    let now = Instant::now();
    let slots = slots(1, QueueOrder::Fifo, Some(ms(100)));
    let busy = start(slots.arrive(None));
    let mut waiter = wait(slots.arrive(deadline_in(now, ms(150))));
    tokio::time::advance(ms(60)).await;
    drop(busy);
    let mut slot = poll(&mut waiter).expect("granted");
    let shed = slot
        .begin(|| deadline_in(now, ms(150)), Instant::now())
        .expect_err("90 ms left is less than the 100 ms of work");
    assert_eq!(shed.remaining(), ms(90));
    drop(slot);
    assert_eq!(slots.free(), 1, "a slot never used is given back");
    // Taken straight from a free slot, the same request is not re-checked.
    let mut slot = start(slots.arrive(deadline_in(now, ms(150))));
    slot.begin(|| deadline_in(now, ms(150)), Instant::now())
        .expect("a free slot is never refused");
}

#[test]
fn queue_orders_parse_and_print() {
    assert_eq!("fifo".parse(), Ok(QueueOrder::Fifo));
    assert_eq!("edf".parse(), Ok(QueueOrder::Edf));
    assert_eq!(QueueOrder::default(), QueueOrder::Fifo);
    assert_eq!(QueueOrder::Edf.to_string(), "edf");
    let err = "LIFO\n".parse::<QueueOrder>().expect_err("unknown");
    assert_eq!(
        err.to_string(),
        r#"unknown queue order "LIFO\\n": expected fifo or edf"#
    );
}
