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
    assert!(start.elapsed() >= Duration::from_millis(250));
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
    std::thread::sleep(Duration::from_millis(500));
    let child = svc.child_mut();
    let start = Instant::now();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    let took = start.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(8),
        "shutdown took {took:?} with --drain-timeout 2"
    );
}
