//! Filled in with its layer.
fn main() {}
