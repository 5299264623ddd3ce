//! `matmul_clamp_bf16_qai8dxp_qsi4c32p`: `dst (bf16, m x n) = clamp(lhs
//! (bf16, m x k) · wᵀ + bias)` with block-quantised int4 weights
//! ([`BlockInt4`], bf16 block scales). The math is that of
//! [`matmul_clamp_f32_qai8dxp_qsi4c32p`](super::matmul_clamp_f32_qai8dxp_qsi4c32p)
//! with bf16 at both ends: the LHS rows are widened to f32 and quantised
//! per row to int8 (`qai8dx`, rounding halves to even as the NEON packer
//! does, [`crate::quant::qai8dx_row_with`]); the f32 result is clamped, then
//! rounded to bf16 (nearest, ties to even).
//!
//! Kernels (2 upstream): NEON dotprod GEMV `1x4` (needs BF16 + dotprod) and
//! NEON i8mm GEMM `16x4` (BF16 + i8mm). Packing: LHS
//! `kai_lhs_quant_pack_qai8dxp_bf16_neon`; RHS format `qsi4c32p`, shared
//! with the f32-output family (same packers:
//! `kai_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon` for N x K input,
//! `kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0` for K x N), so one packed weight
//! serves kernels of both families.
//!
//! Tolerance of the conformance test: the f32 family's bound
//! `1e-5 · (|want| + M) + 1e-6` before the final rounding, plus one bf16 ulp
//! (`|want| / 128`): a kernel value a few f32 ulps from the reference's may
//! round to the neighbouring bf16.

use super::qai8dxp_qsi4c32p::{check_weights, reference_core};
use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use crate::quant::{Rounding, qai8dx_row_with};
use half::bf16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_bf16_qai8dxp_qsi4c32p";

/// The portable reference (test oracle and fallback): the family's math in
/// scalar Rust, quantising the LHS exactly as
/// `kai_lhs_quant_pack_qai8dxp_bf16_neon` does, bf16 scales as the RHS
/// packers store them, and the output rounded to bf16.
///
/// ```
/// use half::bf16;
/// use kleidiai::families::matmul_clamp_bf16_qai8dxp_qsi4c32p::reference;
/// use kleidiai::formats::{BlockScales, Int4Blocks, Int4Encoding, Order};
/// use kleidiai::Clamp;
/// let scales = [bf16::from_f32(0.25)];
/// let w = Int4Blocks { n: 1, k: 32, bl: 32, order: Order::NxK, encoding: Int4Encoding::Signed,
///                      data: &[0x22; 16], scales: BlockScales::Bf16(&scales), bias: None }; // all 2
/// let mut y = [bf16::ZERO];
/// reference(1, &[bf16::ONE; 32], w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0].to_f32(), 16.0);
/// ```
pub fn reference<'a>(
    m: usize,
    lhs: &[bf16],
    w: impl Into<BlockInt4<'a>>,
    clamp: Clamp,
    dst: &mut [bf16],
) -> Result<()> {
    let w = w.into();
    let weights = check_weights(&w).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    reference_core(
        m,
        &w,
        clamp,
        |i| {
            let row: Vec<f32> = lhs[i * k..(i + 1) * k].iter().map(|x| x.to_f32()).collect();
            qai8dx_row_with(&row, Rounding::HalfToEven)
        },
        |i, j, y| dst[i * n + j] = bf16::from_f32(y),
    )
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::qai8dxp_common::entries;
    use crate::families::qai8dxp_qsi4c32p::{Entry, c32_fns, c32_kernel};
    use kleidiai_sys::interfaces::matmul_clamp_bf16_qai8dxp_qsi4c32p::KERNELS;

    entries!(KERNELS, |(u, i)| Entry::bf16_out(u, FAMILY, c32_fns!(i, Half)));
    c32_kernel!(
        lhs: bf16,
        out: bf16,
        pack_lhs_into: pack_lhs_bf16,
        rhs_note: " (format `qsi4c32p`, shared with the f32 family)"
    );
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::qai8dxp_common::tests::matmul_rejects;
    use crate::families::qai8dxp_qsi4c32p::one_block_rows;
    use crate::formats::{BlockScales, Int4Blocks};
    use crate::par::Parallelism;

    crate::families::qai8dxp_qsi4c32p::c32_conformance! {
        elem: bf16,
        seed: 0xbf16,
        quantise: |x: &[f32]| crate::quant::qai8dx_row_with(x, crate::quant::Rounding::HalfToEven),
        step: |y: f32| y.abs() / 128.0,
        // Compared bit for bit without hashing the outputs again (bf16 to
        // f32 is exact and one-to-one).
        same: |a: &[f32], b: &[f32]| a.iter().map(|x| x.to_bits()).eq(b.iter().map(|x| x.to_bits())),
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(4, &f));
        let s = [bf16::ONE; 2];
        let data = vec![0u8; 32];
        let w = one_block_rows(&data, &s);
        let packed = kern.pack_rhs(w).unwrap();
        let seq = Parallelism::Sequential;
        let x = [bf16::ONE; 32];
        matmul_rejects(&x, 2, false, |m, x, y: &mut [bf16], c| kern.matmul(m, x, &packed, y, c, seq));
        let mut dst = vec![bf16::ZERO; 2];
        assert!(kern.pack_lhs(2, 32, &x, 16, seq).is_err(), "stride < k");
        assert!(kern.pack_rhs(Int4Blocks { k: 40, ..w }).is_err(), "k not whole blocks");
        assert!(kern.pack_rhs(Int4Blocks { n: usize::MAX / 2, ..w }).is_err(), "overflow");
        // A packed RHS with another bl is refused.
        let s4 = [bf16::ONE; 4];
        let d2 = vec![0u8; 64];
        let p64 = kern.pack_rhs(Int4Blocks { k: 64, bl: 64, data: &d2, scales: BlockScales::Bf16(&s4), ..w }).unwrap();
        let lhs = kern.pack_lhs(1, 64, &[bf16::ONE; 64], 64, seq).unwrap();
        let p32 = kern.pack_rhs(Int4Blocks { k: 64, data: &d2, scales: BlockScales::Bf16(&s4), ..w }).unwrap();
        kern.run(&lhs, &p32, &mut dst, Clamp::NONE, seq).unwrap();
        kern.run(&lhs, &p64, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(matches!(
            kern.run(&lhs, &packed, &mut dst, Clamp::NONE, seq),
            Err(crate::Error::LayoutMismatch { .. })
        ));
    }
}
