//! A hop's own trace: the root span named after the hop and the spans under it that the server
//! side records for every request (`queue`, `work`), encoded with the spans of the calls it made.
//!
//! Every answer a server gives carries this trace, so it is encoded once per request. The common
//! case, a hop that called nobody, is written straight into a buffer on the stack by a writer of
//! its own (piece by piece, its names checked once; a test holds it byte for byte to
//! [`Trace::encode`]), then copied once into the header value: no spans, no strings, no
//! vectors. With calls, the spans go through [`Trace::encode`] and its caps.

use http::HeaderValue;

use super::encode::{Caps, Fields, Visit, token, walk_recorded};
use super::name::{QUEUE, WORK};
use super::outcome::{DEADLINE, SHED};
use super::{MAX_DEPTH, MAX_DIGITS, MAX_ENCODED_LEN, MAX_INDEX_DIGITS, MAX_MS, MAX_NAME_LEN};
use super::{MAX_OUTCOME_LEN, Recorded, Span, Trace};
use crate::decimal::StackBuf;

/// Traces of at most this many spans are written into the smaller buffer.
const SMALL_SPANS: usize = 12;

/// The longest trace of [`SMALL_SPANS`] spans: each at most 63 bytes, 15 dots and a comma, and
/// a budget of at most 15 bytes (`,^NN=` and ten digits), then `,+` and a ten-digit dropped
/// count.
const SMALL_LEN: usize = SMALL_SPANS
    * (MAX_NAME_LEN + MAX_OUTCOME_LEN + 23 + MAX_DEPTH + 3 + MAX_INDEX_DIGITS + MAX_DIGITS)
    + 12;

/// A hop's own spans for one request: a root named after the hop from its arrival (0) to the
/// answer (`end_ms`), ending with the answer's status and carrying the hop's budget at arrival,
/// and under it what [`HopWork`] says.
///
/// ```
/// use deadline_core::trace::{HopTrace, HopWork, Recorded, Span};
///
/// let hop = HopTrace {
///     name: "inventory",
///     end_ms: 590,
///     status: "504",
///     budget_ms: Some(600),
///     work: HopWork::Worked { start_ms: 0, end_ms: 590, outcome: "deadline" },
/// };
/// assert_eq!(
///     hop.to_header_value(&[], 0),
///     "inventory@0-590=504,.queue@0-0,.work@0-590=deadline,^0=600"
/// );
/// let call = Recorded::Span(Span::new("call:orders", 2, 580).with_outcome("504"));
/// assert_eq!(
///     hop.to_header_value(&[call], 1),
///     "inventory@0-590=504,.queue@0-0,.work@0-590=deadline,.call:orders@2-580=504,^0=600,+1"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopTrace<'a> {
    /// The hop's name (sanitised on the way out if it is not a token).
    pub name: &'a str,
    /// When the answer was given, in ms since the request arrived.
    pub end_ms: u64,
    /// The answer's status code, e.g. `200` or `504`.
    pub status: &'a str,
    /// The hop's budget at arrival in ms, as it read it from its caller's request (after
    /// clamping; 0 for a budget already spent): `None` when the request had no deadline.
    pub budget_ms: Option<u64>,
    /// What the request did at the hop before the answer.
    pub work: HopWork<'a>,
}

/// What a request did at a hop: the spans under its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopWork<'a> {
    /// Nothing: answered on arrival (a 400, or a 504 for a budget already spent), or by the
    /// server itself as it shut down. No spans under the root.
    None,
    /// Left the queue (or got a slot too late) without working: a `queue` span from arrival to
    /// `queued_ms`, outcome `deadline`.
    GaveUp {
        /// When it stopped waiting, in ms since arrival.
        queued_ms: u64,
    },
    /// Refused by admission control at `queued_ms` (0 when refused on arrival) without working:
    /// a `queue` span from arrival to `queued_ms`, outcome `shed`.
    Shed {
        /// When it was refused, in ms since arrival.
        queued_ms: u64,
    },
    /// Worked from `start_ms` to `end_ms`: a `queue` span from arrival to `start_ms`, then a
    /// `work` span ending with `outcome`.
    Worked {
        /// When the work started, in ms since arrival.
        start_ms: u64,
        /// When the work ended (or was dropped), in ms since arrival.
        end_ms: u64,
        /// How the work ended: `ok`, `deadline` or `error`.
        outcome: &'a str,
    },
}

impl HopTrace<'_> {
    /// The hop's `Deadline-Trace` value: its own spans, then what it `recorded` (nested under
    /// the root after `queue` and `work`), and `dropped` spans counted as not kept. Exactly
    /// what [`Trace::encode`] makes of [`to_trace`](Self::to_trace); the callees' traces in
    /// `recorded` are written from their text, not decoded.
    pub fn to_header_value(&self, recorded: &[Recorded], dropped: u64) -> HeaderValue {
        if recorded.is_empty() && dropped == 0 {
            let mut out = StackBuf::<{ HopTrace::ALONE_MAX_LEN }>::new();
            self.write_alone(&mut out);
            if let Some(value) = out.as_bytes().and_then(|b| HeaderValue::from_bytes(b).ok()) {
                return value;
            }
        }
        let walk = |visit: &mut dyn Visit| {
            self.walk_own(visit);
            for entry in recorded {
                walk_recorded(entry, 1, visit);
            }
        };
        // Written on the stack (the bound is exact, so it always fits) and copied once into
        // the header value: one allocation for the whole trace. A hop that made a call or two
        // keeps a dozen spans or fewer, which fit a buffer a fifth the size of the largest
        // trace: a fresh buffer is zeroed, and most of the largest would be zeroed for nothing.
        let caps = Caps::count(&walk, dropped);
        let value = if caps.kept <= SMALL_SPANS {
            let mut out = StackBuf::<SMALL_LEN>::new();
            caps.write(&mut out, &walk);
            out.as_bytes().and_then(|b| HeaderValue::from_bytes(b).ok())
        } else {
            let mut out = StackBuf::<MAX_ENCODED_LEN>::new();
            caps.write(&mut out, &walk);
            out.as_bytes().and_then(|b| HeaderValue::from_bytes(b).ok())
        };
        value.unwrap_or_else(|| self.to_trace(recorded.to_vec(), dropped).to_header_value())
    }

    /// The hop's trace as values: the root with its own spans and then what it `recorded`
    /// under it (the callees' traces decoded).
    pub fn to_trace(&self, recorded: Vec<Recorded>, dropped: u64) -> Trace {
        let mut root = Span::new(self.name, 0, self.end_ms).with_outcome(self.status);
        root.budget_ms = self.budget_ms;
        match self.work {
            HopWork::None => {}
            HopWork::GaveUp { queued_ms } => {
                root.push(Span::new(QUEUE, 0, queued_ms).with_outcome(DEADLINE));
            }
            HopWork::Shed { queued_ms } => {
                root.push(Span::new(QUEUE, 0, queued_ms).with_outcome(SHED));
            }
            HopWork::Worked {
                start_ms,
                end_ms,
                outcome,
            } => {
                root.push(Span::new(QUEUE, 0, start_ms));
                root.push(Span::new(WORK, start_ms, end_ms).with_outcome(outcome));
            }
        }
        let mut dropped = dropped;
        for entry in recorded {
            let (span, callees_dropped) = entry.into_span();
            root.push(span);
            dropped = dropped.saturating_add(callees_dropped);
        }
        let mut trace = Trace::from_span(root);
        trace.dropped = dropped;
        trace
    }

    /// The hop's own spans, for the encoder.
    fn walk_own(&self, visit: &mut dyn Visit) {
        let field = |name, start_ms, end_ms, outcome| Fields {
            name,
            start_ms,
            end_ms,
            outcome,
            budget_ms: None,
        };
        let root = Fields {
            budget_ms: self.budget_ms,
            ..field(self.name, 0, self.end_ms, Some(self.status))
        };
        visit.element(0, root);
        match self.work {
            HopWork::None => {}
            HopWork::GaveUp { queued_ms } => {
                visit.element(1, field(QUEUE, 0, queued_ms, Some(DEADLINE)));
            }
            HopWork::Shed { queued_ms } => {
                visit.element(1, field(QUEUE, 0, queued_ms, Some(SHED)));
            }
            HopWork::Worked {
                start_ms,
                end_ms,
                outcome,
            } => {
                visit.element(1, field(QUEUE, 0, start_ms, None));
                visit.element(1, field(WORK, start_ms, end_ms, Some(outcome)));
            }
        }
    }

    /// The longest value [`write_alone`](Self::write_alone) writes (133 bytes): the root
    /// (`name@0-END=STATUS`), the queue (`,.queue@0-END`), the work
    /// (`,.work@START-END=OUTCOME`) and the budget (`,^0=MS`), each name and outcome at its cap
    /// and every number at ten digits (`MAX_MS`, 9,999,999,999). A test writes it.
    pub const ALONE_MAX_LEN: usize = (MAX_NAME_LEN + 4 + MAX_DIGITS + MAX_OUTCOME_LEN)
        + (",.queue@0-".len() + MAX_DIGITS)
        + (",.work@-=".len() + 2 * MAX_DIGITS + MAX_OUTCOME_LEN)
        + (",^0=".len() + MAX_DIGITS);

    /// Appends to `out` this hop's `Deadline-Trace` value when it recorded no calls and dropped
    /// nothing: the bytes of [`to_header_value(&[], 0)`](Self::to_header_value), at most
    /// [`ALONE_MAX_LEN`](Self::ALONE_MAX_LEN) of them. For a server that writes this and its
    /// other header values into one buffer, to make them with one allocation between them;
    /// `out` overflows (and [`StackBuf::as_bytes`] says `None`) rather than hold a cut value.
    ///
    /// ```
    /// use deadline_core::decimal::StackBuf;
    /// use deadline_core::trace::{HopTrace, HopWork};
    ///
    /// let hop = HopTrace {
    ///     name: "inventory",
    ///     end_ms: 41,
    ///     status: "200",
    ///     budget_ms: Some(950),
    ///     work: HopWork::Worked { start_ms: 0, end_ms: 40, outcome: "ok" },
    /// };
    /// let mut out = StackBuf::<{ HopTrace::ALONE_MAX_LEN }>::new();
    /// hop.write_alone(&mut out);
    /// assert_eq!(out.as_bytes(), Some(hop.to_header_value(&[], 0).as_bytes()));
    /// ```
    pub fn write_alone<const N: usize>(&self, out: &mut StackBuf<N>) {
        self.write_own(out);
    }

    /// The hop's own spans and its budget, in the order and shape [`Trace::encode`] writes
    /// them (a test holds the two byte for byte).
    ///
    /// Written piece by piece rather than element by element: the hop's name and the two
    /// outcomes that come from outside are checked as tokens once each, and everything else
    /// (`@0-`, `,.queue@0-`, `,.work@`, `=deadline`, `,^0=`) is a constant the compiler
    /// stores in place. The element writer would check `queue` and `work` again on every answer
    /// and copy each piece with a call; this is every answer's cost, so it is worth the second
    /// writer of the same shape.
    fn write_own<const N: usize>(&self, out: &mut StackBuf<N>) {
        out.put(token(self.name, MAX_NAME_LEN).as_bytes());
        out.put(b"@0-");
        out.put_decimal(self.end_ms.min(MAX_MS));
        out.push(b'=');
        out.put(token(self.status, MAX_OUTCOME_LEN).as_bytes());
        match self.work {
            HopWork::None => {}
            HopWork::GaveUp { queued_ms } => {
                out.put(QUEUE_ELEMENT);
                out.put_decimal(queued_ms.min(MAX_MS));
                out.put(b"=deadline");
            }
            HopWork::Shed { queued_ms } => {
                out.put(QUEUE_ELEMENT);
                out.put_decimal(queued_ms.min(MAX_MS));
                out.put(b"=shed");
            }
            HopWork::Worked {
                start_ms,
                end_ms,
                outcome,
            } => {
                let start_ms = start_ms.min(MAX_MS);
                out.put(QUEUE_ELEMENT);
                out.put_decimal(start_ms);
                out.put(b",.work@");
                out.put_decimal(start_ms);
                out.push(b'-');
                out.put_decimal(end_ms.max(start_ms).min(MAX_MS));
                out.push(b'=');
                out.put(token(outcome, MAX_OUTCOME_LEN).as_bytes());
            }
        }
        if let Some(ms) = self.budget_ms {
            out.put(b",^0=");
            out.put_decimal(ms.min(MAX_MS));
        }
    }
}

/// The `queue` span under a hop's root up to its end: `,.` (depth 1), the name, `@0-`.
const QUEUE_ELEMENT: &[u8] = b",.queue@0-";

// The constant pieces above spell the names and outcomes the codec writes.
const _: () = {
    assert!(matches!(QUEUE.as_bytes(), b"queue"));
    assert!(matches!(WORK.as_bytes(), b"work"));
    assert!(matches!(DEADLINE.as_bytes(), b"deadline"));
    assert!(matches!(SHED.as_bytes(), b"shed"));
};

#[cfg(test)]
mod tests {
    use super::super::{MAX_NAME_LEN, MAX_OUTCOME_LEN, sanitize_name};
    use super::*;

    #[test]
    fn the_stack_path_matches_the_codec() {
        let long = sanitize_name(&"n".repeat(100), MAX_NAME_LEN);
        let names = ["inventory", long.as_str(), "not a token, é"];
        let works = [
            HopWork::None,
            HopWork::GaveUp { queued_ms: 290 },
            HopWork::Shed { queued_ms: 0 },
            HopWork::Shed { queued_ms: 40 },
            HopWork::GaveUp {
                queued_ms: u64::MAX,
            },
            HopWork::Worked {
                start_ms: 3,
                end_ms: 590,
                outcome: "deadline",
            },
            HopWork::Worked {
                start_ms: 7,
                end_ms: 2,
                outcome: "ok",
            },
            HopWork::Worked {
                start_ms: 0,
                end_ms: 99_999_999_999,
                outcome: "an outcome longer than the cap",
            },
            HopWork::Worked {
                start_ms: u64::MAX,
                end_ms: 5,
                outcome: "not a token, é",
            },
        ];
        for name in names {
            for (end_ms, budget_ms) in [(590, Some(600)), (u64::MAX, None), (3, Some(u64::MAX))] {
                for status in ["504", "", "5 04"] {
                    for work in works {
                        let hop = HopTrace {
                            name,
                            end_ms,
                            status,
                            budget_ms,
                            work,
                        };
                        let mut out = StackBuf::<{ HopTrace::ALONE_MAX_LEN }>::new();
                        hop.write_own(&mut out);
                        let codec = hop.to_trace(Vec::new(), 0).encode();
                        assert_eq!(out.as_bytes(), Some(codec.as_bytes()), "{hop:?}");
                        assert_eq!(hop.to_header_value(&[], 0), codec.as_str());
                    }
                }
            }
        }
    }

    #[test]
    fn the_longest_hop_alone_is_exactly_the_bound() {
        let name = "n".repeat(MAX_NAME_LEN);
        let outcome = "o".repeat(MAX_OUTCOME_LEN);
        let hop = HopTrace {
            name: &name,
            end_ms: u64::MAX,
            status: &outcome,
            budget_ms: Some(u64::MAX),
            work: HopWork::Worked {
                start_ms: u64::MAX,
                end_ms: u64::MAX,
                outcome: &outcome,
            },
        };
        let mut out = StackBuf::<{ HopTrace::ALONE_MAX_LEN }>::new();
        hop.write_alone(&mut out);
        assert_eq!(out.len(), HopTrace::ALONE_MAX_LEN);
        let codec = hop.to_trace(Vec::new(), 0).encode();
        assert_eq!(out.as_bytes(), Some(codec.as_bytes()));
    }

    #[test]
    fn calls_and_dropped_go_through_the_codec() {
        let hop = HopTrace {
            name: "orders",
            end_ms: 40,
            status: "200",
            budget_ms: Some(45),
            work: HopWork::Worked {
                start_ms: 1,
                end_ms: 39,
                outcome: "ok",
            },
        };
        let calls = [Recorded::Span(
            Span::new("call:inventory", 2, 30).with_outcome("200"),
        )];
        assert_eq!(
            hop.to_header_value(&calls, 2),
            "orders@0-40=200,.queue@0-1,.work@1-39=ok,.call:inventory@2-30=200,^0=45,+2"
        );
        assert_eq!(
            hop.to_header_value(&[], 3),
            "orders@0-40=200,.queue@0-1,.work@1-39=ok,^0=45,+3"
        );
    }
}
