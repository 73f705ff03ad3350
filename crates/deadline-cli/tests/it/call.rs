//! `deadline call`: against a chain of `deadline service` processes, against a plain server that
//! sends no trace, and with bad arguments (clear errors, never a panic).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Output;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::util::{Service, bin};

/// gateway (20 ms of work) calls orders (20 ms), which calls inventory (`inventory_work` ms).
/// Returned callee first, so the drops stop gateway last. Each caller keeps a 200 ms margin back
/// (four times the default), so on a loaded machine a callee's 504 still reaches its caller
/// before the caller's own cutoff.
fn chain(inventory_work: &str) -> (Service, Service, Service) {
    chain_over(inventory_work, &[])
}

/// [`chain`] with each hop calling the next over gRPC (on h2c).
fn grpc_chain(inventory_work: &str) -> (Service, Service, Service) {
    chain_over(inventory_work, &["--downstream-protocol", "grpc"])
}

/// [`chain`] with `hop_args` given to the hops that call downstream.
fn chain_over(inventory_work: &str, hop_args: &[&str]) -> (Service, Service, Service) {
    let inventory = Service::start(&["--name", "inventory", "--work", inventory_work]);
    let orders = Service::start(
        &[
            &[
                "--name",
                "orders",
                "--work",
                "20",
                "--downstream",
                &format!("http://{}", inventory.addr),
                "--downstream-name",
                "inventory",
                "--margin",
                "200",
            ],
            hop_args,
        ]
        .concat(),
    );
    let gateway = Service::start(
        &[
            &[
                "--name",
                "gateway",
                "--work",
                "20",
                "--downstream",
                &format!("http://{}", orders.addr),
                "--downstream-name",
                "orders",
                "--margin",
                "200",
            ],
            hop_args,
        ]
        .concat(),
    );
    (inventory, orders, gateway)
}

fn call(args: &[&str]) -> Output {
    bin()
        .arg("call")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn call_json(args: &[&str]) -> Value {
    let out = call(&[&["--json"], args].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn hop_names(json: &Value) -> Vec<&str> {
    json["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_chain_that_runs_out_marks_the_last_hop() {
    let (_inventory, _orders, gateway) = chain("3000");
    let url = format!("http://{}/items/1", gateway.addr);
    let json = call_json(&["--budget", "1000", &url]);
    assert_eq!(json["status"], 504);
    assert_eq!(json["budget_ms"], 1000);
    assert_eq!(hop_names(&json), ["gateway", "orders", "inventory"]);
    assert_eq!(json["ran_out"], serde_json::json!(["inventory"]));
    let hops = json["hops"].as_array().unwrap();
    assert_eq!(
        hops[0]["budget"],
        serde_json::json!({"kind": "arrived", "ms": 1000})
    );
    assert_eq!(hops[1]["budget"]["kind"], "arrived");
    assert_eq!(hops[2]["work"]["outcome"], "deadline");
    assert_eq!(hops[0]["calls"][0]["target"], "orders");
    assert_eq!(hops[1]["depth"], 1);
    assert_eq!(hops[2]["parent"], 1);
    // The answer came within the budget (generous slack for a loaded machine), long before the
    // 3 s of work inventory would have done.
    let elapsed = json["elapsed_ms"].as_f64().unwrap();
    assert!(elapsed < 2_000.0, "{elapsed}");
    let timing = json["server_timing"][0].as_str().unwrap();
    assert!(timing.ends_with(", budget;dur=1000"), "{timing}");
    assert!(json["body"].as_str().unwrap().contains("inventory"));

    // The text report marks the same hop.
    let out = call(&["--budget", "1000", &url]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "GET {url} (http1), budget 1000 ms\n504 Gateway Timeout in "
        )),
        "{text}"
    );
    let marked: Vec<&str> = text.lines().filter(|l| l.contains("← ran out")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].contains("└─ inventory"), "{text}");
    assert!(text.contains("server-timing: queue;dur="), "{text}");
    assert!(text.contains("\ntrace:\ngateway "), "{text}");
}

#[test]
fn a_chain_in_time_marks_nobody() {
    let (_inventory, _orders, gateway) = chain("50");
    let json = call_json(&["--budget", "3000", &format!("http://{}/", gateway.addr)]);
    assert_eq!(json["status"], 200);
    assert_eq!(hop_names(&json), ["gateway", "orders", "inventory"]);
    assert_eq!(json["ran_out"], serde_json::json!([]));
    let headroom = &json["hops"][0]["headroom"];
    assert_eq!(headroom["kind"], "arrived");
    assert!(headroom["ms"].as_u64().unwrap() > 1_000, "{headroom}");
    assert!(json["hops"][2]["work"]["ms"].as_u64().unwrap() >= 50);
}

/// The `budget_ms` of the first line of a `deadline service --log` file, once it is written.
fn logged_budget(path: &std::path::Path) -> Option<u64> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            let hold: Value = serde_json::from_str(line).expect("a JSON line");
            return hold["budget_ms"].as_u64();
        }
        #[allow(clippy::disallowed_methods)] // polling a file another process writes
        thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing logged in {}", path.display());
}

#[test]
fn every_hop_shows_its_exact_budget_at_arrival() {
    let dir = std::env::temp_dir().join(format!("deadline-it-exact-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inventory_log, orders_log) = (dir.join("inventory.jsonl"), dir.join("orders.jsonl"));
    let inventory = Service::start(&[
        "--name",
        "inventory",
        "--work",
        "30",
        "--log",
        inventory_log.to_str().unwrap(),
    ]);
    let orders = Service::start(&[
        "--name",
        "orders",
        "--work",
        "20",
        "--downstream",
        &format!("http://{}", inventory.addr),
        "--downstream-name",
        "inventory",
        "--margin",
        "200",
        "--log",
        orders_log.to_str().unwrap(),
    ]);
    let gateway = Service::start(&[
        "--name",
        "gateway",
        "--work",
        "20",
        "--downstream",
        &format!("http://{}", orders.addr),
        "--downstream-name",
        "orders",
        "--margin",
        "200",
    ]);
    let url = format!("http://{}/", gateway.addr);
    let json = call_json(&["--budget", "3000", &url]);
    assert_eq!(json["status"], 200);
    assert_eq!(hop_names(&json), ["gateway", "orders", "inventory"]);
    let hops = json["hops"].as_array().unwrap();
    for hop in hops {
        assert_eq!(hop["budget_exact"], true, "{hop}");
        assert_eq!(hop["budget"]["kind"], "arrived", "{hop}");
        assert_eq!(hop["budget"]["ms"], hop["budget_ms"], "{hop}");
    }
    let budget = |i: usize| hops[i]["budget_ms"].as_u64().unwrap();
    assert_eq!(budget(0), 3000);
    // Each callee's budget is the one it read and logged, not a bound from the times.
    assert_eq!(Some(budget(1)), logged_budget(&orders_log));
    assert_eq!(Some(budget(2)), logged_budget(&inventory_log));
    // Each caller kept its 200 ms margin back.
    assert!(budget(1) <= 3000 - 200, "{}", budget(1));
    assert!(
        budget(2) <= budget(1) - 200,
        "{} after {}",
        budget(2),
        budget(1)
    );
    assert_eq!(json["trace"]["spans"][0]["budget_ms"], 3000);

    // The table prints the same exact figures, with no bound anywhere.
    let out = call(&["--budget", "3000", &url]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('≤'), "{text}");
    let table = &text[text.find("\nhop ").expect("a hop table")..text.find("\ntrace:").unwrap()];
    for name in ["gateway", "orders", "inventory"] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("no {name} line in {text}"));
        // hop, arrived (`N ms`), budget (`N ms`): an exact figure, no bound sign.
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == name).unwrap();
        let shown: u64 = words[at + 3].parse().unwrap_or_else(|_| panic!("{line}"));
        if name == "gateway" {
            assert_eq!(shown, 3000, "{line}");
        }
    }
    assert!(
        text.contains("budget 3000 ms\n"),
        "the tree shows it too: {text}"
    );
    drop((gateway, orders, inventory));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_budget_there_is_no_budget_anywhere() {
    let service = Service::start(&["--name", "inventory", "--work", "10"]);
    let json = call_json(&[&format!("http://{}/", service.addr)]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["budget_ms"], Value::Null);
    assert_eq!(json["hops"][0]["budget"], Value::Null);
    assert_eq!(json["hops"][0]["headroom"], Value::Null);
    let timing = json["server_timing"][0].as_str().unwrap();
    assert!(!timing.contains("budget"), "{timing}");
}

#[test]
fn a_budget_in_a_header_counts_and_server_timing_can_be_off() {
    let service = Service::start(&["--name", "inventory", "--server-timing", "off"]);
    let url = format!("http://{}/", service.addr);
    let json = call_json(&[
        "-H",
        "Deadline-Budget-Ms: 0",
        "-H",
        "X-Request-Id: call-1",
        &url,
    ]);
    // A spent budget: 504 on arrival.
    assert_eq!(json["status"], 504);
    assert_eq!(json["budget_ms"], 0);
    assert_eq!(json["ran_out"], serde_json::json!(["inventory"]));
    assert_eq!(json["server_timing"], serde_json::json!([]));
}

/// A server that knows nothing of deadlines: waits `delay`, then answers 200 `hello` without a
/// trace. Serves one connection.
fn plain_server(delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            #[allow(clippy::disallowed_methods)] // a real server's real delay, on its own thread
            thread::sleep(delay);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
            );
        }
    });
    addr
}

#[test]
fn a_plain_server_still_gets_status_and_time() {
    let addr = plain_server(Duration::from_millis(150));
    let out = call(&["--budget", "500", &format!("http://{addr}/")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\n200 OK in "), "{text}");
    assert!(text.contains("body: hello"), "{text}");
    assert!(text.contains("no Deadline-Trace in the answer"), "{text}");
    let ms: f64 = text
        .split("200 OK in ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time in {text}"));
    assert!(ms >= 150.0, "{text}");

    let addr = plain_server(Duration::ZERO);
    let json = call_json(&[&format!("http://{addr}/")]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["trace"], Value::Null);
    assert_eq!(json["hops"], serde_json::json!([]));
    assert_eq!(json["body"], "hello");
}

#[test]
fn a_server_that_never_answers_is_given_up_on() {
    let addr = plain_server(Duration::from_secs(5));
    let out = call(&["--timeout", "200", &format!("http://{addr}/")]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no answer from") && err.contains("within 200 ms"),
        "{err}"
    );
}

/// An HTTP/2 server by prior knowledge (h2c) behind the enforce layer, on a runtime of its own
/// thread: `/work/MS` works MS ms. Serves until the test process ends.
fn h2c_server() -> String {
    use std::convert::Infallible;

    use bytes::Bytes;
    use deadline_http::EnforceDeadlineLayer;
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;
    use tower::{Layer, service_fn};

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let handler = service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                let ms: u64 = request
                    .uri()
                    .path()
                    .strip_prefix("/work/")
                    .and_then(|ms| ms.parse().ok())
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"h2 ok"))))
            });
            // `Server-Timing` on, as `deadline service` has it (the library's default is off).
            let service = EnforceDeadlineLayer::new("h2hop")
                .server_timing(true)
                .layer(handler);
            while let Ok((stream, _)) = listener.accept().await {
                let service = TowerToHyperService::new(service.clone());
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
    });
    addr
}

#[test]
fn h2c_carries_the_budget_and_brings_back_the_trace() {
    let addr = h2c_server();
    let json = call_json(&[
        "--protocol",
        "h2c",
        "--budget",
        "300",
        &format!("http://{addr}/work/1000"),
    ]);
    assert_eq!(json["protocol"], "h2c");
    assert_eq!(json["status"], 504);
    assert_eq!(hop_names(&json), ["h2hop"]);
    assert_eq!(json["ran_out"], serde_json::json!(["h2hop"]));
    let timing = json["server_timing"][0].as_str().unwrap();
    assert!(timing.ends_with(", budget;dur=300"), "{timing}");

    let json = call_json(&[
        "--protocol",
        "h2c",
        "--budget",
        "2000",
        &format!("http://{addr}/work/10"),
    ]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["body"], "h2 ok");
    // A gRPC call to an HTTP/2 server that is no gRPC server: no grpc-status, so UNKNOWN (2),
    // as gRPC clients read it.
    let json = call_json(&[
        "--protocol",
        "grpc",
        "--budget",
        "2000",
        &format!("http://{addr}/work/10"),
    ]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["grpc_status"], 2);
    assert_eq!(hop_names(&json), ["h2hop"]);
    // HTTP/1.1 to an HTTP/2-only server fails with an error, not a panic.
    let out = call(&["--budget", "500", &format!("http://{addr}/")]);
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

#[test]
fn a_grpc_chain_that_runs_out_reports_deadline_exceeded_and_the_hop() {
    let (_inventory, _orders, gateway) = grpc_chain("3000");
    let url = format!("http://{}/shop.Orders/Get", gateway.addr);
    let json = call_json(&["--protocol", "grpc", "--budget", "1000", &url]);
    assert_eq!(json["protocol"], "grpc");
    // gRPC answers are HTTP 200; the status is gRPC's.
    assert_eq!(json["status"], 200);
    assert_eq!(json["grpc_status"], 4);
    assert_eq!(json["grpc_status_name"], "DEADLINE_EXCEEDED");
    let message = json["grpc_message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "gateway: downstream answered DEADLINE_EXCEEDED: orders: downstream answered \
             DEADLINE_EXCEEDED: deadline exceeded at inventory while working: budget "
        ),
        "{message}"
    );
    assert_eq!(json["budget_ms"], 1000);
    assert_eq!(hop_names(&json), ["gateway", "orders", "inventory"]);
    assert_eq!(json["ran_out"], serde_json::json!(["inventory"]));
    assert_eq!(json["hops"][2]["work"]["outcome"], "deadline");
    let elapsed = json["elapsed_ms"].as_f64().unwrap();
    assert!(elapsed < 2_000.0, "{elapsed}");
    let timing = json["server_timing"][0].as_str().unwrap();
    assert!(timing.ends_with(", budget;dur=1000"), "{timing}");

    let out = call(&["--protocol", "grpc", "--budget", "1000", &url]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("POST {url} (grpc), budget 1000 ms\n200 OK in ")),
        "{text}"
    );
    assert!(
        text.contains(
            "\ngrpc-status: DEADLINE_EXCEEDED (4)\ngrpc-message: gateway: downstream answered "
        ),
        "{text}"
    );
    let marked: Vec<&str> = text.lines().filter(|l| l.contains("← ran out")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].contains("└─ inventory"), "{text}");
}

#[test]
fn a_grpc_chain_in_time_answers_ok() {
    let (_inventory, _orders, gateway) = grpc_chain("50");
    let url = format!("http://{}/shop.Orders/Get", gateway.addr);
    let json = call_json(&[
        "--protocol",
        "grpc",
        "--budget",
        "3000",
        "--data",
        "\n\u{3}any",
        &url,
    ]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["grpc_status"], 0);
    assert_eq!(json["grpc_status_name"], "OK");
    assert_eq!(json["grpc_message"], "");
    // The reply message, without its length prefix: the last hop's text, passed back up.
    let body = json["body"].as_str().unwrap();
    assert!(body.starts_with("inventory: done in "), "{body}");
    assert_eq!(hop_names(&json), ["gateway", "orders", "inventory"]);
    assert_eq!(json["ran_out"], serde_json::json!([]));
    assert!(json["hops"][2]["work"]["ms"].as_u64().unwrap() >= 50);
}

#[test]
fn a_malformed_budget_over_grpc_is_invalid_argument() {
    let service = Service::start(&["--name", "inventory"]);
    let url = format!("http://{}/shop.Inventory/Reserve", service.addr);
    let json = call_json(&["--protocol", "grpc", "-H", "Deadline-Budget-Ms: soon", &url]);
    assert_eq!(json["status"], 200);
    assert_eq!(json["grpc_status"], 3);
    assert_eq!(json["grpc_status_name"], "INVALID_ARGUMENT");
    let message = json["grpc_message"].as_str().unwrap();
    assert!(
        message.contains("deadline-budget-ms") && message.contains("\"soon\""),
        "{message}"
    );
    assert_eq!(json["budget_ms"], Value::Null);
    // A grpc-timeout given by hand is sent as it is, and read by the server.
    let json = call_json(&["--protocol", "grpc", "-H", "grpc-timeout: 12", &url]);
    assert_eq!(json["grpc_status"], 3);
    let message = json["grpc_message"].as_str().unwrap();
    assert!(message.contains("grpc-timeout"), "{message}");
}

#[test]
fn grpc_to_an_http1_only_server_is_a_clear_error() {
    let addr = plain_server(Duration::ZERO);
    let out = call(&[
        "--protocol",
        "grpc",
        "--budget",
        "500",
        &format!("http://{addr}/"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("over HTTP/2 without TLS") && err.contains("does not speak it"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_arguments_get_clear_errors_and_no_panic() {
    // A port nothing listens on: bound, then closed.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let cases: &[(&[&str], &str)] = &[
        (&["not a url"], "is not a URL"),
        (&["ftp://127.0.0.1/"], "expected an http:// URL"),
        (&["https://127.0.0.1/"], "https is not supported"),
        (&["/just/a/path"], "expected an http:// URL"),
        (
            &["-H", "no colon here", "http://127.0.0.1:1/"],
            "expected 'Name: value'",
        ),
        (
            &["-H", "bad name: x", "http://127.0.0.1:1/"],
            "is not a header name",
        ),
        (
            &[
                "--budget",
                "5",
                "-H",
                "deadline-budget-ms: 5",
                "http://127.0.0.1:1/",
            ],
            "not both",
        ),
        (
            &["--data", "x", "http://127.0.0.1:1/"],
            "give it with --protocol grpc",
        ),
        (
            &["--timeout", "0", "http://127.0.0.1:1/"],
            "--timeout must be at least 1 ms",
        ),
        (&[&format!("http://{closed}/")], "connecting to"),
        (
            &["--budget", "abc", "http://127.0.0.1:1/"],
            "invalid value 'abc'",
        ),
        (&["--budget", "-5", "http://127.0.0.1:1/"], "'-5'"),
        (
            &["--budget", "1.5", "http://127.0.0.1:1/"],
            "invalid value '1.5'",
        ),
        (
            &["--protocol", "smtp", "http://127.0.0.1:1/"],
            "invalid value 'smtp'",
        ),
    ];
    for (args, expected) in cases {
        let out = call(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "{args:?} printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
