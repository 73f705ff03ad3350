//! A consumer drains a queue of messages, works on the live ones and discards the expired ones.
//!
//! Run with: `cargo run -p deadline-core --example queue_expiry`
//!
//! Each producer request had some budget left when it queued its message, and wrote the expiry
//! next to the payload as text (`Deadline-Expires-At`). The consumer falls behind by 1.2 s (a
//! burst, a restart) and then drains the queue: it checks each message against the wall clock
//! with the skew guard, works only on those whose requester is still waiting, and reports the
//! others instead of doing work nobody will read.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use deadline_core::absolute::{SkewGuard, WallInstant};
use deadline_core::expiry::{EXPIRES_AT_HEADER, Freshness, MessageExpiry};

/// A queued message: its payload and the expiry text carried with it.
struct Message {
    payload: String,
    expires_at: String,
}

fn main() {
    #[allow(clippy::disallowed_methods)] // an example's one wall-clock read
    let start = WallInstant::from_system_time(SystemTime::now());

    // Producers: (when the message was queued, ms after start; budget its request had left).
    let produced = [
        (0, 3_000),
        (10, 800),
        (20, 1_500),
        (400, 900),
        (600, 2_000),
        (900, 300),
    ];
    let mut queue: VecDeque<Message> = produced
        .iter()
        .enumerate()
        .map(|(n, &(at_ms, left_ms))| {
            let made = start.after(Duration::from_millis(at_ms));
            let expiry = MessageExpiry::after(made, Duration::from_millis(left_ms));
            Message {
                payload: format!("order-{n}"),
                expires_at: expiry.encode().expect("a date this century"),
            }
        })
        .collect();

    // The consumer gets to the queue 1.2 s after the first message.
    let now = start.after(Duration::from_millis(1_200));
    let guard = SkewGuard::DEFAULT;
    let (mut worked, mut discarded) = (Vec::new(), Vec::new());
    while let Some(message) = queue.pop_front() {
        let freshness = match MessageExpiry::decode(message.expires_at.as_bytes()) {
            Ok(expiry) => expiry.check(now, &guard),
            Err(err) => {
                // A message whose expiry cannot be read is reported, not silently worked on.
                println!("{}: unreadable {EXPIRES_AT_HEADER}: {err}", message.payload);
                continue;
            }
        };
        match freshness {
            Freshness::Live(budget) => {
                println!(
                    "{}: live, {} ms left: working (expires {})",
                    message.payload,
                    budget.as_millis(),
                    message.expires_at
                );
                worked.push(message.payload);
            }
            Freshness::Expired { by } => {
                println!(
                    "{}: expired {} ms ago: discarded (expired {})",
                    message.payload,
                    by.as_millis(),
                    message.expires_at
                );
                discarded.push(message.payload);
            }
        }
    }
    println!(
        "worked on {} messages, discarded {} whose requesters had given up",
        worked.len(),
        discarded.len()
    );
    assert_eq!(worked, ["order-0", "order-2", "order-3", "order-4"]);
    assert_eq!(discarded, ["order-1", "order-5"]);
}
