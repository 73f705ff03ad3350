//! `deadline service --trace off|budgeted|always` and `--server-timing on|off`: who sees the
//! hop's trace, and whether answers carry its timings. The service writes both on every answer
//! by default (the library's own defaults are narrower).

use crate::util::{Service, bin, get};

/// Whether the reply carried `Deadline-Trace` and `Server-Timing`.
fn exposed(addr: &str, extra: &[u8]) -> (bool, bool) {
    let reply = get(addr, extra);
    assert_eq!(reply.status, 200, "{reply:?}");
    (
        reply.header("deadline-trace").is_some(),
        reply.header("server-timing").is_some(),
    )
}

#[test]
fn trace_exposure_per_flag() {
    let budget = b"Deadline-Budget-Ms: 5000\r\n";
    let always = Service::start(&["--name", "edge"]);
    assert_eq!(exposed(&always.addr, b""), (true, true));
    // The trace follows --trace; Server-Timing is its own switch, on by default here.
    let budgeted = Service::start(&["--name", "edge", "--trace", "budgeted"]);
    assert_eq!(exposed(&budgeted.addr, b""), (false, true));
    assert_eq!(exposed(&budgeted.addr, budget), (true, true));
    let off = Service::start(&["--name", "edge", "--trace", "off"]);
    assert_eq!(exposed(&off.addr, b""), (false, true));
    assert_eq!(exposed(&off.addr, budget), (false, true));
    let library = Service::start(&[
        "--name",
        "edge",
        "--trace",
        "budgeted",
        "--server-timing",
        "off",
    ]);
    assert_eq!(exposed(&library.addr, b""), (false, false));
    assert_eq!(exposed(&library.addr, budget), (true, false));
    // The older spelling still turns it off.
    let older = Service::start(&["--name", "edge", "--no-server-timing"]);
    assert_eq!(exposed(&older.addr, budget), (true, false));
}

#[test]
fn an_unknown_server_timing_switch_is_a_clear_error() {
    let out = bin()
        .args(["service", "--name", "x", "--server-timing", "maybe"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--server-timing") && err.contains("maybe"),
        "{err}"
    );
}

#[test]
fn an_unknown_trace_exposure_is_a_clear_error() {
    let out = bin()
        .args(["service", "--name", "x", "--trace", "sometimes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected always, budgeted or off"), "{err}");
}
