//! `deadline service` calling a hostile downstream (a raw socket that sends what no
//! well-behaved server would): what its caller gets back, and how soon.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::util::Service;

/// What the downstream answers to every request.
#[derive(Clone, Copy)]
enum Hostile {
    /// A 200 with a chunked body of `n` bytes of 0xff (not UTF-8).
    Chunked(usize),
    /// A 200 with `Content-Length: 100`, 10 bytes, then the connection closed.
    Truncated,
    /// A 200 with `Content-Length: 1000`, 5 bytes, then nothing, the connection kept open.
    Stall,
    /// A 503 asking to come back in a day.
    Pushback,
}

/// Serves `kind` on a fresh 127.0.0.1 port from threads that live as long as the test process.
fn hostile(kind: Hostile) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("an address").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream, kind));
        }
    });
    addr
}

fn answer(mut stream: TcpStream, kind: Hostile) {
    loop {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let written = match kind {
            Hostile::Chunked(n) => {
                let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                let chunk = vec![0xffu8; 64 * 1024];
                let mut left = n;
                while left > 0 {
                    let len = left.min(chunk.len());
                    out.extend_from_slice(format!("{len:x}\r\n").as_bytes());
                    out.extend_from_slice(&chunk[..len]);
                    out.extend_from_slice(b"\r\n");
                    left -= len;
                }
                out.extend_from_slice(b"0\r\n\r\n");
                stream.write_all(&out)
            }
            Hostile::Truncated => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789");
                return;
            }
            Hostile::Stall => {
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nfirst");
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                return;
            }
            Hostile::Pushback => stream.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 86400\r\ncontent-length: 5\r\n\r\nlater",
            ),
        };
        if written.is_err() {
            return;
        }
    }
}

/// The caller's view: status, raw body bytes, and how long the answer took. Gives up after
/// 20 s (a hop that waits without bound).
fn call(addr: &str) -> (u16, Vec<u8>, Duration) {
    #[allow(clippy::disallowed_methods)] // a real-time test measures real time
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout set");
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut raw = Vec::new();
    if let Err(err) = stream.read_to_end(&mut raw) {
        panic!(
            "no whole answer within {:?} ({err}); got {} bytes",
            start.elapsed(),
            raw.len()
        );
    }
    let elapsed = start.elapsed();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, raw[split + 4..].to_vec(), elapsed)
}

/// Regression: a downstream's body was read whole, however large (a 300 MB body took the hop
/// to 1 GB). Past `--max-body` the call is a 502 that names the limit.
#[test]
fn a_downstream_body_past_max_body_is_a_502_naming_the_limit() {
    let downstream = hostile(Hostile::Chunked(8 * 1024 * 1024));
    let url = format!("http://{downstream}");
    let svc = Service::start(&[
        "--name",
        "gateway",
        "--downstream",
        &url,
        "--max-body",
        "1048576",
    ]);
    let (status, body, _) = call(&svc.addr);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("--max-body 1048576"), "{text}");
}

/// Regression: a body that is not UTF-8 was passed on as text, each bad byte turned into a
/// three-byte U+FFFD (100 MB came out as 314 MB). It goes on as it came.
#[test]
fn a_body_that_is_not_utf8_is_passed_on_as_it_came() {
    let downstream = hostile(Hostile::Chunked(1024 * 1024));
    let url = format!("http://{downstream}");
    let svc = Service::start(&["--name", "gateway", "--downstream", &url]);
    let (status, body, _) = call(&svc.addr);
    assert_eq!(status, 200);
    assert_eq!(body.len(), 1024 * 1024);
    assert!(body.iter().all(|&b| b == 0xff));
}

/// Regression: a reply with `Content-Length: 100` whose connection closed after 10 bytes was
/// answered 200 with "(reply body lost …)".
#[test]
fn a_truncated_downstream_reply_is_a_502() {
    let downstream = hostile(Hostile::Truncated);
    let url = format!("http://{downstream}");
    let svc = Service::start(&["--name", "gateway", "--downstream", &url]);
    let (status, body, _) = call(&svc.addr);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("gateway: downstream reply lost"), "{text}");
}

/// Regression: without a budget, `--timeout` covered only the reply's head: a downstream that
/// sent its head and then stalled held the request until the caller hung up.
#[test]
fn without_a_budget_the_timeout_covers_the_reply_body() {
    let downstream = hostile(Hostile::Stall);
    let url = format!("http://{downstream}");
    let svc = Service::start(&[
        "--name",
        "gateway",
        "--downstream",
        &url,
        "--timeout",
        "500",
    ]);
    let (status, body, elapsed) = call(&svc.addr);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("timeout of 500 ms"), "{text}");
    // One attempt of 500 ms, the stalled body included: within twice it.
    assert!(
        elapsed >= Duration::from_millis(450) && elapsed < Duration::from_secs(1),
        "{elapsed:?}"
    );
}

/// Regression: a 503 with `Retry-After: 86400` was slept (a day, clamped) before the retry. A
/// pushback longer than the attempts' configured total is not slept: the 503 is the answer.
#[test]
fn a_huge_pushback_is_not_slept() {
    let downstream = hostile(Hostile::Pushback);
    let url = format!("http://{downstream}");
    let svc = Service::start(&[
        "--name",
        "gateway",
        "--downstream",
        &url,
        "--timeout",
        "500",
        "--attempts",
        "3",
    ]);
    let (status, body, elapsed) = call(&svc.addr);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("downstream answered 503"), "{text}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}
