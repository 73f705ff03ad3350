//! `deadline trace [--json] HEADER`: decode a `Deadline-Trace` value.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use deadline::trace::Trace;

/// Arguments of `deadline trace`.
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Print `{"spans": [...], "dropped": N}` instead of a tree.
    #[arg(long)]
    json: bool,
    /// The header value (with or without a leading `Deadline-Trace:`); `-` reads standard input.
    header: String,
}

pub(crate) fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    let raw = if args.header == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .context("reading standard input")?;
        buf
    } else {
        args.header.clone()
    };
    let trace = Trace::decode(strip_name(raw.trim()).as_bytes());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&trace)?);
    } else {
        println!("{trace}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Accepts a header line pasted from `curl -si` as well as a bare value.
fn strip_name(raw: &str) -> &str {
    match raw.split_once(':') {
        Some((name, rest)) if name.trim().eq_ignore_ascii_case("deadline-trace") => rest.trim(),
        _ => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::strip_name;

    #[test]
    fn header_lines_and_bare_values_both_decode() {
        assert_eq!(strip_name("Deadline-Trace: a@0-1"), "a@0-1");
        assert_eq!(strip_name("deadline-trace:a@0-1"), "a@0-1");
        assert_eq!(strip_name("a@0-1,.call:x@0-1"), "a@0-1,.call:x@0-1");
    }
}
