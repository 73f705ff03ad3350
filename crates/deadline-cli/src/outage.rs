//! Outages and retries for `deadline service` and `deadline load`: a window in which a service
//! answers 503 to everything, per-attempt slowness, and the answer a hop gives its caller when
//! its own retries already failed.
//!
//! # When the window starts
//!
//! `--outage START:SECONDS` counts from the **first request the service works on**, not from
//! its start: the load command starts the services, checks them, and only then sends its first
//! user, so a window counted from the process start would drift by that setup time. Counted from
//! the first request, `START` is the same instant as "START seconds into the load" to within
//! the first call's transit.
//!
//! # Retry at one hop only
//!
//! When a hop's downstream call fails after that hop's own retries (a 5xx other than 504, or a
//! connection that kept failing), the hop answers its caller 502 with
//! `grpc-retry-pushback-ms: -1`, "do not retry": the failure was already retried where it
//! happened, and every caller above retrying it again multiplies the calls per hop (three hops
//! of three attempts make nine calls to the bottom). A caller with propagation on honours it;
//! the baseline ignores it, as a client without the library would.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use tokio::time::Instant;

use crate::slowness::is_slow;

/// The header a hop sets to tell its caller not to retry (negative gRPC retry pushback).
pub(crate) const DO_NOT_RETRY: (&str, &str) = ("grpc-retry-pushback-ms", "-1");

/// `START:SECONDS`: a window starting `START` seconds in and lasting `SECONDS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    /// Seconds from the origin to the start.
    pub start: f64,
    /// Seconds it lasts.
    pub seconds: f64,
}

impl Window {
    /// Whether `elapsed` since the origin falls in the window.
    pub(crate) fn contains(&self, elapsed: Duration) -> bool {
        let s = elapsed.as_secs_f64();
        s >= self.start && s < self.start + self.seconds
    }
}

impl FromStr for Window {
    type Err = String;

    fn from_str(text: &str) -> Result<Window, String> {
        let (start, seconds) = text
            .split_once(':')
            .ok_or_else(|| format!("expected START:SECONDS (like 10:5), not {text:?}"))?;
        let number = |part: &str, what: &str| -> Result<f64, String> {
            let value: f64 = part.trim().parse().map_err(|_| {
                format!("the outage {what} must be a number of seconds, not {part:?}")
            })?;
            if !(value.is_finite() && (0.0..=86_400.0).contains(&value)) {
                return Err(format!(
                    "the outage {what} must be between 0 and 86400 seconds, not {part}"
                ));
            }
            Ok(value)
        };
        let window = Window {
            start: number(start, "start")?,
            seconds: number(seconds, "length")?,
        };
        if window.seconds <= 0.0 {
            return Err("the outage must last more than 0 seconds".to_owned());
        }
        Ok(window)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.start, self.seconds)
    }
}

/// A service's outage: its window, counted from the first request it sees.
#[derive(Debug)]
pub(crate) struct Outage {
    window: Window,
    origin: OnceLock<Instant>,
}

impl Outage {
    pub(crate) fn new(window: Window) -> Outage {
        Outage {
            window,
            origin: OnceLock::new(),
        }
    }

    /// Whether a request arriving at `now` falls in the outage (the first call sets the origin).
    pub(crate) fn active(&self, now: Instant) -> bool {
        let origin = *self.origin.get_or_init(|| now);
        self.window.contains(now.saturating_duration_since(origin))
    }

    /// The outage's answer: 503, no work done.
    pub(crate) fn answer(name: &str) -> Response<Full<Bytes>> {
        crate::reply::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{name}: unavailable (outage)\n"),
        )
    }
}

/// Which attempts are slow when slowness is per attempt: each arrival draws afresh (its
/// request id and an arrival count), so a retry or a hedge of a slow attempt is usually fast.
#[derive(Debug, Default)]
pub(crate) struct PerAttempt {
    arrivals: AtomicU64,
}

impl PerAttempt {
    /// Whether this arrival of request `id` is slow.
    pub(crate) fn is_slow(&self, id: &str, seed: u64, share: f64) -> bool {
        let n = self.arrivals.fetch_add(1, Ordering::Relaxed);
        is_slow(&format!("{id}#{n}"), seed, share)
    }
}

/// Marks `response` "do not retry" for the caller (see the [module docs](self)).
pub(crate) fn do_not_retry(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response
        .headers_mut()
        .insert(DO_NOT_RETRY.0, HeaderValue::from_static(DO_NOT_RETRY.1));
    response
}

/// `RATIO,PER_WINDOW[,TOKENS]` for `--retry-budget`: the share of requests that may be retried
/// (0 to 1) and the retries allowed per 10 s window regardless, then optionally the bucket's
/// tokens (without them, the ratio cap alone). `finagle` is `0.2,100`, Finagle's 20 % plus 10
/// a second with no bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetArg {
    pub ratio: f64,
    pub per_window: u32,
    pub tokens: Option<u32>,
}

impl FromStr for BudgetArg {
    type Err = String;

    fn from_str(text: &str) -> Result<BudgetArg, String> {
        if text == "finagle" {
            return Ok(BudgetArg {
                ratio: 0.2,
                per_window: 100,
                tokens: None,
            });
        }
        let mut parts = text.split(',');
        let (Some(ratio), Some(per_window)) = (parts.next(), parts.next()) else {
            return Err(format!(
                "expected RATIO,PER_WINDOW[,TOKENS] (like 0.2,10,5) or finagle, not {text:?}"
            ));
        };
        let tokens = parts.next();
        if parts.next().is_some() {
            return Err(format!(
                "expected at most three parts, RATIO,PER_WINDOW,TOKENS, not {text:?}"
            ));
        }
        let ratio: f64 = ratio
            .trim()
            .parse()
            .map_err(|_| format!("the retry ratio must be a number, not {ratio:?}"))?;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!(
                "the retry ratio must be between 0 and 1, not {ratio}"
            ));
        }
        let whole = |part: &str, what: &str| -> Result<u32, String> {
            let part = part.trim();
            if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{what} must be a whole number below 1000000000, not {part:?}"
                ));
            }
            part.parse()
                .map_err(|_| format!("{what} must be a whole number, not {part:?}"))
        };
        Ok(BudgetArg {
            ratio,
            per_window: whole(per_window, "retries per window")?,
            tokens: tokens
                .map(|t| whole(t, "the bucket's tokens"))
                .transpose()?,
        })
    }
}

impl fmt::Display for BudgetArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.ratio, self.per_window)?;
        if let Some(tokens) = self.tokens {
            write!(f, ",{tokens}")?;
        }
        Ok(())
    }
}

impl BudgetArg {
    /// The library's settings for this budget over the default window (a bucket's top-up is
    /// the default one).
    pub(crate) fn config(&self) -> deadline_http::propagate::RetryBudgetConfig {
        use deadline_http::propagate::{RetryBucket, RetryBudgetConfig};
        RetryBudgetConfig::ratio_cap(
            RetryBudgetConfig::DEFAULT.window(),
            (self.ratio * 1_000.0).round() as u32,
            self.per_window,
        )
        .bucket(
            self.tokens
                .map(|t| RetryBucket::new(t, RetryBucket::DEFAULT.top_up_per_mille())),
        )
    }
}

/// `--hedge`: a delay in ms (`150`) or a percentile of the latencies observed (`p95`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HedgeArg(pub deadline_http::propagate::HedgeDelay);

impl FromStr for HedgeArg {
    type Err = String;

    fn from_str(text: &str) -> Result<HedgeArg, String> {
        use deadline_http::propagate::HedgeDelay;
        if let Some(p) = text.strip_prefix('p') {
            let value: f64 = p
                .parse()
                .map_err(|_| format!("expected a percentile like p95, not {text:?}"))?;
            if !(value > 0.0 && value < 100.0) {
                return Err(format!(
                    "the percentile must be above 0 and below 100, not {value}"
                ));
            }
            let per_mille = (value * 10.0).round().clamp(1.0, 999.0) as u16;
            return Ok(HedgeArg(HedgeDelay::Percentile { per_mille }));
        }
        let ms: u64 = text.parse().map_err(|_| {
            format!("expected a delay in ms (150) or a percentile (p95), not {text:?}")
        })?;
        if ms == 0 {
            return Err("a hedge delay must be at least 1 ms".to_owned());
        }
        Ok(HedgeArg(HedgeDelay::Fixed(Duration::from_millis(ms))))
    }
}

impl fmt::Display for HedgeArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use deadline_http::propagate::HedgeDelay;
        match self.0 {
            HedgeDelay::Fixed(delay) => write!(f, "{}", delay.as_millis()),
            HedgeDelay::Percentile { per_mille } => write!(f, "p{}", f64::from(per_mille) / 10.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_bad_ones_say_why() {
        let w: Window = "10:5".parse().unwrap();
        assert_eq!((w.start, w.seconds), (10.0, 5.0));
        assert!(w.contains(Duration::from_secs(10)));
        assert!(w.contains(Duration::from_millis(14_999)));
        assert!(!w.contains(Duration::from_secs(15)));
        assert!(!w.contains(Duration::from_millis(9_999)));
        assert_eq!("0.5:1.5".parse::<Window>().unwrap().seconds, 1.5);
        for bad in [
            "", "10", "10:", ":5", "a:5", "10:0", "-1:5", "10:NaN", "1:1e9", "1:inf",
        ] {
            let err = bad.parse::<Window>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn hedges_parse() {
        use deadline_http::propagate::HedgeDelay;
        assert_eq!(
            "p95".parse::<HedgeArg>().unwrap().0,
            HedgeDelay::Percentile { per_mille: 950 }
        );
        assert_eq!(
            "150".parse::<HedgeArg>().unwrap().0,
            HedgeDelay::Fixed(Duration::from_millis(150))
        );
        for bad in ["", "p", "p0", "p100", "px", "0", "-5", "1.5", "p95%"] {
            assert!(bad.parse::<HedgeArg>().is_err(), "{bad}");
        }
    }

    #[test]
    fn budgets_parse() {
        use deadline_http::propagate::{RetryBucket, RetryBudgetConfig};
        let b: BudgetArg = "0.1,0".parse().unwrap();
        assert_eq!(b.config().ratio_per_mille(), 100);
        assert_eq!(b.config().min_per_window(), 0);
        assert_eq!(b.config().retry_bucket(), None);
        let b: BudgetArg = "0.2,10,5".parse().unwrap();
        assert_eq!(b.config(), RetryBudgetConfig::DEFAULT);
        assert_eq!(b.to_string().parse::<BudgetArg>().unwrap(), b);
        let finagle: BudgetArg = "finagle".parse().unwrap();
        assert_eq!(finagle.config(), RetryBudgetConfig::FINAGLE);
        assert_eq!(finagle.to_string(), "0.2,100");
        assert_eq!(
            "0.5,1,0"
                .parse::<BudgetArg>()
                .unwrap()
                .config()
                .retry_bucket(),
            Some(RetryBucket::new(0, 500))
        );
        for bad in [
            "",
            "0.2",
            "2,10",
            "0.2,-1",
            "x,1",
            "0.2,1.5",
            "0.2,+1",
            "0.2,1,",
            "0.2,1,2,3",
            "0.2,1,-5",
            "0.2,99999999999",
            "Finagle",
        ] {
            let err = bad.parse::<BudgetArg>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn the_window_counts_from_the_first_request() {
        let outage = Outage::new("1:2".parse().unwrap());
        let first = Instant::now() + Duration::from_secs(30);
        assert!(!outage.active(first), "the first request sets the origin");
        assert!(outage.active(first + Duration::from_millis(1_500)));
        assert!(!outage.active(first + Duration::from_millis(3_500)));
    }
}
