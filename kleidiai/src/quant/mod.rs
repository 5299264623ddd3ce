//! Quantisation schemes shared by several families, written to match
//! upstream's packers bit for bit (same float operations, same rounding), so
//! the reference implementations see exactly the integers the kernels see.
//! One file per scheme.

mod qai8dx;
mod qai8dx_half;

pub use qai8dx::{Qai8dxRow, qai8dx_row};
pub use qai8dx_half::{Qai8dxF16Block, qai8dx_rows_bf16, qai8dx_rows_f16};
