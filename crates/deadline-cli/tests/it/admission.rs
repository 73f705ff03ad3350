//! `deadline service --queue --admission` and `deadline load --queue edf --admission`, as real
//! processes on loopback: statuses and orderings, generous bounds on times.

use std::time::Duration;

use crate::util::{Service, bin, get, wait_in_flight};

#[test]
fn a_request_that_cannot_finish_behind_a_busy_worker_is_refused_at_once() {
    let svc = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "300",
        "--slots",
        "1",
        "--queue",
        "edf",
        "--admission",
    ]);
    // Nothing observed yet and a free slot: served. It teaches the estimate 300 ms.
    let warm = get(&svc.addr, b"Deadline-Budget-Ms: 2000\r\n");
    assert_eq!(warm.status, 200, "{warm:?}");

    let addr = svc.addr.clone();
    let busy = std::thread::spawn(move || get(&addr, b"Deadline-Budget-Ms: 2000\r\n"));
    // The other request has taken the slot once the service counts it in flight.
    wait_in_flight(&svc.addr, 1);
    // 400 ms left, but a 300 ms wait and 300 ms of work ahead: refused without waiting.
    let shed = get(&svc.addr, b"Deadline-Budget-Ms: 400\r\n");
    assert_eq!(shed.status, 503, "{shed:?}");
    assert_eq!(shed.header("retry-after"), Some("0"), "{shed:?}");
    let trace = shed.header("deadline-trace").expect("a trace");
    // Refused on arrival: a queue span ending in real ms since arrival (0 on an idle machine).
    let queued_ms = trace
        .rsplit_once(".queue@0-")
        .and_then(|(_, rest)| rest.strip_suffix("=shed,^0=400"))
        .and_then(|ms| ms.parse::<u64>().ok());
    assert!(queued_ms.is_some_and(|ms| ms < 150), "{trace}");
    assert!(shed.body.contains("shed"), "{shed:?}");
    assert!(
        shed.elapsed < Duration::from_millis(150),
        "told well before the busy worker is free: {shed:?}"
    );
    assert_eq!(busy.join().unwrap().status, 200);
}

#[test]
fn queue_and_admission_arguments_are_checked() {
    let fails = |args: &[&str], says: &str| {
        let out = bin().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    };
    fails(
        &["service", "--name", "x", "--queue", "lifo"],
        "expected fifo or edf",
    );
    fails(
        &["service", "--name", "x", "--admission"],
        "--admission needs --slots",
    );
    fails(
        &[
            "service",
            "--name",
            "x",
            "--slots",
            "1",
            "--admission-min-useful",
            "50",
        ],
        "--admission-min-useful needs --admission",
    );
    fails(&["load", "--queue", "lifo"], "expected fifo or edf");
}

#[test]
fn load_with_edf_and_admission_reports_goodput_and_refusals() {
    let out = bin()
        .args([
            "load",
            "--rate",
            "160",
            "--seconds",
            "2",
            "--slow-share",
            "0",
            "--gateway-attempts",
            "1",
            "--orders-attempts",
            "1",
            "--queue",
            "edf",
            "--admission",
            "--only",
            "with",
            "--json",
        ])
        .output()
        .expect("load runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let run = &json["runs"][0];
    assert_eq!(run["queue"], "edf", "{run}");
    assert_eq!(run["admission"], true, "{run}");
    assert_eq!(run["capacity_per_s"].as_f64(), Some(80.0), "{run}");
    let requests = run["requests"].as_u64().unwrap();
    let in_time = run["in_time"].as_u64().unwrap();
    let refused = run["refused"].as_u64().unwrap();
    assert!(in_time + refused <= requests, "{run}");
    // Twice the capacity: inventory must have refused some, and told them before their budget.
    let shed = run["shed"].as_u64().unwrap();
    assert!(shed > 0 && refused > 0, "{run}");
    assert!(run["refused_p50_ms"].as_u64().unwrap() < 1_000, "{run}");
    assert!(run["goodput_per_s"].as_f64().unwrap() > 0.0, "{run}");
    assert!(
        run["inventory_worker_ms_on_missed"].as_f64().unwrap() >= 0.0,
        "{run}"
    );
}
