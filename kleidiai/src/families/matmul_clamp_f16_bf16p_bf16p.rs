//! `matmul_clamp_f16_bf16p_bf16p`: `dst (f16, m x n) = f16(clamp(bf16(lhs) ·
//! bf16(w)ᵀ + bias))` with f16 LHS, weights and bias, on NEON with FEAT_FP16
//! and FEAT_BF16. The packers widen f16 to f32 (exact) and round to bf16
//! (`BFCVTN`: nearest, ties to even); the kernel accumulates in f32 from the
//! bias (f16 widened), clamps in f32, and rounds to f16 (`FCVTN`: nearest,
//! ties to even).
//!
//! Kernel (1 upstream): `bf16p8x4_bf16p12x4b_8x12_neon_mmla` (`BFMMLA`). LHS
//! packer `kai_lhs_pack_bf16p8x4_f16_neon`, RHS packer
//! `kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon` (format `bf16p12x4biasf16`,
//! K x N input; N x K weights are transposed in Rust first). The RHS K
//! padding (copies of weight row 0) is zeroed after packing.
//!
//! Tolerance of the conformance test: the f32 result before the final
//! rounding differs from the reference's by at most
//! `E = (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)` (as in
//! [`matmul_clamp_f32_bf16p_bf16p`](super::matmul_clamp_f32_bf16p_bf16p));
//! both are then rounded to f16, which can put them one f16 ulp apart:
//! `|err| <= E + 2⁻¹⁰ · |want| + 2⁻²⁴`.

use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::families::bf16p_bf16p::{bf16_core, round_bf16};
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f16_bf16p_bf16p";

/// The portable reference (test oracle and fallback): `dst = f16(clamp(bf16(lhs)
/// · bf16(w)ᵀ + bias))` for a dense `m x k` f16 LHS, `dst` `m x n`.
///
/// ```
/// use half::f16;
/// use kleidiai::families::matmul_clamp_f16_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let h = |x: f32| f16::from_f32(x);
/// let data = [h(1.0), h(2.0)];
/// let bias = [h(0.5)];
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &data, bias: Some(&bias) };
/// let mut y = [f16::ZERO];
/// reference(1, &[h(1.0), h(1.0)], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], h(3.5));
/// ```
pub fn reference(m: usize, lhs: &[f16], w: &FloatWeights<'_, f16>, clamp: Clamp, dst: &mut [f16]) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let x: Vec<f32> = lhs[..m * k].iter().map(|v| v.to_f32()).collect();
    let wq: Vec<f32> =
        w.to_nxk()?.into_iter().map(|v| round_bf16(v.to_f32())).collect();
    let bias: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
    let mut y = vec![0f32; m * n];
    bf16_core(m, &x, k, &wq, &bias, clamp, &mut y);
    for (d, v) in dst.iter_mut().zip(y) {
        *d = f16::from_f32(v);
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::bf16p_bf16p::{self as bf, Packers, bf16_kernel};

    // f16 in and out: the f16 LHS and RHS packers are the kernel's own.
    bf16_kernel! {
        interface: matmul_clamp_f16_bf16p_bf16p,
        lhs: f16,
        out: f16,
        rhs: bf::RHS_BF16P12X4BIASF16_F16_NEON,
        packers: |u| Packers::new(&bf::LHS_BF16P8X4_F16_NEON, &bf::RHS_BF16P12X4BIASF16_F16_NEON),
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;

    crate::families::bf16p_bf16p::test_support::bf16_tests!(seed: 0xf16b, ks: &[4, 7, 66], extra: |_, _| Ok(None));
}
