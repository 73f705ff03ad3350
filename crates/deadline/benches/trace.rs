//! Placeholder until the trace codec lands.
fn main() {}
