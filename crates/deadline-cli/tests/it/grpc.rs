//! gRPC against `deadline service` processes, with a raw h2c client: any path is a unary call,
//! the enforce layer answers in gRPC's terms, chains call downstream over gRPC or h2c, and
//! `demo --protocol grpc` / `load --protocol grpc` give the HTTP/1.1 run's figures.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::util::{Service, bin};

type H2 = Client<HttpConnector, Full<Bytes>>;

fn h2() -> H2 {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// What a gRPC client reads: status, decoded message, reply payload, headers, time taken.
#[derive(Debug)]
struct Answer {
    status: u32,
    message: String,
    payload: String,
    headers: HeaderMap,
    elapsed: Duration,
}

/// A unary call of `path` with `message` bytes and the extra headers.
async fn call(client: &H2, addr: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let message = b"\x0a\x03any";
    let mut body = vec![0u8];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    let mut request = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc+proto")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body))).unwrap();
    let start = tokio::time::Instant::now();
    let response = client.request(request).await.expect("an HTTP/2 response");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "gRPC answers are HTTP 200"
    );
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let elapsed = tokio::time::Instant::now().saturating_duration_since(start);
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    let map = if parts.headers.contains_key("grpc-status") {
        assert!(data.is_empty(), "trailers-only has no body");
        parts.headers.clone()
    } else {
        trailers.expect("trailers")
    };
    Answer {
        status: map["grpc-status"].to_str().unwrap().parse().unwrap(),
        message: map
            .get("grpc-message")
            .map(|m| decode(m.as_bytes()))
            .unwrap_or_default(),
        payload: data
            .get(5..)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default(),
        headers: parts.headers,
        elapsed,
    }
}

/// Percent-decoding, as gRPC clients do it (a broken escape is kept as it is).
fn decode(raw: &[u8]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let escaped = raw
            .get(i + 1..i + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (raw[i], escaped) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn service_answers_grpc_on_any_path() {
    let inventory = Service::start(&["--name", "inventory", "--work", "20"]);
    let client = h2();
    let ok = call(
        &client,
        &inventory.addr,
        "/shop.Inventory/Reserve",
        &[("grpc-timeout", "2S")],
    )
    .await;
    assert_eq!(ok.status, 0, "{ok:?}");
    assert!(ok.payload.starts_with("inventory: done in "), "{ok:?}");
    assert!(ok.headers.contains_key("deadline-trace"));
    let other = call(&client, &inventory.addr, "/", &[]).await;
    assert_eq!(other.status, 0, "{other:?}");

    for spent in ["1n", "0m"] {
        let late = call(&client, &inventory.addr, "/a/b", &[("grpc-timeout", spent)]).await;
        assert_eq!(late.status, 4, "{late:?}");
        assert_eq!(
            late.message,
            "deadline exceeded at inventory on arrival: the caller had already run out"
        );
    }
    let bad = call(&client, &inventory.addr, "/a/b", &[("grpc-timeout", "12")]).await;
    assert_eq!(bad.status, 3, "{bad:?}");
    assert!(bad.message.contains("grpc-timeout"), "{bad:?}");
}

/// orders calls inventory with gRPC; inventory runs out: the client hears DEADLINE_EXCEEDED
/// carrying inventory's report, before its own deadline.
#[tokio::test]
async fn a_grpc_chain_reports_the_hop_that_ran_out() {
    let inventory = Service::start(&["--name", "inventory", "--work", "3000"]);
    let url = format!("http://{}", inventory.addr);
    let orders = Service::start(&[
        "--name",
        "orders",
        "--downstream",
        &url,
        "--downstream-name",
        "inventory",
        "--downstream-protocol",
        "grpc",
    ]);
    let client = h2();
    let answer = call(
        &client,
        &orders.addr,
        "/shop.Orders/Place",
        &[("grpc-timeout", "600m")],
    )
    .await;
    assert_eq!(answer.status, 4, "{answer:?}");
    assert!(
        answer.message.starts_with(
            "orders: downstream answered DEADLINE_EXCEEDED: deadline exceeded at inventory while working: budget "
        ),
        "{answer:?}"
    );
    // At the 600 ms deadline, not after inventory's 3 s of work: within twice it.
    assert!(answer.elapsed < Duration::from_millis(1_200), "{answer:?}");
    let trace = answer.headers["deadline-trace"].to_str().unwrap();
    assert!(trace.contains("inventory@"), "{trace}");
}

/// orders calls inventory over h2c; an HTTP/1.1 caller of orders gets inventory's reply.
#[tokio::test]
async fn h2c_downstream_calls() {
    let inventory = Service::start(&["--name", "inventory"]);
    let url = format!("http://{}", inventory.addr);
    let orders = Service::start(&[
        "--name",
        "orders",
        "--downstream",
        &url,
        "--downstream-protocol",
        "h2c",
    ]);
    let reply = crate::util::get(&orders.addr, b"Deadline-Budget-Ms: 2000\r\n");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.body.starts_with("inventory: done in "), "{reply:?}");
}

#[test]
fn demo_over_grpc_gives_the_http_figures() {
    let out = bin()
        .args(["demo", "--protocol", "grpc", "--json"])
        .output()
        .expect("demo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = json["runs"].as_array().unwrap();
    let (without, with) = (&runs[0], &runs[1]);
    assert_eq!(without["user_status"], serde_json::Value::Null);
    assert_eq!(without["calls"], 12, "{without}");
    // The user leaves at 2 s. Orders' first call to inventory comes at about 0.02 s and its
    // second after a 1 s timeout; its third, after another, at about 2.02 s, a race with the
    // user's 2 s timer on a busy machine. Everything from the gateway's second attempt on comes
    // after orders' three timeouts (past 3 s). So 8 or 9 calls came after the user left.
    let after = without["calls_after_user_left"].as_u64().unwrap();
    assert!((8..=9).contains(&after), "{without}");

    assert_eq!(with["user_grpc_status"], "DEADLINE_EXCEEDED", "{with}");
    assert_eq!(with["user_status"], 504, "{with}");
    let heard = with["user_heard_back_ms"].as_f64().unwrap();
    assert!(heard < 2_000.0 && heard > 1_500.0, "{heard}");
    assert_eq!(with["calls_after_user_left"], 0, "{with}");
    assert_eq!(with["worker_ms_after_user_left"].as_f64().unwrap(), 0.0);
    let body = with["user_body"].as_str().unwrap();
    assert!(body.starts_with("DEADLINE_EXCEEDED: gateway: "), "{body}");
    // Inventory's own report reaches the user in the trace: its work cut at the deadline.
    let trace = with["user_trace"].as_str().expect("a trace");
    assert!(trace.contains("inventory@"), "{trace}");
    assert!(
        trace.contains("work@") && trace.contains("=deadline"),
        "{trace}"
    );
}

/// At 30 users/s over gRPC with deadlines, the only misses are the slow requests.
#[test]
fn load_over_grpc_misses_only_the_slow_requests() {
    let out = bin()
        .args([
            "load",
            "--protocol",
            "grpc",
            "--rate",
            "30",
            "--seconds",
            "4",
            "--only",
            "with",
            "--json",
        ])
        .output()
        .expect("load runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &json["runs"][0];
    assert_eq!(run["deadlines"], true);
    assert_eq!(run["requests"], 120, "{run}");
    assert_eq!(run["fast_missed"], 0, "{run}");
    assert_eq!(run["slow_missed"], run["slow_requests"], "{run}");
    assert_eq!(
        run["worker_ms_after_users_left"].as_f64().unwrap(),
        0.0,
        "{run}"
    );
}
