//! What `serve` bounds for a client that misbehaves, on real loopback sockets and real time:
//! idle connections (HTTP/2 after its preface, HTTP/1.1 between requests), an HTTP/2 peer that
//! answers no PING, the connection limit, a peer that reads nothing.
//!
//! Raw TCP clients write the frames themselves, so they can stop where a hostile client would.
//! Bounds are generous (two shared cores): each test asserts the connection closes within a few
//! seconds where, without the limit, it would stay open for the header timeout (30 s) or
//! forever.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadline_http::serve::{ServeOptions, serve_with};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tower::service_fn;

/// The HTTP/2 connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Bytes of the body `/big` answers: more than loopback's socket buffers hold.
const BIG: usize = 64 << 20;

/// Answers after `x-work-ms` ms of work: 64 MiB for `/big`, `done` otherwise.
async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let work = request
        .headers()
        .get("x-work-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(work)).await;
    let body = if request.uri().path() == "/big" {
        Bytes::from(vec![b'x'; BIG])
    } else {
        Bytes::from_static(b"done")
    };
    Ok(Response::new(Full::new(body)))
}

struct Server {
    addr: SocketAddr,
    /// One permit per request the handler was called with.
    started: Arc<Semaphore>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// `x-work-ms` sets how long a request works; `/big` answers [`BIG`] bytes.
    async fn start(options: ServeOptions) -> Server {
        let started = Arc::new(Semaphore::new(0));
        let starts = started.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            starts.add_permits(1);
            answer(request)
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve_with(listener, service, shutdown, options));
        Server {
            addr,
            started,
            stop: Some(stop),
            task,
        }
    }

    /// Waits (up to 10 s) until the handler has been called with one more request.
    async fn wait_started(&self) {
        timeout(Duration::from_secs(10), self.started.acquire())
            .await
            .expect("a request reached the handler in time")
            .expect("the server is running")
            .forget();
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        timeout(Duration::from_secs(15), self.task)
            .await
            .expect("shut down")
            .expect("no panic")
            .expect("no error");
    }
}

/// Reads until the server closes the connection (end of stream or reset), at most `within`;
/// returns the bytes read, or `None` if it was still open.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 16 << 10];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    timeout(within, read_all).await.ok()?;
    Some(seen)
}

/// An HTTP/2 frame header: length, type, flags, stream id.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The (type, stream) of each whole HTTP/2 frame the server sent.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u32)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
        out.push((bytes[3], stream));
        bytes = bytes.get(9 + len..).unwrap_or_default();
    }
    out
}

/// A GET on stream 1 with `x-work-ms: work`, in HPACK without indexing or Huffman.
fn get_headers(work_ms: u64) -> Vec<u8> {
    get_headers_on(1, work_ms)
}

/// A GET on stream `stream` with `x-work-ms: work`, in HPACK without indexing or Huffman.
fn get_headers_on(stream: u32, work_ms: u64) -> Vec<u8> {
    let literal = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.push(0x00);
        out.push(u8::try_from(name.len()).unwrap());
        out.extend_from_slice(name);
        out.push(u8::try_from(value.len()).unwrap());
        out.extend_from_slice(value);
    };
    // :method GET, :scheme http, :path / (static table entries 2, 6, 4).
    let mut block = vec![0x82, 0x86, 0x84];
    literal(&mut block, b":authority", b"localhost");
    literal(&mut block, b"x-work-ms", work_ms.to_string().as_bytes());
    // END_HEADERS | END_STREAM
    frame(0x1, 0x4 | 0x1, stream, &block)
}

/// An HTTP/2 client's opening: the preface and SETTINGS_INITIAL_WINDOW_SIZE (4) = 0, so no
/// stream may be sent a byte of data.
fn zero_window_hello() -> Vec<u8> {
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    hello
}

/// Finding: an HTTP/2 client that sends the 24-byte preface and nothing else skipped the
/// header-read timeout and held its connection (a file descriptor, a task) forever; 1,100 of
/// them under a 1,024 file limit locked every new client out. Now it is closed after the idle
/// timeout.
#[tokio::test]
async fn a_preface_only_connection_is_closed_after_the_idle_timeout() {
    let options = ServeOptions::default().idle_timeout(Duration::from_millis(300));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(PREFACE).await.unwrap();
    let start = Instant::now();
    let closed = read_until_closed(&mut stream, Duration::from_secs(6)).await;
    assert!(
        closed.is_some(),
        "the preface-only connection is still open"
    );
    // The 300 ms idle timer sends GOAWAY; this peer answers no PING, so the socket is dropped
    // after the 1 s close grace: about 1.3 s. Not before the idle timeout, and within twice
    // the expected time.
    let after = Instant::now().saturating_duration_since(start);
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_millis(2_600),
        "closed after {after:?}"
    );
    server.stop().await;
}

/// An HTTP/1.1 keep-alive connection between requests is closed after the idle timeout, not
/// only after the header-read timeout (30 s).
#[tokio::test]
async fn an_idle_http1_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let options = ServeOptions::default().idle_timeout(Duration::from_millis(300));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let start = Instant::now();
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let seen = read_until_closed(&mut stream, Duration::from_secs(6))
        .await
        .expect("the idle keep-alive connection is closed");
    // Answered at once, then closed by the 300 ms idle timer: within twice it.
    let after = Instant::now().saturating_duration_since(start);
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_millis(600),
        "closed after {after:?}"
    );
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.ends_with("done"),
        "the answer came whole first: {seen}"
    );
    server.stop().await;
}

/// A request in progress is not idle: an HTTP/2 connection whose only stream works longer than
/// the idle timeout (and the grace a closing connection gets) is kept until the answer is
/// written.
#[tokio::test]
async fn a_connection_with_a_request_open_is_not_idle() {
    let options = ServeOptions::default().idle_timeout(Duration::from_millis(200));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    hello.extend(get_headers(2_000));
    stream.write_all(&hello).await.unwrap();
    let seen = read_until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("closed once idle after the answer");
    let kinds = frames(&seen);
    assert!(
        kinds.contains(&(0x1, 1)),
        "the answer's HEADERS on stream 1 came before the close: {kinds:?}"
    );
    server.stop().await;
}

/// An HTTP/2 peer that has a stream open but answers no PING (vanished without closing) is
/// closed after the keep-alive interval and timeout, before its request would have ended.
#[tokio::test]
async fn an_http2_peer_that_answers_no_ping_is_closed() {
    let options = ServeOptions::default().keep_alive(Some((
        Duration::from_millis(300),
        Duration::from_millis(300),
    )));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    hello.extend(get_headers(20_000));
    let start = Instant::now();
    stream.write_all(&hello).await.unwrap();
    let seen = read_until_closed(&mut stream, Duration::from_secs(8))
        .await
        .expect("the connection of a peer that answers no PING is closed");
    // A PING after 300 ms of silence, 300 ms for its answer: closed about 600 ms after the
    // request, within twice that (its work is 20 s).
    let after = Instant::now().saturating_duration_since(start);
    assert!(
        after < Duration::from_millis(1_200),
        "closed after {after:?}"
    );
    let kinds = frames(&seen);
    assert!(kinds.contains(&(0x6, 0)), "a PING came first: {kinds:?}");
    assert!(!kinds.contains(&(0x1, 1)), "no answer came: {kinds:?}");
    server.stop().await;
}

/// At the connection limit, a new connection closes the one idle the longest to make room, and
/// is served.
#[tokio::test]
async fn at_the_connection_limit_the_longest_idle_connection_makes_room() {
    let options = ServeOptions::default().max_connections(Some(2));
    let server = Server::start(options).await;
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first.write_all(PREFACE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second.write_all(PREFACE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third
        .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let seen = read_until_closed(&mut third, Duration::from_secs(5))
        .await
        .expect("the new connection is answered");
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    assert!(
        read_until_closed(&mut first, Duration::from_secs(5))
            .await
            .is_some(),
        "the connection idle the longest was closed"
    );
    assert!(
        read_until_closed(&mut second, Duration::from_millis(500))
            .await
            .is_none(),
        "the other one is kept"
    );
    server.stop().await;
}

/// At the connection limit with every connection busy, a new connection is closed at once,
/// unanswered, and the busy one is served.
#[tokio::test]
async fn at_the_connection_limit_with_none_idle_new_connections_are_refused() {
    let options = ServeOptions::default().max_connections(Some(1));
    let server = Server::start(options).await;
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    busy.write_all(
        b"GET / HTTP/1.1\r\nhost: localhost\r\nx-work-ms: 1500\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    // Busy once the handler works on its request.
    server.wait_started().await;
    let mut refused = TcpStream::connect(server.addr).await.unwrap();
    let _ = refused
        .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await;
    let seen = read_until_closed(&mut refused, Duration::from_secs(1))
        .await
        .expect("the connection beyond the limit is closed at once");
    assert!(seen.is_empty(), "{}", String::from_utf8_lossy(&seen));
    let seen = read_until_closed(&mut busy, Duration::from_secs(5))
        .await
        .expect("the busy connection is answered");
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    server.stop().await;
}

/// A client that asks for a large answer and reads none of it: once the socket's buffers are
/// full, the connection is dropped after the send timeout instead of holding its task and
/// buffers for as long as the client stays.
#[tokio::test]
async fn a_peer_that_reads_nothing_is_dropped_after_the_send_timeout() {
    let options = ServeOptions::default().send_timeout(Duration::from_millis(300));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    // Long enough for the buffers to fill and the send timeout to run out, generously.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = read_until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("the connection was dropped");
    assert!(
        seen.len() < BIG,
        "only what the buffers held arrived: {} bytes",
        seen.len()
    );
    server.stop().await;
}

/// Reads what the server sends for `within` (or until it closes the connection).
async fn read_for(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut seen = Vec::new();
    let _ = timeout(within, async {
        let mut buf = [0u8; 16 << 10];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    seen
}

/// Finding: a stream whose answer could not be written (the peer opened it with a flow-control
/// window of zero) was kept forever: 100 connections held 20,000 such streams and their tasks.
/// Now the stream is reset once its answer has waited the send timeout, and the connection
/// stays usable.
#[tokio::test]
async fn a_stream_whose_answer_the_peer_never_takes_is_reset_after_the_send_timeout() {
    let options = ServeOptions::default().send_timeout(Duration::from_millis(300));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = PREFACE.to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0: no stream may be sent a byte of data.
    hello.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    hello.extend(get_headers(0));
    stream.write_all(&hello).await.unwrap();
    let kinds = frames(&read_for(&mut stream, Duration::from_secs(4)).await);
    assert!(
        kinds.contains(&(0x1, 1)),
        "the answer's HEADERS came: {kinds:?}"
    );
    assert!(!kinds.contains(&(0x0, 1)), "no DATA could come: {kinds:?}");
    assert!(
        kinds.contains(&(0x3, 1)),
        "stream 1 was reset (RST_STREAM): {kinds:?}"
    );
    server.stop().await;
}

/// Finding: at the connection limit, a connection holding a stream whose answer could not be
/// written (window zero) counted as busy, so it was never evicted and every new client was
/// refused (0 of 51 served with `--max-connections 400` under 600 such connections). Now the
/// connection making no progress the longest is dropped to make room.
#[tokio::test]
async fn at_the_connection_limit_a_connection_whose_answers_wait_on_the_peer_makes_room() {
    let options = ServeOptions::default().max_connections(Some(1));
    let server = Server::start(options).await;
    let mut stuck = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = zero_window_hello();
    hello.extend(get_headers(0));
    stuck.write_all(&hello).await.unwrap();
    // Its answer waits on the peer once its HEADERS came (no DATA can follow).
    let mut seen = Vec::new();
    let headers = timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 16 << 10];
        while !frames(&seen).contains(&(0x1, 1)) {
            match stuck.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    assert_eq!(
        headers,
        Ok(true),
        "the stuck stream's HEADERS: {:?}",
        frames(&seen)
    );
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let seen = read_until_closed(&mut client, Duration::from_secs(5))
        .await
        .expect("the new connection is answered");
    assert!(
        String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    assert!(
        read_until_closed(&mut stuck, Duration::from_secs(2))
            .await
            .is_some(),
        "the stuck connection was dropped"
    );
    server.stop().await;
}

/// Finding: a peer that re-armed its stuck stream (a new zero-window stream opened, the old
/// one reset, faster than the send timeout) kept its connection forever: each stream lived
/// less than the send timeout, and one was always open. Now the connection's own clock, which
/// only an answer taken by the peer resets, drops it after twice the send timeout.
#[tokio::test]
async fn re_arming_stuck_streams_does_not_reset_the_send_timeout() {
    let options = ServeOptions::default().send_timeout(Duration::from_millis(500));
    let server = Server::start(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let mut hello = zero_window_hello();
    hello.extend(get_headers_on(1, 0));
    stream.write_all(&hello).await.unwrap();
    let started = Instant::now();
    let mut id = 1u32;
    let closed = loop {
        // Re-arm every 200 ms: open the next stream, then reset the one before (CANCEL).
        let mut rearm = get_headers_on(id + 2, 0);
        rearm.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
        id += 2;
        if stream.write_all(&rearm).await.is_err() {
            break true;
        }
        if read_until_closed(&mut stream, Duration::from_millis(200))
            .await
            .is_some()
        {
            break true;
        }
        if Instant::now().saturating_duration_since(started) > Duration::from_secs(8) {
            break false;
        }
    };
    assert!(
        closed,
        "the connection was still open after 8 s of stuck streams (send timeout 0.5 s)"
    );
    server.stop().await;
}
