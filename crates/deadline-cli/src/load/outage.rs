//! The load's outage, retry and hedging flags for each hop, and the calls per user
//! request on the inventory link while inventory was down.

use std::collections::HashSet;

use serde::Serialize;

use super::LoadArgs;
use super::users::Outcome;
use crate::harness::Hop;
use crate::holds::HoldLine;

/// The retry flags of gateway and orders, and the outage and slowness flags of inventory.
pub(super) fn with_retry_flags(mut hops: Vec<Hop>, args: &LoadArgs) -> Vec<Hop> {
    for hop in &mut hops {
        match hop.name {
            "inventory" => {
                if let Some(window) = args.outage {
                    hop.args.extend(["--outage".to_owned(), window.to_string()]);
                }
                if args.slow_per_attempt {
                    hop.args.push("--slow-per-attempt".to_owned());
                }
            }
            _ => {
                if args.no_retry_budget {
                    hop.args.push("--no-retry-budget".to_owned());
                } else if let Some(budget) = args.retry_budget {
                    hop.args
                        .extend(["--retry-budget".to_owned(), budget.to_string()]);
                }
                if let Some(share) = args.retry_504_share {
                    hop.args
                        .extend(["--retry-504-share".to_owned(), share.to_string()]);
                }
                // Orders hedges its inventory calls: the hop right above the slowness.
                if let (Some(hedge), "orders") = (args.hedge, hop.name) {
                    hop.args.extend(["--hedge".to_owned(), hedge.to_string()]);
                }
            }
        }
    }
    hops
}

/// What the outage did, from the users sent during it and inventory's log.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutageFigures {
    /// Users sent while inventory was down.
    pub users: usize,
    /// Calls inventory received for those users.
    pub inventory_calls: usize,
    /// Share of them answered in time.
    pub in_time_share: f64,
    /// Share answered in time among users sent in the seconds before the outage.
    pub before_share: f64,
    /// Seconds from the outage's end until users were answered in time as often as before it
    /// (within 5 points), counted by when users were sent; null if they never were.
    pub recovery_s: Option<f64>,
}

/// The outage's figures; `None` without an outage or with no user sent during it.
pub(super) fn figures(
    args: &LoadArgs,
    outcomes: &[Outcome],
    holds: &[HoldLine],
    start_wall: f64,
    by_second: &[f64],
) -> Option<OutageFigures> {
    let window = args.outage?;
    // The outage counts from inventory's first request: the first user's arrival.
    let origin = outcomes.first().map_or(start_wall, |o| o.sent_at);
    let from = origin + window.start * 1_000.0;
    let to = from + window.seconds * 1_000.0;
    let during: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.sent_at >= from && o.sent_at < to)
        .collect();
    if during.is_empty() {
        return None;
    }
    let ids: HashSet<&str> = during.iter().map(|o| o.id.as_str()).collect();
    let inventory_calls = holds
        .iter()
        .filter(|h| h.service == "inventory")
        .filter(|h| h.request_id.as_deref().is_some_and(|id| ids.contains(id)))
        .count();
    let in_time = during.iter().filter(|o| o.in_time).count();
    let start_s = ((from - start_wall) / 1_000.0).floor().max(0.0) as usize;
    let before: Vec<f64> = by_second[..start_s.min(by_second.len())]
        .iter()
        .skip(1) // the first second warms connections up
        .copied()
        .collect();
    let before_share = if before.is_empty() {
        1.0
    } else {
        before.iter().sum::<f64>() / before.len() as f64
    };
    // The first second (by send time) from the one the outage ends in whose users were
    // answered in time as often as before it; counted from the outage's end, never negative.
    let to_s = (to - start_wall) / 1_000.0;
    let recovery_s = by_second
        .iter()
        .enumerate()
        .skip(to_s.floor().max(0.0) as usize)
        .find(|(_, share)| **share >= before_share - 0.05)
        .map(|(s, _)| (s as f64 - to_s).max(0.0));
    Some(OutageFigures {
        users: during.len(),
        inventory_calls,
        in_time_share: in_time as f64 / during.len() as f64,
        before_share,
        recovery_s,
    })
}
