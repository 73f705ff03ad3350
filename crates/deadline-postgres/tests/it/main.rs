//! The deadline rules of `deadline-postgres`, and what it does under faults, over a real
//! PostgreSQL.
//!
//! The database is the one `DEADLINE_TEST_POSTGRES` names (default
//! `postgres://postgres@127.0.0.1:5432/test`; `scripts/ensure-postgres.sh` starts one). A test
//! that cannot reach it fails, saying so: these rules are not checked by anything else.

mod faults;
mod rules;
mod support;
