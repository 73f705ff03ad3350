//! `deadline trace [--json] HEADER`: decode a `Deadline-Trace` value. A hop's root span shows
//! its budget at arrival when the trace carries it (`budget 950 ms` in the tree, `budget_ms` in
//! the JSON).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use deadline::trace::Trace;

/// Arguments of `deadline trace`.
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Print `{"spans": [...], "dropped": N}` instead of a tree (a span carrying a hop's budget
    /// at arrival has `budget_ms`).
    #[arg(long)]
    json: bool,
    /// The header value (with or without a leading `Deadline-Trace:`); `-` reads standard input.
    /// Any bytes are accepted: what does not parse is left out, never an error.
    header: std::ffi::OsString,
}

pub(crate) fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let raw: Vec<u8> = if args.header == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .context("reading standard input")?;
        buf
    } else {
        args.header.as_encoded_bytes().to_vec()
    };
    let trace = Trace::decode(strip_name(trim(&raw)));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&trace)?);
    } else {
        println!("{trace}");
    }
    Ok(ExitCode::SUCCESS)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Accepts a header line pasted from `curl -si` as well as a bare value.
fn strip_name(raw: &[u8]) -> &[u8] {
    const NAME: &[u8] = b"deadline-trace";
    match raw.iter().position(|b| *b == b':') {
        Some(colon) if trim(&raw[..colon]).eq_ignore_ascii_case(NAME) => trim(&raw[colon + 1..]),
        _ => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::strip_name;

    #[test]
    fn header_lines_and_bare_values_both_decode() {
        assert_eq!(strip_name(b"Deadline-Trace: a@0-1"), b"a@0-1");
        assert_eq!(strip_name(b"deadline-trace:a@0-1"), b"a@0-1");
        assert_eq!(strip_name(b"a@0-1,.call:x@0-1"), b"a@0-1,.call:x@0-1");
        assert_eq!(strip_name(b"\xff:\xfe"), b"\xff:\xfe");
    }
}
