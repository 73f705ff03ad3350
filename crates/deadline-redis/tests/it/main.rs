//! The deadline rules of `deadline-redis` over a real Redis.
//!
//! The server is the one `DEADLINE_TEST_REDIS` names (default `redis://127.0.0.1:6379`). A test
//! that cannot reach it fails, saying so: these rules are not checked by anything else. Every
//! test uses keys and client names of its own, so tests running side by side do not see each
//! other's clients.

mod abandon;
mod http;
mod rules;
mod support;
