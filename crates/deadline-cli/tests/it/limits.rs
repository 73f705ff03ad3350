//! `deadline service`'s connection limits and bounded shutdown, from outside the process.
#![allow(clippy::disallowed_methods)] // real processes in real time: the clock and sleeps are real

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::Service;

/// Reads until the server closes the connection or `within` passes; true if it closed.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < within {
        stream
            .set_read_timeout(Some(
                within
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
    false
}

/// Finding: an h2c client that sent the 24-byte preface and nothing else was never closed
/// (the header timeout protects HTTP/1.1 only). With `--idle-timeout`, it is.
#[test]
fn a_preface_only_h2c_connection_is_closed_after_the_idle_timeout() {
    let svc = Service::start(&["--name", "inventory", "--idle-timeout", "300"]);
    let mut stream = TcpStream::connect(&svc.addr).unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap();
    let start = Instant::now();
    assert!(
        closed_within(&mut stream, Duration::from_secs(8)),
        "the preface-only connection is still open after 8 s"
    );
    // Closed by the 300 ms idle timer (the header timer, 30 s by default, never runs for
    // HTTP/2; the default idle timeout is 60 s): a GOAWAY then, and as this peer answers no
    // PING, the socket dropped after the 1 s close grace: about 1.3 s. Not before the idle
    // timeout, and within twice the expected time.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2_600),
        "closed {took:?} after the preface, with --idle-timeout 300"
    );
}

/// Finding: shutdown took the serve loop's 10 s grace and then up to `--drain-timeout` (600 s
/// by default) more. Now `--drain-timeout` bounds the whole shutdown: a budget-less request
/// working 20 s does not hold a service told to stop with `--drain-timeout 2` much past 2 s.
#[test]
fn shutdown_takes_at_most_the_drain_timeout() {
    let mut svc = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "20000",
        "--drain-timeout",
        "2",
        "--exit-on-stdin-close",
    ]);
    let mut stream = TcpStream::connect(&svc.addr).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    // The request has reached the service (and taken a slot) once it is counted in flight.
    crate::util::wait_in_flight(&svc.addr, 1);
    let child = svc.child_mut();
    let start = Instant::now();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    let took = start.elapsed();
    assert!(status.success(), "{status}");
    // The service waits for the request still in flight (20 s of work) for the 2 s of
    // --drain-timeout, counted from the stop, then exits: about 2 s. Not sooner (it waited
    // for the work in flight), and within twice that.
    assert!(
        took >= Duration::from_millis(1_900) && took < Duration::from_secs(4),
        "shutdown took {took:?} with --drain-timeout 2"
    );
}

/// Finding: a 200 KB `x-request-id` was forwarded to every hop and written into every hop's
/// log. Now an id longer than 128 characters is replaced with one the hop makes, the hold log
/// has the new one, and the replacements are logged at most once a second (20 requests in well
/// under a second: one warning line, not twenty).
#[test]
fn a_request_id_longer_than_128_characters_is_replaced_and_logged_once() {
    let dir = std::env::temp_dir().join(format!("deadline-cli-long-id-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("holds.jsonl");
    let mut child = crate::util::bin()
        .args(["service", "--name", "inventory", "--exit-on-stdin-close"])
        .arg("--log")
        .arg(&log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (_stdout, addr) = crate::util::ready_addr(&mut child);
    let long = "x".repeat(129);
    let header = format!("X-Request-Id: {long}\r\n");
    for _ in 0..20 {
        assert_eq!(crate::util::get(&addr, header.as_bytes()).status, 200);
    }
    // Exactly 128 is kept.
    let kept = "k".repeat(128);
    let header = format!("X-Request-Id: {kept}\r\n");
    assert_eq!(crate::util::get(&addr, header.as_bytes()).status, 200);
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings = stderr.matches("x-request-id replaced").count();
    assert!(
        (1..=3).contains(&warnings),
        "{warnings} warning lines for 20 replacements:\n{stderr}"
    );
    assert!(!stderr.contains(&long), "the long id is not written out");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(&long), "the long id is not in the hold log");
    let ids: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["request_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 21, "{text}");
    assert_eq!(
        ids.iter().filter(|id| id.contains("inventory-")).count(),
        20,
        "each long id replaced by one made here: {ids:?}"
    );
    assert!(ids.iter().any(|id| id.contains(&kept)), "{ids:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Finding: requests without a budget queued without limit. With `--slots 1 --max-queue 1`,
/// one works, one waits, and a third is refused at once with 503.
#[test]
fn a_full_queue_is_refused_with_503() {
    let svc = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "1500",
        "--slots",
        "1",
        "--max-queue",
        "1",
    ]);
    let addr = svc.addr.clone();
    let first = std::thread::spawn({
        let addr = addr.clone();
        move || crate::util::get(&addr, b"").status
    });
    // The first has the slot once it is counted in flight; the second is counted in before
    // it queues, in the same turn of its connection's task.
    crate::util::wait_in_flight(&addr, 1);
    let second = std::thread::spawn({
        let addr = addr.clone();
        move || crate::util::get(&addr, b"").status
    });
    crate::util::wait_in_flight(&addr, 2);
    let refused = crate::util::get(&addr, b"");
    assert_eq!(refused.status, 503, "{}", refused.body);
    // Refused at once (a few ms). The bound only tells it from a place in the queue, which
    // would wait at least for the rest of the first's 1.5 s of work.
    assert!(
        refused.elapsed < Duration::from_millis(1000),
        "{:?}",
        refused.elapsed
    );
    assert!(refused.body.contains("already waiting"), "{}", refused.body);
    assert_eq!(first.join().unwrap(), 200);
    assert_eq!(second.join().unwrap(), 200);
}

/// Finding: `/metrics` and `/debug/runtime` were served on the public port only. With
/// `--admin-listen` they are served on an address of their own, and with `--no-public-admin`
/// the public port treats them as ordinary work paths.
#[test]
fn admin_paths_are_served_apart_from_the_public_port() {
    use std::io::BufRead;
    let mut child = crate::util::bin()
        .args(["service", "--name", "inventory", "--exit-on-stdin-close"])
        .args(["--admin-listen", "127.0.0.1:0", "--no-public-admin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stdout, public) = crate::util::ready_addr(&mut child);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let admin = line
        .trim()
        .strip_prefix("admin on http://")
        .unwrap_or_else(|| panic!("no admin line: {line:?}"))
        .to_owned();
    let get = |addr: &str, path: &str| {
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    let metrics = get(&admin, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("deadline_"), "{metrics}");
    let runtime = get(&admin, "/debug/runtime");
    assert!(runtime.contains("alive_tasks"), "{runtime}");
    assert!(get(&admin, "/work").starts_with("HTTP/1.1 404"));
    let public_metrics = get(&public, "/metrics");
    assert!(!public_metrics.contains("deadline_"), "{public_metrics}");
    assert!(
        public_metrics.contains("inventory: done"),
        "{public_metrics}"
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// The soft limit of `/proc/PID/limits`' "Max open files" line, and the hard one.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc/PID/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().expect("soft").to_owned(),
        fields.next().expect("hard").to_owned(),
    )
}

/// Past saturation: a service started with a low soft limit on open files (1,024 is common)
/// runs out of them under load while the hard limit allows far more, and new callers wait in
/// the kernel's accept queue, where no budget counts. The service raises its soft limit to the
/// hard limit (at most 2^20) at start, and says so in its log.
#[test]
fn the_service_raises_its_open_file_limit_to_the_hard_limit() {
    let hard = std::process::Command::new("sh")
        .args(["-c", "ulimit -H -n"])
        .output()
        .expect("sh runs");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_owned();
    assert!(
        hard == "unlimited" || hard.parse::<u64>().expect("a number") > 256,
        "this test needs a hard open-file limit above 256 (it is {hard}): raise it to run it"
    );
    // The service raises its soft limit to the hard one, at most 2^20.
    let expected = match hard.parse::<u64>() {
        Ok(n) => n.min(1 << 20).to_string(),
        Err(_) => (1u64 << 20).to_string(),
    };
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            r#"ulimit -S -n 256 && exec "$0" service --name fds --listen 127.0.0.1:0"#,
            env!("CARGO_BIN_EXE_deadline"),
        ])
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let (_stdout, _addr) = crate::util::ready_addr(&mut child);
    let (soft, hard_seen) = open_file_limits(child.id());
    let _ = child.kill();
    let output = child.wait_with_output().expect("the service's output");
    // The log's colours out, to read its fields.
    let mut stderr = String::new();
    let mut in_escape = false;
    for c in String::from_utf8_lossy(&output.stderr).chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => stderr.push(c),
        }
    }
    assert_eq!(
        (soft.as_str(), hard_seen.as_str()),
        (expected.as_str(), hard.as_str()),
        "the soft open-file limit was not raised to the hard one"
    );
    assert!(
        stderr.contains("raised the open-file limit")
            && stderr.contains("before=256")
            && stderr.contains(&format!("after={expected}")),
        "the service did not say it raised the limit: {stderr}"
    );
}
