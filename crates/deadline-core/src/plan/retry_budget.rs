//! A retry budget: retries as a share of recent requests, so an outage cannot multiply load.
//!
//! A per-call limit of `attempts` does not bound what retries do to a callee that is down: every
//! request becomes `attempts` calls, and with several hops retrying the product (3 × 3 = 9 calls
//! per user request in the demo's chain). A retry budget bounds retries across calls instead:
//!
//! ```text
//! retries in the window  ≤  ratio × requests in the window  +  min_per_second × window
//! ```
//!
//! with a 10 s window, a ratio of 20 % and 10 retries a second by default. While the callee is
//! healthy almost no retry is refused (most requests need none); during an outage retries settle
//! at a fifth of the requests, plus a trickle that keeps low-traffic callers able to retry at all.
//! A hedge counts as a retry.
//!
//! The window slides in steps of a tenth of its length: counts are kept in ten slots, and a slot
//! leaves the window whole. The type is pure (every method takes `now`) and not shared by itself:
//! a client that is cloned keeps one behind a lock, so every clone draws from the same budget.

use std::time::{Duration, Instant};

/// How many slots the window is kept in.
const SLOTS: usize = 10;

/// The settings of a [`RetryBudget`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudgetConfig {
    window: Duration,
    ratio_per_mille: u32,
    min_per_second: u32,
}

impl RetryBudgetConfig {
    /// 10 s window, 20 % of requests, 10 retries a second.
    pub const DEFAULT: RetryBudgetConfig = RetryBudgetConfig {
        window: Duration::from_secs(10),
        ratio_per_mille: 200,
        min_per_second: 10,
    };

    /// A budget over `window` (at least 10 ms, so each slot is at least 1 ms), allowing
    /// `ratio_per_mille` thousandths of the requests as retries plus `min_per_second` retries a
    /// second.
    pub fn new(window: Duration, ratio_per_mille: u32, min_per_second: u32) -> RetryBudgetConfig {
        RetryBudgetConfig {
            window: window.max(Duration::from_millis(SLOTS as u64)),
            ratio_per_mille,
            min_per_second,
        }
    }

    /// The window retries are counted over.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Retries allowed per thousand requests.
    pub fn ratio_per_mille(&self) -> u32 {
        self.ratio_per_mille
    }

    /// Retries allowed a second regardless of requests.
    pub fn min_per_second(&self) -> u32 {
        self.min_per_second
    }

    /// The retries allowed in one window that saw `requests` requests, in thousandths.
    fn allowance_milli(&self, requests: u64) -> u128 {
        let reserve = u128::from(self.min_per_second) * self.window.as_millis();
        u128::from(requests) * u128::from(self.ratio_per_mille) + reserve
    }
}

impl Default for RetryBudgetConfig {
    fn default() -> RetryBudgetConfig {
        RetryBudgetConfig::DEFAULT
    }
}

/// Counts of one slot of the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    /// Which slot of time this is, counted from the budget's origin.
    index: u64,
    requests: u64,
    retries: u64,
}

/// The retries a target may still make: deposits per request, withdrawals per retry.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    origin: Instant,
    slots: [Slot; SLOTS],
}

impl RetryBudget {
    /// An empty budget (only the per-second reserve to draw from) starting at `now`.
    pub fn new(config: RetryBudgetConfig, now: Instant) -> RetryBudget {
        RetryBudget {
            config,
            origin: now,
            slots: [Slot::default(); SLOTS],
        }
    }

    /// The settings.
    pub fn config(&self) -> &RetryBudgetConfig {
        &self.config
    }

    /// Counts a request (its first attempt) at `now`.
    pub fn deposit(&mut self, now: Instant) {
        let slot = self.slot(now);
        slot.requests = slot.requests.saturating_add(1);
    }

    /// Asks for one retry at `now`: `true` (and counted) if the window allows it.
    pub fn try_withdraw(&mut self, now: Instant) -> bool {
        let (requests, retries) = self.totals(now);
        let wanted = u128::from(retries.saturating_add(1)) * 1_000;
        if wanted > self.config.allowance_milli(requests) {
            return false;
        }
        let slot = self.slot(now);
        slot.retries = slot.retries.saturating_add(1);
        true
    }

    /// Retries the window still allows at `now`.
    pub fn available(&self, now: Instant) -> u64 {
        let (requests, retries) = self.totals(now);
        let allowed = self.config.allowance_milli(requests) / 1_000;
        u64::try_from(allowed)
            .unwrap_or(u64::MAX)
            .saturating_sub(retries)
    }

    fn slot_len(&self) -> Duration {
        self.config.window / SLOTS as u32
    }

    fn index(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos() / self.slot_len().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The slot for `now`, emptied first if it last held an older stretch of time.
    fn slot(&mut self, now: Instant) -> &mut Slot {
        let index = self.index(now);
        let slot = &mut self.slots[(index % SLOTS as u64) as usize];
        if slot.index != index {
            *slot = Slot {
                index,
                requests: 0,
                retries: 0,
            };
        }
        slot
    }

    /// Requests and retries in the window ending at `now`: the slots of the last `SLOTS`
    /// stretches of time.
    fn totals(&self, now: Instant) -> (u64, u64) {
        let index = self.index(now);
        let oldest = index.saturating_sub(SLOTS as u64 - 1);
        self.slots
            .iter()
            .filter(|s| (oldest..=index).contains(&s.index))
            .fold((0u64, 0u64), |(q, r), s| {
                (q.saturating_add(s.requests), r.saturating_add(s.retries))
            })
    }
}

#[cfg(test)]
mod tests;
