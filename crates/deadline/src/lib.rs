//! Pure core of deadline propagation.

pub mod trace;
