//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

mod float;
mod int4;

pub use float::{FloatElement, FloatWeights};
pub use int4::{Int4Encoding, Int4PerChannel, Order};
