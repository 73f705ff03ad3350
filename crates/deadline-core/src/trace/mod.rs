//! The `Deadline-Trace` response header: what each hop did with its budget.
//!
//! Every hop answers with a [`Trace`] of its own spans in the [`TRACE_HEADER`] response header,
//! with times in whole milliseconds relative to the moment *that hop* received the request. A
//! caller that gets a callee's trace back shifts it by the time it sent that attempt
//! ([`Trace::shift`]) and nests it under the attempt's span, so the edge ends up with the whole
//! tree without any clock synchronisation between hosts. A 504 carries the trace too, which is how
//! the edge learns which hop ran out of time and what it was doing. A callee writes its own
//! trace, so the propagate layer also holds every time of it inside the attempt
//! ([`Trace::nest_within`]): a callee's spans cannot claim time before the attempt was sent or
//! after its answer came, only tell how it spent the attempt.
//!
//! Each hop also writes its **budget at arrival** on its root span ([`Span::budget_ms`]): the
//! whole milliseconds it read from its caller's request, after clamping (absent when it had no
//! deadline). A budget is not a time, so shifting and nesting leave it as it is, and the edge
//! knows every hop's budget exactly ([`hops`] reads it), not only bounds from the times.
//!
//! This module holds the value types and the codec only: it does no I/O and reads no clock.
//!
//! # Grammar
//!
//! ```abnf
//! trace    = element *( "," element )
//! element  = span / budget / dropped
//!                                  ; every span first, then the budgets,
//!                                  ; then at most one `dropped`, last
//! span     = depth name "@" start "-" end [ "=" outcome ]
//! depth    = *15"."                ; nesting level; 0 for a root;
//!                                  ; at most one deeper than the previous span
//! name     = 1*24tchar
//! outcome  = 1*16tchar
//! tchar    = ALPHA / DIGIT / "_" / "-" / ":"
//! start    = 1*10DIGIT             ; ms since this hop received the request
//! end      = 1*10DIGIT             ; end >= start
//! budget   = "^" index "=" 1*10DIGIT
//!                                  ; the budget at arrival, in ms, of a hop
//!                                  ; whose root span is number `index`
//! index    = 1*2DIGIT              ; from 0, counting the spans of this value
//!                                  ; in the order written; each budget's index
//!                                  ; is above the previous one's
//! dropped  = "+" 1*10DIGIT         ; spans not kept
//! ```
//!
//! The first span is a root (no dots). Spans are written in pre-order (a parent before its
//! children), and a span's dot count is its nesting level, so the span's parent is the nearest
//! earlier span one level up. An empty trace is the empty string; a trace whose spans were all
//! dropped is just `+N`. Budgets follow the spans, each naming its span by position:
//! `orders@0-40=200,.work@1-39=ok,^0=950` is a hop `orders` that arrived with 950 ms.
//!
//! ## Worked example
//!
//! ```text
//! gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,...orders@1-1822=504,....work@1-21,.queue@0-0,+3
//! ```
//!
//! reads as: a root span `gateway` from 0 to 1873 ms that ended in a 504; under it a
//! `call:orders` span (level 1) holding one `attempt` (level 2), which holds the callee's own root
//! span `orders` (level 3, already shifted onto the gateway's clock) with its `work` (level 4);
//! then, back at level 1, a `queue` span that took no time; and three more spans that did not fit.
//! [`Trace`]'s [`Display`](std::fmt::Display) renders it as:
//!
//! ```
//! # use deadline_core::trace::Trace;
//! let header = "gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,\
//!               ...orders@1-1822=504,....work@1-21,.queue@0-0,+3";
//! let trace = Trace::decode(header.as_bytes());
//! assert_eq!(trace.span_count(), 6);
//! assert_eq!(trace.dropped, 3);
//! assert_eq!(trace.encode(), header);
//! assert_eq!(
//!     trace.to_string(),
//!     "\
//! gateway  0–1873 ms (1873 ms)  504
//! ├─ call:orders  0–1872 ms (1872 ms)  504
//! │  └─ attempt  0–1823 ms (1823 ms)  504
//! │     └─ orders  1–1822 ms (1821 ms)  504
//! │        └─ work  1–21 ms (20 ms)
//! └─ queue  0–0 ms (0 ms)
//! … and 3 more spans
//! "
//! );
//! ```
//!
//! ## A three-hop chain
//!
//! The gateway calls orders, which calls inventory. Inventory runs out of budget and answers 504
//! with its own trace, on its own clock:
//!
//! ```
//! use deadline_core::trace::{Span, Trace};
//!
//! let inventory = Trace::from_span(
//!     Span::new("inventory", 0, 941)
//!         .with_outcome("504")
//!         .with_budget_ms(941)
//!         .with_child(Span::new("work", 0, 940).with_outcome("deadline")),
//! );
//! let header = inventory.to_header_value();
//! assert_eq!(header, "inventory@0-941=504,.work@0-940=deadline,^0=941");
//!
//! // Orders worked 20 ms, sent its only attempt at 21 ms on its clock and got the 504 at
//! // 963 ms. It moves inventory's spans onto its own clock, held inside the attempt, and
//! // nests them under it; spans inventory could not report stay counted.
//! fn nest(attempt: &mut Span, sent_at_ms: u64, mut callee: Trace, dropped: &mut u64) {
//!     callee.nest_within(sent_at_ms, attempt.end_ms);
//!     for span in callee.spans {
//!         attempt.push(span);
//!     }
//!     *dropped = dropped.saturating_add(callee.dropped);
//! }
//! let mut attempt = Span::new("attempt", 21, 963).with_outcome("504");
//! let mut orders = Trace::new();
//! nest(&mut attempt, 21, Trace::from_header_value(&header), &mut orders.dropped);
//! orders.spans.push(
//!     Span::new("orders", 0, 964)
//!         .with_outcome("504")
//!         .with_budget_ms(1000)
//!         .with_child(Span::new("work", 0, 20).with_outcome("ok"))
//!         .with_child(Span::new("call:inventory", 21, 963).with_outcome("504").with_child(attempt)),
//! );
//! let header = orders.to_header_value();
//! assert_eq!(
//!     header,
//!     "orders@0-964=504,.work@0-20=ok,.call:inventory@21-963=504,..attempt@21-963=504,\
//!      ...inventory@21-962=504,....work@21-961=deadline,^0=1000,^4=941"
//! );
//!
//! // The gateway sent its attempt to orders 1 ms after it received the user's request.
//! let mut attempt = Span::new("attempt", 1, 966).with_outcome("504");
//! let mut gateway = Trace::new();
//! nest(&mut attempt, 1, Trace::from_header_value(&header), &mut gateway.dropped);
//! gateway.spans.push(
//!     Span::new("gateway", 0, 967)
//!         .with_outcome("504")
//!         .with_budget_ms(1002)
//!         .with_child(Span::new("call:orders", 1, 966).with_outcome("504").with_child(attempt)),
//! );
//! assert_eq!(
//!     gateway.encode(),
//!     "gateway@0-967=504,.call:orders@1-966=504,..attempt@1-966=504,...orders@1-965=504,\
//!      ....work@1-21=ok,....call:inventory@22-964=504,.....attempt@22-964=504,\
//!      ......inventory@22-963=504,.......work@22-962=deadline,^0=1002,^3=1000,^7=941"
//! );
//! ```
//!
//! Every budget is still the one its hop read, now numbered among the gateway's spans. The
//! times were moved and held inside the attempts; the budgets were not.
//!
//! # Versions: how the grammar grows, and why older readers are safe
//!
//! The value has no version number. It grows only by new kinds of element written **after
//! every span**, never by changing how a span is written, and the reading rule makes that
//! safe: a reader goes through the elements in order and stops at the first one it cannot
//! read, keeping everything before it (see [`Trace::decode`]). Budgets came that way: a reader
//! from before them stops at the first `^` element, having read every span with its name,
//! times, outcome and nesting exactly as this version reads it. What it misses is the budgets,
//! and, when the value also ends with `+N`, that count (it stops before reaching it, so it
//! shows no "and N more spans" line for a trace that was cut); it never gets a wrong span. Its
//! hop view falls back to bounds from the times, as before. Budgets written on the span itself
//! (`orders@0-40=200^950`) would have made that reader reject the first root span and
//! everything after it. The other way round, a trace without budgets (from an older writer)
//! is read by this version exactly as before, with no budgets: its hops are bounded, not exact.
//!
//! A later extension follows the same rule: an element whose first byte is none of a span's
//! nor `^` nor `+`, placed after the budgets and before the `+N`; this version stops there the
//! same way. The tests keep the previous decoder word for word and check both directions.
//!
//! # Why the grammar is shaped this way
//!
//! - **Pre-order with depth dots, not brackets.** The encoder writes each span as it walks the
//!   tree and the decoder attaches each span as it reads it (its parent is the last span one level
//!   up), so neither needs to look ahead or keep more than the current path. There are no brackets
//!   to balance, so there is no way to be "unclosed".
//! - **Every valid prefix is still a tree.** A span can only be one level deeper than the one
//!   before it, so cutting the list after any element leaves every kept span with its parent.
//!   The decoder relies on this: at the first malformed element it stops and returns what it has
//!   (see [`Trace::decode`]), which is a well-formed trace rather than an error.
//! - **Tokens only.** Names and outcomes are restricted to `tchar` (letters, digits, `_`, `-`,
//!   `:`), and the separators `.` `@` `-` `=` `,` `+` are all plain ASCII, so the encoded form is
//!   always a valid header value, needs no quoting or escaping, and is safe to print in a terminal
//!   or a log line. Arbitrary text is made to fit by [`sanitize_name`].
//! - **Whole milliseconds, relative to the hop.** Relative times need no clock agreement between
//!   hosts and shifting a subtree is one addition; at most ten digits each keeps every number in a
//!   `u64` with no overflow checks (times saturate at [`MAX_MS`], about 115 days).
//! - **A comma-separated list.** If an intermediary folds two `Deadline-Trace` fields into one
//!   (`a, b`), the space after the comma makes the second element malformed, so the result is the
//!   first field's trace, not a mixture.
//!
//! # Bounds
//!
//! [`Trace::encode`] keeps at most [`MAX_SPANS`] spans, at most [`MAX_DEPTH`] levels deep. When a
//! trace is larger it keeps the first `MAX_SPANS` spans in breadth-first order (level by level,
//! left to right, across all roots) and adds the rest to the `+N` count. Breadth-first keeps what
//! matters most when the tree is pruned: the roots, which hop answered and with what outcome,
//! and the attempts, rather than the leaves of the first subtree; and a span is only ever kept
//! together with all of its ancestors.
//!
//! A kept span's budget is written with it, numbered by its place among the kept spans; a
//! dropped span's budget goes with it.
//!
//! The encoded value is never longer than [`MAX_ENCODED_LEN`] (5,897) bytes:
//!
//! | part | bytes |
//! |---|---|
//! | one span without its dots: name 24 + `@` + start 10 + `-` + end 10 + `=` + outcome 16 | 63 |
//! | 64 spans | 64 × 63 = 4,032 |
//! | dots: at most 0, 1, …, 15 for the first 16 spans (one deeper each time), then 15 each for the other 48 | 120 + 720 = 840 |
//! | commas between the 64 spans | 63 |
//! | a budget for each span, `,^` index `=` and 10 digits: 14 bytes for spans 0 to 9, 15 for the other 54 | 140 + 810 = 950 |
//! | `,+` and a 10-digit dropped count | 12 |
//! | **total** | **5,897** |
//!
//! The bound is reached (a chain 16 deep with 48 more spans at the deepest level, all names and
//! outcomes at full length, all times and budgets at `MAX_MS`, every span with a budget, and a
//! dropped count of at least `MAX_MS`), so it cannot be lowered without lowering a cap. Only
//! hops' root spans carry budgets, and a callee's root sits under an `attempt` span, itself
//! under a `call:` span, so a real 64-span trace holds at most 32 of them; without budgets the
//! bound is 4,947 bytes. Real traces are far smaller: the three-hop chain above is 229 bytes (23
//! of them its three budgets), and a 64-span trace of a gateway trying orders three times, each trying
//! inventory three times, is about 1.6 KiB. Proxies that cap response headers at one memory
//! page (4 KiB, e.g. nginx's default `proxy_buffer_size` on some platforms) can still reject the
//! worst case, so keep span names short.
//!
//! [`Trace::decode`] never reads more than 64 KiB of its input, stores at most `MAX_SPANS` spans
//! (later valid spans are only counted), and never panics: hostile input decodes to an empty trace
//! or to its valid prefix.

mod decode;
mod display;
mod encode;
mod hop;
pub mod hops;
mod limits;
mod model;
pub mod name;
pub mod outcome;
mod record;
mod token;

#[cfg(test)]
mod compat;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use hop::{HopTrace, HopWork};
pub(crate) use limits::{MAX_DECODE_LEN, MAX_DIGITS, MAX_INDEX_DIGITS};
pub use limits::{
    MAX_DEPTH, MAX_ENCODED_LEN, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN, MAX_SPANS, TRACE_HEADER,
};
pub use model::{Span, Trace};
pub use record::{AttemptSpan, Attempts, CallSpan, EncodedTrace, Outcome, Recorded};
pub use token::sanitize_name;
