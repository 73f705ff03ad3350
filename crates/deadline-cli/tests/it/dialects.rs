//! `deadline service --accept/--send/--share`: bad values refused before start, and a gateway
//! that accepts one dialect and sends another translating between them in a real chain.

use std::time::Duration;

use crate::util::{Service, bin, get};

#[test]
fn bad_dialect_flags_are_clear_errors_before_start() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--accept", "x-timeout"],
            "unknown deadline header \"x-timeout\"",
        ),
        (
            &["--accept", "deadline-budget-ms,"],
            "unknown deadline header \"\"",
        ),
        (
            &[
                "--send",
                "x-envoy-expected-rq-timeout-ms",
                "--downstream",
                "http://127.0.0.1:1",
            ],
            "--send",
        ),
        (&["--send", "grpc-timeout"], "needs --downstream"),
        (
            &["--share", "0", "--downstream", "http://127.0.0.1:1"],
            "above 0 and at most 1",
        ),
        (
            &["--max-skew", "10"],
            "--max-skew (10 ms) must be at least --assumed-skew (50 ms)",
        ),
    ];
    for (args, message) in cases {
        let out = bin()
            .args(["service", "--name", "x"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "no ready line: {args:?}");
    }
}

/// The budget in a hop's 504 body: `deadline exceeded at NAME while working: budget N ms`.
fn budget_in(body: &str, hop: &str) -> u64 {
    let prefix = format!("deadline exceeded at {hop} while working: budget ");
    let at = body
        .find(&prefix)
        .unwrap_or_else(|| panic!("no {hop} deadline in {body:?}"));
    body[at + prefix.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no budget in {body:?}"))
}

/// A Connect client's `connect-timeout-ms` reaches a backend that reads only the absolute
/// `X-Request-Deadline`, through a gateway translating one to the other: the backend stops at
/// the translated deadline. Without the translation the backend sees no budget it reads, and
/// the gateway has to give up on it instead.
#[test]
fn a_gateway_translates_between_dialects() {
    let backend = Service::start(&[
        "--name",
        "backend",
        "--work",
        "1500",
        "--accept",
        "x-request-deadline",
    ]);
    let downstream = format!("http://{}", backend.addr);
    let translator = Service::start(&[
        "--name",
        "gateway",
        "--accept",
        "connect-timeout-ms",
        "--send",
        "x-request-deadline",
        "--downstream",
        &downstream,
    ]);
    let reply = get(&translator.addr, b"Connect-Timeout-Ms: 600\r\n");
    assert_eq!(reply.status, 504, "{reply:?}");
    // 600 less the 50 ms margin, sent as an instant, read less the 50 ms assumed skew.
    let budget = budget_in(&reply.body, "backend");
    assert!((300..=500).contains(&budget), "{reply:?}");
    // At the 600 ms deadline: within twice it.
    assert!(reply.elapsed < Duration::from_millis(1_200), "{reply:?}");

    // The same without --send: the backend reads nothing it accepts and works on, and the
    // gateway's own deadline ends the wait.
    let plain = Service::start(&[
        "--name",
        "gateway",
        "--accept",
        "connect-timeout-ms",
        "--downstream",
        &downstream,
    ]);
    let reply = get(&plain.addr, b"Connect-Timeout-Ms: 600\r\n");
    assert_eq!(reply.status, 504, "{reply:?}");
    assert!(
        reply
            .body
            .contains("deadline exceeded at gateway while calling"),
        "{reply:?}"
    );
}

/// `--share 0.5`: the downstream is told half of what is left, less the margin.
#[test]
fn a_share_caps_the_downstream_budget() {
    let backend = Service::start(&["--name", "backend", "--work", "3000"]);
    let downstream = format!("http://{}", backend.addr);
    let gateway = Service::start(&[
        "--name",
        "gateway",
        "--share",
        "0.5",
        "--timeout",
        "5000",
        "--downstream",
        &downstream,
    ]);
    let reply = get(&gateway.addr, b"Deadline-Budget-Ms: 2000\r\n");
    assert_eq!(reply.status, 504, "{reply:?}");
    let budget = budget_in(&reply.body, "backend");
    assert!((800..=950).contains(&budget), "{reply:?}");
}

/// An absolute deadline from a clock two minutes off, beside a relative budget: the service
/// runs with the relative budget and says on stderr that it ignored the absolute one.
#[test]
fn a_broken_clock_is_logged_and_changes_nothing() {
    use std::io::Read;
    use std::process::Stdio;

    use crate::util::ready_addr;

    let mut child = bin()
        .args([
            "service",
            "--name",
            "inventory",
            "--work",
            "1500",
            "--accept",
            "deadline-budget-ms,x-request-deadline",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_stdout, addr) = ready_addr(&mut child);
    // 2000-01-01: decades, not minutes, off; the relative 400 ms still rules.
    let reply = get(
        &addr,
        b"X-Request-Deadline: 2000-01-01T00:00:00Z\r\nDeadline-Budget-Ms: 400\r\n",
    );
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(reply.status, 504, "{reply:?}");
    let budget = budget_in(&reply.body, "inventory");
    assert_eq!(budget, 400, "{reply:?}");
    assert!(
        stderr.contains("X-Request-Deadline ignored") && stderr.contains("inventory"),
        "{stderr}"
    );
}
