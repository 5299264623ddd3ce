//! `matmul_clamp_fp32_bf16p_bf16p`: the SME/SME2 kernels of
//! `dst (f32, m x n) = clamp(bf16(lhs) · bf16(w)ᵀ + bias)`: the same math as
//! [`matmul_clamp_f32_bf16p_bf16p`](super::matmul_clamp_f32_bf16p_bf16p)
//! (upstream keeps them in a directory of their own, with the same
//! interface type), computed with `BFMOPA` outer products in streaming mode.
//! ggml runs the SME2 kernel for F16 weights (converted to f32 K x N first).
//!
//! Kernels (2 upstream): `bf16p2vlx2_bf16p2vlx2_2vlx2vl_sme_mopa` (SME) and
//! `..._sme2_mopa` (SME2); tiles of `2·SVL/32 x 2·SVL/32`, so packed layouts
//! depend on the streaming vector length. LHS packers
//! `kai_lhs_pack_bf16p2vlx2_f32_sme` / `kai_lhs_pack_bf16p2vlx2_f32_sme2`
//! (same packed format); RHS packer `kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme`
//! (format `bf16p2vlx2biasf32`, K x N input, bias required: zeros are passed
//! when there is none). Upstream lists that RHS packer in its SME2 source
//! group, but it executes only SME instructions and upstream's own tests use
//! it with the SME kernel on SME-only CPUs, as this module does. Its K
//! padding (odd `k`) holds copies of weight row 0; it is zeroed after packing.
//!
//! Tolerance of the conformance test: as for the NEON family (same rounding
//! of the operands, exact bf16 products, at most `2k` rounded f32 additions):
//! `|err| <= (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)`.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_fp32_bf16p_bf16p";

/// The portable reference: identical to
/// [`matmul_clamp_f32_bf16p_bf16p::reference`](super::matmul_clamp_f32_bf16p_bf16p::reference)
/// (operands rounded to bf16 as the packers do, f64 accumulation).
///
/// ```
/// use kleidiai::families::matmul_clamp_fp32_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[2.0f32, -1.0], bias: None };
/// let mut y = [0f32; 2];
/// reference(1, &[3.0], &w, Clamp { min: -2.0, max: 5.0 }, &mut y).unwrap();
/// assert_eq!(y, [5.0, -2.0]);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    super::bf16p_bf16p::reference_f32(m, lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::CpuFeature;
    use crate::families::bf16p_bf16p::{self as bf, Packers, bf16_kernel};

    // The SME2 kernel packs its LHS with the `_sme2` packer (same format).
    bf16_kernel! {
        interface: matmul_clamp_fp32_bf16p_bf16p,
        lhs: f32,
        out: f32,
        rhs: bf::RHS_BF16P2VLX2BIASF32_F32_SME,
        packers: |u| {
            let sme2 = u.features.contains(&CpuFeature::Sme2);
            let lhs = if sme2 { &bf::LHS_BF16P2VLX2_F32_SME2 } else { &bf::LHS_BF16P2VLX2_F32_SME };
            Packers::new(lhs, &bf::RHS_BF16P2VLX2BIASF32_F32_SME)
        },
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;

    crate::families::bf16p_bf16p::test_support::bf16_tests!(seed: 0xf32b, ks: &[2, 7, 34], extra: |_, _| Ok(None));
}
