//! `deadline jobs` across a broker restart: a private RabbitMQ node (never the shared broker)
//! stopped and started again on the same port and data in the middle of a run. The run goes on,
//! loses no message, and reports the restart in its JSON.

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::rabbitmq_node::Node;
use crate::util::bin;

/// A `deadline jobs` process, killed if still running when dropped (a failing test).
struct Jobs(Child);

impl Drop for Jobs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads a child's pipe to its end on a thread of its own.
fn collect(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

fn count(run: &Value, key: &str) -> u64 {
    run[key]
        .as_u64()
        .unwrap_or_else(|| panic!("runs[] has no count {key:?}: {run}"))
}

/// Runs `deadline jobs --json` (100 messages a run, 20 a second, to consumers that can work
/// 13.3 a second, so a backlog waits in the queue and the prefetch windows) against a private
/// node, stops the node cleanly 2.5 s in (during the first run's producing), starts it again a
/// second later on the same data, and checks that the command succeeds, that every message of
/// both runs is accounted for once (produced = worked + discarded + cut at deadline + other,
/// with nothing "other"), that the run without expiry worked on every message, and that the
/// JSON reports the restart (`reconnects` at least 1). The command failed here before it moved
/// to `deadline_lapin::Broker`, at the first publish after the stop ("the run without expiry:
/// publishing: publish failed: invalid channel state").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_survives_a_broker_restart_and_reports_it() {
    let mut node = Node::start().await;
    let url = node.url();
    let mut child = bin()
        .args([
            "jobs",
            "--broker",
            &url,
            "--rate",
            "20",
            "--seconds",
            "5",
            "--work",
            "150",
            "--consumers",
            "2",
            "--prefetch",
            "5",
            "--expiry",
            "3000",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let stdout = collect(child.stdout.take().expect("piped"));
    let stderr = collect(child.stderr.take().expect("piped"));
    let mut jobs = Jobs(child);

    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        jobs.0.try_wait().expect("its status").is_none(),
        "deadline jobs ended before the restart; its stderr:\n{}",
        stderr.join().unwrap_or_default()
    );
    node.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    node.start_again().await;
    let restarted_in = Instant::now().saturating_duration_since(started);

    let status = loop {
        if let Some(status) = jobs.0.try_wait().expect("its status") {
            break status;
        }
        assert!(
            Instant::now().saturating_duration_since(started) < Duration::from_secs(90),
            "deadline jobs still running 90 s after it started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = Instant::now().saturating_duration_since(started);
    let stdout = stdout.join().expect("its stdout");
    let stderr = stderr.join().expect("its stderr");
    assert!(
        status.success(),
        "deadline jobs failed across the broker restart ({status}); stderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "a panic: {stderr}");
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}\nstderr:\n{stderr}"));
    eprintln!(
        "deadline jobs across a restart (node back {restarted_in:?} after the start, command \
         done in {took:?}):\n{report:#}"
    );
    let runs = report["runs"].as_array().expect("runs[]");
    assert_eq!(runs.len(), 2, "{report}");
    for run in runs {
        let produced = count(run, "produced");
        assert_eq!(produced, 100, "every scheduled message published: {run}");
        let accounted = count(run, "worked")
            + count(run, "discarded")
            + count(run, "cut_at_deadline")
            + count(run, "other");
        assert_eq!(
            accounted, produced,
            "every produced message accounted for once: {run}"
        );
        assert_eq!(count(run, "other"), 0, "{run}");
        for key in ["republished", "resubscribed", "redelivered", "duplicates"] {
            count(run, key);
        }
    }
    assert_eq!(
        count(&runs[0], "worked"),
        100,
        "without expiry, every message worked on: {}",
        runs[0]
    );
    let reconnects: u64 = runs.iter().map(|run| count(run, "reconnects")).sum();
    assert!(
        reconnects >= 1,
        "the restart reported (reconnects {reconnects}): {report}"
    );
    drop(jobs);
    drop(node);
}
