//! The users of `deadline demo` and `deadline load`: how they call the edge (HTTP/1.1 or gRPC,
//! and so how every hop calls the next) and one user's call, with its budget and its give-up
//! time, read back as the user heard it.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use clap::ValueEnum;
use deadline::Budget;
use deadline::grpc::GrpcCode;
use deadline_http::enforce::answer::http_status;
use http::HeaderValue;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::wire::{read_reply, request};
use crate::harness::Hop;
use crate::users::{Heard, UserClient, UserResult, hear, one_user, user_client};

/// How the demo's and the load's users call the edge (and so how every hop calls the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum Protocol {
    /// HTTP/1.1 GETs with `Deadline-Budget-Ms`.
    #[default]
    Http1,
    /// gRPC unary calls over h2c with `grpc-timeout`, as a gRPC client sends them.
    Grpc,
}

impl Protocol {
    /// `hops`, each told to call the next one this way.
    pub(crate) fn on(self, mut hops: Vec<Hop>) -> Vec<Hop> {
        for hop in &mut hops {
            hop.args.extend(self.hop_args());
        }
        hops
    }

    /// The `deadline service` flags that make each hop call the next one this way.
    fn hop_args(self) -> Vec<String> {
        match self {
            Protocol::Http1 => Vec::new(),
            Protocol::Grpc => vec!["--downstream-protocol".to_owned(), "grpc".to_owned()],
        }
    }
}

/// The users of the demo and the load: HTTP/1.1 or gRPC over one h2c connection.
#[derive(Debug, Clone)]
pub(crate) enum Users {
    Http(UserClient),
    Grpc(Client<HttpConnector, Full<Bytes>>),
}

impl Users {
    pub(crate) fn new(protocol: Protocol) -> Users {
        match protocol {
            Protocol::Http1 => Users::Http(user_client()),
            Protocol::Grpc => {
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                Users::Grpc(
                    Client::builder(hyper_util::rt::TokioExecutor::new())
                        .http2_only(true)
                        .build(connector),
                )
            }
        }
    }

    /// One user, as [`one_user`]: sends with `budget_ms` (in `grpc-timeout` for gRPC, as a gRPC
    /// client with that timeout does) and `gives_up` (in `X-Request-Deadline`), waits at most
    /// `wait`, then gives up (dropping the call, which resets its stream or closes its
    /// connection).
    pub(crate) async fn one(
        &self,
        url: &str,
        id: &str,
        budget_ms: Option<u64>,
        gives_up: Option<HeaderValue>,
        wait: Duration,
    ) -> anyhow::Result<UserResult> {
        let client = match self {
            Users::Http(client) => {
                return one_user(client, url, id, budget_ms, gives_up, wait).await;
            }
            Users::Grpc(client) => client,
        };
        let mut call = request(url, id).context("building the user's call")?;
        call.headers_mut().remove(deadline_http::IDEMPOTENCY_KEY);
        if let Some(value) = gives_up {
            call.headers_mut()
                .insert(deadline::absolute::REQUEST_DEADLINE_HEADER, value);
        }
        if let Some(budget) = budget_ms.and_then(Budget::from_millis) {
            call.headers_mut().insert(
                deadline::header::GRPC_TIMEOUT_HEADER,
                deadline::dialect::grpc_timeout(budget),
            );
        }
        let attempt = async {
            let reply = read_reply(client.request(call).await?).await?;
            Ok(Heard {
                status: http_status(reply.code).as_u16(),
                trace: reply.trace,
                body: if reply.code == GrpcCode::Ok {
                    reply.payload
                } else {
                    format!("{}: {}", reply.code, reply.message)
                },
                grpc: Some(reply.code),
            })
        };
        Ok(hear(wait, attempt).await)
    }
}
