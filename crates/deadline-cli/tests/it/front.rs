//! `deadline service --front-timeout` and `--trust-request-start` through the binary: the
//! service answers before the proxy in front would give up, and takes the time a request spent
//! in front from its budget.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::util::{Service, bin, get};

/// The budget at arrival the hop's trace carries (`^0=`).
fn budget_at_arrival(trace: &str) -> u64 {
    trace
        .rsplit_once("^0=")
        .and_then(|(_, ms)| ms.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no budget in {trace}"))
}

/// A proxy in front gives up after 2 s; the work takes 5 s and the request carries no budget:
/// the service's own 504 and trace come before the proxy's 2 s are up (a margin of 500 ms, so
/// a busy machine's late timer cannot reverse the order).
#[test]
fn the_front_timeout_answers_before_the_front_gives_up() {
    let svc = Service::start(&[
        "--name",
        "gateway",
        "--work",
        "5000",
        "--front-timeout",
        "2000",
        "--front-margin",
        "500",
    ]);
    let reply = get(&svc.addr, b"");
    assert_eq!(reply.status, 504, "{reply:?}");
    // Its cutoff is 1,490 ms (2 s less the margin and the 10 ms reply reserve).
    assert!(
        reply.elapsed >= Duration::from_millis(1_400) && reply.elapsed < Duration::from_secs(2),
        "answered after {:?}",
        reply.elapsed
    );
    let trace = reply.header("deadline-trace").expect("a trace");
    assert!(trace.contains(",.budget:front@0-0"), "{trace}");
    assert_eq!(budget_at_arrival(trace), 1_500, "{trace}");
}

/// `X-Request-Start` 300 ms old with a 1 s budget: the hop starts with 700 ms (within 5 ms, or
/// the time the request took to send if longer); a malformed stamp leaves the budget and is
/// counted in `/debug/runtime`.
#[test]
fn time_in_front_comes_off_the_budget_and_a_bad_stamp_is_counted() {
    let svc = Service::start(&["--name", "gateway", "--work", "5", "--trust-request-start"]);
    #[allow(clippy::disallowed_methods)] // the proxy's stamp is wall time by definition
    let wall = SystemTime::now();
    let at = wall
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis()
        - 300;
    let stamp = format!(
        "Deadline-Budget-Ms: 1000\r\nX-Request-Start: t={}.{:03}\r\n",
        at / 1_000,
        at % 1_000
    );
    let reply = get(&svc.addr, stamp.as_bytes());
    let slack = wall.elapsed().map_or(0, |e| e.as_millis()).max(5) as u64;
    assert_eq!(reply.status, 200, "{reply:?}");
    let budget = budget_at_arrival(reply.header("deadline-trace").expect("a trace"));
    assert!(
        (700 - slack..=700).contains(&budget),
        "budget {budget} ms, not 700 within {slack}"
    );
    let reply = get(
        &svc.addr,
        b"Deadline-Budget-Ms: 1000\r\nX-Request-Start: soon\r\n",
    );
    assert_eq!(
        budget_at_arrival(reply.header("deadline-trace").expect("a trace")),
        1000
    );
    let runtime = get_runtime(&svc.addr);
    assert_eq!(runtime["ignored_request_starts"], 1, "{runtime}");
}

/// Without `--trust-request-start` the stamp is not read.
#[test]
fn an_untrusting_service_reads_no_stamp() {
    let svc = Service::start(&["--name", "gateway", "--work", "5"]);
    let reply = get(
        &svc.addr,
        b"Deadline-Budget-Ms: 1000\r\nX-Request-Start: t=1000000000.000\r\n",
    );
    assert_eq!(
        budget_at_arrival(reply.header("deadline-trace").expect("a trace")),
        1000
    );
    assert_eq!(get_runtime(&svc.addr)["ignored_request_starts"], 0);
}

#[test]
fn a_front_margin_without_a_front_timeout_is_a_clear_error() {
    let out = bin()
        .args(["service", "--name", "x", "--front-margin", "20"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--front-timeout"), "{err}");
}

fn get_runtime(addr: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    let request =
        format!("GET /debug/runtime HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reads");
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"))
}
