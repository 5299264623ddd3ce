//! Unpacked weight formats the families take as input, with their checks.
//! One file per format kind.

mod int4;
mod int4_block;

pub use int4::{Int4Encoding, Int4PerChannel, Order};
pub use int4_block::{BlockInt4, BlockScales, Int4Blocks, Q4_0, Q4_0_BLOCK, Q4_0_BLOCK_BYTES, ScaleType};
