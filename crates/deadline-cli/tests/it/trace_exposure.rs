//! `deadline service --trace off|budgeted|always`: who sees the hop's trace and timings.

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
    let budgeted = Service::start(&["--name", "edge", "--trace", "budgeted"]);
    assert_eq!(exposed(&budgeted.addr, b""), (false, false));
    assert_eq!(exposed(&budgeted.addr, budget), (true, true));
    let off = Service::start(&["--name", "edge", "--trace", "off"]);
    assert_eq!(exposed(&off.addr, b""), (false, false));
    assert_eq!(exposed(&off.addr, budget), (false, false));
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
