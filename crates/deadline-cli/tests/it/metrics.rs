//! `GET /metrics` on `deadline service`: a two-hop chain of real processes, scraped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::util::{Service, get};

/// `GET /metrics`: the status line's code, the content type and the text.
fn scrape(addr: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a reply");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

/// The value of `series` (name and labels as written) in `text`.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

#[test]
fn both_hops_serve_their_metrics_and_a_scrape_is_not_a_request() {
    let inventory = Service::start(&["--name", "inventory", "--work", "300"]);
    let downstream = format!("http://{}", inventory.addr);
    let gateway = Service::start(&[
        "--name",
        "gateway",
        "--downstream",
        &downstream,
        "--downstream-name",
        "inventory",
    ]);

    // In time, then too little budget for inventory's 300 ms: inventory runs out working.
    assert_eq!(
        get(&gateway.addr, b"Deadline-Budget-Ms: 2000\r\n").status,
        200
    );
    assert_eq!(
        get(&gateway.addr, b"Deadline-Budget-Ms: 200\r\n").status,
        504
    );
    assert_eq!(get(&gateway.addr, b"Deadline-Budget-Ms: x\r\n").status, 400);

    let (status, content_type, first) = scrape(&gateway.addr);
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let (_, _, text) = scrape(&gateway.addr);
    assert!(text.ends_with("# EOF\n"), "{text}");
    let gw = |rest: &str| value(&text, rest);
    assert_eq!(
        gw(r#"deadline_requests_total{service="gateway",outcome="ok"}"#),
        1.0
    );
    // The 504 came from inventory: the gateway relays it; its own time did not run out.
    assert_eq!(
        gw(r#"deadline_requests_total{service="gateway",outcome="deadline"}"#),
        1.0
    );
    assert_eq!(
        gw(r#"deadline_requests_total{service="gateway",outcome="malformed"}"#),
        1.0
    );
    assert_eq!(
        gw(r#"deadline_exceeded_total{service="gateway",phase="calling"}"#),
        0.0
    );
    // Scrapes are not requests: the second scrape saw the same counts as the first.
    assert_eq!(
        value(
            &first,
            r#"deadline_requests_total{service="gateway",outcome="ok"}"#
        ),
        1.0
    );
    assert_eq!(
        gw(r#"deadline_attempts_total{service="gateway",target="inventory",kind="first"}"#),
        2.0
    );
    assert_eq!(
        gw(r#"deadline_call_duration_seconds_count{service="gateway",target="inventory"}"#),
        2.0
    );
    assert_eq!(
        gw(r#"deadline_budget_seconds_count{service="gateway"}"#),
        2.0
    );

    let (_, _, text) = scrape(&inventory.addr);
    let inv = |rest: &str| value(&text, rest);
    assert_eq!(
        inv(r#"deadline_requests_total{service="inventory",outcome="ok"}"#),
        1.0
    );
    assert_eq!(
        inv(r#"deadline_exceeded_total{service="inventory",phase="work"}"#),
        1.0
    );
    // Budgets 1950 and 150 ms (each less the gateway's 50 ms margin, less its own time).
    assert_eq!(
        inv(r#"deadline_budget_seconds_count{service="inventory"}"#),
        2.0
    );
    assert_eq!(
        inv(r#"deadline_worker_seconds_after_caller_left_total{service="inventory"}"#),
        0.0
    );
    // The cut request left the reserve (10 ms) of its budget; the other over a second.
    assert!(
        inv(r#"deadline_headroom_seconds_bucket{le="0.025",service="inventory"}"#) >= 1.0,
        "{text}"
    );
    assert_eq!(
        inv(r#"deadline_headroom_seconds_bucket{le="2.5",service="inventory"}"#),
        2.0
    );
}
