//! `deadline service --stream` read by `deadline call`, real processes on loopback: a 20 × 100 ms
//! stream under a 550 ms budget is ended at the cutoff, in each protocol's terms, after the
//! chunks sent in time; without the layer (`--no-enforce`) it runs to its end. Bounds are
//! generous (a loaded machine), orderings exact.

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::util::{Service, bin};

/// `deadline call --json` of `addr` over `protocol` with a 550 ms budget.
fn call(addr: &str, protocol: &str) -> Value {
    let out: Output = bin()
        .args(["call", &format!("http://{addr}/items"), "--budget", "550"])
        .args(["--protocol", protocol, "--json", "--timeout", "10000"])
        .output()
        .expect("deadline call runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn chunks(doc: &Value) -> u64 {
    doc["chunk_count"].as_u64().expect("chunk_count")
}

/// Cut at ~540 ms: after 3 to 5 chunks (one every 100 ms; 5 on time), well before the 2 s the
/// stream would take.
fn assert_cut_in_time(doc: &Value) {
    let n = chunks(doc);
    assert!((3..=5).contains(&n), "{n} chunks: {doc:#}");
    let elapsed = doc["elapsed_ms"].as_f64().unwrap();
    assert!((500.0..1_500.0).contains(&elapsed), "{elapsed} ms: {doc:#}");
}

#[test]
fn a_stream_is_ended_at_the_deadline_in_each_protocols_terms() {
    let log = tempfile_path("stream-holds");
    let service = Service::start(&[
        "--name",
        "inventory",
        "--stream",
        "20:100",
        "--log",
        log.to_str().unwrap(),
    ]);

    let http1 = call(&service.addr, "http1");
    assert_cut_in_time(&http1);
    assert_eq!(http1["stream_end"]["end"], "broken", "{http1:#}");
    let detail = http1["stream_end"]["detail"].as_str().unwrap();
    assert!(detail.contains("unexpected EOF"), "{detail}");

    let h2 = call(&service.addr, "h2c");
    assert_cut_in_time(&h2);
    assert_eq!(h2["stream_end"]["end"], "broken", "{h2:#}");
    // h2's words for a reset with CANCEL.
    let detail = h2["stream_end"]["detail"].as_str().unwrap();
    assert!(detail.contains("stream no longer needed"), "{detail}");

    let grpc = call(&service.addr, "grpc");
    assert_cut_in_time(&grpc);
    assert_eq!(grpc["stream_end"]["end"], "complete", "{grpc:#}");
    assert_eq!(grpc["grpc_status"], 4, "{grpc:#}");
    let message = grpc["grpc_message"].as_str().unwrap();
    assert!(
        message.starts_with("deadline exceeded at inventory while streaming the response"),
        "{message}"
    );

    // The three holds, as the log has them: cut at the deadline, in the stream phase. The log
    // is flushed at least every 100 ms: waited for (up to 10 s) until it holds three lines.
    #[allow(clippy::disallowed_methods)] // a real-time test of real processes
    let start = std::time::Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 3 || start.elapsed() > Duration::from_secs(10) {
            break text;
        }
        #[allow(clippy::disallowed_methods)] // polling a file another process writes
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(service);
    let holds: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(holds.len(), 3, "{text}");
    for hold in &holds {
        assert_eq!(hold["outcome"], "deadline", "{hold}");
        assert_eq!(hold["exceeded"], "stream", "{hold}");
        let streamed = hold["streamed_ms"].as_f64().unwrap();
        assert!((400.0..600.0).contains(&streamed), "{hold}");
    }
    let _ = std::fs::remove_file(log);
}

#[test]
fn without_the_layer_the_stream_runs_to_its_end() {
    let service = Service::start(&["--name", "inventory", "--stream", "20:100", "--no-enforce"]);
    let doc = call(&service.addr, "http1");
    assert_eq!(chunks(&doc), 20, "{doc:#}");
    assert_eq!(doc["stream_end"]["end"], "complete", "{doc:#}");
    assert!(doc["elapsed_ms"].as_f64().unwrap() >= 2_000.0, "{doc:#}");
}

#[test]
fn a_hop_streams_its_downstreams_stream_through() {
    let inventory = Service::start(&["--name", "inventory", "--stream", "20:100"]);
    for protocol in ["http1", "grpc"] {
        let gateway = Service::start(&[
            "--name",
            "gateway",
            "--stream",
            "1:1",
            "--downstream",
            &format!("http://{}", inventory.addr),
            "--downstream-protocol",
            protocol,
        ]);
        let doc = call(&gateway.addr, protocol);
        // The downstream got the budget less the 50 ms margin: cut there, after 2 to 4 chunks,
        // all of them inventory's.
        let n = chunks(&doc);
        assert!((2..=5).contains(&n), "{protocol}: {n} chunks: {doc:#}");
        let first = doc["chunks"][0]["text"].as_str().unwrap();
        assert_eq!(first, "inventory: chunk 1 of 20", "{protocol}");
        if protocol == "grpc" {
            assert_eq!(doc["grpc_status"], 4, "{doc:#}");
        } else {
            assert_eq!(doc["stream_end"]["end"], "broken", "{doc:#}");
        }
    }
}

#[test]
fn bad_stream_arguments_are_refused_clearly() {
    for bad in ["20", "0:100", "+5:100", "5:1.5", "x:1"] {
        let out = bin()
            .args(["service", "--name", "a", "--stream", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--stream"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
}

/// A fresh path in the temporary directory for this process.
fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{name}-{}.jsonl", std::process::id()))
}
