//! The trace's value types: [`Span`] and [`Trace`].

use super::token::into_token;
use super::{MAX_DEPTH, MAX_NAME_LEN, MAX_OUTCOME_LEN};

/// One timed piece of work at a hop, with the spans nested inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Span {
    /// What the work was, e.g. `gateway`, `queue`, `call:orders`, `attempt`. Kept sanitised to
    /// `tchar` (see [`sanitize_name`](super::sanitize_name)) by every constructor; [`Trace::encode`] sanitises again in
    /// case the field was set directly.
    pub name: String,
    /// Start, in ms since this hop received the request.
    pub start_ms: u64,
    /// End, in ms since this hop received the request; never before `start_ms`.
    pub end_ms: u64,
    /// How it ended, sanitised like `name`, e.g. `ok`, `504`, `deadline`, `skipped`, `hung-up`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub outcome: Option<String>,
    /// The hop's budget at arrival, in whole ms, on a hop's root span: what the hop read from
    /// its caller's request (after clamping to its maximum; 0 for a budget already spent).
    /// `None` on every other span, on a hop that had no deadline, and in traces from writers
    /// that predate it. A budget, not a time: [`shift`](Span::shift) and
    /// [`Trace::nest_within`] leave it as it is.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub budget_ms: Option<u64>,
    /// Spans nested inside this one, in order.
    #[cfg_attr(feature = "serde", serde(default))]
    pub children: Vec<Span>,
}

impl Span {
    /// A span called `name` (sanitised to [`MAX_NAME_LEN`] bytes) from `start_ms` to `end_ms`.
    /// An `end_ms` before `start_ms` is taken as `start_ms`.
    ///
    /// ```
    /// # use deadline_core::trace::Span;
    /// let span = Span::new("call orders", 30, 10);
    /// assert_eq!((span.name.as_str(), span.start_ms, span.end_ms), ("call_orders", 30, 30));
    /// ```
    ///
    /// `name` is taken as it is when it is already a token (the names the layers record nearly
    /// always are): a `String` is moved in, not rebuilt.
    pub fn new(name: impl Into<String>, start_ms: u64, end_ms: u64) -> Span {
        Span {
            name: into_token(name.into(), MAX_NAME_LEN),
            start_ms,
            end_ms: end_ms.max(start_ms),
            outcome: None,
            budget_ms: None,
            children: Vec::new(),
        }
    }

    /// Sets the outcome, sanitised to [`MAX_OUTCOME_LEN`] bytes (taken as it is when it is
    /// already a token, as [`new`](Span::new) takes the name).
    pub fn with_outcome(mut self, outcome: impl Into<String>) -> Span {
        self.outcome = Some(into_token(outcome.into(), MAX_OUTCOME_LEN));
        self
    }

    /// Sets the hop's budget at arrival ([`budget_ms`](Span::budget_ms)), in ms.
    ///
    /// ```
    /// # use deadline_core::trace::{Span, Trace};
    /// let root = Span::new("inventory", 0, 12).with_outcome("200").with_budget_ms(950);
    /// assert_eq!(Trace::from_span(root).encode(), "inventory@0-12=200,^0=950");
    /// ```
    pub fn with_budget_ms(mut self, budget_ms: u64) -> Span {
        self.budget_ms = Some(budget_ms);
        self
    }

    /// Appends `child` to this span's children.
    pub fn with_child(mut self, child: Span) -> Span {
        self.children.push(child);
        self
    }

    /// Appends `child` to this span's children, in place (for building a span in a loop, or
    /// nesting a callee's shifted spans under an attempt).
    pub fn push(&mut self, child: Span) {
        self.children.push(child);
    }

    /// Adds `offset_ms` to the start and end of this span and all its descendants, saturating at
    /// `u64::MAX` (encoding then saturates at [`MAX_MS`](super::MAX_MS)). This is how a caller moves a callee's
    /// spans onto its own clock: the offset is when it sent the attempt.
    ///
    /// Heap-free for the trees [`Trace::decode`] makes (at most [`MAX_DEPTH`] levels): it
    /// recurses that far, and only a deeper tree built by hand goes on with an explicit stack.
    pub fn shift(&mut self, offset_ms: u64) {
        map_times(
            std::slice::from_mut(self),
            &|t| t.saturating_add(offset_ms),
            0,
        );
    }

    /// The number of spans in this subtree: this span and all its descendants.
    pub fn count(&self) -> usize {
        let mut count = 0;
        let mut stack = vec![self];
        while let Some(span) = stack.pop() {
            count += 1;
            stack.extend(span.children.iter());
        }
        count
    }
}

/// A hop's spans: a forest of root spans, plus how many spans were not kept.
///
/// See the [module docs](super) for the wire format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct Trace {
    /// The root spans, in order.
    pub spans: Vec<Span>,
    /// Spans that were not kept (beyond [`MAX_SPANS`](super::MAX_SPANS) or [`MAX_DEPTH`]), shown as "… and N more
    /// spans". Additions should saturate.
    pub dropped: u64,
}

impl Trace {
    /// An empty trace: no spans, nothing dropped. Encodes as the empty string.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// A trace with the single root `root`.
    pub fn from_span(root: Span) -> Trace {
        Trace {
            spans: vec![root],
            dropped: 0,
        }
    }

    /// The number of spans held (roots and all their descendants), not counting `dropped`.
    pub fn span_count(&self) -> usize {
        self.spans.iter().map(Span::count).sum()
    }

    /// Adds `offset_ms` to every span, as [`Span::shift`] does.
    pub fn shift(&mut self, offset_ms: u64) {
        map_times(&mut self.spans, &|t| t.saturating_add(offset_ms), 0);
    }

    /// A callee's trace placed under the attempt that carried it, which ran from `start_ms` to
    /// `end_ms` on the caller's clock: every time is shifted by `start_ms` and then held at
    /// `end_ms` at most. A callee chooses what its trace says, so this is what keeps its spans
    /// inside the window the caller saw: none can claim to start before the attempt was sent or
    /// to end after its answer came.
    pub fn nest_within(&mut self, start_ms: u64, end_ms: u64) {
        let end_ms = end_ms.max(start_ms);
        map_times(
            &mut self.spans,
            &|t| t.saturating_add(start_ms).min(end_ms),
            0,
        );
    }
}

/// Replaces every time of `spans` (at nesting level `level`) and their descendants with `f` of
/// it, by recursion as deep as [`MAX_DEPTH`], then with a stack on the heap for deeper subtrees.
fn map_times(spans: &mut [Span], f: &dyn Fn(u64) -> u64, level: usize) {
    for span in spans {
        span.start_ms = f(span.start_ms);
        span.end_ms = f(span.end_ms);
        if level < MAX_DEPTH {
            map_times(&mut span.children, f, level + 1);
        } else {
            let mut stack: Vec<&mut Span> = span.children.iter_mut().collect();
            while let Some(span) = stack.pop() {
                span.start_ms = f(span.start_ms);
                span.end_ms = f(span.end_ms);
                stack.extend(span.children.iter_mut());
            }
        }
    }
}
