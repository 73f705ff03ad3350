//! `DeadlineChannel` with tonic's own client and server: the example's chain (tonic servers with
//! the enforce layer) called through a tonic generated client over a `DeadlineChannel`, inside a
//! deadline and without one. Real loopback and real time: bounds are generous.

use std::time::Duration;

use deadline::Deadline;
use deadline_tonic::{CallPolicy, DeadlineChannel};
use deadline_tonic_example::Chain;
use deadline_tonic_example::pb::HopRequest;
use deadline_tonic_example::pb::hop_client::HopClient;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Endpoint;

/// The number after `key` in a hop's line ("gateway: grpc-timeout 949999u, deadline-budget-ms
/// 949").
fn figure(line: &str, key: &str) -> String {
    line.split(", ")
        .find_map(|part| part.split_once(key).map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| panic!("{key} in {line}"))
}

/// A generated client over a `DeadlineChannel` to the chain's gateway.
fn client(chain: &Chain, attempts: u32) -> HopClient<DeadlineChannel> {
    let channel = Endpoint::from_shared(format!("http://{}", chain.gateway))
        .expect("a valid address")
        .tcp_nodelay(true)
        .connect_lazy();
    let policy = CallPolicy::new(Duration::from_secs(5), attempts).expect("a valid policy");
    HopClient::new(DeadlineChannel::new(channel, policy, "gateway"))
}

fn request(inventory_work: Duration) -> HopRequest {
    HopRequest {
        item: "book".to_owned(),
        inventory_work_ms: u32::try_from(inventory_work.as_millis()).expect("fits"),
    }
}

/// `future` run as if inside a request with `budget` left.
async fn within<F: Future>(budget: Duration, future: F) -> F::Output {
    let deadline = Deadline::after_duration(Instant::now().into_std(), budget);
    deadline_http::with_deadline(deadline, future).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_deadline_reaches_the_callee_in_both_headers() {
    let chain = Chain::start(Duration::from_millis(5)).await.unwrap();
    let mut client = client(&chain, 1);
    let start = Instant::now();
    let reply = within(
        Duration::from_millis(3_000),
        client.handle(request(Duration::from_millis(10))),
    )
    .await
    .expect("a reply")
    .into_inner();
    let took = u64::try_from(Instant::now().saturating_duration_since(start).as_millis()).unwrap();
    let gateway = reply.hops.last().expect("the gateway's line");
    assert!(gateway.starts_with("gateway:"), "{reply:?}");
    let budget: u64 = figure(gateway, "deadline-budget-ms").parse().unwrap();
    let timeout = figure(gateway, "grpc-timeout");
    let micros: u64 = timeout.strip_suffix('u').unwrap().parse().unwrap();
    // The 3 s left less the default 50 ms margin, less at most the time the call took before
    // the budget was stamped (never more than the whole call), and the same budget in both.
    assert!(
        budget <= 2_950 && budget + took >= 2_950,
        "{gateway} (the call took {took} ms)"
    );
    assert_eq!(micros / 1_000, budget, "{gateway}");
    chain.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_deadline_the_call_is_a_plain_tonic_call() {
    let chain = Chain::start(Duration::from_millis(5)).await.unwrap();
    let mut client = client(&chain, 1);
    let reply = client
        .handle(request(Duration::from_millis(10)))
        .await
        .expect("a reply")
        .into_inner();
    let gateway = reply.hops.last().expect("the gateway's line");
    assert_eq!(figure(gateway, "deadline-budget-ms"), "none", "{gateway}");
    chain.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_runs_out_downstream_is_deadline_exceeded_in_time() {
    let chain = Chain::start(Duration::from_millis(5)).await.unwrap();
    let mut client = client(&chain, 3);
    let start = Instant::now();
    let status = within(
        Duration::from_millis(600),
        client.handle(request(Duration::from_secs(5))),
    )
    .await
    .expect_err("inventory takes 5 s");
    let took = Instant::now().saturating_duration_since(start);
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Not 5 s, and not three attempts of it: the deadline ended the call, at most its 600 ms
    // after it began; within twice that.
    assert!(took < Duration::from_millis(1_200), "{took:?} {status:?}");
    chain.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_little_time_sends_nothing_and_says_deadline_exceeded() {
    let chain = Chain::start(Duration::from_millis(5)).await.unwrap();
    let mut client = client(&chain, 1);
    let status = within(
        Duration::from_millis(5),
        client.handle(request(Duration::from_millis(10))),
    )
    .await
    .expect_err("5 ms is less than an attempt needs");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("calling gateway"), "{status:?}");
    chain.stop().await.unwrap();
}
