//! What one run of `deadline jobs` saw, shared by its producer, consumers and accounting: each
//! message accounted for once by its id (the payload), later copies counted as duplicates, and
//! every piece of work recorded when it ends, however it ends.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::report::{Counts, WorkRecord};

/// How a message was accounted for, the first time a copy of it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Worked,
    DiscardedByConsumer,
    DiscardedByBroker,
    DiscardedByProducer,
    Cut,
    Other,
}

/// Which messages have been accounted for, and how.
struct Accounts {
    /// Indexed by message id (the payload): whether a copy was accounted for.
    seen: Vec<bool>,
    /// How many ids are in `seen`.
    settled: u64,
    counts: Counts,
}

/// What the producer, the consumers and the accounting saw, shared by their tasks.
pub(super) struct Tally {
    accounts: Mutex<Accounts>,
    /// Deliveries the broker flagged as delivered before.
    pub(super) redelivered: AtomicU64,
    records: Mutex<Vec<WorkRecord>>,
}

impl Tally {
    /// A tally for messages with ids `0..total`.
    pub(super) fn new(total: u64) -> Tally {
        Tally {
            accounts: Mutex::new(Accounts {
                seen: vec![false; usize::try_from(total).unwrap_or(usize::MAX)],
                settled: 0,
                counts: Counts::default(),
            }),
            redelivered: AtomicU64::new(0),
            records: Mutex::new(Vec::new()),
        }
    }

    fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Accounts for one copy of the message whose payload is `payload`: the first copy of an id
    /// counts as `outcome`, any later one as a duplicate. A payload that is no id of this run
    /// counts as `other` (and never completes the run).
    pub(super) fn account(&self, payload: &[u8], outcome: Outcome) {
        let id = std::str::from_utf8(payload)
            .ok()
            .and_then(|text| text.parse::<usize>().ok());
        let mut accounts = self.accounts();
        let first = match id.and_then(|id| accounts.seen.get_mut(id)) {
            None => {
                accounts.counts.other += 1;
                return;
            }
            Some(seen) => !std::mem::replace(seen, true),
        };
        if !first {
            accounts.counts.duplicates += 1;
            return;
        }
        accounts.settled += 1;
        let counts = &mut accounts.counts;
        *match outcome {
            Outcome::Worked => &mut counts.worked,
            Outcome::DiscardedByConsumer => &mut counts.discarded_by_consumer,
            Outcome::DiscardedByBroker => &mut counts.discarded_by_broker,
            Outcome::DiscardedByProducer => &mut counts.discarded_by_producer,
            Outcome::Cut => &mut counts.cut_at_deadline,
            Outcome::Other => &mut counts.other,
        } += 1;
    }

    /// How many of the run's messages have been accounted for.
    pub(super) fn settled(&self) -> u64 {
        self.accounts().settled
    }

    pub(super) fn counts(&self) -> Counts {
        self.accounts().counts
    }

    fn record(&self, record: WorkRecord) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }

    /// Every piece of work recorded so far, taken out of the tally.
    pub(super) fn take_records(&self) -> Vec<WorkRecord> {
        std::mem::take(&mut *self.records.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Records one piece of work when it ends, however it ends: finished, or dropped at the
/// message's deadline.
pub(super) struct Working {
    pub(super) tally: Arc<Tally>,
    pub(super) began: Instant,
    pub(super) began_ms: f64,
    pub(super) age_ms: f64,
    pub(super) expired: bool,
}

impl Drop for Working {
    fn drop(&mut self) {
        let work_ms = Instant::now()
            .saturating_duration_since(self.began)
            .as_secs_f64()
            * 1e3;
        self.tally.record(WorkRecord {
            began_ms: self.began_ms,
            age_ms: self.age_ms,
            work_ms,
            expired: self.expired,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_is_accounted_for_once_and_copies_are_duplicates() {
        let tally = Tally::new(4);
        tally.account(b"0", Outcome::Worked);
        tally.account(b"1", Outcome::DiscardedByConsumer);
        // The first copy of 0 was worked but its acknowledgement lost: it comes again.
        tally.account(b"0", Outcome::DiscardedByConsumer);
        tally.account(b"2", Outcome::DiscardedByProducer);
        // The first broker kept the copy the producer gave up on.
        tally.account(b"2", Outcome::DiscardedByBroker);
        assert_eq!(tally.settled(), 3);
        tally.account(b"not an id", Outcome::Worked);
        tally.account(b"4", Outcome::Worked);
        assert_eq!(tally.settled(), 3, "ids outside the run never complete it");
        tally.account(b"3", Outcome::Cut);
        assert_eq!(tally.settled(), 4);
        let counts = tally.counts();
        assert_eq!(
            (
                counts.worked,
                counts.discarded_by_consumer,
                counts.discarded_by_producer,
                counts.discarded_by_broker,
                counts.cut_at_deadline,
                counts.other,
                counts.duplicates
            ),
            (1, 1, 1, 0, 1, 2, 2)
        );
    }
}
