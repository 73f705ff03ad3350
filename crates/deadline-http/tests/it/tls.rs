//! `serve_tls` on real loopback sockets: ALPN picks the protocol, the handshake has its own
//! timeout, plaintext sent to the TLS port is closed without harming the server, the connection
//! limit and idle timeout hold for TLS connections, and the enforce layer's budget works over
//! TLS. Outbound: `DeadlineClient::https` verifies against a private CA and refuses a
//! certificate it does not trust, speaks what ALPN chose, stamps the budget after the
//! handshake, and does not reuse a connection an attempt timed out on.
//!
//! Certificates are made at run time with rcgen (a CA and a leaf for `localhost` and
//! `127.0.0.1`) and written to a fresh temporary directory, so the PEM loader is the one under
//! test; no key is committed. Bounds are generous (two shared cores).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline::{CallPolicy, Deadline};
use deadline_http::propagate::{Backoff, HedgeDelay};
use deadline_http::serve::{ServeOptions, serve_tls};
use deadline_http::tls::{
    ALPN_H2, ALPN_HTTP1, TlsConfigError, client_config_from_pem, server_config_from_pem,
};
use deadline_http::{CallError, DeadlineClient, EnforceDeadlineLayer, with_deadline};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_rustls::TlsConnector;
use tower::{Layer, service_fn};

/// A CA and a leaf it signed, written as PEM files in a directory removed on drop.
struct Pki {
    dir: PathBuf,
    ca: CertificateDer<'static>,
}

impl Pki {
    fn new() -> Pki {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "deadline-http-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Its own name: a leaf named as its issuer looks self-signed to OpenSSL (curl).
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "deadline test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca: ca_cert.der().clone(),
        }
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    fn ca_pem(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A client trusting the CA, offering `alpn`.
    fn connector(&self, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Answers the request's HTTP version as its body (`HTTP/2.0`, `HTTP/1.1`), after
    /// `x-work-ms` milliseconds of work, behind the enforce layer.
    async fn start(pki: &Pki, options: ServeOptions) -> Server {
        let handler = service_fn(|request: Request<Incoming>| async move {
            let work = request
                .headers()
                .get("x-work-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(work)).await;
            let body = format!("{:?}", request.version());
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
        });
        let service = EnforceDeadlineLayer::new("inventory").layer(handler);
        let tls = server_config_from_pem(pki.cert(), pki.key()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve_tls(listener, tls, service, shutdown, options));
        Server {
            addr,
            stop: Some(stop),
            task,
        }
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

/// What a TLS client saw.
#[derive(Debug)]
struct Reply {
    /// The ALPN protocol the server chose.
    alpn: Option<Vec<u8>>,
    /// The response's version.
    version: Version,
    status: StatusCode,
    /// The handler's body: the version it saw.
    body: String,
    elapsed: Duration,
}

/// One GET on a fresh TLS connection offering `alpn`, in HTTP/2 if the server chose `h2`,
/// HTTP/1.1 otherwise.
async fn get(
    pki: &Pki,
    addr: SocketAddr,
    alpn: &[&[u8]],
    headers: &[(&str, &str)],
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    let t0 = Instant::now();
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost")?;
    let tls = pki.connector(alpn).connect(name, tcp).await?;
    let chosen = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let mut request = Request::builder().uri("https://localhost/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new())?;
    let response = if chosen.as_deref() == Some(ALPN_H2) {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        sender.send_request(request).await?
    } else {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let (mut parts, body) = request.into_parts();
        parts.uri = "/".parse()?;
        parts.headers.insert("host", "localhost".parse()?);
        sender
            .send_request(Request::from_parts(parts, body))
            .await?
    };
    let version = response.version();
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Reply {
        alpn: chosen,
        version,
        status,
        body: String::from_utf8(body.to_vec())?,
        elapsed: Instant::now().saturating_duration_since(t0),
    })
}

/// Reads until the server closes the connection (end of stream or reset), at most `within`;
/// returns when it closed and the bytes read, or `None` if it was still open.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<(Instant, Vec<u8>)> {
    let mut seen = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    let at = timeout(within, read).await.ok()?;
    Some((at, seen))
}

#[tokio::test]
async fn alpn_h2_is_served_as_http2() {
    let pki = Pki::new();
    let server = Server::start(&pki, ServeOptions::default()).await;
    // A gRPC-style client: `h2` only.
    let reply = get(&pki, server.addr, &[ALPN_H2], &[]).await.unwrap();
    assert_eq!(reply.alpn.as_deref(), Some(ALPN_H2), "{reply:?}");
    assert_eq!(reply.version, Version::HTTP_2, "{reply:?}");
    assert_eq!(reply.body, "HTTP/2.0", "{reply:?}");
    // A browser-style client offers both: the server prefers `h2`.
    let reply = get(&pki, server.addr, &[ALPN_H2, ALPN_HTTP1], &[])
        .await
        .unwrap();
    assert_eq!(reply.alpn.as_deref(), Some(ALPN_H2), "{reply:?}");
    assert_eq!(reply.body, "HTTP/2.0", "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn alpn_http11_or_none_is_served_as_http1() {
    let pki = Pki::new();
    let server = Server::start(&pki, ServeOptions::default()).await;
    let reply = get(&pki, server.addr, &[ALPN_HTTP1], &[]).await.unwrap();
    assert_eq!(reply.alpn.as_deref(), Some(ALPN_HTTP1), "{reply:?}");
    assert_eq!(reply.version, Version::HTTP_11, "{reply:?}");
    assert_eq!(reply.body, "HTTP/1.1", "{reply:?}");
    // No ALPN at all: HTTP/1.1.
    let reply = get(&pki, server.addr, &[], &[]).await.unwrap();
    assert_eq!(reply.alpn, None, "{reply:?}");
    assert_eq!(reply.body, "HTTP/1.1", "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_silent_client_is_closed_after_the_handshake_timeout_without_stalling_others() {
    let pki = Pki::new();
    let handshake = Duration::from_secs(1);
    // Header and idle timeouts far longer: only the handshake timeout can close it in time.
    let options = ServeOptions::default()
        .header_read_timeout(Duration::from_secs(30))
        .idle_timeout(Duration::from_secs(60))
        .tls_handshake_timeout(handshake);
    let server = Server::start(&pki, options).await;
    let t0 = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    // While it says nothing, another client is served, before the silent one is closed: the
    // handshake waits in the connection's task, not in the accept loop.
    let reply = get(&pki, server.addr, &[ALPN_H2], &[]).await.unwrap();
    let served = Instant::now();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let (at, seen) = closed_within(&mut silent, Duration::from_secs(10))
        .await
        .expect("a silent client is closed after the handshake timeout");
    let after = at.saturating_duration_since(t0);
    eprintln!(
        "silent client closed after {} ms (handshake timeout 1000 ms); a TLS request meanwhile took {} ms",
        after.as_millis(),
        reply.elapsed.as_millis()
    );
    assert!(served < at, "the other client waited for the silent one");
    assert!(
        seen.is_empty(),
        "nothing is sent to a silent client: {seen:?}"
    );
    assert!(
        after >= Duration::from_millis(950),
        "closed after {after:?}"
    );
    // The 1 s handshake timer, counted from the accept: within twice it (the header and idle
    // timeouts are 30 s and 60 s).
    assert!(after < Duration::from_secs(2), "closed after {after:?}");
    server.stop().await;
}

#[tokio::test]
async fn plaintext_to_the_tls_port_is_closed_and_the_server_goes_on() {
    let pki = Pki::new();
    // A long handshake timeout: what closes the plaintext client is the failed handshake.
    let options = ServeOptions::default().tls_handshake_timeout(Duration::from_secs(30));
    let server = Server::start(&pki, options).await;
    for _ in 0..3 {
        let mut plain = TcpStream::connect(server.addr).await.unwrap();
        plain
            .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let (_, seen) = closed_within(&mut plain, Duration::from_secs(5))
            .await
            .expect("plaintext to the TLS port is closed at once");
        // At most a TLS alert; never an HTTP answer.
        assert!(
            !seen.starts_with(b"HTTP/"),
            "{:?}",
            String::from_utf8_lossy(&seen)
        );
    }
    let reply = get(&pki, server.addr, &[ALPN_HTTP1], &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "HTTP/1.1", "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn the_budget_header_is_enforced_over_tls() {
    let pki = Pki::new();
    let server = Server::start(&pki, ServeOptions::default()).await;
    let budget = BUDGET_HEADER;
    for alpn in [ALPN_H2, ALPN_HTTP1] {
        let headers = [(budget.as_str(), "300"), ("x-work-ms", "3000")];
        let reply = get(&pki, server.addr, &[alpn], &headers).await.unwrap();
        eprintln!(
            "300 ms budget over TLS ({}): {} after {} ms",
            String::from_utf8_lossy(alpn),
            reply.status,
            reply.elapsed.as_millis()
        );
        assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{reply:?}");
        assert!(reply.elapsed >= Duration::from_millis(280), "{reply:?}");
        assert!(reply.elapsed < Duration::from_millis(2500), "{reply:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_connection_limit_counts_a_connection_in_its_handshake() {
    let pki = Pki::new();
    // One connection at most; the handshake timeout alone would keep the silent one for 30 s.
    let options = ServeOptions::default()
        .max_connections(Some(1))
        .tls_handshake_timeout(Duration::from_secs(30));
    let server = Server::start(&pki, options).await;
    let t0 = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The new client needs the room: the silent one, idle in its handshake, is evicted.
    let reply = get(&pki, server.addr, &[ALPN_H2], &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let (at, _) = closed_within(&mut silent, Duration::from_secs(5))
        .await
        .expect("the silent connection is evicted for the new one");
    assert!(at.saturating_duration_since(t0) < Duration::from_secs(5));
    server.stop().await;
}

#[tokio::test]
async fn an_idle_tls_connection_is_closed_after_the_idle_timeout() {
    let pki = Pki::new();
    let options = ServeOptions::default().idle_timeout(Duration::from_millis(300));
    let server = Server::start(&pki, options).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = pki
        .connector(&[ALPN_HTTP1])
        .connect(name, tcp)
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 64];
    // The server ends the TLS session: a close_notify (read as 0 bytes), or the end of the
    // stream or a reset without one. Any other answer (bytes, a TLS error) is not a close.
    let read = timeout(Duration::from_secs(10), tls.read(&mut buf))
        .await
        .expect("an idle TLS connection is closed after the idle timeout");
    let ended = Instant::now().saturating_duration_since(t0);
    match &read {
        Ok(0) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) => {}
        other => panic!("not a close: {other:?}"),
    }
    // And the connection itself is closed, not only the TLS session: the socket under it
    // reads its end (or a reset) within a second of the close_notify. A server that sent
    // close_notify and kept the socket open fails here.
    let (mut tcp, _) = tls.into_inner();
    let (_, after) = closed_within(&mut tcp, Duration::from_secs(1))
        .await
        .expect("the server closed the TLS session but kept the TCP connection open");
    assert!(after.is_empty(), "bytes after the close: {after:?}");
    // The 300 ms idle timer closed it, counted from about the end of the handshake: not
    // before it, and within twice it (the default idle timeout is 60 s).
    assert!(
        ended >= Duration::from_millis(250) && ended < Duration::from_millis(600),
        "closed {ended:?} after the handshake, with an idle timeout of 300 ms"
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_pem_files_are_errors_not_panics() {
    let pki = Pki::new();
    let missing = pki.dir.join("missing.pem");
    assert!(matches!(
        server_config_from_pem(&missing, pki.key()),
        Err(TlsConfigError::ReadCert { .. })
    ));
    // A key where the certificate should be: no CERTIFICATE section.
    assert!(matches!(
        server_config_from_pem(pki.key(), pki.key()),
        Err(TlsConfigError::NoCert { .. })
    ));
    // A certificate where the key should be: no private key.
    let error = server_config_from_pem(pki.cert(), pki.cert()).unwrap_err();
    assert!(matches!(error, TlsConfigError::ReadKey { .. }), "{error}");
    // A key that does not match the certificate.
    let other = pki.dir.join("other-key.pem");
    std::fs::write(&other, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let error = server_config_from_pem(pki.cert(), &other).unwrap_err();
    assert!(matches!(error, TlsConfigError::Rejected(_)), "{error}");
    assert!(server_config_from_pem(pki.cert(), pki.key()).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Outbound: `DeadlineClient::https`.

/// A TLS server (`serve_tls`, offering `alpn`) answering `<version> <budget>`: the HTTP version
/// it saw and the `Deadline-Budget-Ms` it was sent (`-` for none), after `x-work-ms` ms.
async fn echo_server(pki: &Pki, alpn: &[&[u8]]) -> Server {
    let handler = service_fn(|request: Request<Incoming>| async move {
        let work = request
            .headers()
            .get("x-work-ms")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(work)).await;
        let budget = request
            .headers()
            .get(BUDGET_HEADER)
            .map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned());
        let body = format!("{:?} {budget}", request.version());
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
    });
    let mut config = (*server_config_from_pem(pki.cert(), pki.key()).unwrap()).clone();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let task = tokio::spawn(serve_tls(
        listener,
        Arc::new(config),
        handler,
        shutdown,
        ServeOptions::default(),
    ));
    Server {
        addr,
        stop: Some(stop),
        task,
    }
}

/// A TCP proxy to `to` that waits `delay` after accepting each connection before it passes
/// any byte (so a TLS handshake through it takes at least `delay`), counting connections.
async fn slow_proxy(to: SocketAddr, delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut outbound = TcpStream::connect(to).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (addr, accepted)
}

fn policy(timeout_ms: u64, attempts: u32) -> CallPolicy {
    CallPolicy::new(Duration::from_millis(timeout_ms), attempts).unwrap()
}

/// The body of a call's answer.
async fn text(
    response: Result<
        Response<deadline_http::propagate::CallBody<Incoming>>,
        deadline_http::CallError,
    >,
) -> String {
    let response = response.expect("an answer");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn outbound_https_with_a_private_ca_reaches_serve_tls() {
    let pki = Pki::new();
    let server = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let client = DeadlineClient::https(policy(2_000, 1), tls);
    let url = format!("https://localhost:{}/items", server.addr.port());
    // Outside a deadline: no budget header, the call goes through.
    assert_eq!(text(client.get(url.as_str()).await).await, "HTTP/2.0 -");
    // Inside one: the callee is told a budget, less the margin.
    let deadline = Deadline::after_duration(Instant::now().into_std(), Duration::from_secs(2));
    let body = text(with_deadline(deadline, client.get(url.as_str())).await).await;
    let budget: u64 = body.strip_prefix("HTTP/2.0 ").unwrap().parse().unwrap();
    assert!((1_000..=1_950).contains(&budget), "{body}");
    // The IP address of the certificate is verified too.
    let by_ip = format!("https://127.0.0.1:{}/", server.addr.port());
    assert_eq!(text(client.get(by_ip.as_str()).await).await, "HTTP/2.0 -");
    server.stop().await;
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_as_a_connection_error() {
    let pki = Pki::new();
    let other = Pki::new();
    let server = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    // Trusting another CA: the handshake fails, every attempt as a connection error.
    let tls = client_config_from_pem(other.ca_pem()).unwrap();
    let client = DeadlineClient::https(policy(2_000, 2), tls).backoff(Backoff::NONE);
    let url = format!("https://localhost:{}/", server.addr.port());
    let error = client.get(url.as_str()).await.expect_err("refused");
    let CallError::Inner { attempts_sent, .. } = &error else {
        panic!("not a connection error: {error:?}");
    };
    assert_eq!(*attempts_sent, 2, "retried as a connection error");
    let chain = format!("{:?}", std::error::Error::source(&error).unwrap());
    assert!(chain.contains("TLS handshake failed"), "{chain}");
    assert!(chain.contains("InvalidCertificate"), "{chain}");
    // And a CA file that is not one is an error, not a panic.
    let missing = client_config_from_pem(pki.dir.join("missing.pem")).unwrap_err();
    assert!(
        matches!(missing, TlsConfigError::ReadCa { .. }),
        "{missing}"
    );
    std::fs::write(pki.dir.join("empty.pem"), "not a certificate\n").unwrap();
    let empty = client_config_from_pem(pki.dir.join("empty.pem")).unwrap_err();
    assert!(matches!(empty, TlsConfigError::NoCa { .. }), "{empty}");
    server.stop().await;
}

#[tokio::test]
async fn the_client_speaks_what_alpn_chose() {
    let pki = Pki::new();
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let both = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    let http1 = echo_server(&pki, &[ALPN_HTTP1]).await;
    let h2 = echo_server(&pki, &[ALPN_H2]).await;
    let url = |server: &Server| format!("https://localhost:{}/", server.addr.port());

    // `h2, http/1.1` offered: HTTP/2 when the server chooses it, HTTP/1.1 otherwise.
    let client = DeadlineClient::https(policy(2_000, 1), Arc::clone(&tls));
    assert_eq!(text(client.get(url(&both)).await).await, "HTTP/2.0 -");
    assert_eq!(text(client.get(url(&http1)).await).await, "HTTP/1.1 -");
    // Twice over HTTP/1.1: the pooled connection is reused once its answer is read.
    assert_eq!(text(client.get(url(&http1)).await).await, "HTTP/1.1 -");
    // For gRPC, `h2` alone: HTTP/2, and a server without h2 refuses the handshake.
    let grpc = DeadlineClient::https_h2(policy(2_000, 1), tls);
    assert_eq!(text(grpc.get(url(&h2)).await).await, "HTTP/2.0 -");
    assert_eq!(text(grpc.get(url(&both)).await).await, "HTTP/2.0 -");
    assert!(matches!(
        grpc.get(url(&http1)).await,
        Err(CallError::Inner { .. })
    ));
    for server in [both, http1, h2] {
        server.stop().await;
    }
}

/// The budget is stamped when the request is written, after the handshake: a handshake made
/// 300 ms slow by a proxy is taken from the budget the callee is told.
#[tokio::test]
async fn the_budget_is_stamped_after_the_handshake() {
    let pki = Pki::new();
    let server = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    let delay = Duration::from_millis(300);
    let (proxy, _) = slow_proxy(server.addr, delay).await;
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let hedged = DeadlineClient::https(policy(5_000, 2), Arc::clone(&tls))
        .hedge(Some(HedgeDelay::Fixed(Duration::from_secs(4))));
    for client in [
        DeadlineClient::https(policy(5_000, 1), Arc::clone(&tls)),
        DeadlineClient::https_h2(policy(5_000, 1), Arc::clone(&tls)),
        // The hedging loop sends its attempts its own way: stamped late too.
        hedged,
    ] {
        let url = format!("https://localhost:{}/", proxy.port());
        let start = Instant::now();
        let budget_at_start = Duration::from_millis(3_000);
        let deadline = Deadline::after_duration(start.into_std(), budget_at_start);
        let body = text(with_deadline(deadline, client.get(url.as_str())).await).await;
        assert!(
            Instant::now().saturating_duration_since(start) >= delay,
            "the proxy delayed the handshake"
        );
        let told: u64 = body.split(' ').nth(1).unwrap().parse().unwrap();
        // Stamped before connecting it would be 3000 less the 50 ms margin: 2950.
        assert!(
            told <= 3_000 - 250,
            "the callee was told {told} ms: the {delay:?} handshake was not taken off"
        );
        assert!(told >= 2_000, "told {told} ms");
    }
    server.stop().await;
}

/// An idle HTTP/1.1 connection the server closed is not used for the next call: it goes out on
/// a new connection, with one attempt.
#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_a_failed_call() {
    let pki = Pki::new();
    let handler = service_fn(|_request: Request<Incoming>| async move {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok"))))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = (*server_config_from_pem(pki.cert(), pki.key()).unwrap()).clone();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    let options = ServeOptions::default().idle_timeout(Duration::from_millis(100));
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let task = tokio::spawn(serve_tls(
        listener,
        Arc::new(config),
        handler,
        shutdown,
        options,
    ));
    let server = Server {
        addr,
        stop: Some(stop),
        task,
    };
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let client = DeadlineClient::https(policy(2_000, 1), tls);
    // Through a counting relay: each call's connection is seen.
    let (relay, connections) = slow_proxy(server.addr, Duration::ZERO).await;
    let url = format!("https://localhost:{}/", relay.port());
    for call in 1..=3 {
        assert_eq!(text(client.get(url.as_str()).await).await, "ok");
        // Each call on a new connection: the one before was closed by the server while idle
        // (so the case this test is about did happen), and was not reused.
        assert_eq!(
            connections.load(Ordering::SeqCst),
            call,
            "call {call} went out on a connection of an earlier call"
        );
        // Three times the 100 ms idle timeout: time for the server to close the connection.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    server.stop().await;
}

/// Calls started together on a new HTTP/2 client make one connection, not one each.
#[tokio::test]
async fn concurrent_first_calls_over_http2_share_one_dial() {
    let pki = Pki::new();
    let server = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    // The handshake held 100 ms, so the calls all find no connection.
    let (proxy, connections) = slow_proxy(server.addr, Duration::from_millis(100)).await;
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let client = DeadlineClient::https_h2(policy(3_000, 1), tls);
    let url = format!("https://localhost:{}/", proxy.port());
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            tokio::spawn(async move { text(client.get(url.as_str()).await).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap(), "HTTP/2.0 -");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "one dial shared");
    server.stop().await;
}

/// A connection an attempt timed out on is not reused: the next call dials a new one (over
/// HTTP/2, where it would otherwise carry every call).
#[tokio::test]
async fn a_connection_an_attempt_timed_out_on_is_not_reused() {
    let pki = Pki::new();
    let server = echo_server(&pki, &[ALPN_H2, ALPN_HTTP1]).await;
    let (proxy, connections) = slow_proxy(server.addr, Duration::ZERO).await;
    let tls = client_config_from_pem(pki.ca_pem()).unwrap();
    let client = DeadlineClient::https_h2(policy(300, 1), tls);
    let url = format!("https://localhost:{}/", proxy.port());
    assert_eq!(text(client.get(url.as_str()).await).await, "HTTP/2.0 -");
    assert_eq!(text(client.get(url.as_str()).await).await, "HTTP/2.0 -");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one connection, reused"
    );
    let slow = Request::builder()
        .uri(url.as_str())
        .header("x-work-ms", "2000")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let timed_out = client.send(slow).await.expect_err("timed out");
    assert!(
        matches!(timed_out, CallError::TimedOut { .. }),
        "{timed_out:?}"
    );
    assert_eq!(text(client.get(url.as_str()).await).await, "HTTP/2.0 -");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        2,
        "a new connection after the timeout"
    );
    server.stop().await;
}
