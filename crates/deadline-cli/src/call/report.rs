//! `deadline call`'s report: the text a person reads (the trace hop by hop, drawn as a tree)
//! and the `--json` document.

use std::fmt::Write as _;

use deadline::trace::Trace;
use deadline::trace::hops::{Budget, Hop};
use deadline_http::enforce::SERVER_TIMING_HEADER;

use super::{Answer, CallArgs, MAX_BODY, Plan, ms};
use crate::stream_read as stream;

/// `347 ms` (exact), `≤ 347 ms` (a bound) or `-20 ms`.
pub(super) fn budget_text(budget: Option<Budget>) -> String {
    match budget {
        None => "-".to_owned(),
        Some(Budget::Arrived(ms) | Budget::Sent(ms)) => format!("{ms} ms"),
        Some(Budget::AtMost(ms)) => format!("≤ {ms} ms"),
        Some(Budget::Over(ms)) => format!("-{ms} ms"),
    }
}

/// The tree drawing before each hop's name: `├─ `, `└─ ` and the ancestors' `│  `.
pub(super) fn prefixes(hops: &[Hop]) -> Vec<String> {
    let last = |i: usize| !hops[i + 1..].iter().any(|h| h.parent == hops[i].parent);
    (0..hops.len())
        .map(|i| {
            let mut chain = Vec::new();
            let mut at = hops[i].parent;
            let mut child = i;
            while let Some(parent) = at {
                chain.push(child);
                child = parent;
                at = hops[parent].parent;
            }
            // `chain` holds i and its ancestors below the root, deepest first.
            let mut out = String::new();
            for (n, &node) in chain.iter().rev().enumerate() {
                let is_self = n + 1 == chain.len();
                out.push_str(match (is_self, last(node)) {
                    (true, true) => "└─ ",
                    (true, false) => "├─ ",
                    (false, true) => "   ",
                    (false, false) => "│  ",
                });
            }
            out
        })
        .collect()
}

pub(super) fn calls_text(hop: &Hop) -> String {
    let calls: Vec<String> = hop
        .calls
        .iter()
        .map(|c| {
            let attempts = match c.attempts {
                1 => "1 attempt".to_owned(),
                n => format!("{n} attempts"),
            };
            format!(
                "{}: {} in {} ms ({attempts})",
                c.target,
                c.outcome.as_deref().unwrap_or("?"),
                c.ms
            )
        })
        .collect();
    calls.join("; ")
}

pub(super) fn ran_out_text(hop: &Hop) -> &'static str {
    let deadline = |p: &Option<deadline::trace::hops::Phase>| {
        p.as_ref()
            .is_some_and(|p| p.outcome.as_deref() == Some(deadline::trace::outcome::DEADLINE))
    };
    if deadline(&hop.queue) {
        "← ran out waiting for a worker"
    } else if deadline(&hop.work) {
        "← ran out while working"
    } else {
        "← arrived with no time left"
    }
}

/// The text report.
pub(super) fn report(
    args: &CallArgs,
    plan: &Plan,
    answer: &Answer,
    trace: Option<&Trace>,
    hops: &[Hop],
) -> String {
    let mut out = String::new();
    answer_lines(args, plan, answer, &mut out);
    let Some(trace) = trace else {
        let _ = writeln!(
            out,
            "no Deadline-Trace in the answer: the server does not report what it did with the budget"
        );
        return out;
    };
    if hops.is_empty() {
        let _ = writeln!(out, "the Deadline-Trace has no hops:\n{trace}");
        return out;
    }
    hop_table(hops, &mut out);
    if hops
        .iter()
        .any(|h| matches!(h.budget, Some(Budget::AtMost(_))))
    {
        let _ = writeln!(
            out,
            "≤: an upper bound, what the caller had left when it sent the request: this hop's trace does\n   \
             not carry its budget at arrival (an older version). A caller sends less (less its margin,\n   \
             at most its per-attempt timeout). Figures without ≤ are exact."
        );
    }
    if trace.dropped > 0 {
        let _ = writeln!(out, "({} spans were dropped from the trace)", trace.dropped);
    }
    let _ = writeln!(out, "\ntrace:\n{trace}");
    out
}

/// The answer's part of the text report: the request, the status, gRPC's status, the
/// `Server-Timing` lines and the body (or the stream), then a blank line.
fn answer_lines(args: &CallArgs, plan: &Plan, answer: &Answer, out: &mut String) {
    let budget = plan
        .budget_ms
        .map_or_else(|| "no budget".to_owned(), |ms| format!("budget {ms} ms"));
    let method = if plan.grpc_body.is_some() {
        "POST"
    } else {
        "GET"
    };
    let _ = writeln!(
        out,
        "{method} {} ({}), {budget}",
        args.url,
        args.protocol.as_str()
    );
    let _ = writeln!(
        out,
        "{} {} in {:.1} ms",
        answer.status.as_u16(),
        answer.status.canonical_reason().unwrap_or(""),
        ms(answer.elapsed)
    );
    if let Some(grpc) = &answer.grpc {
        let _ = writeln!(out, "grpc-status: {} ({})", grpc.code, grpc.code.code());
        if !grpc.message.is_empty() {
            let _ = writeln!(out, "grpc-message: {}", grpc.message);
        }
    }
    for line in answer.headers.get_all(SERVER_TIMING_HEADER) {
        let _ = writeln!(
            out,
            "server-timing: {}",
            String::from_utf8_lossy(line.as_bytes())
        );
    }
    // A stream the server ended at its deadline carries its timings in the trailers.
    if let Some(trailers) = &answer.stream.trailers {
        for line in trailers.get_all(SERVER_TIMING_HEADER) {
            let _ = writeln!(
                out,
                "server-timing (trailers): {}",
                String::from_utf8_lossy(line.as_bytes())
            );
        }
    }
    let body = match &answer.grpc {
        // The reply message's bytes, without their length prefix.
        Some(grpc) => grpc.payload.clone(),
        None => String::from_utf8_lossy(&answer.body).into_owned(),
    };
    let body = body.trim_end();
    let streamed = answer.stream.count > 1 || answer.stream.end != stream::StreamEnd::Complete;
    if streamed {
        answer.stream.report(answer.grpc.is_some(), out);
    } else if answer.body_cut {
        let _ = writeln!(out, "body: (more than {MAX_BODY} bytes, not shown)");
    } else if !body.is_empty() {
        let shown: String = body.chars().take(500).collect();
        let more = if shown.len() < body.len() { " …" } else { "" };
        let _ = writeln!(out, "body: {shown}{more}");
    }
    let _ = writeln!(out);
}

/// The table of the trace's hops, one line each: when it arrived, its budget, queue, work,
/// headroom and calls (and why it ran out).
fn hop_table(hops: &[Hop], out: &mut String) {
    let prefixes = prefixes(hops);
    let names: Vec<String> = hops
        .iter()
        .zip(&prefixes)
        .map(|(h, p)| format!("{p}{}", h.name))
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(3)
        .max(3);
    let _ = writeln!(
        out,
        "{:<width$}  {:>8}  {:>10}  {:>7}  {:>8}  {:>10}  calls",
        "hop", "arrived", "budget", "queue", "work", "headroom"
    );
    for (hop, name) in hops.iter().zip(&names) {
        let phase = |p: &Option<deadline::trace::hops::Phase>| {
            p.as_ref()
                .map_or_else(|| "-".to_owned(), |p| format!("{} ms", p.ms))
        };
        let pad = width - name.chars().count();
        let mut line = format!(
            "{name}{:pad$}  {:>8}  {:>10}  {:>7}  {:>8}  {:>10}  {}",
            "",
            format!("{} ms", hop.start_ms),
            budget_text(hop.budget),
            phase(&hop.queue),
            phase(&hop.work),
            // A hop that ran out used its budget up, whatever the bound says.
            if hop.ran_out {
                "none".to_owned()
            } else {
                budget_text(hop.headroom())
            },
            calls_text(hop),
        );
        if hop.ran_out {
            let _ = write!(line, "  {}", ran_out_text(hop));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// One hop in `--json`: the core's fields, its headroom, and its budget as a plain number.
#[derive(serde::Serialize)]
struct HopJson<'a> {
    #[serde(flatten)]
    hop: &'a Hop,
    headroom: Option<Budget>,
    /// The budget at arrival in ms (negative when a bound went below zero); null without one.
    budget_ms: Option<i64>,
    /// Whether `budget_ms` is exact (the hop's trace carries it, or it is what was sent to the
    /// first hop) rather than an upper bound.
    budget_exact: bool,
}

/// A budget as a signed number of ms: [`Budget::Over`] is below zero.
fn signed_ms(budget: Budget) -> i64 {
    let ms = i64::try_from(budget.ms()).unwrap_or(i64::MAX);
    match budget {
        Budget::Over(_) => -ms,
        _ => ms,
    }
}

/// The `--json` document.
#[derive(serde::Serialize)]
pub(super) struct CallJson<'a> {
    url: &'a str,
    protocol: &'static str,
    budget_ms: Option<u64>,
    status: u16,
    /// The gRPC status code (`--protocol grpc` only).
    grpc_status: Option<u32>,
    /// Its name, `DEADLINE_EXCEEDED`.
    grpc_status_name: Option<String>,
    /// `grpc-message`, decoded.
    grpc_message: Option<String>,
    elapsed_ms: f64,
    server_timing: Vec<String>,
    body: String,
    body_cut: bool,
    /// How many data frames (gRPC: messages) arrived.
    chunk_count: usize,
    /// Each of them: when it arrived (ms since the call started), its size and text.
    chunks: &'a [stream::Received],
    /// How the body ended: `{"end": "complete"}`, or `{"end": "broken", "detail": "…"}` when the
    /// connection closed or the stream was reset before it ended.
    stream_end: &'a stream::StreamEnd,
    trace: Option<&'a Trace>,
    hops: Vec<HopJson<'a>>,
    ran_out: Vec<&'a str>,
}

pub(super) fn json<'a>(
    args: &'a CallArgs,
    plan: &Plan,
    answer: &'a Answer,
    trace: Option<&'a Trace>,
    hops: &'a [Hop],
) -> CallJson<'a> {
    CallJson {
        url: &args.url,
        protocol: args.protocol.as_str(),
        budget_ms: plan.budget_ms,
        status: answer.status.as_u16(),
        grpc_status: answer.grpc.as_ref().map(|g| g.code.code()),
        grpc_status_name: answer.grpc.as_ref().map(|g| g.code.to_string()),
        grpc_message: answer.grpc.as_ref().map(|g| g.message.clone()),
        elapsed_ms: (ms(answer.elapsed) * 1_000.0).round() / 1_000.0,
        server_timing: answer
            .headers
            .get_all(SERVER_TIMING_HEADER)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect(),
        body: match &answer.grpc {
            Some(grpc) => grpc.payload.clone(),
            None => String::from_utf8_lossy(&answer.body).into_owned(),
        },
        body_cut: answer.body_cut,
        chunk_count: answer.stream.count,
        chunks: &answer.stream.pieces,
        stream_end: &answer.stream.end,
        trace,
        hops: hops
            .iter()
            .map(|hop| HopJson {
                hop,
                headroom: hop.headroom(),
                budget_ms: hop.budget.map(signed_ms),
                budget_exact: hop.budget.is_some_and(Budget::is_exact),
            })
            .collect(),
        ran_out: hops
            .iter()
            .filter(|h| h.ran_out)
            .map(|h| h.name.as_str())
            .collect(),
    }
}
