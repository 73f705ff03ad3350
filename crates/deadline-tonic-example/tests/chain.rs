//! The example's chain, asserted: the budget shrinks hop by hop, and a slow inventory gives the
//! user inventory's DEADLINE_EXCEEDED report before the user's own timeout.

use std::time::Duration;

use deadline_tonic_example::{Chain, call_as_user};
use tonic::Code;

/// The number in "name: grpc-timeout 949999u, deadline-budget-ms 949" after `key`.
fn figure(line: &str, key: &str) -> String {
    line.split(", ")
        .find_map(|part| part.split_once(key).map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| panic!("{key} in {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_flows_and_inventory_reports_the_deadline() {
    let chain = Chain::start(Duration::from_millis(20)).await.unwrap();

    let call = call_as_user(
        chain.gateway,
        Duration::from_secs(1),
        Duration::from_millis(50),
    )
    .await
    .unwrap();
    let hops = call.result.expect("a reply");
    assert_eq!(hops.len(), 3, "{hops:?}");
    assert!(hops[0].starts_with("inventory:") && hops[2].starts_with("gateway:"));
    // The user's tonic client sent grpc-timeout only; each hop after it got both headers, each
    // smaller than the one before.
    assert_eq!(figure(&hops[2], "deadline-budget-ms"), "none");
    let budgets: Vec<u64> = hops[..2]
        .iter()
        .map(|l| figure(l, "deadline-budget-ms").parse().unwrap())
        .collect();
    assert!(budgets[1] < 1_000 && budgets[0] < budgets[1], "{hops:?}");
    for (line, budget) in hops[..2].iter().zip(&budgets) {
        let timeout = figure(line, "grpc-timeout");
        let micros: u64 = timeout.strip_suffix('u').unwrap().parse().unwrap();
        assert_eq!(micros, budget * 1_000, "{line}");
    }

    let call = call_as_user(
        chain.gateway,
        Duration::from_secs(1),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    let status = call.result.expect_err("the deadline ran out");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Inventory's own report; on a busy machine its answer can come after orders' channel
    // stopped waiting, and then orders' report names inventory instead.
    assert!(
        status
            .message()
            .starts_with("deadline exceeded at inventory while working: budget ")
            || status
                .message()
                .starts_with("deadline exceeded while calling inventory: "),
        "{status:?}"
    );
    assert!(
        call.took < Duration::from_secs(1),
        "heard in {:?}",
        call.took
    );
    chain.stop().await.unwrap();
}

/// A server-streaming call under a 550 ms deadline (tonic's own `grpc-timeout`): 20 replies, one
/// every 100 ms, would take 2 s. The gateway's enforce layer ends the stream at its cutoff
/// (550 ms less the 10 ms reserve) with DEADLINE_EXCEEDED after the replies sent in time; the
/// service's code has no deadline in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_ends_with_deadline_exceeded_at_the_deadline() {
    use deadline_tonic_example::pb::WatchRequest;
    use deadline_tonic_example::pb::hop_client::HopClient;

    let chain = Chain::start(Duration::from_millis(20)).await.unwrap();
    let mut client = HopClient::connect(format!("http://{}", chain.gateway))
        .await
        .unwrap();
    let mut request = tonic::Request::new(WatchRequest {
        count: 20,
        interval_ms: 100,
    });
    request.set_timeout(Duration::from_millis(550));
    let start = tokio::time::Instant::now();
    let mut stream = client.watch(request).await.unwrap().into_inner();
    let mut replies = Vec::new();
    let status = loop {
        match stream.message().await {
            Ok(Some(reply)) => replies.push(reply.hops.join("")),
            Ok(None) => panic!("the stream ended without a status: {replies:?}"),
            Err(status) => break status,
        }
    };
    let took = tokio::time::Instant::now().saturating_duration_since(start);
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("deadline exceeded at gateway while streaming the response"),
        "{status:?}"
    );
    // 5 replies leave by 500 ms; a loaded machine may deliver fewer before the cutoff.
    assert!((2..=5).contains(&replies.len()), "{replies:?}");
    assert_eq!(replies[0], "gateway: reply 1 of 20");
    // Cut at the 550 ms timeout: within twice it.
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(1_100),
        "{took:?}"
    );
    chain.stop().await.unwrap();
}
