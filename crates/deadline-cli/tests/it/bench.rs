//! A very short `deadline bench`: every variant answers, and the report has its shape; and the
//! fixed client of the instruction count against a served variant.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::util::{bin, ready_addr};

#[test]
fn short_bench_serves_every_variant_and_reports_ratios() {
    let out = bin()
        .args([
            "bench",
            "--connections",
            "2",
            "--seconds",
            "0.3",
            "--rounds",
            "2",
            "--warmup-ms",
            "50",
            "--json",
        ])
        .output()
        .expect("bench runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let variants = json["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bare",
            "enforce",
            "enforce-all",
            "enforce-metrics",
            "enforce-quiet",
            "peer",
            "peer-headers",
            "chain-bare",
            "chain-deadline",
            "chain-peer"
        ]
    );
    for v in variants {
        assert!(v["requests"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["errors"], 0, "{v}");
        assert_eq!(v["rounds_requests_per_second"].as_array().unwrap().len(), 2);
        let (p50, p99, p999) = (
            v["p50_us"].as_u64().unwrap(),
            v["p99_us"].as_u64().unwrap(),
            v["p999_us"].as_u64().unwrap(),
        );
        assert!(p50 <= p99 && p99 <= p999, "{v}");
    }
    let ratios = json["ratios"].as_array().unwrap();
    let pairs: Vec<(&str, &str)> = ratios
        .iter()
        .map(|r| {
            (
                r["variant"].as_str().unwrap(),
                r["baseline"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("enforce", "bare"),
            ("enforce", "peer"),
            ("enforce-all", "enforce"),
            ("enforce-all", "peer-headers"),
            ("enforce-metrics", "enforce"),
            ("enforce-metrics", "bare"),
            ("enforce-quiet", "enforce"),
            ("enforce-quiet", "peer"),
            ("peer", "bare"),
            ("peer-headers", "peer"),
            ("chain-deadline", "chain-bare"),
            ("chain-deadline", "chain-peer"),
            ("chain-peer", "chain-bare"),
        ]
    );
    for r in ratios {
        assert!(r["throughput_ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn bench_rejects_bad_arguments() {
    let out = bin()
        .args(["bench", "--connections", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--connections"));
}

/// A `deadline bench --serve` process, killed when dropped.
struct Served(Child);

impl Served {
    /// `deadline bench --serve VARIANT`, and the address it listens on once it says so.
    fn start(variant: &str) -> (Served, String) {
        let mut served = Served(
            bin()
                .args(["bench", "--serve", variant])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("the binary starts"),
        );
        let (_, addr) = ready_addr(&mut served.0);
        (served, addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_fixed_client_sends_exactly_its_requests_and_the_server_stops_when_stdin_closes() {
    for variant in ["peer", "chain-peer"] {
        let (mut served, addr) = Served::start(variant);

        let sent = bin()
            .args(["bench", "--target", &addr, "--requests", "200"])
            .output()
            .unwrap();
        assert!(
            sent.status.success(),
            "{variant}: {}",
            String::from_utf8_lossy(&sent.stderr)
        );

        drop(served.0.stdin.take());
        #[allow(clippy::disallowed_methods)] // a real-time test measures real time
        let start = Instant::now();
        let status = loop {
            if let Some(status) = served.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{variant}: still serving after stdin closed"
            );
            #[allow(clippy::disallowed_methods)] // polls a real process, no runtime here
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{variant}: {status}");
    }
}

#[test]
fn the_fixed_client_fails_without_a_server() {
    // Port 9 on loopback (discard) has no listener here; the client must say so, not hang.
    let out = bin()
        .args(["bench", "--target", "127.0.0.1:9", "--requests", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to 127.0.0.1:9"));
}

/// The head of the answer a `--serve VARIANT` server gives one request carrying a budget,
/// read off a raw socket, lowercased.
fn served_head(variant: &str) -> String {
    let (_served, addr) = Served::start(variant);
    let mut socket = TcpStream::connect(&addr).expect("connects");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket
        .write_all(
            b"GET / HTTP/1.1\r\nhost: bench\r\ndeadline-budget-ms: 1950\r\nconnection: close\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).expect("an answer");
    let head = answer.split("\r\n\r\n").next().unwrap_or_default();
    assert!(head.starts_with("HTTP/1.1 200"), "{variant}: {answer:?}");
    head.to_ascii_lowercase()
}

#[test]
fn enforce_quiet_answers_without_the_headers_enforce_sends() {
    let loud = served_head("enforce-all");
    assert!(loud.contains("\r\ndeadline-trace: bench@"), "{loud}");
    assert!(loud.contains("\r\nserver-timing: queue;dur="), "{loud}");
    // The library's defaults: the trace for a request with a budget (the bench's carry one),
    // no Server-Timing.
    let default = served_head("enforce");
    assert!(default.contains("\r\ndeadline-trace: bench@"), "{default}");
    assert!(!default.contains("server-timing"), "{default}");
    let quiet = served_head("enforce-quiet");
    assert!(!quiet.contains("deadline-trace"), "{quiet}");
    assert!(!quiet.contains("server-timing"), "{quiet}");
}

/// `peer-headers` answers with the two header lines `enforce-all` writes, under the same names, in
/// the same order and of the same shape (each run of digits read as one number, since times
/// differ), so its instruction count against `peer` is what those two lines cost.
#[test]
fn peer_headers_answers_with_lines_shaped_like_enforces() {
    // The lines after the status line but hyper's own (the request asked it to close), with
    // every run of digits as `#`.
    let shape = |head: &str| -> Vec<String> {
        let hypers = ["date:", "content-length:", "connection:"];
        head.split("\r\n")
            .skip(1)
            .filter(|line| !hypers.iter().any(|name| line.starts_with(name)))
            .map(|line| {
                let mut shape = String::new();
                for c in line.chars() {
                    if !c.is_ascii_digit() {
                        shape.push(c);
                    } else if !shape.ends_with('#') {
                        shape.push('#');
                    }
                }
                shape
            })
            .collect()
    };
    let (peer_head, enforce_head) = (served_head("peer-headers"), served_head("enforce-all"));
    // The budget is the one number both write alike: the request carries 1950 ms.
    for head in [&peer_head, &enforce_head] {
        assert!(head.contains(",^0=1950\r\n"), "{head}");
        assert!(head.contains(", budget;dur=1950\r\n"), "{head}");
    }
    let peer = shape(&peer_head);
    assert_eq!(
        peer,
        [
            "deadline-trace: bench@#-#=#,.queue@#-#,.work@#-#=ok,^#=#",
            "server-timing: queue;dur=#.#, work;dur=#.#, budget;dur=#",
        ]
    );
    assert_eq!(shape(&enforce_head), peer);
    assert!(shape(&served_head("peer")).is_empty());
}
