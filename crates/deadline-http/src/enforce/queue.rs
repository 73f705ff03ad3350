//! The worker slots and their wait list: served first in, first out, or earliest deadline first,
//! with optional predictive admission at arrival.
//!
//! # Why not tokio's `Semaphore`
//!
//! A semaphore serves its waiters in arrival order and cannot say how many are waiting. Earliest
//! deadline first needs the waiters in another order, and admission needs to know how many wait
//! ahead of a newcomer. So the slots are a count of free slots and an ordered wait list behind
//! one mutex: a `BTreeMap` keyed by `(no deadline, deadline, arrival number)`. In FIFO order every
//! key's deadline part is empty and the arrival number alone orders them; in EDF order the
//! earliest deadline comes first, requests without a deadline after every request with one, and
//! ties (and the deadline-less) in arrival order.
//!
//! With a free slot a request takes it under the lock and starts: one lock on arrival and one
//! when the slot is given back, in either order (a semaphore's release takes its wait-list lock
//! too). The wait list is touched only when every slot is busy.
//!
//! # Cancel safety
//!
//! A waiting request is an entry in the list and a [`Waiter`] future. Dropping the future (the
//! caller hung up, or the request gave up at its cutoff) removes the entry at once, so no stale
//! entry is ever handed a slot. A slot given back goes to the first entry: the entry moves from
//! the list to a short list of *granted* arrival numbers (at most one per slot) and its task is
//! woken. If that waiter is dropped before it is polled again, its drop finds itself granted and
//! passes the slot on to the next waiter, so a slot is never lost between a grant and a drop.
//!
//! # Admission
//!
//! With admission on, a request that finds every slot busy is weighed by the core's
//! [`admit`](deadline::admission::admit) against the waiters that would be served before it (in
//! EDF order, those with an earlier deadline: counting them walks that part of the list) and a
//! moving average of the work times of the slots given back. When it is granted a slot after
//! queuing, [`Slot::begin`] re-checks it with the real time left
//! ([`admit_at_grant`](deadline::admission::admit_at_grant)). A cap on the expected wait
//! ([`admit_capped`](deadline::admission::admit_capped)) is weighed at arrival the same way, and
//! only there.
//!
//! # A runtime running late
//!
//! With a bound on the runtime's lag ([`Slots::max_lag`]), an arrival is first weighed by the
//! core's [`admit_on_lag`](deadline::admission::admit_on_lag) against how late the service's
//! own timer fires ([`lag`]): while the processor is the bottleneck, every arrival is refused
//! at once, free slot or not, before it costs any work or a call downstream. It is checked
//! before the lock, with two atomic loads and one clock read.

mod lag;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use deadline::Deadline;
use deadline::admission::{self, Admission, QueueState, Shed, WorkTimeEstimate};
use tokio::time::Instant;

use crate::time;

/// The order in which requests waiting for a worker slot are served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueOrder {
    /// First in, first out (the default).
    #[default]
    Fifo,
    /// Earliest deadline first: requests without a deadline after every request with one, ties
    /// in arrival order.
    Edf,
}

impl QueueOrder {
    /// `fifo` or `edf`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueOrder::Fifo => "fifo",
            QueueOrder::Edf => "edf",
        }
    }
}

impl fmt::Display for QueueOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A queue order other than `fifo` or `edf`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownQueueOrder(String);

impl fmt::Display for UnknownQueueOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown queue order {:?}: expected fifo or edf",
            self.0.escape_debug().to_string()
        )
    }
}

impl std::error::Error for UnknownQueueOrder {}

impl FromStr for QueueOrder {
    type Err = UnknownQueueOrder;

    fn from_str(s: &str) -> Result<QueueOrder, UnknownQueueOrder> {
        match s {
            "fifo" => Ok(QueueOrder::Fifo),
            "edf" => Ok(QueueOrder::Edf),
            other => Err(UnknownQueueOrder(other.to_owned())),
        }
    }
}

/// A layer's worker slots: the free count, the wait list and the work-time estimate.
pub(crate) struct Slots {
    list: Mutex<WaitList>,
    count: NonZeroU32,
    order: QueueOrder,
    /// The least budget worth starting with, when admission is on.
    min_useful: Option<Duration>,
    /// The cap on the expected wait, when it is on.
    max_wait: Option<Duration>,
    /// The longest the wait list may grow, if bounded.
    max_queue: Option<usize>,
    /// The most the runtime may run late before arrivals are refused, if bounded.
    max_lag: Option<Duration>,
    /// How late the runtime runs (read only with `max_lag`).
    lag: lag::LagClock,
}

/// Everything behind the lock.
struct WaitList {
    free: u32,
    next_seq: u64,
    /// Waiting requests in the order they are served, with the waker of each one's task (none
    /// until it is first polled).
    waiting: BTreeMap<Key, Option<Waker>>,
    /// Arrival numbers of waiters handed a slot that have not taken it yet (at most one per
    /// slot).
    granted: Vec<u64>,
    estimate: WorkTimeEstimate,
}

/// A waiter's place: ordered by deadline class, deadline, then arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    /// EDF: no deadline, so after everyone with one.
    no_deadline: bool,
    /// EDF: the deadline (always `None` in FIFO order).
    at: Option<Instant>,
    /// Arrival number: the order within equal deadlines, and the FIFO order.
    seq: u64,
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = self.lock();
        f.debug_struct("Slots")
            .field("count", &self.count)
            .field("free", &list.free)
            .field("waiting", &list.waiting.len())
            .field("order", &self.order)
            .field("min_useful", &self.min_useful)
            .field("max_wait", &self.max_wait)
            .field("max_lag", &self.max_lag)
            .finish()
    }
}

/// What a request found on arrival.
pub(crate) enum Arrival {
    /// A free slot: start now.
    Start(Slot),
    /// Every slot busy: wait in the list.
    Wait(Waiter),
    /// Every slot busy, and admission says it could not finish.
    Shed(Shed),
    /// Every slot busy and the wait list at its limit (`waiting` long).
    QueueFull { waiting: usize },
}

impl Slots {
    /// `count` slots (clamped to 1..=`u32::MAX`), served in `order`; with `min_useful`,
    /// predictive admission is on.
    pub(crate) fn new(count: usize, order: QueueOrder, min_useful: Option<Duration>) -> Slots {
        let count = u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        let count = NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN);
        Slots {
            list: Mutex::new(WaitList {
                free: count.get(),
                next_seq: 0,
                waiting: BTreeMap::new(),
                granted: Vec::new(),
                estimate: WorkTimeEstimate::new(),
            }),
            count,
            order,
            min_useful,
            max_wait: None,
            max_queue: None,
            max_lag: None,
            lag: lag::LagClock::new(),
        }
    }

    /// The same slots refusing every arrival while the runtime runs `max_lag` late or more
    /// (`None`: no bound).
    pub(crate) fn max_lag(mut self, max_lag: Option<Duration>) -> Slots {
        self.max_lag = max_lag;
        self
    }

    /// The same slots with admission's cap on the expected wait (`None`: no cap).
    pub(crate) fn max_wait(mut self, max_wait: Option<Duration>) -> Slots {
        self.max_wait = max_wait;
        self
    }

    /// Whether arrivals are weighed (admission, or the cap on the wait), so work times are
    /// observed.
    fn weighs(&self) -> bool {
        self.min_useful.is_some() || self.max_wait.is_some()
    }

    /// Bounds the wait list: with `max` waiting, an arrival that finds no free slot is refused.
    pub(crate) fn max_queue(mut self, max: Option<usize>) -> Slots {
        self.max_queue = max;
        self
    }

    /// How many slots there are.
    pub(crate) fn count(&self) -> usize {
        usize::try_from(self.count.get()).unwrap_or(usize::MAX)
    }

    /// How many slots are free now.
    pub(crate) fn free(&self) -> u32 {
        self.lock().free
    }

    /// A request with `deadline` (if any) arrives: takes a free slot, joins the wait list, or
    /// (with admission on) is shed. The clock is read only to weigh a request for admission.
    pub(crate) fn arrive(self: &Arc<Self>, deadline: Option<Deadline>) -> Arrival {
        if let Some(max_lag) = self.max_lag {
            let now = Instant::now();
            let remaining = deadline.map(|d| d.remaining(time::to_std(now)));
            if let Admission::Shed(shed) =
                admission::admit_on_lag(self.lag.lag(now), max_lag, remaining)
            {
                return Arrival::Shed(shed);
            }
        }
        let mut list = self.lock();
        if list.free > 0 {
            list.free -= 1;
            return Arrival::Start(Slot::new(self.clone(), false));
        }
        if self.max_queue.is_some_and(|max| list.waiting.len() >= max) {
            return Arrival::QueueFull {
                waiting: list.waiting.len(),
            };
        }
        let key = self.key(&mut list, deadline);
        if let (true, Some(_)) = (self.weighs(), deadline) {
            let ahead = match self.order {
                QueueOrder::Fifo => list.waiting.len(),
                QueueOrder::Edf => list.waiting.range(..key).count(),
            };
            let queue = QueueState {
                free_slot: false,
                ahead,
                slots: self.count,
            };
            let decision = admission::admit_capped(
                queue,
                &list.estimate,
                deadline,
                self.min_useful,
                self.max_wait,
                time::now(),
            );
            if let Admission::Shed(shed) = decision {
                return Arrival::Shed(shed);
            }
        }
        Arrival::Wait(self.enqueue(&mut list, key))
    }

    /// Takes a slot, waiting without a deadline as long as it takes; never shed (baseline mode).
    #[cfg(feature = "baseline")]
    pub(crate) async fn acquire(self: &Arc<Self>) -> Slot {
        let waiter = {
            let mut list = self.lock();
            if list.free > 0 {
                list.free -= 1;
                return Slot::new(self.clone(), false);
            }
            let key = self.key(&mut list, None);
            self.enqueue(&mut list, key)
        };
        waiter.await
    }

    /// The next arrival's place in the list.
    fn key(&self, list: &mut WaitList, deadline: Option<Deadline>) -> Key {
        let seq = list.next_seq;
        list.next_seq += 1;
        match (self.order, deadline) {
            (QueueOrder::Fifo, _) => Key {
                no_deadline: false,
                at: None,
                seq,
            },
            (QueueOrder::Edf, Some(deadline)) => Key {
                no_deadline: false,
                at: Some(time::to_tokio(deadline)),
                seq,
            },
            (QueueOrder::Edf, None) => Key {
                no_deadline: true,
                at: None,
                seq,
            },
        }
    }

    fn enqueue(self: &Arc<Self>, list: &mut WaitList, key: Key) -> Waiter {
        list.waiting.insert(key, None);
        Waiter {
            slots: self.clone(),
            key,
            done: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, WaitList> {
        // Every change under the lock is a few plain assignments that cannot panic half-way;
        // a poisoned lock still holds a consistent list.
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WaitList {
    /// A slot came back: hand it to the first waiter (returning its waker, to wake once the lock
    /// is released), or free it.
    fn release(&mut self) -> Option<Waker> {
        match self.waiting.pop_first() {
            Some((key, waker)) => {
                self.granted.push(key.seq);
                waker
            }
            None => {
                self.free += 1;
                None
            }
        }
    }

    /// Takes back `seq`'s grant, if it has one.
    fn take_grant(&mut self, seq: u64) -> bool {
        match self.granted.iter().position(|&granted| granted == seq) {
            Some(index) => {
                self.granted.swap_remove(index);
                true
            }
            None => false,
        }
    }
}

/// A worker slot, given back when dropped (to the next waiter, if any).
pub(crate) struct Slot {
    slots: Arc<Slots>,
    /// Got after waiting in the list (so re-checked by admission before the work starts).
    queued: bool,
    /// When the work started on it: its work time feeds the estimate when it is given back.
    work_start: Option<Instant>,
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("queued", &self.queued)
            .field("work_start", &self.work_start)
            .finish_non_exhaustive()
    }
}

impl Slot {
    fn new(slots: Arc<Slots>, queued: bool) -> Slot {
        Slot {
            slots,
            queued,
            work_start: None,
        }
    }

    /// The work of a request with `deadline` (read only when needed) is about to start on this
    /// slot at `now`. With admission on, a request that queued for the slot and has less than
    /// `min_useful` left is shed instead (the slot then goes to the next waiter when dropped).
    pub(crate) fn begin(
        &mut self,
        deadline: impl FnOnce() -> Option<Deadline>,
        now: Instant,
    ) -> Result<(), Shed> {
        if let (true, Some(min_useful)) = (self.queued, self.slots.min_useful) {
            if let Admission::Shed(shed) =
                admission::admit_at_grant(deadline(), min_useful, time::to_std(now))
            {
                return Err(shed);
            }
        }
        self.work_start = Some(now);
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let work = match (self.work_start, self.slots.weighs()) {
            // The estimate is read only by admission: no clock read without it.
            (Some(start), true) => Some(Instant::now().saturating_duration_since(start)),
            _ => None,
        };
        let waker = {
            let mut list = self.slots.lock();
            if let Some(work) = work {
                list.estimate.observe(work);
            }
            list.release()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A place in the wait list: resolves to a [`Slot`] when one is handed to it. Dropping it leaves
/// the list at once (passing on a slot it was handed but had not taken).
pub(crate) struct Waiter {
    slots: Arc<Slots>,
    key: Key,
    /// The slot was taken: nothing to clean up.
    done: bool,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("key", &self.key)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Future for Waiter {
    type Output = Slot;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Slot> {
        let this = &mut *self;
        if this.done {
            // Polled after it resolved: it has nothing more to give.
            return Poll::Pending;
        }
        let mut list = this.slots.lock();
        if list.take_grant(this.key.seq) {
            drop(list);
            this.done = true;
            return Poll::Ready(Slot::new(this.slots.clone(), true));
        }
        if let Some(waker) = list.waiting.get_mut(&this.key) {
            match waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let waker = {
            let mut list = self.slots.lock();
            if list.take_grant(self.key.seq) {
                // Handed a slot it will never use: pass it on.
                list.release()
            } else {
                list.waiting.remove(&self.key);
                None
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests;
