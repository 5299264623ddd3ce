//! Quantisation schemes shared by several families, written to match
//! upstream's packers bit for bit (same float operations, same rounding), so
//! the reference implementations see exactly the integers the kernels see.
//! One file per scheme.

mod qai8_static;
mod qai8dx;
mod qai8dx_half;
mod qsi8d32;
mod qsi8d32_row;

pub use qai8_static::{Qai8Output, Qai8Quant, requantize};
pub use qai8dx::{Qai8dxRow, qai8dx_row, qai8dx_row_with};
pub use qai8dx_half::{Qai8dxF16Block, qai8dx_rows_bf16, qai8dx_rows_f16};
pub use qsi8d32::{Qsi8d32Block, qsi8d32_block, qsi8d32_block_f16};
pub use qsi8d32_row::{Qsi8d32Row, qsi8d32_row};

/// How a packer rounds `x * scale` to an integer: upstream's scalar code
/// calls `roundf` (half away from zero), its NEON code `vcvtnq` (half to
/// even). The two differ only for exact ties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Rounding {
    /// `roundf`: halves away from zero.
    #[default]
    HalfAwayFromZero,
    /// `vcvtnq_s32_f32`: halves to even.
    HalfToEven,
}

impl Rounding {
    /// `x` rounded to an integer (as f32).
    pub fn round(self, x: f32) -> f32 {
        match self {
            Rounding::HalfAwayFromZero => x.round(),
            Rounding::HalfToEven => x.round_ties_even(),
        }
    }
}
