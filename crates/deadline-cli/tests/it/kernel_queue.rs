//! Time a request spends in a service's kernel queues, before the service reads its head, counts
//! against the user's time only when the caller also sends the instant it gives up
//! (`X-Request-Deadline`, as `deadline load --absolute-deadline` users do): a relative budget
//! starts when the head is read, so it cannot see that time. A stopped process stands for a
//! saturated one: the kernel completes the connection and holds the request's bytes, and nothing
//! reads them until it runs again.

use std::process::Command;
use std::thread;
use std::time::{Duration, SystemTime};

use deadline::Budget;
use deadline::absolute::WallInstant;
use deadline::dialect::{AbsoluteFormat, Dialect};

use crate::util::{Reply, Service, get};

/// Sends `signal` to `pid` with the `kill` command.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// The `X-Request-Deadline` line of a user who gives up `wait` from now.
fn gives_up_in(wait: Duration) -> String {
    #[allow(clippy::disallowed_methods)] // an absolute deadline is wall time by definition
    let now = WallInstant::from_system_time(SystemTime::now());
    let budget = Budget::from_millis(wait.as_millis() as u64).expect("a valid budget");
    let value = Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis)
        .encode(budget, now)
        .expect("an encodable deadline");
    format!("X-Request-Deadline: {}\r\n", value.to_str().unwrap())
}

/// Sends `extra` header lines to `addr` from a thread (the service is stopped, so the reply
/// comes only once it runs again).
fn send(addr: &str, extra: String) -> thread::JoinHandle<Reply> {
    let addr = addr.to_owned();
    thread::spawn(move || get(&addr, extra.as_bytes()))
}

#[test]
fn time_in_a_stopped_services_kernel_queue_counts_against_an_absolute_deadline() {
    let mut service = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "300",
        "--accept",
        "deadline-budget-ms,x-request-deadline",
    ]);
    let pid = service.child_mut().id();
    // Both users wait 1 s and send it as a relative budget; one also sends its give-up instant.
    signal(pid, "-STOP");
    let absolute = send(
        &service.addr,
        format!(
            "Deadline-Budget-Ms: 1000\r\n{}",
            gives_up_in(Duration::from_secs(1))
        ),
    );
    let relative = send(&service.addr, "Deadline-Budget-Ms: 1000\r\n".to_owned());
    // Longer than both users wait: each request sits unread in the kernel past its deadline.
    #[allow(clippy::disallowed_methods)] // real processes, real time
    thread::sleep(Duration::from_millis(1_300));
    signal(pid, "-CONT");
    let absolute = absolute.join().expect("the user thread");
    let relative = relative.join().expect("the user thread");

    // The absolute deadline passed while the request waited in the kernel: refused on arrival,
    // without the 300 ms of work.
    assert_eq!(absolute.status, 504, "{absolute:?}");
    let trace = absolute.header("Deadline-Trace").unwrap_or_default();
    assert!(
        !trace.contains("work@"),
        "worked after the deadline: {absolute:?}"
    );
    assert!(
        absolute.elapsed < Duration::from_millis(1_300 + 250),
        "not refused at once: {absolute:?}"
    );
    // The relative budget starts when the head is read: the same wait is invisible to it, and
    // the work is done for a user who gave up long ago.
    assert_eq!(relative.status, 200, "{relative:?}");
    let trace = relative.header("Deadline-Trace").unwrap_or_default();
    assert!(trace.contains("work@"), "{relative:?}");
    assert!(
        relative.elapsed >= Duration::from_millis(1_300 + 300),
        "{relative:?}"
    );
}
