//! Every inbound dialect over real HTTP on loopback: which headers a service reads, the tightest
//! winning, a malformed value of an enabled source refused with 400, the absolute deadline with
//! its skew guard; and every outbound dialect written from one budget, read back by a real
//! server on the other side.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use deadline::absolute::{SkewGuard, WallInstant};
use deadline::inbound::{Source, SourceSet};
use deadline_http::{DeadlineContext, EnforceDeadlineLayer, serve};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{Layer, service_fn};

/// A service whose handler answers with the budget it was given: `none`, or whole ms left
/// before its deadline when the handler started.
struct Echo {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Echo {
    async fn start(layer: EnforceDeadlineLayer) -> Echo {
        let handler = service_fn(|_request: Request<Incoming>| async move {
            let left = DeadlineContext::current()
                .and_then(|c| c.deadline())
                .map_or_else(
                    || "none".to_owned(),
                    |d| {
                        d.remaining(tokio::time::Instant::now().into_std())
                            .as_millis()
                            .to_string()
                    },
                );
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(left))))
        });
        let service = layer.layer(handler);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, service, async {
            let _ = stopped.await;
        }));
        Echo {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("shut down")
            .expect("no panic")
            .expect("no error");
    }

    /// One GET with `headers` on a fresh connection: the status and the body.
    async fn get(&self, headers: &[(&str, &str)]) -> (StatusCode, String) {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder().uri("/").header("host", "echo");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(request.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// The budget the handler saw, in ms, for a request with `headers` (which must succeed).
    async fn budget(&self, headers: &[(&str, &str)]) -> Option<u64> {
        let (status, body) = self.get(headers).await;
        assert_eq!(status, StatusCode::OK, "{headers:?}: {body}");
        (body != "none").then(|| body.parse().unwrap())
    }
}

/// Asserts a budget of about `expected` ms arrived: at most that, and no more than a generous
/// loopback allowance less (real time on shared cores).
fn about(got: Option<u64>, expected: u64) {
    let got = got.unwrap_or_else(|| panic!("no deadline, expected about {expected} ms"));
    assert!(
        got <= expected && got + 300 >= expected,
        "{got} ms, expected about {expected}"
    );
}

fn wall_now() -> WallInstant {
    #[allow(clippy::disallowed_methods)] // the absolute dialect is wall-clock time
    let now = SystemTime::now();
    WallInstant::from_system_time(now)
}

/// `X-Request-Deadline` `ms` from now (negative: ago), in RFC 3339 or epoch µs.
fn absolute(ms: i64, micros: bool) -> String {
    let at = WallInstant::from_unix_nanos(wall_now().unix_nanos() + i128::from(ms) * 1_000_000);
    if micros {
        at.to_epoch_micros().unwrap().to_string()
    } else {
        at.to_rfc3339_millis().unwrap()
    }
}

fn all() -> SourceSet {
    Source::ALL.into_iter().collect()
}

#[tokio::test]
async fn by_default_only_deadline_budget_ms_is_read() {
    let echo = Echo::start(EnforceDeadlineLayer::new("echo")).await;
    about(echo.budget(&[("deadline-budget-ms", "900")]).await, 900);
    let far = absolute(500, false);
    for (name, value) in [
        ("grpc-timeout", "500m"),
        ("connect-timeout-ms", "500"),
        ("x-envoy-expected-rq-timeout-ms", "500"),
        ("x-request-deadline", far.as_str()),
        // Not read, so not checked either: no 400 for a dialect the service does not speak.
        ("connect-timeout-ms", "soon"),
        ("x-request-deadline", "soon"),
    ] {
        assert_eq!(echo.budget(&[(name, value)]).await, None, "{name}: {value}");
    }
    echo.stop().await;
}

#[tokio::test]
async fn deadline_budget_ms_can_be_switched_off() {
    let accept: SourceSet = "connect-timeout-ms".parse().unwrap();
    let echo = Echo::start(EnforceDeadlineLayer::new("echo").accept(accept)).await;
    assert_eq!(echo.budget(&[("deadline-budget-ms", "-5")]).await, None);
    assert_eq!(echo.budget(&[("deadline-budget-ms", "1.5")]).await, None);
    about(echo.budget(&[("connect-timeout-ms", "800")]).await, 800);
    echo.stop().await;
}

/// One row of the table: the dialect read when enabled, its expired spelling answered 504 on
/// arrival, a malformed value answered 400 naming the header.
async fn row(name: &str, valid: &str, budget: Option<u64>, expired: Option<&str>, malformed: &str) {
    let accept = SourceSet::NONE.with(name.parse::<Source>().unwrap());
    let echo = Echo::start(EnforceDeadlineLayer::new("echo").accept(accept)).await;
    match budget {
        Some(ms) => about(echo.budget(&[(name, valid)]).await, ms),
        None => assert_eq!(echo.budget(&[(name, valid)]).await, None),
    }
    if let Some(expired) = expired {
        let (status, body) = echo.get(&[(name, expired)]).await;
        assert_eq!(
            status,
            StatusCode::GATEWAY_TIMEOUT,
            "{name}: {expired}: {body}"
        );
        assert!(body.contains("on arrival"), "{body}");
    }
    let (status, body) = echo.get(&[(name, malformed)]).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{name}: {malformed}: {body}"
    );
    assert!(body.starts_with(&format!("invalid {name} value")), "{body}");
    echo.stop().await;
}

#[tokio::test]
async fn row_deadline_budget_ms() {
    row("deadline-budget-ms", "700", Some(700), Some("-20"), "+5").await;
}

#[tokio::test]
async fn row_grpc_timeout() {
    row("grpc-timeout", "700m", Some(700), Some("3u"), "700ms").await;
    row("grpc-timeout", "1S", Some(1_000), Some("0n"), "123456789m").await;
}

#[tokio::test]
async fn row_connect_timeout_ms() {
    row(
        "connect-timeout-ms",
        "700",
        Some(700),
        Some("0"),
        "12345678901",
    )
    .await;
    row(
        "connect-timeout-ms",
        "9999999999",
        Some(3_600_000),
        None,
        "-1",
    )
    .await;
}

#[tokio::test]
async fn row_envoy_expected_timeout() {
    row(
        "x-envoy-expected-rq-timeout-ms",
        "700",
        Some(700),
        None,
        "7e2",
    )
    .await;
    // Envoy's 0 is a route without a timeout: no deadline, never expired.
    row("x-envoy-expected-rq-timeout-ms", "0", None, None, "").await;
}

#[tokio::test]
async fn row_request_deadline_in_both_spellings() {
    let in_a_second = absolute(1_000, false);
    let ago = absolute(-1, false);
    // Less the 50 ms assumed skew.
    row(
        "x-request-deadline",
        &in_a_second,
        Some(950),
        Some(&ago),
        "2026-01-15",
    )
    .await;
    let in_a_second = absolute(1_000, true);
    let ago = absolute(-1, true);
    row(
        "x-request-deadline",
        &in_a_second,
        Some(950),
        Some(&ago),
        "-1768473045123000",
    )
    .await;
    // Inside the assumed skew is already too late.
    let nearly = absolute(30, false);
    row(
        "x-request-deadline",
        &in_a_second,
        Some(950),
        Some(&nearly),
        "soon",
    )
    .await;
}

#[tokio::test]
async fn the_tightest_valid_source_wins_and_any_malformed_one_refuses() {
    let echo = Echo::start(EnforceDeadlineLayer::new("echo").accept(all())).await;
    let far = absolute(5_000, false);
    let near = absolute(400, true);
    let sources = [
        ("deadline-budget-ms", "2000"),
        ("grpc-timeout", "1500m"),
        ("connect-timeout-ms", "1200"),
        ("x-envoy-expected-rq-timeout-ms", "1000"),
        ("x-request-deadline", far.as_str()),
    ];
    about(echo.budget(&sources).await, 1_000);
    // Each one in turn the tightest.
    for (i, (name, _)) in sources.iter().enumerate() {
        let mut headers = sources;
        headers[i].1 = match *name {
            "grpc-timeout" => "300m",
            "x-request-deadline" => near.as_str(),
            _ => "300",
        };
        let expected = if *name == "x-request-deadline" {
            350
        } else {
            300
        };
        about(echo.budget(&headers).await, expected);
        // And each one malformed spoils the lot.
        headers[i].1 = "1.5e3";
        let (status, body) = echo.get(&headers).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        assert!(body.contains(name), "{body}");
    }
    echo.stop().await;
}

#[tokio::test]
async fn a_clock_that_disagrees_beyond_the_maximum_skew_is_ignored_and_counted() {
    let layer = EnforceDeadlineLayer::new("echo")
        .accept(all())
        .skew_guard(SkewGuard::new(
            Duration::from_millis(50),
            Duration::from_secs(60),
        ));
    let counter = layer.clone();
    let echo = Echo::start(layer).await;
    // Two minutes in the past: alone, it is expired.
    let behind = absolute(-120_000, false);
    let (status, _) = echo.get(&[("x-request-deadline", behind.as_str())]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(counter.ignored_absolute_deadlines(), 0);
    // With a relative budget it disagrees by two minutes: the clock is broken, the relative
    // budget alone counts, and that is counted.
    let budget = echo
        .budget(&[
            ("x-request-deadline", &behind),
            ("deadline-budget-ms", "800"),
        ])
        .await;
    about(budget, 800);
    assert_eq!(counter.ignored_absolute_deadlines(), 1);
    // Ten minutes ahead would extend the work: ignored too.
    let ahead = absolute(600_000, true);
    let budget = echo
        .budget(&[
            ("x-request-deadline", &ahead),
            ("connect-timeout-ms", "800"),
        ])
        .await;
    about(budget, 800);
    assert_eq!(counter.ignored_absolute_deadlines(), 2);
    // Within the maximum skew the tighter wins and nothing is counted.
    let close = absolute(30_000, false);
    let budget = echo
        .budget(&[
            ("x-request-deadline", &close),
            ("deadline-budget-ms", "800"),
        ])
        .await;
    about(budget, 800);
    let near = absolute(500, false);
    let budget = echo
        .budget(&[("x-request-deadline", &near), ("deadline-budget-ms", "800")])
        .await;
    about(budget, 450);
    assert_eq!(counter.ignored_absolute_deadlines(), 2);
    echo.stop().await;
}

/// A server that answers with the deadline headers it received, one `name: value` per line.
async fn mirror() -> (
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
) {
    let handler = service_fn(|request: Request<Incoming>| async move {
        let mut lines = String::new();
        for (name, value) in request.headers() {
            if name != "host" {
                lines.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
            }
        }
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(lines))))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, handler, async {
        let _ = stopped.await;
    }));
    (addr, stop, task)
}

/// Every outbound dialect over a real connection, from one planned budget: each reads back as
/// that budget, less at most its own truncation (a millisecond for the absolute one, read
/// against this host's clock a moment later; the coarsest grpc-timeout unit at this size is the
/// microsecond).
#[tokio::test]
async fn every_outbound_dialect_carries_the_same_budget() {
    use deadline::dialect::{ConnectTimeoutMs, EnvoyExpectedTimeoutMs};
    use deadline::header::{BudgetValue, GrpcTimeout, parse_budget};
    use deadline::{Budget, CallPolicy, Deadline};
    use deadline_http::propagate::{DeadlineClient, DialectSet};

    let (addr, stop, task) = mirror().await;
    for send in [
        "grpc-timeout,connect-timeout-ms,x-envoy-upstream-rq-timeout-ms,x-request-deadline",
        "x-request-deadline:us",
    ] {
        let dialects: DialectSet = send.parse().unwrap();
        let policy = CallPolicy::new(Duration::from_secs(5), 1).unwrap();
        let client = DeadlineClient::new(policy).dialects(dialects);
        let now = tokio::time::Instant::now().into_std();
        let deadline = Deadline::after_duration(now, Duration::from_millis(1_500));
        let url = format!("http://{addr}/");
        let response = deadline_http::with_deadline(deadline, client.get(url))
            .await
            .unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        let header = |name: &str| {
            body.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .map(str::to_owned)
        };
        let wide = Budget::from_millis(u64::MAX).unwrap();
        let budget = |value: BudgetValue| match value {
            BudgetValue::Remaining(b) => b.as_millis(),
            BudgetValue::Expired => 0,
        };
        let ours =
            budget(parse_budget(header("deadline-budget-ms").unwrap().as_bytes(), wide).unwrap());
        assert!(ours <= 1_450 && ours > 1_000, "{body}");
        if send.starts_with("grpc") {
            let grpc = budget(
                GrpcTimeout { max: wide }
                    .parse(header("grpc-timeout").unwrap().as_bytes())
                    .unwrap(),
            );
            assert_eq!(grpc, ours, "{body}");
            let connect = budget(
                ConnectTimeoutMs { max: wide }
                    .parse(header("connect-timeout-ms").unwrap().as_bytes())
                    .unwrap(),
            );
            assert_eq!(connect, ours, "{body}");
            let envoy = EnvoyExpectedTimeoutMs { max: wide }
                .parse(header("x-envoy-upstream-rq-timeout-ms").unwrap().as_bytes())
                .unwrap()
                .map(budget);
            assert_eq!(envoy, Some(ours), "{body}");
        } else {
            assert_eq!(header("grpc-timeout"), None, "{body}");
        }
        let at = WallInstant::parse(header("x-request-deadline").unwrap().as_bytes()).unwrap();
        let left_ms = (at.unix_nanos() - wall_now().unix_nanos()) / 1_000_000;
        assert!(
            left_ms <= i128::from(ours) && left_ms + 300 >= i128::from(ours),
            "absolute {left_ms} ms vs relative {ours} ms: {body}"
        );
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// A share caps the callee's budget at part of what is left: two calls in a row, each allowed
/// half, and the second still gets time (paused clock, in process).
#[tokio::test(start_paused = true)]
async fn a_share_leaves_time_for_the_calls_after() {
    use deadline::plan::Share;
    use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
    use deadline_http::PropagateDeadlineLayer;
    use tower::ServiceExt;

    // A callee that uses all of its budget, then answers with it.
    let callee = service_fn(|request: Request<()>| async move {
        let budget: u64 = request.headers()[BUDGET_HEADER].to_str()?.parse()?;
        tokio::time::sleep(Duration::from_millis(budget)).await;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Response::new(budget))
    });
    let policy = CallPolicy::builder()
        .timeout(Duration::from_secs(10))
        .share(Share::new(0.5).unwrap())
        .build()
        .unwrap();
    let client = PropagateDeadlineLayer::new(policy).layer(callee);
    let now = tokio::time::Instant::now().into_std();
    let deadline = Deadline::after_duration(now, Duration::from_millis(1_000));
    let budgets = deadline_http::with_deadline(deadline, async {
        let first = client.clone().oneshot(Request::new(())).await.unwrap();
        let second = client.clone().oneshot(Request::new(())).await.unwrap();
        (
            *first.body().get_ref().unwrap(),
            *second.body().get_ref().unwrap(),
        )
    })
    .await;
    // Half of 1,000 less the 50 ms margin; then half of the 550 left, less the margin.
    assert_eq!(budgets, (450, 225));
}
