//! How `deadline demo` prints a run and the comparison of the two: the text a person reads
//! (`--json` prints the same figures as data).

use deadline::trace::name;

use crate::demo_run::DemoRun;

fn secs(ms: f64) -> String {
    format!("{:.2} s", ms / 1_000.0)
}

pub(crate) fn print_run(run: &DemoRun) {
    println!();
    let title = match run.chain {
        Some(label) => label,
        None if run.deadlines => "With deadlines",
        None => "Without deadlines",
    };
    println!("{title}");
    match (run.heard(), run.user_heard_back_ms, run.user_gave_up_ms) {
        (Some(status), Some(at), _) => println!("  user       heard {status} at {}", secs(at)),
        (_, _, Some(at)) => println!("  user       gave up at {} with no answer", secs(at)),
        _ => println!("  user       no answer"),
    }
    println!(
        "  calls      {} between services, {} after the user left",
        run.calls, run.calls_after_user_left
    );
    println!("  last work  ended at {}", secs(run.last_work_end_ms));
    println!(
        "  waste      {:.0} ms of worker time after the user left (of {:.0} ms)",
        run.worker_ms_after_user_left, run.worker_ms
    );
    if let Some(db) = &run.database {
        println!(
            "  database   {:.2} s of statements, {:.2} s after the user left (pg_stat_activity: {} samples, gaps up to {:.0} ms)",
            db.db_seconds, db.db_seconds_after_users_left, db.db_samples, db.db_sample_gap_max_ms
        );
        match run.db_empty_ms_after_user_left {
            Some(ms) => println!(
                "             no inventory statement active {ms:.0} ms after the user left"
            ),
            None => {
                println!("             inventory statements still active when sampling stopped")
            }
        }
    }
    if let Some(trace) = &run.user_trace {
        let tree = deadline::Trace::decode(trace.as_bytes());
        if let Some(line) = innermost(&tree) {
            println!("  last hop   {line}");
        }
        println!("  Deadline-Trace, decoded ({} spans):", tree.span_count());
        for line in tree.to_string().lines() {
            println!("    {line}");
        }
    }
}

/// The deepest span's line of a trace, e.g. `inventory 0-879 ms, 504`: which hop ran out.
pub(crate) fn innermost(trace: &deadline::Trace) -> Option<String> {
    fn walk<'a>(
        span: &'a deadline::Span,
        depth: usize,
        best: &mut Option<(usize, &'a deadline::Span)>,
    ) {
        let is_hop = ![
            name::QUEUE,
            name::WORK,
            name::ATTEMPT,
            name::QUERY,
            name::POOL,
        ]
        .contains(&span.name.as_str())
            && !name::is_call(&span.name);
        if is_hop && best.is_none_or(|(d, _)| depth >= d) {
            *best = Some((depth, span));
        }
        for child in &span.children {
            walk(child, depth + 1, best);
        }
    }
    let mut best = None;
    for span in &trace.spans {
        walk(span, 0, &mut best);
    }
    best.map(|(_, s)| {
        let outcome = s.outcome.as_deref().unwrap_or("?");
        let work = s.children.iter().find(|c| c.name == name::WORK);
        let detail = work.map_or(String::new(), |w| {
            format!(
                ", worked {} ms ({})",
                w.end_ms - w.start_ms,
                w.outcome.as_deref().unwrap_or("?")
            )
        });
        format!(
            "{} answered {outcome} after {} ms{detail}",
            s.name,
            s.end_ms - s.start_ms
        )
    })
}

pub(crate) fn print_comparison(runs: &[DemoRun]) {
    let [without, with] = runs else { return };
    println!();
    let fate = |run: &DemoRun| match (run.heard(), run.user_heard_back_ms) {
        (Some(status), Some(at)) => format!("heard {status} at {}", secs(at)),
        _ => format!("gave up at {}", secs(run.user_left_ms())),
    };
    println!(
        "With deadlines the user {}; without, they {};",
        fate(with),
        fate(without)
    );
    println!(
        "work ended at {}, not {}; calls after the user left: {}, not {};",
        secs(with.last_work_end_ms),
        secs(without.last_work_end_ms),
        with.calls_after_user_left,
        without.calls_after_user_left
    );
    println!(
        "worker time after the user left: {:.0} ms, not {:.0} ms.",
        with.worker_ms_after_user_left, without.worker_ms_after_user_left
    );
    if let (Some(w), Some(wo)) = (&with.database, &without.database) {
        println!(
            "database time after the user left: {:.2} s, not {:.2} s.",
            w.db_seconds_after_users_left, wo.db_seconds_after_users_left
        );
    }
}

/// A `--check` verdict as the demo prints it: `check: passed`, or `check: FAILED` and each
/// failure on a line of its own.
pub(crate) fn print_check(failures: &[String]) {
    if failures.is_empty() {
        println!("check: passed");
    } else {
        println!("check: FAILED");
        for failure in failures {
            println!("  - {failure}");
        }
    }
}

/// The demo's exit code: failure only when `--check` was asked for and something failed.
pub(crate) fn check_exit(check: bool, failures: &[String]) -> std::process::ExitCode {
    if check && !failures.is_empty() {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
