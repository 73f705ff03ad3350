use std::convert::Infallible;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Full};

use super::*;

fn end_after(ms: u64, capped: bool) -> Option<AttemptEnd> {
    Some(AttemptEnd {
        at: Instant::now() + Duration::from_millis(ms),
        capped,
        timeout: Duration::from_millis(1_000),
    })
}

#[tokio::test(start_paused = true)]
async fn a_body_announcing_more_than_the_limit_fails_before_any_read() {
    let body = CallBody::new(
        Full::new(Bytes::from(vec![7u8; 10])),
        end_after(1_000, false),
        9,
    );
    let error = body.collect().await.unwrap_err();
    assert!(error.is_too_large(), "{error}");
    assert_eq!(
        error.to_string(),
        "response body larger than the limit of 9 bytes"
    );
    let body = CallBody::new(Full::new(Bytes::from(vec![7u8; 10])), None, 10);
    assert_eq!(body.collect().await.unwrap().to_bytes().len(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_body_growing_past_the_limit_fails_and_lets_go_of_the_callee() {
    let (mut tx, rx) = Channel::<Bytes, Infallible>::new(4);
    let mut body = CallBody::new(rx, end_after(60_000, false), 1_000);
    tx.send_data(Bytes::from(vec![0u8; 600])).await.unwrap();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap().len(), 600);
    tx.send_data(Bytes::from(vec![0u8; 600])).await.unwrap();
    let error = body.frame().await.unwrap().unwrap_err();
    assert!(error.is_too_large(), "{error}");
    assert_eq!(body.bytes_read(), 1_200);
    // The callee's side is gone: nothing more is read or buffered.
    assert!(tx.send_data(Bytes::from_static(b"more")).await.is_err());
    assert!(body.frame().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_ends_at_the_end_of_the_attempt() {
    for capped in [false, true] {
        let (mut tx, rx) = Channel::<Bytes, Infallible>::new(4);
        let start = Instant::now();
        let mut body = CallBody::new(rx, end_after(500, capped), DEFAULT_MAX_BODY);
        tx.send_data(Bytes::from_static(b"first")).await.unwrap();
        assert!(body.frame().await.unwrap().is_ok());
        // Then the callee stalls, its connection open.
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(Instant::now() - start, Duration::from_millis(500));
        if capped {
            assert!(error.is_deadline(), "{error}");
        } else {
            assert!(error.is_timeout(), "{error}");
            assert_eq!(
                error.to_string(),
                "response body still arriving when the attempt's timeout of 1000 ms ended"
            );
        }
        assert!(tx.send_data(Bytes::from_static(b"late")).await.is_err());
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_fails_is_an_error_never_a_short_success() {
    let (mut tx, rx) = Channel::<Bytes, std::io::Error>::new(4);
    let body = CallBody::new(rx, end_after(1_000, false), DEFAULT_MAX_BODY);
    tx.send_data(Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    tx.abort(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "end of file before message length reached",
    ));
    let error = body.collect().await.unwrap_err();
    assert!(matches!(error, BodyError::Inner(_)), "{error}");
    assert!(error.to_string().starts_with("response body cut short: "));
    assert!(error.source().is_some());
}

#[tokio::test(start_paused = true)]
async fn the_trailers_grpc_status_is_read_as_it_passes() {
    let (mut tx, rx) = Channel::<Bytes, Infallible>::new(4);
    let mut body = CallBody::new(rx, end_after(1_000, false), DEFAULT_MAX_BODY);
    tx.send_data(Bytes::from_static(b"\0\0\0\0\x01m"))
        .await
        .unwrap();
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "13".parse().unwrap());
    tx.send_trailers(trailers).await.unwrap();
    drop(tx);
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(body.grpc_status(), None);
    assert!(body.frame().await.unwrap().unwrap().is_trailers());
    assert_eq!(body.grpc_status(), Some(GrpcCode::Other(13)));
    assert!(body.frame().await.is_none());
}

/// A body whole when it arrives must not need a timer (and so a runtime's timer) at all.
#[test]
fn a_whole_body_never_touches_the_timer() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let end = Some(AttemptEnd {
        at: runtime.block_on(async { Instant::now() }),
        capped: false,
        timeout: Duration::from_millis(1),
    });
    let body = CallBody::new(Full::new(Bytes::from_static(b"all here")), end, 100);
    let bytes = runtime.block_on(body.collect()).unwrap().to_bytes();
    assert_eq!(bytes, "all here");
}
