//! Quantisation schemes shared by several families, written to match
//! upstream's packers bit for bit (same float operations, same rounding), so
//! the reference implementations see exactly the integers the kernels see.
//! One file per scheme.

mod qai8_static;
mod qai8dx;
mod qsi8d32;

pub use qai8_static::{Qai8Output, Qai8Quant, requantize};
pub use qai8dx::{Qai8dxRow, qai8dx_row};
pub use qsi8d32::{Qsi8d32Block, qsi8d32_block, qsi8d32_block_f16};
