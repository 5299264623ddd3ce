//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

mod depthwise;
mod float_weights;
mod indirection;
mod int4;

pub use depthwise::{DepthwiseShape, DepthwiseWeights};
pub use float_weights::{FloatElement, FloatWeights};
pub use indirection::Indirection;
pub use int4::{Int4Encoding, Int4PerChannel, Order};
