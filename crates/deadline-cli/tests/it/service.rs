//! `deadline service` itself: the reference system's one-service cases, replayed over loopback
//! against `--work 1500 --slots 1`.

use std::time::Duration;

use crate::util::{Service, bin, get};

#[test]
fn seven_headers_against_one_slow_worker() {
    let svc = Service::start(&["--name", "inventory", "--work", "1500", "--slots", "1"]);

    // Rejections never touch the worker, so they come back at once.
    let zero = get(&svc.addr, b"Deadline-Budget-Ms: 0\r\n");
    assert_eq!(zero.status, 504, "{zero:?}");
    assert!(zero.elapsed < Duration::from_millis(500), "{zero:?}");
    assert!(
        zero.header("deadline-trace").is_some(),
        "a 504 carries the trace"
    );

    let negative = get(&svc.addr, b"Deadline-Budget-Ms: -20\r\n");
    assert_eq!(negative.status, 504);

    let malformed = get(&svc.addr, b"Deadline-Budget-Ms: 1.5\r\n");
    assert_eq!(malformed.status, 400);
    assert!(
        malformed.body.contains("deadline-budget-ms"),
        "the body names the header: {malformed:?}"
    );
    assert!(
        malformed.body.contains("1.5"),
        "and the value: {malformed:?}"
    );

    // 600 ms: the work stops at about 590 and the 504 leaves before 600.
    let short = get(&svc.addr, b"Deadline-Budget-Ms: 600\r\n");
    assert_eq!(short.status, 504, "{short:?}");
    assert!(short.elapsed >= Duration::from_millis(550), "{short:?}");
    assert!(
        short.elapsed < Duration::from_millis(1_200),
        "stopped well before the 1.5 s of work: {short:?}"
    );
    assert!(
        short.body.contains("inventory"),
        "the 504 says which hop ran out: {short:?}"
    );

    // No header: no deadline, the work runs its 1.5 s.
    let absent = get(&svc.addr, b"");
    assert_eq!(absent.status, 200, "{absent:?}");
    assert!(absent.elapsed >= Duration::from_millis(1_450), "{absent:?}");

    // A huge budget is clamped, not rejected.
    let huge = get(
        &svc.addr,
        b"Deadline-Budget-Ms: 99999999999999999999999\r\n",
    );
    assert_eq!(huge.status, 200, "{huge:?}");

    let enough = get(&svc.addr, b"Deadline-Budget-Ms: 2000\r\n");
    assert_eq!(enough.status, 200, "{enough:?}");
}

#[test]
fn baseline_ignores_budgets() {
    let svc = Service::start(&["--name", "inventory", "--work", "200", "--no-enforce"]);
    for header in [
        &b"Deadline-Budget-Ms: 0\r\n"[..],
        b"Deadline-Budget-Ms: junk\r\n",
        b"Deadline-Budget-Ms: 50\r\n",
    ] {
        let reply = get(&svc.addr, header);
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(reply.elapsed >= Duration::from_millis(190), "{reply:?}");
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = bin()
        .args([
            "service",
            "--name",
            "x",
            "--downstream",
            "http://127.0.0.1:1",
            "--timeout",
            "10",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("timeout"), "{err}");

    let out = bin()
        .args(["service", "--name", "x", "--slow-share", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slow-share"));

    let out = bin().args(["service"]).output().unwrap();
    assert!(!out.status.success(), "--name is required");
}

#[test]
fn log_has_one_line_per_hold_and_is_flushed_on_shutdown() {
    let dir = std::env::temp_dir().join(format!("deadline-cli-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("holds.jsonl");
    let svc = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "10",
        "--log",
        log.to_str().unwrap(),
        "--exit-on-stdin-close",
    ]);
    assert_eq!(get(&svc.addr, b"X-Request-Id: r-1\r\n").status, 200);
    assert_eq!(
        get(
            &svc.addr,
            b"Deadline-Budget-Ms: -1\r\nX-Request-Id: r-2\r\n"
        )
        .status,
        504
    );
    // Without an id (or with an empty one) the edge makes one.
    assert_eq!(get(&svc.addr, b"").status, 200);
    assert_eq!(get(&svc.addr, b"X-Request-Id: \r\n").status, 200);
    drop_stdin_and_wait(svc);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let made: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["request_id"].as_str())
        .filter(|id| id.starts_with("inventory-"))
        .collect();
    assert_eq!(made.len(), 2, "ids made at the edge: {text}");
    assert_ne!(made[0], made[1], "each request gets its own");
    let ok = lines
        .iter()
        .find(|l| l["request_id"] == "r-1")
        .expect("r-1 logged");
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["service"], "inventory");
    assert!(ok["worked_ms"].as_f64().unwrap() >= 9.0);
    assert!(ok["end_ms"].as_f64().unwrap() >= ok["start_ms"].as_f64().unwrap());
    let rejected = lines
        .iter()
        .find(|l| l["request_id"] == "r-2")
        .expect("r-2 logged");
    assert_eq!(rejected["outcome"], "rejected");
    assert_eq!(rejected["budget_ms"], 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Ends a service the way the demo does: closing its stdin, then waiting for it to drain.
fn drop_stdin_and_wait(mut svc: Service) {
    let child = svc.child_mut();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
