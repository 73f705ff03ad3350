//! gateway → orders → inventory as tonic services, each with the enforce layer on its server
//! and the propagate layer around its `Channel`; the handlers hold no deadline code.
//!
//! A user calls the gateway with a 1 s timeout, twice: once when inventory is quick (each hop
//! says what budget it was told), once when inventory takes 3 s (the user hears inventory's own
//! DEADLINE_EXCEEDED report, before its 1 s is up).
//!
//! ```text
//! cargo run -p deadline-tonic-example --example tonic_chain
//! ```

use std::time::Duration;

use deadline_tonic_example::{BoxError, Chain, call_as_user};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let chain = Chain::start(Duration::from_millis(20)).await?;
    let timeout = Duration::from_secs(1);
    for inventory_work in [Duration::from_millis(50), Duration::from_secs(3)] {
        println!(
            "user -> gateway, timeout {} ms, inventory works {} ms:",
            timeout.as_millis(),
            inventory_work.as_millis()
        );
        let call = call_as_user(chain.gateway, timeout, inventory_work).await?;
        match call.result {
            Ok(hops) => {
                for line in hops.iter().rev() {
                    println!("  {line}");
                }
            }
            Err(status) => println!("  {:?}: {}", status.code(), status.message()),
        }
        println!("  the user waited {} ms", call.took.as_millis());
    }
    chain.stop().await
}
