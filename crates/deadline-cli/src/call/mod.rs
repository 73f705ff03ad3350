//! `deadline call URL`: curl for budgets. Sends one request (with `--budget MS` and any `-H`
//! headers), then prints the status, how long the answer took, the `Server-Timing` the first
//! hop sent, and the `Deadline-Trace` read hop by hop: when each hop got the request, its budget
//! at arrival, its queue and work, its calls and its headroom, with the hop that ran out marked.
//! `--json` prints the same as one document.
//!
//! `--protocol http1` (the default) speaks HTTP/1.1, `h2c` HTTP/2 without TLS by prior knowledge
//! (as gRPC servers and `curl --http2-prior-knowledge` do). `grpc` makes one unary gRPC call over
//! h2c: a POST of one length-prefixed message (empty, or `--data`), `application/grpc`, the
//! budget in `grpc-timeout` (the finest unit whose count fits gRPC's 8 digits, never more than
//! the budget) beside `Deadline-Budget-Ms`, as the client layers send it. The report adds the
//! call's gRPC status and decoded `grpc-message`, read from the trailers or, for a
//! trailers-only answer, from the headers (the trace is read from either too).
//!
//! The body is read frame by frame: a streamed answer (`deadline service --stream`) is reported
//! as the chunks (gRPC: messages) received, each with when it arrived, and how the stream ended:
//! complete, or broken off (the connection closed mid-body, or the HTTP/2 stream reset), with
//! the error as the client read it; a gRPC stream's status comes from its trailers.
//!
//! A server that sends no trace still gets its status, time and body reported. The hop view is
//! the core's ([`deadline::trace::hops`]): every hop's budget at arrival is exact, as the hop
//! wrote it in its trace; only a hop whose trace does not carry it (an older version) gets an
//! upper bound from its caller's times, and the output marks it `≤`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use clap::Args;
use deadline::header::{BudgetValue, GRPC_TIMEOUT_HEADER, read_budget};
use deadline::trace::hops::hops;
use deadline::trace::{TRACE_HEADER, Trace};
use deadline::{BUDGET_HEADER, Budget as BudgetLimit};
use http::header::{CONTENT_TYPE, HOST};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod report;

use crate::grpc::wire::DownstreamProtocol as Protocol;
use crate::grpc::wire::{GrpcReply, frame, reply};
use crate::stream_read as stream;
use report::{json, report};

/// At most this much of the answer's body is read and shown.
const MAX_BODY: usize = 64 * 1024;

/// How long to wait beyond the budget by default: the answer of a hop that keeps its deadline
/// comes before it; one second more shows what a server that ignores it does.
const GRACE: Duration = Duration::from_secs(1);

/// How long to wait without a budget, by default.
const NO_BUDGET_WAIT: Duration = Duration::from_secs(30);

/// Arguments of `deadline call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The URL to GET (`http://HOST[:PORT]/PATH`; with `--protocol grpc`, the method to call).
    url: String,
    /// Send `Deadline-Budget-Ms: MS`: the budget the first hop gets.
    #[arg(long, value_name = "MS")]
    budget: Option<u64>,
    /// A request header, `Name: value`; repeat for more.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The protocol to speak.
    #[arg(long, value_enum, default_value_t = Protocol::Http1)]
    protocol: Protocol,
    /// The gRPC request message's bytes, sent as they are (with `--protocol grpc`; default:
    /// an empty message).
    #[arg(short = 'd', long = "data", value_name = "BYTES")]
    data: Option<String>,
    /// Stop waiting after this many ms (default: the budget plus 1000, or 30000 without one).
    #[arg(long, value_name = "MS")]
    timeout: Option<u64>,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    json: bool,
}

/// The request, checked before anything is sent.
#[derive(Debug)]
struct Plan {
    uri: Uri,
    host: String,
    port: u16,
    headers: HeaderMap,
    protocol: Protocol,
    /// The budget the request carries, as the first hop will read it.
    budget_ms: Option<u64>,
    wait: Duration,
    /// The gRPC call's one message, framed (`--protocol grpc` only).
    grpc_body: Option<Bytes>,
}

/// What came back.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// Whether the body was longer than [`MAX_BODY`] (and cut there).
    body_cut: bool,
    elapsed: Duration,
    /// The call's gRPC status, message and payload (`--protocol grpc` only).
    grpc: Option<GrpcReply>,
    /// The body as it arrived: its chunks or messages, when, and how it ended.
    stream: stream::Read,
}

pub(crate) async fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    let plan = plan(&args)?;
    let answer = tokio::time::timeout(plan.wait, send(&plan))
        .await
        .map_err(|_| {
            anyhow!(
                "no answer from {} within {} ms (--timeout)",
                args.url,
                plan.wait.as_millis()
            )
        })??;
    let trace = match &answer.grpc {
        // The trace may come in the trailers too.
        Some(grpc) => grpc
            .trace
            .as_deref()
            .and_then(|t| HeaderValue::from_str(t).ok())
            .map(|v| Trace::from_header_value(&v)),
        None => answer
            .headers
            .get(TRACE_HEADER)
            .map(Trace::from_header_value),
    };
    let hops = trace
        .as_ref()
        .map(|t| hops(t, plan.budget_ms))
        .unwrap_or_default();
    let out = if args.json {
        let mut doc =
            serde_json::to_string_pretty(&json(&args, &plan, &answer, trace.as_ref(), &hops))?;
        doc.push('\n');
        doc
    } else {
        report(&args, &plan, &answer, trace.as_ref(), &hops)
    };
    // A reader that stops early (`| head`) closes the pipe: that ends the output, not in a panic.
    match std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow!(err).context("writing the report"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Checks the arguments: the URL, the headers, the budget and the protocol.
fn plan(args: &CallArgs) -> anyhow::Result<Plan> {
    if args.data.is_some() && args.protocol != Protocol::Grpc {
        bail!("--data is the gRPC message: give it with --protocol grpc");
    }
    let (uri, authority) = target(args)?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = authority.port_u16().unwrap_or(80);
    let mut headers = headers(args, &authority)?;
    let grpc_body = (args.protocol == Protocol::Grpc).then(|| {
        headers
            .entry(CONTENT_TYPE)
            .or_insert(HeaderValue::from_static("application/grpc"));
        headers.insert(
            HeaderName::from_static("te"),
            HeaderValue::from_static("trailers"),
        );
        frame(args.data.as_deref().unwrap_or("").as_bytes())
    });
    // The first hop's budget, read as a server reads it (a malformed one is sent anyway, to see
    // what the server does with it, but has no figure).
    let budget_ms = match read_budget(
        &headers,
        BudgetLimit::from_millis(u64::MAX).unwrap_or(BudgetLimit::DEFAULT_MAX),
    ) {
        Ok(Some(BudgetValue::Remaining(b))) => Some(b.as_millis()),
        Ok(Some(BudgetValue::Expired)) => Some(0),
        Ok(None) | Err(_) => None,
    };
    let wait = match (args.timeout, budget_ms) {
        (Some(0), _) => bail!("--timeout must be at least 1 ms"),
        (Some(ms), _) => Duration::from_millis(ms),
        (None, Some(ms)) => Duration::from_millis(ms).saturating_add(GRACE),
        (None, None) => NO_BUDGET_WAIT,
    };
    if let (Some(_), Some(budget)) = (&grpc_body, args.budget.and_then(BudgetLimit::from_millis)) {
        // A `-H grpc-timeout` given by hand is sent as it is.
        headers
            .entry(GRPC_TIMEOUT_HEADER)
            .or_insert_with(|| deadline::dialect::grpc_timeout(budget));
    }
    Ok(Plan {
        uri,
        host,
        port,
        headers,
        protocol: args.protocol,
        budget_ms,
        wait,
        grpc_body,
    })
}

/// The URL, checked: `http://` with a host.
fn target(args: &CallArgs) -> anyhow::Result<(Uri, Authority)> {
    let uri: Uri = args
        .url
        .parse()
        .with_context(|| format!("{:?} is not a URL", args.url))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => bail!("{}: https is not supported, only http://", args.url),
        _ => bail!("{}: expected an http:// URL", args.url),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| anyhow!("{}: the URL has no host", args.url))?
        .clone();
    if authority.host().is_empty() {
        bail!("{}: the URL has no host", args.url);
    }
    Ok((uri, authority))
}

/// The request's headers: `Host` over HTTP/1.1, then each `-H` (a second `Host` replaces the
/// first), then the budget of `--budget`.
fn headers(args: &CallArgs, authority: &Authority) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    if args.protocol == Protocol::Http1 {
        // HTTP/2 carries the host in the request's `:authority` instead.
        headers.insert(
            HOST,
            HeaderValue::from_str(authority.as_str()).context("the URL's host")?,
        );
    }
    for raw in &args.headers {
        let (name, value) = parse_header(raw)?;
        if name == HOST {
            headers.insert(name, value);
        } else {
            headers.append(name, value);
        }
    }
    if let Some(ms) = args.budget {
        if headers.contains_key(BUDGET_HEADER) {
            bail!(
                "give the budget either with --budget or with -H 'Deadline-Budget-Ms: …', not both"
            );
        }
        headers.insert(BUDGET_HEADER, HeaderValue::from(ms));
    }
    Ok(headers)
}

/// `Name: value` (the value trimmed; it may be empty).
fn parse_header(raw: &str) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let (name, value) = raw
        .split_once(':')
        .ok_or_else(|| anyhow!("-H {raw:?}: expected 'Name: value'"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| anyhow!("-H {raw:?}: {:?} is not a header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| anyhow!("-H {raw:?}: the value has characters a header cannot carry"))?;
    Ok((name, value))
}

/// Connects, sends the request and reads the answer: the time runs from the start of the
/// connection to the end of the body.
async fn send(plan: &Plan) -> anyhow::Result<Answer> {
    let t0 = Instant::now();
    let stream = TcpStream::connect((plan.host.as_str(), plan.port))
        .await
        .with_context(|| format!("connecting to {}:{}", plan.host, plan.port))?;
    stream.set_nodelay(true)?;
    let (response, connection) = exchange(plan, TokioIo::new(stream)).await?;
    let response = response.map_err(|err| send_error(plan, err))?;
    let (parts, body) = response.into_parts();
    // Read frame by frame, so a streamed answer shows what arrived when, and how it ended.
    let grpc = plan.grpc_body.is_some();
    let read = stream::read(body, t0, grpc, MAX_BODY).await;
    let elapsed = Instant::now().saturating_duration_since(t0);
    connection.abort();
    let grpc = grpc.then(|| {
        reply(
            parts.status,
            &parts.headers,
            read.trailers.as_ref(),
            &read.data,
        )
    });
    let body = if read.data_cut {
        Bytes::new()
    } else {
        read.data.clone()
    };
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        body_cut: read.data_cut,
        elapsed,
        grpc,
        stream: read,
    })
}

/// The handshake of `plan`'s protocol on `io`, and its request sent: the response (or why
/// none came) and the connection's task, to abort once the body is read.
async fn exchange(
    plan: &Plan,
    io: TokioIo<TcpStream>,
) -> anyhow::Result<(
    hyper::Result<Response<Incoming>>,
    JoinHandle<hyper::Result<()>>,
)> {
    Ok(match plan.protocol {
        Protocol::Http1 => {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .context("starting HTTP/1.1")?;
            let connection = tokio::spawn(connection);
            // HTTP/1.1 sends the path; the host is in the headers.
            let target = plan.uri.path_and_query().map_or("/", |p| p.as_str());
            let request = request(Method::GET, target, &plan.headers, Empty::<Bytes>::new())?;
            (sender.send_request(request).await, connection)
        }
        Protocol::H2c | Protocol::Grpc => {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .context("starting HTTP/2 (h2c, prior knowledge)")?;
            let connection = tokio::spawn(connection);
            // HTTP/2 sends the whole URI, as `:scheme`, `:authority` and `:path`; a gRPC call
            // is a POST of its one message.
            let request = match &plan.grpc_body {
                Some(message) => request(
                    Method::POST,
                    plan.uri.clone(),
                    &plan.headers,
                    Either::Left(Full::new(message.clone())),
                )?,
                None => request(
                    Method::GET,
                    plan.uri.clone(),
                    &plan.headers,
                    Either::Right(Empty::<Bytes>::new()),
                )?,
            };
            (sender.send_request(request).await, connection)
        }
    })
}

/// Why sending failed, in `plan`'s terms: over HTTP/2 the server likely does not speak it.
fn send_error(plan: &Plan, err: hyper::Error) -> anyhow::Error {
    let what = match plan.protocol {
        Protocol::Http1 => "sending the request".to_owned(),
        Protocol::H2c | Protocol::Grpc => format!(
            "sending the request over HTTP/2 without TLS (prior knowledge{}): \
             {}:{} does not speak it, or closed the connection",
            if plan.protocol == Protocol::Grpc {
                ", as gRPC needs"
            } else {
                ""
            },
            plan.host,
            plan.port
        ),
    };
    anyhow!(err).context(what)
}

/// A `method` request of `target` with `headers` and `body`.
fn request<T, B>(
    method: Method,
    target: T,
    headers: &HeaderMap,
    body: B,
) -> anyhow::Result<Request<B>>
where
    Uri: TryFrom<T>,
    <Uri as TryFrom<T>>::Error: Into<http::Error>,
{
    let mut request = Request::builder().method(method).uri(target).body(body)?;
    *request.headers_mut() = headers.clone();
    Ok(request)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

#[cfg(test)]
mod tests {
    use super::{CallArgs, Protocol, parse_header, plan};

    fn args(protocol: Protocol, budget: Option<u64>, headers: &[&str]) -> CallArgs {
        CallArgs {
            url: "http://127.0.0.1:1/shop.Orders/Get".to_owned(),
            budget,
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            protocol,
            data: None,
            timeout: None,
            json: false,
        }
    }

    #[test]
    fn a_grpc_call_carries_the_budget_in_both_headers_and_one_message() {
        let grpc = plan(&args(Protocol::Grpc, Some(1_000), &[])).unwrap();
        assert_eq!(grpc.headers["content-type"], "application/grpc");
        assert_eq!(grpc.headers["te"], "trailers");
        assert_eq!(grpc.headers["deadline-budget-ms"], "1000");
        assert_eq!(grpc.headers["grpc-timeout"], "1000000u");
        assert_eq!(grpc.grpc_body.as_deref(), Some(&[0u8, 0, 0, 0, 0][..]));

        let mut with_data = args(Protocol::Grpc, Some(250_000), &["grpc-timeout: 3S"]);
        with_data.data = Some("hi".to_owned());
        let given = plan(&with_data).unwrap();
        // Given by hand, kept as given.
        assert_eq!(given.headers["grpc-timeout"], "3S");
        assert_eq!(given.grpc_body.as_deref(), Some(&b"\0\0\0\0\x02hi"[..]));

        let http = plan(&args(Protocol::H2c, Some(1_000), &[])).unwrap();
        assert!(!http.headers.contains_key("grpc-timeout"));
        assert!(!http.headers.contains_key("content-type"));
        assert!(http.grpc_body.is_none());
    }

    #[test]
    fn headers_parse_or_say_what_is_wrong() {
        let (name, value) = parse_header("X-Request-Id:  abc ").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("x-request-id", "abc")
        );
        assert_eq!(parse_header("X-Empty:").unwrap().1, "");
        let no_colon = parse_header("X-Request-Id abc").unwrap_err().to_string();
        assert!(no_colon.contains("expected 'Name: value'"), "{no_colon}");
        let bad_name = parse_header("Bad Name: x").unwrap_err().to_string();
        assert!(bad_name.contains("is not a header name"), "{bad_name}");
        let bad_value = parse_header("X-A: a\u{7f}b").unwrap_err().to_string();
        assert!(bad_value.contains("cannot carry"), "{bad_value}");
    }
}
