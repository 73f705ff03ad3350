//! Starting `deadline service` processes and talking HTTP/1.1 to them without a client library.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_deadline"))
}

/// A `deadline service` process, killed when dropped.
pub(crate) struct Service {
    child: Child,
    pub(crate) addr: String,
    _stdout: BufReader<ChildStdout>,
}

/// Reads a just-started server's ready line (`listening on http://ADDR`, or `https://`) from its piped stdout:
/// the rest of that stdout, and `ADDR`.
pub(crate) fn ready_addr(child: &mut Child) -> (BufReader<ChildStdout>, String) {
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a ready line");
    let line = line.trim();
    let addr = line
        .strip_prefix("listening on http://")
        .or_else(|| line.strip_prefix("listening on https://"))
        .unwrap_or_else(|| panic!("unexpected ready line {line:?}"))
        .to_owned();
    (stdout, addr)
}

impl Service {
    pub(crate) fn start(args: &[&str]) -> Service {
        let mut child = bin()
            .arg("service")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let (stdout, addr) = ready_addr(&mut child);
        Service {
            child,
            addr,
            _stdout: stdout,
        }
    }

    pub(crate) fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    pub(crate) elapsed: Duration,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `GET /` with the extra header lines (raw bytes, so malformed values go out as they are)
/// and reads the reply to the end (`Connection: close`).
pub(crate) fn get(addr: &str, extra: &[u8]) -> Reply {
    #[allow(clippy::disallowed_methods)] // a real-time test measures real time
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout set");
    let mut request =
        format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n").into_bytes();
    request.extend_from_slice(extra);
    request.extend_from_slice(b"\r\n");
    stream.write_all(&request).expect("sends");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reads");
    let elapsed = start.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
        elapsed,
    }
}

/// Waits (up to 10 s) until the service at `addr` counts `n` requests in flight, read from its
/// `GET /debug/runtime`: a request counted there has reached the service and, with a slot free,
/// taken it. Panics when the count is not reached.
pub(crate) fn wait_in_flight(addr: &str, n: u64) {
    #[allow(clippy::disallowed_methods)] // real processes, real time
    let start = Instant::now();
    loop {
        let mut stream = TcpStream::connect(addr).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout set");
        let request =
            format!("GET /debug/runtime HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).expect("sends");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("reads");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let figures: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"));
        if figures["in_flight"].as_u64() == Some(n) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never {n} in flight: {figures}"
        );
        #[allow(clippy::disallowed_methods)] // polling another process in real time
        std::thread::sleep(Duration::from_millis(5));
    }
}
