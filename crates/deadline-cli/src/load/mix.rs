//! `--budget-mix MS:SHARE,...`: users with different budgets, the case where the queue's order
//! matters (with one budget for everyone, earliest deadline first is arrival order).
//!
//! Each class is a user wait in ms (the user sends it less `--margin` as its budget, like
//! `--user-wait`) and the share of users in it. User *i* falls in the class where `frac(i × φ)`
//! lands among the cumulative shares (φ the golden ratio's fractional part): deterministic, the
//! same users in every run, and well spread over time (no run of one class).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// One class of users.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetClass {
    /// How long these users wait, in ms.
    pub(crate) wait_ms: u64,
    /// Their share of the users (the shares sum to 1).
    pub(crate) share: f64,
}

/// The classes of `--budget-mix`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BudgetMix(pub(crate) Vec<BudgetClass>);

/// The most classes a mix may have.
const MAX_CLASSES: usize = 16;

impl FromStr for BudgetMix {
    type Err = String;

    fn from_str(text: &str) -> Result<BudgetMix, String> {
        let mut classes = Vec::new();
        for part in text.split(',') {
            let (ms, share) = part.split_once(':').ok_or_else(|| {
                format!("expected MS:SHARE,... (like 500:0.3,2000:0.7), not {part:?}")
            })?;
            let ms = ms.trim();
            if ms.is_empty() || ms.len() > 7 || !ms.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "a class's wait must be a whole number of ms below 10000000, not {ms:?}"
                ));
            }
            let wait_ms: u64 = ms
                .parse()
                .map_err(|_| format!("a class's wait must be a number of ms, not {ms:?}"))?;
            if wait_ms < 100 {
                return Err(format!(
                    "a class's wait must be at least 100 ms (like --user-wait), not {wait_ms}"
                ));
            }
            let share: f64 = share
                .trim()
                .parse()
                .map_err(|_| format!("a class's share must be a number, not {share:?}"))?;
            if !(share.is_finite() && share > 0.0 && share <= 1.0) {
                return Err(format!(
                    "a class's share must be above 0 and at most 1, not {share}"
                ));
            }
            if classes.iter().any(|c: &BudgetClass| c.wait_ms == wait_ms) {
                return Err(format!("the wait {wait_ms} ms is given twice"));
            }
            classes.push(BudgetClass { wait_ms, share });
        }
        if classes.len() > MAX_CLASSES {
            return Err(format!(
                "at most {MAX_CLASSES} classes, not {}",
                classes.len()
            ));
        }
        let total: f64 = classes.iter().map(|c| c.share).sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!("the shares must add up to 1, not {total}"));
        }
        Ok(BudgetMix(classes))
    }
}

impl fmt::Display for BudgetMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, class) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{}", class.wait_ms, class.share)?;
        }
        Ok(())
    }
}

impl BudgetMix {
    /// The class of user `index`.
    pub(crate) fn class_of(&self, index: usize) -> usize {
        // The golden ratio's fractional part: frac(i × φ) spreads evenly over [0, 1).
        const PHI: f64 = 0.618_033_988_749_894_9;
        let point = (index as f64 * PHI).fract();
        let mut upto = 0.0;
        for (class, c) in self.0.iter().enumerate() {
            upto += c.share;
            if point < upto {
                return class;
            }
        }
        self.0.len() - 1
    }

    /// The shortest wait of any class.
    pub(crate) fn shortest_wait(&self) -> u64 {
        self.0.iter().map(|c| c.wait_ms).min().unwrap_or(0)
    }
}

/// How one class of users fared.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClassFigures {
    /// The class's wait, in ms.
    pub(crate) wait_ms: u64,
    /// Users in it.
    pub(crate) users: usize,
    /// Of them, answered in time.
    pub(crate) in_time: usize,
    /// The share answered in time.
    pub(crate) in_time_share: f64,
    /// Latency of those answered in time: 50th percentile, in ms.
    pub(crate) in_time_p50_ms: u64,
    /// And 99th percentile, in ms.
    pub(crate) in_time_p99_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_bad_ones_say_why() {
        let mix: BudgetMix = "500:0.3,2000:0.7".parse().unwrap();
        assert_eq!(mix.0.len(), 2);
        assert_eq!(mix.0[0].wait_ms, 500);
        assert_eq!(mix.to_string(), "500:0.3,2000:0.7");
        assert_eq!(mix.shortest_wait(), 500);
        assert_eq!("1000:1".parse::<BudgetMix>().unwrap().0.len(), 1);
        for bad in [
            "",
            "500",
            "500:",
            ":0.5",
            "500:0.3",
            "500:0.3,2000:0.8",
            "500:0.5,500:0.5",
            "50:1",
            "-500:1",
            "+500:1",
            "500:NaN",
            "500:-0.5,2000:1.5",
            "500:0,2000:1",
            "99999999:1",
            "500:0.3;2000:0.7",
        ] {
            let err = bad.parse::<BudgetMix>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn users_spread_over_the_classes_by_share() {
        let mix: BudgetMix = "500:0.3,2000:0.7".parse().unwrap();
        let short = (0..1_000).filter(|&i| mix.class_of(i) == 0).count();
        assert!((290..=310).contains(&short), "{short}");
        // No long run of one class: every 10 consecutive users hold both.
        for start in 0..990 {
            let classes: std::collections::HashSet<usize> =
                (start..start + 10).map(|i| mix.class_of(i)).collect();
            assert_eq!(classes.len(), 2, "users {start}..{}", start + 10);
        }
    }
}
