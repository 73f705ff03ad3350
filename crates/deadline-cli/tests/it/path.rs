//! `deadline path` through the binary, and the `GET /deadline/limits` it reads: a deliberately
//! misaligned path (nginx and HAProxy fixtures with planted faults, two `deadline service`
//! processes with misaligned flags, the tests' PostgreSQL with `statement_timeout` 0) names
//! every fault with its file and line and fails `--check`; an aligned one names none. The
//! database is `DEADLINE_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/test`,
//! started by `scripts/ensure-postgres.sh`); a test that cannot reach it fails.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use crate::util::{Service, bin, ready_addr};

fn postgres() -> String {
    std::env::var("DEADLINE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/path/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `GET path` on `addr`, the answer's status line and body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout set");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reads");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

fn path(args: &[&str]) -> Output {
    bin()
        .arg("path")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_service_serves_its_limits_on_the_public_and_the_admin_address() {
    let mut child = bin()
        .args([
            "service",
            "--name",
            "lim",
            "--admin-listen",
            "127.0.0.1:0",
            "--front-timeout",
            "1500",
            "--front-margin",
            "70",
            "--slots",
            "3",
            "--max-queue-wait",
            "250",
            "--idle-timeout",
            "9000",
            "--downstream",
            "http://127.0.0.1:9/",
            "--timeout",
            "1200",
            "--attempts",
            "2",
            "--no-retry-budget",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let (mut rest, public) = ready_addr(&mut child);
    let _child = Killed(child);
    let mut line = String::new();
    rest.read_line(&mut line).expect("the admin line");
    let admin = line
        .trim()
        .strip_prefix("admin on http://")
        .unwrap_or_else(|| panic!("unexpected admin line {line:?}"))
        .to_owned();
    for addr in [&public, &admin] {
        let (status, body) = get(addr, "/deadline/limits");
        assert!(status.contains(" 200 "), "{status}: {body}");
        let limits: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(limits["name"], "lim");
        assert_eq!(limits["front_timeout_ms"], 1500);
        assert_eq!(limits["front_margin_ms"], 70);
        assert_eq!(limits["default_budget_ms"], 1430);
        assert_eq!(limits["slots"], 3);
        assert_eq!(limits["max_queue"], 1024);
        assert_eq!(limits["max_queue_wait_ms"], 250);
        assert_eq!(limits["idle_timeout_ms"], 9000);
        assert_eq!(limits["reply_reserve_ms"], 10);
        assert_eq!(limits["downstream"]["attempt_timeout_ms"], 1200);
        assert_eq!(limits["downstream"]["attempts"], 2);
        assert_eq!(limits["downstream"]["propagate"], true);
        assert_eq!(
            limits["downstream"]["retry_budget"],
            serde_json::Value::Null
        );
        assert_eq!(limits["database"], serde_json::Value::Null);
    }
    // The path is matched without its query.
    let (status, _) = get(&public, "/deadline/limits?x=1");
    assert!(status.contains(" 200 "), "{status}");
}

/// Violation blocks of the text output: each starts with `[rule]`.
fn violations(text: &str) -> Vec<String> {
    text.split("\n[")
        .skip(1)
        .map(|block| format!("[{block}"))
        .collect()
}

#[test]
fn a_misaligned_path_names_every_planted_fault_with_its_file_and_line() {
    let db = postgres();
    let b = Service::start(&[
        "--name",
        "b",
        "--idle-timeout",
        "1000",
        "--postgres",
        &db,
        "--postgres-pool-wait",
        "0",
    ]);
    let downstream = format!("http://{}", b.addr);
    let a = Service::start(&[
        "--name",
        "a",
        "--downstream",
        &downstream,
        "--no-propagate",
        "--timeout",
        "300",
    ]);
    let (nginx, haproxy) = (
        fixture("misaligned-nginx.conf"),
        fixture("misaligned-haproxy.cfg"),
    );
    let (url_a, url_b) = (format!("http://{}", a.addr), format!("http://{}", b.addr));
    let out = path(&[
        "--budget",
        "2000",
        "--nginx",
        &nginx,
        "--haproxy",
        &haproxy,
        "--service",
        &url_a,
        "--service",
        &url_b,
        "--postgres",
        &db,
        "--check",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    // Timers print where they were read, the include's file included.
    assert!(text.contains("misaligned-nginx-extra.conf:2"), "{text}");
    // The shortest limit is service a's 300 ms attempt.
    assert!(
        text.contains("effective limit: 300 ms (service a downstream.attempt_timeout_ms"),
        "{text}"
    );
    let found = violations(&text);
    // (rule, what the block must name: the inner end, and the outer one where there is one).
    let planted: [(&str, &[&str]); 13] = [
        ("retry-without-cap", &["misaligned-nginx.conf:14 (default)"]),
        (
            "inner-outlasts-outer",
            &["misaligned-haproxy.cfg:16", "misaligned-nginx.conf:15"],
        ),
        (
            "keep-alive-reversed",
            &["misaligned-haproxy.cfg:9", "misaligned-nginx.conf:8"],
        ),
        ("retry-without-cap", &["misaligned-haproxy.cfg:18"]),
        (
            "attempt-below-rto",
            &["misaligned-haproxy.cfg:7 (backend app)"],
        ),
        (
            "server-timeout-unset",
            &["misaligned-haproxy.cfg:21 (default)"],
        ),
        (
            "attempt-below-rto",
            &["misaligned-haproxy.cfg:7 (backend admin)"],
        ),
        (
            "inner-outlasts-outer",
            &["service a front_timeout_ms", "misaligned-nginx.conf:15"],
        ),
        (
            "attempt-below-rto",
            &["service a downstream.attempt_timeout_ms = 300 ms"],
        ),
        (
            "inner-outlasts-outer",
            &[
                "service b front_timeout_ms",
                "outer: service a downstream.attempt_timeout_ms = 300 ms",
            ],
        ),
        (
            "keep-alive-reversed",
            &[
                "service b idle_timeout_ms = 1000 ms",
                "service a downstream.pool_idle_timeout_ms",
            ],
        ),
        ("pool-wait-unset", &["service b database.pool_wait_ms"]),
        (
            "statement-limit",
            &[
                "statement_timeout = no limit",
                "outer: service a downstream.attempt_timeout_ms",
            ],
        ),
    ];
    assert_eq!(found.len(), planted.len(), "{text}");
    for ((rule, names), block) in planted.iter().zip(&found) {
        assert!(
            block.starts_with(&format!("[{rule}]")),
            "{rule} expected, got {block}"
        );
        for name in *names {
            assert!(block.contains(name), "{rule} does not name {name}: {block}");
        }
        assert!(block.contains("   fix:   "), "{block}");
    }
    drop((a, b));
}

#[test]
fn an_aligned_path_names_no_fault_and_passes_the_check() {
    let db = postgres();
    let b = Service::start(&["--name", "b", "--postgres", &db]);
    let downstream = format!("http://{}", b.addr);
    let a = Service::start(&[
        "--name",
        "a",
        "--downstream",
        &downstream,
        "--front-timeout",
        "900",
    ]);
    let separator = if db.contains('?') { '&' } else { '?' };
    let limited = format!("{db}{separator}options=-c%20statement_timeout%3D800");
    let (url_a, url_b) = (format!("http://{}", a.addr), format!("http://{}", b.addr));
    let (nginx, haproxy) = (
        fixture("aligned-nginx.conf"),
        fixture("aligned-haproxy.cfg"),
    );
    let out = path(&[
        "--balancer-idle",
        "60000",
        "--nginx",
        &nginx,
        "--haproxy",
        &haproxy,
        "--service",
        &url_a,
        "--service",
        &url_b,
        "--postgres",
        &limited,
        "--check",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("no violations"), "{text}");
    assert!(violations(&text).is_empty(), "{text}");
    assert!(
        text.contains("statement_timeout (source: client)"),
        "{text}"
    );
    // The same as JSON: hops in the order given, no violation, the effective limit's owner.
    let out = path(&[
        "--nginx",
        &nginx,
        "--haproxy",
        &haproxy,
        "--service",
        &url_a,
        "--json",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kinds: Vec<&str> = doc["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .map(|h| h["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["nginx", "haproxy", "service"]);
    assert_eq!(doc["violations"], serde_json::json!([]));
    assert_eq!(doc["effective"]["hop"], "service a");
    assert_eq!(doc["effective"]["limit"], 850);
    drop((a, b));
}

#[test]
fn bad_inputs_are_clear_errors_naming_file_and_line() {
    for (args, want) in [
        (
            vec!["--nginx".to_owned(), fixture("unbalanced-nginx.conf")],
            "unbalanced-nginx.conf:1: the `{` of \"server\" is never closed".to_owned(),
        ),
        (
            vec!["--nginx".to_owned(), fixture("missing-include-nginx.conf")],
            "missing-include-nginx.conf:2: include does-not-exist.conf: cannot read".to_owned(),
        ),
        (
            vec!["--haproxy".to_owned(), fixture("no-such-file.cfg")],
            "--haproxy: cannot read".to_owned(),
        ),
        (
            vec!["--service".to_owned(), "http://127.0.0.1:9".to_owned()],
            "--service http://127.0.0.1:9: GET http://127.0.0.1:9/deadline/limits".to_owned(),
        ),
        (
            vec![
                "--postgres".to_owned(),
                "postgres://host:port:x/y".to_owned(),
            ],
            "--postgres: invalid PostgreSQL connection URL".to_owned(),
        ),
        (
            vec!["--budget".to_owned(), "0".to_owned()],
            "--budget must be at least 1 ms".to_owned(),
        ),
        (vec![], "give the path's hops in order".to_owned()),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = path(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(&want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_glob_include_reads_every_match_in_order() {
    let dir = std::env::temp_dir().join(format!("deadline-path-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("conf.d")).expect("a temporary directory");
    let main = dir.join("nginx.conf");
    std::fs::write(&main, "http {\n    include conf.d/*.conf;\n}\n").expect("written");
    for (name, timeout) in [("b.conf", "2s"), ("a.conf", "3s")] {
        std::fs::write(
            dir.join("conf.d").join(name),
            format!("server {{ listen {name}; location / {{ proxy_pass http://127.0.0.1:1; proxy_read_timeout {timeout}; }} }}\n"),
        )
        .expect("written");
    }
    let out = path(&["--nginx", &main.to_string_lossy(), "--json"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let reads: Vec<(String, u64)> = doc["hops"][0]["timers"]
        .as_array()
        .expect("timers")
        .iter()
        .filter(|t| t["name"] == "proxy_read_timeout")
        .map(|t| {
            (
                t["scope"].as_str().unwrap_or_default().to_owned(),
                t["limit"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        reads,
        [
            ("server a.conf location /".to_owned(), 3_000),
            ("server b.conf location /".to_owned(), 2_000)
        ]
    );
}
