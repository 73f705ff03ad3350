//! Reading a streamed answer as a client does (`deadline call`, and a hop relaying a stream):
//! each chunk or gRPC message with when it arrived, and how the stream ended.

use bytes::Bytes;
use http::HeaderMap;
use http_body::Body;
use http_body_util::BodyExt as _;

/// At most this many chunks are listed one by one in a report (all are counted).
const MAX_LISTED: usize = 10_000;

/// One piece of a streamed answer as a client received it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Received {
    /// When it arrived, in ms since the call started.
    pub at_ms: f64,
    /// Its size in bytes (a gRPC message's, without its 5-byte prefix).
    pub bytes: usize,
    /// Its text, as much of it as is shown (lossy UTF-8, at most 120 characters).
    pub text: String,
}

/// How a streamed answer ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "end", content = "detail")]
pub(crate) enum StreamEnd {
    /// The body ended normally (for gRPC: with its trailers, whatever their status).
    Complete,
    /// The body failed part-way: the connection closed before it ended (HTTP/1.1), or the
    /// stream was reset (HTTP/2). The error, as the client read it.
    Broken(String),
}

/// A body read frame by frame: what arrived, when, and how it ended.
#[derive(Debug)]
pub(crate) struct Read {
    /// The data received, up to `max` bytes.
    pub data: Bytes,
    /// More than `max` bytes arrived (the rest is counted, not kept).
    pub data_cut: bool,
    pub trailers: Option<HeaderMap>,
    /// Every data frame (HTTP) or message (gRPC) received, up to [`MAX_LISTED`].
    pub pieces: Vec<Received>,
    /// How many there were in all.
    pub count: usize,
    pub end: StreamEnd,
}

/// Reads `body` to its end or its failure, noting when each piece arrived (from `t0`): data
/// frames for HTTP, whole messages for gRPC (`grpc`). Keeps at most `max` bytes of data.
pub(crate) async fn read<B>(mut body: B, t0: tokio::time::Instant, grpc: bool, max: usize) -> Read
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error,
{
    let mut read = Read {
        data: Bytes::new(),
        data_cut: false,
        trailers: None,
        pieces: Vec::new(),
        count: 0,
        end: StreamEnd::Complete,
    };
    let mut kept = bytes::BytesMut::new();
    // gRPC: the bytes of a message not yet complete.
    let mut pending = bytes::BytesMut::new();
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(err)) => {
                read.end = StreamEnd::Broken(error_chain(&err));
                break;
            }
        };
        let at_ms = tokio::time::Instant::now()
            .saturating_duration_since(t0)
            .as_secs_f64()
            * 1_000.0;
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                read.trailers = frame.into_trailers().ok();
                continue;
            }
        };
        if data.is_empty() {
            continue;
        }
        if kept.len() + data.len() <= max {
            kept.extend_from_slice(&data);
        } else {
            read.data_cut = true;
        }
        if !grpc {
            read.note(at_ms, &data);
            continue;
        }
        pending.extend_from_slice(&data);
        while pending.len() >= 5 {
            let len = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]);
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if pending.len() - 5 < len {
                break;
            }
            let message = pending.split_to(5 + len);
            read.note(at_ms, &message[5..]);
        }
    }
    read.data = kept.freeze();
    read
}

impl Read {
    fn note(&mut self, at_ms: f64, data: &[u8]) {
        self.count += 1;
        if self.pieces.len() < MAX_LISTED {
            let text: String = String::from_utf8_lossy(data)
                .trim_end()
                .chars()
                .take(120)
                .collect();
            self.pieces.push(Received {
                at_ms: (at_ms * 1_000.0).round() / 1_000.0,
                bytes: data.len(),
                text,
            });
        }
    }

    /// The text report's lines about the stream: how many pieces arrived and when, and how it
    /// ended (the caller adds the gRPC status).
    pub(crate) fn report(&self, grpc: bool, out: &mut String) {
        use std::fmt::Write as _;
        let what = if grpc { "messages" } else { "chunks" };
        let _ = writeln!(out, "stream: {} {what} received", self.count);
        for piece in &self.pieces {
            let _ = writeln!(out, "  {:>9.1} ms  {}", piece.at_ms, piece.text);
        }
        if self.count > self.pieces.len() {
            let _ = writeln!(
                out,
                "  ({} more not listed)",
                self.count - self.pieces.len()
            );
        }
        match &self.end {
            StreamEnd::Complete if grpc => {
                let _ = writeln!(out, "stream ended: with its trailers");
            }
            StreamEnd::Complete => {
                let _ = writeln!(out, "stream ended: complete");
            }
            StreamEnd::Broken(err) => {
                let _ = writeln!(out, "stream ended: broken off ({err})");
            }
        }
    }
}

/// `err` and its sources, `: `-separated.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
