//! Example: an axum app behind the enforce layer.
fn main() {}
