//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

mod int4;
mod int8;
mod uint2;

pub use int4::{Int4Encoding, Int4PerChannel, Order};
pub use int8::Int8PerChannel;
pub use uint2::UInt2PerChannel;
