//! A trace read hop by hop: for each service a request passed through, when it arrived, what it
//! could have had left, how long it queued and worked, the calls it made, its headroom, and which
//! hop ran out of time.
//!
//! A hop is a root span (the service that answered the caller) or a span directly under an
//! `attempt` (a callee's root span, shifted onto the caller's clock). Its `queue`, `work` and
//! `call:<target>` children are what the enforce and propagate layers record; other children
//! (spans a handler recorded by hand) are left to the tree.
//!
//! # What the budget column can and cannot say
//!
//! Every hop writes its budget at arrival on its root span ([`Span::budget_ms`]), so a hop's
//! budget is exact ([`Budget::Arrived`]): what that hop read from its caller's request, after
//! clamping, and its headroom is exact too.
//!
//! A hop whose root carries no budget either had no deadline or wrote its trace with a version
//! that predates budgets in the trace. Then, as before, the first hop's budget is the one its
//! caller sent, which the caller knows ([`Budget::Sent`]); and a callee's is bounded by the
//! trace's times: it shows when the caller sent the attempt, so the caller's own budget less
//! the time it had already spent is an upper bound ([`Budget::AtMost`]): the budget that arrived
//! was smaller by the caller's transit margin and the truncation to whole milliseconds, and no
//! larger than the caller's per-attempt timeout, none of which the times record. The bound can
//! be loose (an attempt capped at 1 s by its timeout, sent with 1.9 s left, shows `≤ 1900`). The
//! headroom of such a hop is an upper bound too.
//!
//! # The hop that ran out
//!
//! A hop *ran out* when its own time ended its answer: its queue wait gave up (`queue` outcome
//! `deadline`), its work was cut or answered 504 (`work` outcome `deadline`), or it answered 504
//! without working at all (a budget already spent on arrival). A hop that answered 504 only
//! because a callee did also has a `deadline` work outcome, so only the deepest such hops are
//! marked: those with no marked hop below them.
//!
//! ```
//! use deadline_core::trace::Trace;
//! use deadline_core::trace::hops::{Budget, hops};
//!
//! let trace = Trace::decode(
//!     b"gateway@0-303=504,.queue@0-0,.work@0-303=deadline,.call:orders@53-303=504,\
//!       ..attempt@53-303=504,...orders@53-296=504,....queue@53-53,....work@53-296=deadline",
//! );
//! // A trace from hops that predate budgets in the trace: the callee's budget is a bound.
//! let bounded = hops(&trace, Some(400));
//! assert_eq!(bounded.len(), 2);
//! assert_eq!(bounded[0].budget, Some(Budget::Sent(400)));
//! assert_eq!(bounded[1].budget, Some(Budget::AtMost(347)));
//! assert_eq!(bounded[1].headroom(), Some(Budget::AtMost(104)));
//! assert!(!bounded[0].ran_out && bounded[1].ran_out);
//!
//! // The same chain, each hop writing its budget at arrival (`^INDEX=MS`): exact figures.
//! let trace = Trace::decode(
//!     b"gateway@0-303=504,.queue@0-0,.work@0-303=deadline,.call:orders@53-303=504,\
//!       ..attempt@53-303=504,...orders@53-296=504,....queue@53-53,....work@53-296=deadline,\
//!       ^0=400,^5=247",
//! );
//! let exact = hops(&trace, Some(400));
//! assert_eq!(exact[0].budget, Some(Budget::Arrived(400)));
//! assert_eq!(exact[1].budget, Some(Budget::Arrived(247)));
//! assert_eq!(exact[1].headroom(), Some(Budget::Arrived(4)));
//! assert!(exact.iter().all(|hop| hop.budget.is_some_and(Budget::is_exact)));
//! ```

use super::name::{ATTEMPT, CALL_PREFIX, QUEUE, WORK};
use super::outcome::DEADLINE;
use super::{Span, Trace};

/// A hop's budget at arrival (or its headroom), as far as the trace can tell. See the
/// [module docs](self#what-the-budget-column-can-and-cannot-say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "kind", content = "ms", rename_all = "snake_case")
)]
pub enum Budget {
    /// Exactly this many ms: the budget the hop read on arrival, as its trace carries it (or
    /// that less the hop's duration, for headroom).
    Arrived(u64),
    /// Exactly this many ms: the budget the caller of the first hop sent (or that less the hop's
    /// duration, for headroom), for a first hop whose trace does not carry its own.
    Sent(u64),
    /// At most this many ms: what the hop's caller had left when it sent the attempt.
    AtMost(u64),
    /// Negative: the hop took this many ms more than the bound, so its budget was already less
    /// than its duration.
    Over(u64),
}

impl Budget {
    /// The number of ms, whatever the kind (for [`Budget::Over`], how far over).
    pub fn ms(self) -> u64 {
        match self {
            Budget::Arrived(ms) | Budget::Sent(ms) | Budget::AtMost(ms) | Budget::Over(ms) => ms,
        }
    }

    /// Whether the figure is exact ([`Budget::Arrived`] or [`Budget::Sent`]), not a bound.
    pub fn is_exact(self) -> bool {
        matches!(self, Budget::Arrived(_) | Budget::Sent(_))
    }

    /// `self` less `ms`, kind kept; [`Budget::Over`] when `ms` is larger.
    fn less(self, ms: u64) -> Budget {
        match self {
            Budget::Arrived(b) | Budget::Sent(b) | Budget::AtMost(b) if b < ms => {
                Budget::Over(ms - b)
            }
            Budget::Arrived(b) => Budget::Arrived(b - ms),
            Budget::Sent(b) => Budget::Sent(b - ms),
            Budget::AtMost(b) => Budget::AtMost(b - ms),
            Budget::Over(o) => Budget::Over(o.saturating_add(ms)),
        }
    }

    /// What a callee sent an attempt `after` ms into this budget could have had at most.
    fn for_callee(self, after: u64) -> Budget {
        match self.less(after) {
            Budget::Arrived(b) | Budget::Sent(b) => Budget::AtMost(b),
            other => other,
        }
    }
}

/// One hop of a trace. Times are on the first hop's clock (ms since it received the request).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Hop {
    /// The service's name, as its root span has it.
    pub name: String,
    /// 0 for the first hop, 1 for the hops it called, and so on.
    pub depth: usize,
    /// The index in the list of the hop that called this one: `None` for a first hop.
    pub parent: Option<usize>,
    /// When it received the request.
    pub start_ms: u64,
    /// When it answered.
    pub end_ms: u64,
    /// The status it answered with (its root span's outcome).
    pub status: Option<String>,
    /// Its budget at arrival: exact when its trace carries it, else as far as the times tell;
    /// `None` if the first hop got none and the trace carries none.
    pub budget: Option<Budget>,
    /// How long it waited for a worker slot, and how that ended (`deadline` if it gave up).
    pub queue: Option<Phase>,
    /// How long its work ran, and how that ended (`ok`, `deadline`, `error`).
    pub work: Option<Phase>,
    /// Its outbound calls, in order.
    pub calls: Vec<Call>,
    /// Whether its own time ran out (see the [module docs](self#the-hop-that-ran-out)).
    pub ran_out: bool,
}

/// The time a hop spent in one phase, and how the phase ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Phase {
    /// The phase's length in ms.
    pub ms: u64,
    /// Its outcome, if the trace gives one.
    pub outcome: Option<String>,
}

/// One outbound call of a hop.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Call {
    /// The callee's name as the caller knows it (the span name after `call:`).
    pub target: String,
    /// The call's length in ms, every attempt included.
    pub ms: u64,
    /// How the call ended (a status, or `skipped`, `timeout`, `deadline`, …).
    pub outcome: Option<String>,
    /// The attempts sent.
    pub attempts: usize,
}

impl Hop {
    /// How long the hop took, arrival to answer.
    pub fn ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.start_ms)
    }

    /// The budget left when it answered: its budget less its duration (an upper bound when the
    /// budget is one).
    pub fn headroom(&self) -> Option<Budget> {
        self.budget.map(|b| b.less(self.ms()))
    }

    fn own_deadline(&self) -> bool {
        let is_deadline = |p: &Option<Phase>| {
            p.as_ref()
                .is_some_and(|p| p.outcome.as_deref() == Some(DEADLINE))
        };
        is_deadline(&self.queue)
            || is_deadline(&self.work)
            || (self.work.is_none()
                && self.queue.is_none()
                && self.status.as_deref() == Some("504"))
    }
}

/// The hops of `trace` in pre-order (a caller before its callees). A hop's budget is the one its
/// root span carries; without one, the first hop's is `sent_ms` (what its caller sent, if
/// anything) and a callee's is bounded by its caller's.
pub fn hops(trace: &Trace, sent_ms: Option<u64>) -> Vec<Hop> {
    let mut out = Vec::new();
    for root in &trace.spans {
        walk(root, 0, None, sent_ms.map(Budget::Sent), &mut out);
    }
    // Deepest first: a hop is marked when its own time ended its answer and no hop below it was.
    let mut marked_below = vec![false; out.len()];
    for i in (0..out.len()).rev() {
        let ran_out = out[i].own_deadline() && !marked_below[i];
        out[i].ran_out = ran_out;
        if let Some(parent) = out[i].parent {
            marked_below[parent] |= ran_out || marked_below[i];
        }
    }
    out
}

fn walk(
    span: &Span,
    depth: usize,
    parent: Option<usize>,
    budget: Option<Budget>,
    out: &mut Vec<Hop>,
) {
    let index = out.len();
    let budget = span.budget_ms.map(Budget::Arrived).or(budget);
    let phase = |s: &Span| Phase {
        ms: s.end_ms.saturating_sub(s.start_ms),
        outcome: s.outcome.clone(),
    };
    out.push(Hop {
        name: span.name.clone(),
        depth,
        parent,
        start_ms: span.start_ms,
        end_ms: span.end_ms,
        status: span.outcome.clone(),
        budget,
        queue: span.children.iter().find(|c| c.name == QUEUE).map(phase),
        work: span.children.iter().find(|c| c.name == WORK).map(phase),
        calls: Vec::new(),
        ran_out: false,
    });
    for child in &span.children {
        let Some(target) = child.name.strip_prefix(CALL_PREFIX) else {
            continue;
        };
        let attempts: Vec<&Span> = child
            .children
            .iter()
            .filter(|c| c.name == ATTEMPT)
            .collect();
        out[index].calls.push(Call {
            target: target.to_owned(),
            ms: child.end_ms.saturating_sub(child.start_ms),
            outcome: child.outcome.clone(),
            attempts: attempts.len(),
        });
        for attempt in attempts {
            let after = attempt.start_ms.saturating_sub(span.start_ms);
            for callee in &attempt.children {
                walk(
                    callee,
                    depth + 1,
                    Some(index),
                    budget.map(|b| b.for_callee(after)),
                    out,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Budget, hops};
    use crate::trace::Trace;

    fn decode(text: &str) -> Trace {
        Trace::decode(text.as_bytes())
    }

    #[test]
    fn a_chain_cut_at_its_last_hop_marks_only_that_hop() {
        let trace = decode(
            "gateway@0-303=504,.queue@0-0,.work@0-303=deadline,.call:orders@53-303=504,\
             ..attempt@53-303=504,...orders@53-296=504,....queue@53-53,\
             ....work@53-296=deadline,....call:inventory@155-296=504,\
             .....attempt@155-296=504,......inventory@155-289=504,\
             .......queue@155-155,.......work@155-289=deadline",
        );
        let hops = hops(&trace, Some(400));
        let names: Vec<_> = hops
            .iter()
            .map(|h| (h.name.as_str(), h.depth, h.ran_out))
            .collect();
        assert_eq!(
            names,
            [
                ("gateway", 0, false),
                ("orders", 1, false),
                ("inventory", 2, true)
            ]
        );
        assert_eq!(hops[0].headroom(), Some(Budget::Sent(97)));
        assert_eq!(hops[1].budget, Some(Budget::AtMost(347)));
        // Orders arrived at 53 with at most 347 and sent at 155: at most 245 left.
        assert_eq!(hops[2].budget, Some(Budget::AtMost(245)));
        assert_eq!(hops[2].headroom(), Some(Budget::AtMost(111)));
        assert_eq!(hops[0].calls[0].target, "orders");
        assert_eq!(hops[0].calls[0].attempts, 1);
        assert_eq!(hops[0].calls[0].ms, 250);
        assert_eq!(hops[2].work.as_ref().unwrap().ms, 134);
    }

    #[test]
    fn a_hop_that_skipped_its_call_is_the_one_that_ran_out() {
        let trace =
            decode("gateway@0-90=504,.queue@0-0,.work@0-90=deadline,.call:orders@80-80=skipped");
        let hops = hops(&trace, Some(100));
        assert_eq!(hops.len(), 1);
        assert!(hops[0].ran_out);
        assert_eq!(hops[0].calls[0].outcome.as_deref(), Some("skipped"));
        assert_eq!(hops[0].calls[0].attempts, 0);
    }

    #[test]
    fn a_give_up_in_the_queue_and_a_budget_spent_on_arrival_ran_out() {
        let queued = hops(
            &decode("inventory@0-190=504,.queue@0-190=deadline"),
            Some(200),
        );
        assert!(queued[0].ran_out);
        assert_eq!(queued[0].queue.as_ref().unwrap().ms, 190);
        let spent = hops(&decode("inventory@0-0=504"), Some(1));
        assert!(spent[0].ran_out);
    }

    #[test]
    fn a_success_marks_nobody_and_no_budget_means_no_headroom() {
        let hops = hops(
            &decode(
                "a@0-20=200,.queue@0-0,.work@0-20=ok,.call:b@5-20=200,..attempt@5-20=200,...b@5-19=200",
            ),
            None,
        );
        assert_eq!(hops.len(), 2);
        assert!(
            hops.iter()
                .all(|h| !h.ran_out && h.budget.is_none() && h.headroom().is_none())
        );
    }

    #[test]
    fn a_hop_slower_than_its_bound_is_over_not_a_wrapped_number() {
        let hops = hops(
            &decode(
                "a@0-50=200,.work@0-50=ok,.call:b@40-50=200,..attempt@40-50=200,...b@40-49=200",
            ),
            Some(30),
        );
        assert_eq!(hops[0].headroom(), Some(Budget::Over(20)));
        assert_eq!(hops[1].budget, Some(Budget::Over(10)));
    }

    #[test]
    fn carried_budgets_are_exact_and_a_hop_without_one_keeps_the_bound() {
        // Orders (a previous version) carries no budget; inventory does. Orders' bound comes
        // from the gateway's exact budget; inventory's own figure replaces any bound.
        let trace = decode(
            "gateway@0-303=504,.work@0-303=deadline,.call:orders@53-303=504,\
             ..attempt@53-303=504,...orders@53-296=504,....work@53-296=deadline,\
             ....call:inventory@155-296=504,.....attempt@155-296=504,\
             ......inventory@155-289=504,.......work@155-289=deadline,^0=390,^8=120",
        );
        let hops = hops(&trace, Some(400));
        let budgets: Vec<_> = hops.iter().map(|h| h.budget).collect();
        assert_eq!(
            budgets,
            [
                Some(Budget::Arrived(390)),
                Some(Budget::AtMost(337)),
                Some(Budget::Arrived(120)),
            ]
        );
        assert_eq!(hops[2].headroom(), Some(Budget::Over(14)));
        assert!(hops[0].budget.unwrap().is_exact() && !hops[1].budget.unwrap().is_exact());
    }

    #[test]
    fn an_empty_trace_has_no_hops() {
        assert!(hops(&Trace::new(), Some(100)).is_empty());
    }
}
