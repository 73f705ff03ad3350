//! A retry budget: retries as a share of recent requests, and a small bucket that failing
//! retries empty, so an outage cannot multiply load.
//!
//! A per-call limit of `attempts` does not bound what retries do to a callee that is down: every
//! request becomes `attempts` calls, and with several hops retrying the product (3 × 3 = 9 calls
//! per user request in the demo's chain). A retry budget bounds retries across calls instead, with
//! two rules that must both allow a retry (a hedge counts as a retry):
//!
//! ```text
//! ratio cap:  retries in the window  ≤  ratio × requests in the window  +  min_per_window
//! bucket:     a retry takes one token; none left, no retry
//!             a retry (or hedge) that succeeds gives its token back
//!             a first attempt that succeeds adds top_up (a fraction of a token)
//!             nothing refills the bucket with time
//! ```
//!
//! with a 10 s window, a ratio of 20 %, 10 retries per window, a bucket of 5 tokens and a top-up
//! of half a token by default ([`RetryBudgetConfig::DEFAULT`]).
//!
//! # Why a bucket that only failures empty
//!
//! A ratio cap alone settles, during an outage, at its ratio plus its constant: `1 + 0.2 +
//! reserve / requests` calls per request, and a reserve large enough to let a quiet client retry
//! (Finagle's 10 a second) is a third of the requests of a client sending 30 a second. What
//! matters is not how many retries were sent but whether they worked. The bucket reads exactly
//! that: a retry that works costs nothing (its token comes back), a retry that fails costs one,
//! and only successes earn tokens. In a full outage no retry works and no first attempt succeeds,
//! so after `tokens` failed retries no further retry is sent until the callee answers again: the
//! calls per request during the outage fall to `1 + tokens / requests`, whatever the rate. A
//! failure here and there (a retry that then works) never empties it, so isolated failures are
//! retried at any rate, even one request a minute: nothing has to accumulate with time first.
//!
//! Why not count first-attempt failures against the bucket, as gRPC's retry throttling does (each
//! failed attempt takes a token, each success gives a tenth back, retries stop below half)? Then a
//! callee that fails a third of the requests drains it for good (a third of a token lost per
//! request, a fifteenth earned), and retries stop in exactly the partial failure where they
//! still help. Here a partial failure keeps the bucket full (its retries mostly work) and the
//! ratio cap bounds what they add: 20 % of the requests plus the small constant.
//!
//! Why no refill with time, as a token bucket for rate limits has? Any refill rate is a number of
//! retries per second the callee gets whether or not it is up, the flaw of the per-second reserve.
//!
//! # The window
//!
//! The ratio's window slides in steps of a tenth of its length: counts are kept in ten slots, and
//! a slot leaves the window whole. The type is pure (every method that depends on time takes
//! `now`) and not shared by itself: a client that is cloned keeps one behind a lock, so every
//! clone draws from the same budget.

use std::time::{Duration, Instant};

/// How many slots the window is kept in.
const SLOTS: usize = 10;

/// Thousandths of a token in a token.
const MILLI: u64 = 1_000;

/// The failure-driven bucket of a [`RetryBudgetConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBucket {
    tokens: u32,
    top_up_per_mille: u32,
}

impl RetryBucket {
    /// 5 tokens, half a token back per successful first attempt.
    pub const DEFAULT: RetryBucket = RetryBucket {
        tokens: 5,
        top_up_per_mille: 500,
    };

    /// A bucket of `tokens` (its size, and how full it starts), topped up by
    /// `top_up_per_mille` thousandths of a token per successful first attempt. A bucket of 0
    /// tokens refuses every retry.
    pub const fn new(tokens: u32, top_up_per_mille: u32) -> RetryBucket {
        RetryBucket {
            tokens,
            top_up_per_mille,
        }
    }

    /// The bucket's size in tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Thousandths of a token added per successful first attempt.
    pub fn top_up_per_mille(&self) -> u32 {
        self.top_up_per_mille
    }

    fn capacity_milli(&self) -> u64 {
        u64::from(self.tokens) * MILLI
    }
}

impl Default for RetryBucket {
    fn default() -> RetryBucket {
        RetryBucket::DEFAULT
    }
}

/// The settings of a [`RetryBudget`]: the ratio cap and, optionally, the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudgetConfig {
    window: Duration,
    ratio_per_mille: u32,
    min_per_window: u32,
    bucket: Option<RetryBucket>,
}

impl RetryBudgetConfig {
    /// 10 s window, 20 % of requests plus 10 retries per window, and a bucket of 5 tokens
    /// topped up by half a token per successful first attempt ([`RetryBucket::DEFAULT`]).
    pub const DEFAULT: RetryBudgetConfig = RetryBudgetConfig {
        window: Duration::from_secs(10),
        ratio_per_mille: 200,
        min_per_window: 10,
        bucket: Some(RetryBucket::DEFAULT),
    };

    /// The ratio cap alone with Finagle's defaults: 20 % of requests plus 10 retries a second
    /// (100 per 10 s window), no bucket. This library's default before the bucket; kept for
    /// comparison.
    pub const FINAGLE: RetryBudgetConfig = RetryBudgetConfig {
        window: Duration::from_secs(10),
        ratio_per_mille: 200,
        min_per_window: 100,
        bucket: None,
    };

    /// A ratio cap over `window` (at least 10 ms, so each slot is at least 1 ms), allowing
    /// `ratio_per_mille` thousandths of the requests as retries plus `min_per_window` retries
    /// per window, with no bucket (add one with [`bucket`](Self::bucket)).
    pub fn ratio_cap(
        window: Duration,
        ratio_per_mille: u32,
        min_per_window: u32,
    ) -> RetryBudgetConfig {
        RetryBudgetConfig {
            window: window.max(Duration::from_millis(SLOTS as u64)),
            ratio_per_mille,
            min_per_window,
            bucket: None,
        }
    }

    /// The same settings with this bucket (`None`: the ratio cap alone).
    #[must_use = "this returns the settings with the bucket; the original is unchanged"]
    pub fn bucket(mut self, bucket: Option<RetryBucket>) -> RetryBudgetConfig {
        self.bucket = bucket;
        self
    }

    /// The window retries are counted over.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Retries allowed per thousand requests.
    pub fn ratio_per_mille(&self) -> u32 {
        self.ratio_per_mille
    }

    /// Retries allowed per window regardless of requests.
    pub fn min_per_window(&self) -> u32 {
        self.min_per_window
    }

    /// The bucket, if there is one.
    pub fn retry_bucket(&self) -> Option<RetryBucket> {
        self.bucket
    }

    /// The retries allowed in one window that saw `requests` requests, in thousandths.
    fn allowance_milli(&self, requests: u64) -> u128 {
        u128::from(requests) * u128::from(self.ratio_per_mille)
            + u128::from(self.min_per_window) * u128::from(MILLI)
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

/// The retries a target may still make: deposits per request, withdrawals per retry, tokens
/// back per success.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    origin: Instant,
    slots: [Slot; SLOTS],
    /// The bucket's content in thousandths of a token (0 without a bucket).
    tokens_milli: u64,
}

impl RetryBudget {
    /// A budget starting at `now`: an empty window (only the per-window constant to draw
    /// from) and a full bucket.
    pub fn new(config: RetryBudgetConfig, now: Instant) -> RetryBudget {
        RetryBudget {
            config,
            origin: now,
            slots: [Slot::default(); SLOTS],
            tokens_milli: config.bucket.map_or(0, |b| b.capacity_milli()),
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

    /// Asks for one retry (or hedge) at `now`: `true` (counted, and its token taken) if both
    /// the window and the bucket allow it.
    pub fn try_withdraw(&mut self, now: Instant) -> bool {
        let (requests, retries) = self.totals(now);
        let wanted = u128::from(retries.saturating_add(1)) * u128::from(MILLI);
        if wanted > self.config.allowance_milli(requests) {
            return false;
        }
        if self.config.bucket.is_some() {
            if self.tokens_milli < MILLI {
                return false;
            }
            self.tokens_milli -= MILLI;
        }
        let slot = self.slot(now);
        slot.retries = slot.retries.saturating_add(1);
        true
    }

    /// A first attempt succeeded: the bucket gains its top-up (up to its size).
    pub fn first_attempt_succeeded(&mut self) {
        if let Some(bucket) = self.config.bucket {
            self.fill(u64::from(bucket.top_up_per_mille));
        }
    }

    /// A retry or hedge that was granted did not fail (it succeeded, or lost to another attempt
    /// that did): its token goes back to the bucket (up to its size).
    pub fn refund(&mut self) {
        self.fill(MILLI);
    }

    /// The bucket's content in thousandths of a token (0 without a bucket).
    pub fn tokens_milli(&self) -> u64 {
        self.tokens_milli
    }

    /// Retries the window and the bucket still allow at `now`.
    pub fn available(&self, now: Instant) -> u64 {
        let (requests, retries) = self.totals(now);
        let allowed = self.config.allowance_milli(requests) / u128::from(MILLI);
        let by_window = u64::try_from(allowed)
            .unwrap_or(u64::MAX)
            .saturating_sub(retries);
        match self.config.bucket {
            Some(_) => by_window.min(self.tokens_milli / MILLI),
            None => by_window,
        }
    }

    fn fill(&mut self, milli: u64) {
        if let Some(bucket) = self.config.bucket {
            self.tokens_milli = self
                .tokens_milli
                .saturating_add(milli)
                .min(bucket.capacity_milli());
        }
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
