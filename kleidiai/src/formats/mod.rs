//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

mod int4;

pub use int4::{Int4Encoding, Int4PerChannel, Order};
