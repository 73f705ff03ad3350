//! gRPC for the `deadline` command: the wire format a unary call needs ([`wire`]:
//! length-prefixed messages, `grpc-status` in trailers or trailers-only headers, the request a
//! hop sends and the reply a client reads), the service's gRPC answers ([`answers`]) and the
//! gRPC user of `demo --protocol grpc` and `load --protocol grpc` ([`users`]).
//!
//! The service's work has no schema: a gRPC request on any path is a unary call whose message
//! bytes are ignored, and the reply is one message holding the same text an HTTP caller gets
//! in its body. The enforce layer gives its own answers (DEADLINE_EXCEEDED, INVALID_ARGUMENT)
//! in gRPC's terms already; [`answers`] does the same for the handler's answers.

pub(crate) mod answers;
pub(crate) mod users;
pub(crate) mod wire;
