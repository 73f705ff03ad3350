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
