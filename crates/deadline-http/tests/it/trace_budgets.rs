//! Each hop's budget at arrival in `Deadline-Trace`, over real loopback HTTP: a gateway calls
//! inventory through the propagate layer, and the trace the edge gets back carries both hops'
//! budgets exactly as each hop read them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::hops::{Budget, hops};
use deadline::trace::{Span, TRACE_HEADER, Trace};
use deadline::{BUDGET_HEADER, CallPolicy};
use deadline_http::{DeadlineClient, serve};
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tower::{Layer, service_fn};

/// Inventory behind the enforce layer: reports the `Deadline-Budget-Ms` it was sent, works
/// 20 ms and answers.
async fn inventory() -> (SocketAddr, mpsc::UnboundedReceiver<u64>) {
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let handler = service_fn(move |request: Request<Incoming>| {
        let sent = request
            .headers()
            .get(BUDGET_HEADER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(sent) = sent {
            let _ = seen_tx.send(sent);
        }
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"7 left"))))
        }
    });
    let service = crate::every_header("inventory").layer(handler);
    let (listener, addr) = listener().await;
    tokio::spawn(serve(listener, service, std::future::pending::<()>()));
    (addr, seen)
}

/// The gateway: calls inventory once (1 s per attempt, the default 50 ms margin) and answers
/// with inventory's status.
async fn gateway(inventory: SocketAddr) -> SocketAddr {
    let policy = CallPolicy::new(Duration::from_secs(1), 1).unwrap();
    let client = DeadlineClient::new(policy).target("inventory");
    let handler = service_fn(move |_: Request<Incoming>| {
        let client = client.clone();
        async move {
            let status = match client.get(format!("http://{inventory}/items/7")).await {
                Ok(response) => response.status(),
                Err(_) => StatusCode::GATEWAY_TIMEOUT,
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    });
    let service = crate::every_header("gateway").layer(handler);
    let (listener, addr) = listener().await;
    tokio::spawn(serve(listener, service, std::future::pending::<()>()));
    addr
}

/// A fresh listener on 127.0.0.1.
async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// One GET with `budget` (if any) on a fresh connection: the status and the decoded trace.
async fn get(addr: SocketAddr, budget: Option<&str>) -> (StatusCode, Trace) {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder().uri("/").header("host", "edge");
    if let Some(budget) = budget {
        request = request.header(BUDGET_HEADER, budget);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let trace = Trace::from_header_value(&response.headers()[TRACE_HEADER]);
    (response.status(), trace)
}

/// The first child of `span` called `name`.
fn child<'a>(span: &'a Span, name: &str) -> &'a Span {
    span.children
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} under {span:?}"))
}

#[tokio::test]
async fn the_edge_gets_every_hops_budget_at_arrival_exactly() {
    let (inventory, mut seen) = inventory().await;
    let gateway = gateway(inventory).await;

    let (status, trace) = get(gateway, Some("1500")).await;
    assert_eq!(status, StatusCode::OK, "{trace}");
    let sent_to_inventory = seen.recv().await.expect("inventory was called");

    let root = &trace.spans[0];
    assert_eq!(
        (root.name.as_str(), root.budget_ms),
        ("gateway", Some(1500))
    );
    let attempt = child(child(root, "call:inventory"), "attempt");
    let callee = &attempt.children[0];
    assert_eq!(callee.name, "inventory");
    // Exactly what the gateway sent and inventory read: not the bound its times allow.
    assert_eq!(callee.budget_ms, Some(sent_to_inventory), "{trace}");
    assert!(
        sent_to_inventory <= 1450,
        "the gateway keeps its 50 ms margin back: {sent_to_inventory}"
    );
    // No other span carries a budget.
    let carried = trace.encode().matches(",^").count();
    assert_eq!(carried, 2, "{}", trace.encode());

    let hops = hops(&trace, Some(1500));
    let budgets: Vec<_> = hops.iter().map(|h| h.budget).collect();
    assert_eq!(
        budgets,
        [
            Some(Budget::Arrived(1500)),
            Some(Budget::Arrived(sent_to_inventory))
        ]
    );
}

#[tokio::test]
async fn a_spent_budget_is_carried_as_zero_and_no_budget_as_none() {
    let (inventory, _seen) = inventory().await;
    let (status, spent) = get(inventory, Some("0")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(spent.encode(), "inventory@0-0=504,^0=0");

    let (status, none) = get(inventory, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(none.spans[0].budget_ms, None, "{}", none.encode());
    assert!(!none.encode().contains('^'));

    // Above the maximum budget: carried as the hop clamped it.
    let (_, clamped) = get(inventory, Some("99999999999999999999")).await;
    assert_eq!(clamped.spans[0].budget_ms, Some(3_600_000));
}
