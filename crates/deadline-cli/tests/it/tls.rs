//! `deadline service --tls-cert PEM --tls-key PEM`: curl negotiates HTTP/2 or HTTP/1.1 with it
//! over TLS and the budget is enforced; a silent client is closed after
//! `--tls-handshake-timeout`; the two flags go together, and bad PEM files are an error before
//! anything is served. Outbound: a TLS chain, `deadline service` calling another over
//! `--downstream https://… --ca ca.pem` (HTTP/2 by ALPN, or gRPC), answers curl; a downstream
//! certificate the CA did not sign is a 502 naming the handshake, and a bad `--ca` an error
//! before serving.
//!
//! Certificates are made at run time with rcgen (a CA and a leaf for `127.0.0.1`) in a fresh
//! temporary directory; no key is committed. curl must be installed: without it the test fails,
//! it does not pass silently.

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::util::{Service, bin};

/// `ca.pem`, `cert.pem` and `key.pem` in a directory removed on drop.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "deadline-cli-tls-{}-{}",
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
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf_params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// curl against `url` trusting `ca`, with `args`; prints `HTTP_VERSION STATUS` then the body.
fn curl(ca: &str, url: &str, args: &[&str]) -> String {
    let output = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "10",
            "--cacert",
            ca,
        ])
        .args(["--write-out", "%{http_version} %{http_code}\n"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("curl must be installed to test --tls-cert (this test does not pass without it)");
    assert!(
        output.status.success(),
        "curl {args:?} {url} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The last line curl wrote: `HTTP_VERSION STATUS`.
fn version_and_status(out: &str) -> &str {
    out.trim_end().lines().last().unwrap_or_default()
}

#[test]
fn service_speaks_tls_with_alpn_choosing_http2_or_http11() {
    let pki = Pki::new();
    let (cert, key, ca) = (
        pki.path("cert.pem"),
        pki.path("key.pem"),
        pki.path("ca.pem"),
    );
    let svc = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "1500",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let url = format!("https://{}/", svc.addr);
    // curl offers `h2, http/1.1` with --http2 and `http/1.1` alone with --http1.1: the version
    // printed is the one the server chose.
    let budget = ["--header", "deadline-budget-ms: 2500"];
    let out = curl(&ca, &url, &[&["--http2"], &budget[..]].concat());
    assert_eq!(version_and_status(&out), "2 200", "{out}");
    let out = curl(&ca, &url, &[&["--http1.1"], &budget[..]].concat());
    assert_eq!(version_and_status(&out), "1.1 200", "{out}");
    // The budget is read over TLS: 300 ms for 1500 ms of work is a 504.
    let out = curl(
        &ca,
        &url,
        &["--http2", "--header", "deadline-budget-ms: 300"],
    );
    assert_eq!(version_and_status(&out), "2 504", "{out}");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = Command::new("curl")
        .args([
            "--silent",
            "--max-time",
            "10",
            "--write-out",
            "%{http_code}",
        ])
        .arg(format!("http://{}/", svc.addr))
        .output()
        .expect("curl must be installed");
    assert!(!plain.status.success(), "{plain:?}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "000", "{plain:?}");
}

fn service_fails(args: &[&str]) -> Output {
    let output = bin()
        .args(["service", "--name", "inventory"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{args:?}: {stdout} {stderr}");
    assert!(
        !stdout.contains("listening"),
        "served with {args:?}: {stdout}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    output
}

#[test]
fn tls_flags_go_together_and_bad_pem_files_are_refused_before_serving() {
    let pki = Pki::new();
    let (cert, key) = (pki.path("cert.pem"), pki.path("key.pem"));
    let stderr = |output: Output| String::from_utf8_lossy(&output.stderr).into_owned();
    let err = stderr(service_fails(&["--tls-cert", &cert]));
    assert!(err.contains("--tls-cert needs --tls-key"), "{err}");
    let err = stderr(service_fails(&["--tls-key", &key]));
    assert!(err.contains("--tls-key needs --tls-cert"), "{err}");
    let missing = pki.path("missing.pem");
    let err = stderr(service_fails(&["--tls-cert", &missing, "--tls-key", &key]));
    assert!(err.contains("missing.pem"), "{err}");
    // The certificate given as the key: no private key in it.
    let err = stderr(service_fails(&["--tls-cert", &cert, "--tls-key", &cert]));
    assert!(err.contains("private key"), "{err}");
    // A key that does not belong to the certificate.
    let other = pki.path("other.pem");
    std::fs::write(&other, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let err = stderr(service_fails(&["--tls-cert", &cert, "--tls-key", &other]));
    assert!(err.contains("refused"), "{err}");
}

#[test]
#[allow(clippy::disallowed_methods)] // a real process in real time: the clock is real
fn a_silent_client_is_closed_after_the_tls_handshake_timeout() {
    let pki = Pki::new();
    let (cert, key) = (pki.path("cert.pem"), pki.path("key.pem"));
    let svc = Service::start(&[
        "--name",
        "inventory",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--header-timeout",
        "30000",
        "--tls-handshake-timeout",
        "500",
    ]);
    let t0 = Instant::now();
    let mut silent = TcpStream::connect(&svc.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    // End of stream or a reset: closed. A timeout (WouldBlock/TimedOut) means still open.
    let read = silent.read(&mut buf);
    let after = t0.elapsed();
    assert!(
        matches!(&read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "still open after {after:?}: {read:?}"
    );
    assert!(
        after >= Duration::from_millis(450),
        "closed after {after:?}"
    );
    // The 500 ms handshake timer (the header timeout is 30 s): within twice it.
    assert!(after < Duration::from_secs(1), "closed after {after:?}");
    let err = String::from_utf8_lossy(
        &service_fails(&[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-handshake-timeout",
            "0",
        ])
        .stderr,
    )
    .into_owned();
    assert!(
        err.contains("--tls-handshake-timeout must be at least 1 ms"),
        "{err}"
    );
}

#[test]
fn a_tls_chain_calls_its_https_downstream_verified_against_the_ca() {
    let pki = Pki::new();
    let other = Pki::new();
    let (cert, key, ca) = (
        pki.path("cert.pem"),
        pki.path("key.pem"),
        pki.path("ca.pem"),
    );
    let inventory = Service::start(&[
        "--name",
        "inventory",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let downstream = format!("https://{}", inventory.addr);
    let tls = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    let front = Service::start(
        &[
            &["--name", "front", "--downstream", &downstream, "--ca", &ca][..],
            &tls[..],
        ]
        .concat(),
    );
    let grpc = Service::start(&[
        "--name",
        "grpc-front",
        "--downstream",
        &downstream,
        "--downstream-protocol",
        "grpc",
        "--ca",
        &ca,
    ]);
    let untrusting = Service::start(&[
        "--name",
        "untrusting",
        "--downstream",
        &downstream,
        "--ca",
        &other.path("ca.pem"),
        "--attempts",
        "1",
    ]);
    let budget = ["--include", "--header", "deadline-budget-ms: 2000"];

    // curl → front over TLS → inventory over TLS: the answer is the callee's, and the trace
    // nests the callee's hop under the attempt.
    let out = curl(&ca, &format!("https://{}/items", front.addr), &budget);
    assert_eq!(version_and_status(&out), "2 200", "{out}");
    assert!(out.contains("inventory: done"), "{out}");
    assert!(out.contains("...inventory@"), "{out}");
    // gRPC downstream: `h2` negotiated, the reply's status judged.
    let out = curl(&ca, &format!("http://{}/items", grpc.addr), &budget);
    assert_eq!(version_and_status(&out), "1.1 200", "{out}");
    assert!(out.contains("inventory: done"), "{out}");
    assert!(out.contains("...inventory@"), "{out}");
    // A CA that did not sign the downstream's certificate: the handshake fails, a 502.
    let out = curl(&ca, &format!("http://{}/items", untrusting.addr), &budget);
    assert_eq!(version_and_status(&out), "1.1 502", "{out}");
    assert!(out.contains("TLS handshake failed"), "{out}");
    assert!(!out.contains("inventory@"), "{out}");
}

#[test]
fn a_bad_ca_file_is_refused_before_serving() {
    let pki = Pki::new();
    let stderr = |output: Output| String::from_utf8_lossy(&output.stderr).into_owned();
    let https = ["--downstream", "https://127.0.0.1:1"];
    let missing = pki.path("missing.pem");
    let err = stderr(service_fails(&[&https[..], &["--ca", &missing]].concat()));
    assert!(err.contains("--ca: cannot read CA certificates"), "{err}");
    let key = pki.path("key.pem");
    let err = stderr(service_fails(&[&https[..], &["--ca", &key]].concat()));
    assert!(err.contains("--ca: no PEM CERTIFICATE section"), "{err}");
    let ca = pki.path("ca.pem");
    let err = stderr(service_fails(&[
        "--downstream",
        "http://127.0.0.1:1",
        "--ca",
        &ca,
    ]));
    assert!(
        err.contains("--ca is for an https:// --downstream"),
        "{err}"
    );
}
