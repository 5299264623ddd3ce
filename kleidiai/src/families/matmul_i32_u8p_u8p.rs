//! `matmul_i32_u8p_u8p`: `dst (i32, m x n) = lhs (u8, m x k) · wᵀ (u8) +
//! per_row[i] + per_col[j]`, accumulated in int32 with wrap-around (as the
//! hardware does; `255 * 255 * k` passes `i32::MAX` beyond k = 33025).
//!
//! Kernel (1 upstream, `kai_matmul_uker_api`):
//! `kai_matmul_i32_u8p4vsx4_u8p4vsx4_i32_i32_8vsx8vs_sme2_mopa` (SME2 UMOPA,
//! tiles of `8 * vscale` rows and columns). Packing: LHS
//! `kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme`, RHS
//! `kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme` or `..._kxn_...` (one packed
//! format, `u8p4vsx4`, shared with `matmul_clamp_f32_u8p_u8p`). Both biases
//! are run-time arguments; a missing one is zero.
//!
//! Tolerance of the conformance test: none. Integer arithmetic modulo 2^32
//! is exact; results must equal the reference bit for bit.

pub use super::u8p_u8p::AccBias;
use super::u8p_u8p as shared;
use crate::error::{self, Result};
use crate::formats::U8Weights;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_i32_u8p_u8p";

/// The portable reference (test oracle and fallback): `lhs` is dense
/// `m x w.k`, `dst` dense `m x w.n`.
///
/// ```
/// use kleidiai::families::matmul_i32_u8p_u8p::{reference, AccBias};
/// use kleidiai::formats::{Order, U8Weights};
/// let w = U8Weights { n: 1, k: 2, order: Order::NxK, data: &[3, 4] };
/// let mut y = [0i32];
/// reference(1, &[10, 20], &w, &AccBias { per_row: Some(&[1]), per_col: Some(&[-2]) }, &mut y).unwrap();
/// assert_eq!(y[0], 30 + 80 + 1 - 2);
/// ```
pub fn reference(m: usize, lhs: &[u8], w: &U8Weights<'_>, bias: &AccBias<'_>, dst: &mut [i32]) -> Result<()> {
    error::at_least(dst.len(), error::mul(m, w.n, "dst")?, "dst")?;
    let n = w.n;
    shared::accumulate(m, lhs, w, bias, |i, j, acc| dst[i * n + j] = acc)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;

    shared::u8_kernel! {
        interface: matmul_i32_u8p_u8p,
        out: i32,
        /// `dst = lhs · wᵀ + biases`: `dst` is `m x n`, rows `n` apart.
        stage: () => shared::Stage::I32,
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;

    shared::tests::u8_tests! {
        out: i32,
        args: (),
        draw: |_, _| (),
        plain: (),
        bad: |_| vec![],
        pass: |_a| (),
    }
}
