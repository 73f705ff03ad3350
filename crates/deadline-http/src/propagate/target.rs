//! The downstream a call is made to, as its trace span and retry budget name it.

use std::sync::Arc;

use deadline::trace::name;

/// The name used for a call whose URI has no authority and whose layer was given no target.
pub(super) const UNNAMED_TARGET: &str = "downstream";

/// A configured downstream name and its call span's name, both made once per layer rather than
/// once per call (cloning them is two reference counts).
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) name: Arc<str>,
    pub(super) span: Arc<str>,
}

impl Target {
    pub(super) fn new(name: &str) -> Target {
        Target {
            name: Arc::from(name),
            span: Arc::from(name::call(name)),
        }
    }
}
