//! Hand-written SVG for the demo's timeline and the load command's chart: no dependency, and
//! every number in the picture comes from the services' own logs.
//!
//! [`draw`] holds what every picture shares (the canvas, its colours and margins, escaping, a
//! grid line); [`timeline`] draws the demo's timeline and [`chart`] the load command's chart.

pub(crate) mod chart;
pub(crate) mod draw;
pub(crate) mod timeline;
