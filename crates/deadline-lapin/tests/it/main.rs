//! Tests over a real RabbitMQ: 127.0.0.1:5672 (guest/guest) unless `DEADLINE_TEST_AMQP` names
//! another broker. A broker that cannot be reached fails the tests with a message saying how
//! to start one (`scripts/ensure-rabbitmq.sh`); they never skip.
//!
//! `restart` and `alarm` each run a private RabbitMQ node (the `rabbitmq-server` package),
//! which they stop and start again or put under a memory alarm; they never touch the shared
//! broker.
//!
//! Every test uses queues of its own (unique names, deleted at the end, and deleted by the
//! broker after a minute idle if the test dies first).

mod alarm;
mod consume;
mod node;
mod produce;
mod restart;
mod support;
