//! The load generator: keep-alive HTTP/1.1 connections in a closed loop, each a minimal writer
//! and reader (no pool, no header map), so it costs the servers' side of the machine as little as
//! possible.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::machine::{thread_cpu, threads_cpu};
use super::servers::lock;

/// Latency histograms are in microseconds, up to a minute.
pub(crate) const HIST_MAX_US: u64 = 60_000_000;

/// What one variant's measured window gave.
pub(crate) struct Window {
    pub(crate) histogram: Histogram<u64>,
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) elapsed: Duration,
    pub(crate) server_cpu: Option<Duration>,
    pub(crate) client_cpu: Option<Duration>,
}

/// The one request every connection sends, again and again: with a budget header when
/// `budget_ms` is given, without one otherwise.
pub(crate) fn request_bytes(addr: SocketAddr, budget_ms: Option<u64>) -> Arc<[u8]> {
    let budget = match budget_ms {
        Some(ms) => format!("{}: {ms}\r\n", deadline::BUDGET_HEADER),
        None => String::new(),
    };
    format!("GET /bench HTTP/1.1\r\nhost: {addr}\r\n{budget}\r\n")
        .into_bytes()
        .into()
}

/// Drives `addr` with `connections` closed-loop connections: `warmup`, then `measure`.
pub(crate) async fn drive(
    addr: SocketAddr,
    request: Arc<[u8]>,
    connections: usize,
    warmup: Duration,
    measure: Duration,
    server_tids: &Mutex<Vec<u32>>,
    client_tid: Option<u32>,
) -> anyhow::Result<Window> {
    let start = Instant::now();
    let measure_from = start + warmup;
    let measure_until = measure_from + measure;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        tasks.spawn(connection(
            addr,
            request.clone(),
            measure_from,
            measure_until,
        ));
    }
    tokio::time::sleep_until(measure_from).await;
    let server_before = threads_cpu(&lock(server_tids));
    let client_before = client_tid.and_then(thread_cpu);
    tokio::time::sleep_until(measure_until).await;
    let server_after = threads_cpu(&lock(server_tids));
    let client_after = client_tid.and_then(thread_cpu);
    let elapsed = measure_until - measure_from;

    let mut histogram = new_histogram()?;
    let (mut requests, mut errors) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        let conn = joined.context("a connection task failed")?;
        histogram.add(&conn.histogram)?;
        requests += conn.requests;
        errors += conn.errors;
    }
    Ok(Window {
        histogram,
        requests,
        errors,
        elapsed,
        server_cpu: server_after
            .zip(server_before)
            .map(|(a, b)| a.saturating_sub(b)),
        client_cpu: client_after
            .zip(client_before)
            .map(|(a, b)| a.saturating_sub(b)),
    })
}

/// An empty latency histogram (µs, three significant digits).
pub(crate) fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).context("histogram bounds")
}

/// One connection's share of a window.
struct ConnectionTally {
    histogram: Histogram<u64>,
    requests: u64,
    errors: u64,
}

/// One keep-alive connection: sends, reads the whole answer, sends again, until `until`.
/// Requests sent from `from` on are counted (and their latency recorded) when they complete.
async fn connection(
    addr: SocketAddr,
    request: Arc<[u8]>,
    from: Instant,
    until: Instant,
) -> ConnectionTally {
    let mut tally = ConnectionTally {
        histogram: new_histogram().expect("valid bounds"),
        requests: 0,
        errors: 0,
    };
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(_) => {
            tally.errors += 1;
            return tally;
        }
    };
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        let status = match exchange(&mut stream, &request, &mut buf).await {
            Ok(status) => status,
            Err(_) => {
                tally.errors += 1;
                break;
            }
        };
        if sent >= from {
            let us = u64::try_from(Instant::now().saturating_duration_since(sent).as_micros())
                .unwrap_or(u64::MAX);
            let _ = tally.histogram.record(us.clamp(1, HIST_MAX_US));
            tally.requests += 1;
            if status != 200 {
                tally.errors += 1;
            }
        }
    }
    tally
}

/// Sends `count` requests to `addr` one at a time over one keep-alive connection: the fixed
/// client of an instruction count, so every run sends the server the same bytes in the same
/// order. Fails on a connection error or on any answer but 200.
pub(crate) async fn send_sequentially(
    addr: SocketAddr,
    request: &[u8],
    count: u64,
) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    for n in 1..=count {
        let status = exchange(&mut stream, request, &mut buf)
            .await
            .with_context(|| format!("request {n} of {count}"))?;
        if status != 200 {
            bail!("request {n} of {count} was answered {status}");
        }
    }
    Ok(())
}

/// Writes `request` and reads one whole answer (a `content-length` body), returning its status.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> anyhow::Result<u16> {
    stream.write_all(request).await?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    let (head_end, status, length) = loop {
        if let Some(head) = parse_head(buf)? {
            break head;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection mid-body");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(status)
}

/// Parses a response head in `buf`: `None` until it is complete, then where the body starts,
/// the status and the body's length. Answers without `content-length` are not supported (the
/// servers here always send one).
fn parse_head(buf: &[u8]) -> anyhow::Result<Option<(usize, u16, usize)>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).context("a response head that is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
    let mut length = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let length = length.ok_or_else(|| anyhow!("an answer without content-length"))?;
    Ok(Some((end + 4, status, length)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_parse_only_when_complete() {
        let full = b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 12\r\nx: y\r\n\r\nbody";
        assert_eq!(parse_head(&full[..20]).unwrap(), None);
        assert_eq!(parse_head(full).unwrap(), Some((58, 504, 12)));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "no length");
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn the_request_carries_a_budget_header_unless_told_not_to() {
        let addr: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let with = request_bytes(addr, Some(1950));
        let with = std::str::from_utf8(&with).unwrap();
        assert!(
            with.contains("\r\ndeadline-budget-ms: 1950\r\n"),
            "{with:?}"
        );
        assert!(with.ends_with("\r\n\r\n"));
        let without = request_bytes(addr, None);
        let without = std::str::from_utf8(&without).unwrap();
        assert_eq!(
            without,
            "GET /bench HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n\r\n"
        );
    }
}
