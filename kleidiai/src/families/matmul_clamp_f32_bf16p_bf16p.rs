//! `matmul_clamp_f32_bf16p_bf16p`: `dst (f32, m x n) = clamp(bf16(lhs) ·
//! bf16(w)ᵀ + bias)` on NEON with FEAT_BF16. Both operands are f32 in the
//! API; the packers round them to bf16 (round to nearest, ties to even: the
//! `BFCVT`/`BFCVTN` instructions under the default FPCR), the kernels multiply
//! bf16 pairs exactly and accumulate in f32, and the f32 bias is added in f32.
//!
//! Kernels (2 upstream): `bf16p1x4_bf16p12x4b_1x36_neon_dot` (GEMV, one LHS
//! row per call, `BFDOT`) and `bf16p8x4_bf16p12x4b_8x12_neon_mmla` (GEMM,
//! `BFMMLA`). LHS packers `kai_lhs_quant_pack_bf16p1x4_f32_neon` (GEMV) and
//! `kai_lhs_quant_pack_bf16p8x4_f32_neon` (GEMM); both kernels read the same
//! RHS format, `bf16p12x4biasf32` from `kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon`
//! (K x N input; N x K weights are transposed in Rust first), so one packed
//! RHS serves both. For f16 inputs upstream also has
//! `kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon` (same packed format, f32
//! bias) and `kai_lhs_pack_bf16p8x4_f16_neon` (GEMM), which need FEAT_FP16:
//! `Kernel::pack_rhs_f16`, `Kernel::pack_lhs_f16_into` and
//! [`reference_f16`].
//!
//! Upstream's RHS packer fills the K padding of the last group of 4 (when
//! `k % 4 != 0`) with copies of weight row 0 (the LHS padding is zero, so the
//! products vanish unless a weight is infinite or NaN); `Kernel::pack_rhs`
//! zeroes that padding after packing, so non-finite weights cannot leak into
//! other outputs.
//!
//! Tolerance of the conformance test: the reference rounds both operands
//! exactly as the packers do (bf16, RNE), so the products are the kernel's
//! products, exact in f32 (8-bit significands). Only the f32 sums differ:
//! `BFDOT`/`BFMMLA` round each partial sum (round-to-odd in the standard
//! BF16 mode), at most `2k` additions per output plus the bias, each off by
//! at most one f32 ulp of a partial sum bounded by `Σ|x·w| + |b|`:
//! `|err| <= (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)`.

use crate::error::{self, Result};
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_bf16p_bf16p";

/// The portable reference (test oracle and fallback): `dst = clamp(bf16(lhs)
/// · bf16(w)ᵀ + bias)` for a dense `m x k` f32 LHS, `dst` `m x n`.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0f32, 2.0], bias: Some(&[0.5]) };
/// let mut y = [0f32];
/// // 1.001 is not a bf16 value: it rounds to 1.0 first.
/// reference(1, &[1.001, 1.0], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 3.5);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    super::bf16p_bf16p::reference_f32(m, lhs, w, clamp, dst)
}

/// The reference for f16 inputs (upstream's f16 packers of this family):
/// f16 widens to f32 exactly, so this is [`fn@reference`] on the widened
/// values; the bias is f16 here, f32 in the packed weights (exact too).
pub fn reference_f16(
    m: usize,
    lhs: &[half::f16],
    w: &FloatWeights<'_, half::f16>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    w.validate()?;
    error::nonzero(m, "m")?;
    error::at_least(lhs.len(), error::mul(m, w.k, "lhs")?, "lhs")?;
    let x: Vec<f32> = lhs[..m * w.k].iter().map(|v| v.to_f32()).collect();
    let data: Vec<f32> = w.data[..w.n * w.k].iter().map(|v| v.to_f32()).collect();
    let bias: Option<Vec<f32>> = w.bias.map(|b| b[..w.n].iter().map(|v| v.to_f32()).collect());
    let wf = FloatWeights { n: w.n, k: w.k, order: w.order, data: &data, bias: bias.as_deref() };
    reference(m, &x, &wf, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::bf16p_bf16p::{self as bf, Packers, bf16_kernel};
    use crate::packed::{PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::{TileKind, tile_kind_for};
    use half::f16;

    // The GEMV kernel packs its LHS one row per call and has no f16 LHS
    // packer upstream (f16 rows are widened to f32); both kernels read one
    // RHS format, from f32 or f16 weights.
    bf16_kernel! {
        interface: matmul_clamp_f32_bf16p_bf16p,
        lhs: f32,
        out: f32,
        rhs: bf::RHS_BF16P12X4BIASF32_F32_NEON,
        packers: |u| {
            let gemv = tile_kind_for(u.name) == TileKind::Gemv;
            Packers {
                lhs: if gemv { &bf::LHS_BF16P1X4_F32_NEON } else { &bf::LHS_BF16P8X4_F32_NEON },
                lhs_f16: (!gemv).then_some(&bf::LHS_BF16P8X4_F16_NEON),
                rhs: &bf::RHS_BF16P12X4BIASF32_F32_NEON,
                rhs_f16: Some(&bf::RHS_BF16P12X4BIASF32_F16_NEON),
            }
        },
    }

    impl Kernel {
        /// As [`pack_rhs`](Self::pack_rhs) for f16 weights and bias (upstream's
        /// `kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon`, which also needs
        /// FEAT_FP16): the same packed format, usable by both kernels.
        pub fn pack_rhs_f16(&self, w: &FloatWeights<'_, f16>) -> Result<PackedRhs> {
            self.0.pack_rhs(w, true)
        }

        /// As [`pack_lhs_f16_into`](Self::pack_lhs_f16_into), allocating.
        pub fn pack_lhs_f16(
            &self,
            m: usize,
            k: usize,
            lhs: &[f16],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_f16_into(m, k, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs) for an f16 LHS: the GEMM kernel
        /// uses upstream's `kai_lhs_pack_bf16p8x4_f16_neon` (FEAT_FP16); the
        /// GEMV kernel has no f16 packer upstream, so rows are widened to
        /// f32 (exactly) and packed as f32, which rounds to the same bf16.
        pub fn pack_lhs_f16_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[f16],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            self.0.pack_lhs_into(m, k, lhs, lhs_stride, par, out, true)
        }
    }
}

#[cfg(test)]
mod reference_tests {
    use super::*;
    use crate::families::bf16p_bf16p::round_bf16;

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        // Halfway cases go to the even significand; others to the nearest.
        assert_eq!(round_bf16(1.0 + f32::powi(2.0, -8)), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 * f32::powi(2.0, -8)), 1.0 + f32::powi(2.0, -6));
        assert_eq!(round_bf16(1.0 + 1.5 * f32::powi(2.0, -8)), 1.0 + f32::powi(2.0, -7));
        assert_eq!(round_bf16(-1.0 - 1.5 * f32::powi(2.0, -8)), -1.0 - f32::powi(2.0, -7));
    }

    #[test]
    fn reference_orders_agree() {
        let kxn = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // k = 3 rows of n = 2
        let nxk = [1.0f32, 3.0, 5.0, 2.0, 4.0, 6.0];
        let a = FloatWeights { n: 2, k: 3, order: crate::formats::Order::KxN, data: &kxn, bias: None };
        let b = FloatWeights { n: 2, k: 3, order: crate::formats::Order::NxK, data: &nxk, bias: None };
        let (mut ya, mut yb) = ([0f32; 2], [0f32; 2]);
        reference(1, &[1.0, 1.0, 1.0], &a, Clamp::NONE, &mut ya).unwrap();
        reference(1, &[1.0, 1.0, 1.0], &b, Clamp::NONE, &mut yb).unwrap();
        assert_eq!(ya, [9.0, 12.0]);
        assert_eq!(ya, yb);
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::cpu::{CpuFeature, Features};
    use crate::families::bf16p_bf16p::round_bf16;
    use crate::families::bf16p_bf16p::test_support::{Case, bf16_tolerance, magnitudes};
    use crate::formats::Order;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::compare;
    use half::f16;

    /// The f16 packers, on every third case (where FP16 exists).
    fn f16_packers(kernel: &Kernel, c: &Case<'_, f32>) -> core::result::Result<Option<f64>, (usize, String)> {
        let (cases, m, n, k, order, clamp) = (c.cases, c.m, c.n, c.k, c.order, c.clamp);
        if c.ci % 3 != 1 || !Features::current().has(CpuFeature::Fp16) {
            return Ok(None);
        }
        let e = |c: usize| move |x: crate::Error| (c, x.to_string());
        let h = |v: &[f32]| -> Vec<f16> { v.iter().map(|&x| f16::from_f32(x)).collect() };
        let (dh, bh, lh) = (h(c.data), h(c.bias_v), h(c.lhs));
        let wh = FloatWeights { n, k, order, data: &dh, bias: c.has_bias.then_some(&bh[..]) };
        let mut want = vec![0f32; m * n];
        reference_f16(m, &lh, &wh, clamp, &mut want).map_err(e(cases))?;
        let wq: Vec<f32> = wh.to_nxk().unwrap().iter().map(|v| round_bf16(v.to_f32())).collect();
        let b: Vec<f32> = (0..n).map(|j| wh.bias_f32(j)).collect();
        let lf: Vec<f32> = lh.iter().map(|v| v.to_f32()).collect();
        let mags = magnitudes(m, &lf, k, &wq, &b);
        let packed = kernel.pack_rhs_f16(&wh).map_err(e(cases))?;
        let mut scratch = PackedLhs::empty();
        let mut dst = vec![f32::NAN; m * n];
        let par = Parallelism::Rayon(3);
        kernel.pack_lhs_f16_into(m, k, &lh, k, par, &mut scratch).map_err(e(cases))?;
        kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
        let err = compare(&dst, &want, |i, _| bf16_tolerance(k, mags[i]))
            .map_err(|x| (cases, format!("f16 inputs m={m} n={n} k={k}: {x}")))?;
        let mut row = vec![0f32; k];
        unpack_rhs_row(&packed, n - 1, &mut row).map_err(e(cases))?;
        if row[..] != wq[(n - 1) * k..n * k] {
            return Err((cases, format!("f16-packed unpack_rhs_row n={n} k={k} differs")));
        }
        Ok(Some(err))
    }

    crate::families::bf16p_bf16p::test_support::bf16_tests!(seed: 0xbf16, ks: &[4, 7, 66], extra: f16_packers);

    #[test]
    fn padding_is_zero_and_nonfinite_weights_stay_local() {
        let f = crate::cpu::Features::current();
        let kern = crate::testing::or_skip!(Kernel::select(4, &f));
        // k = 5: one padded group; an infinite weight in row 0 must only
        // affect the outputs of its own channel.
        let (n, k) = (3, 5);
        let mut data = vec![0.25f32; k * n];
        data[0] = f32::INFINITY; // (k 0, n 0) in K x N order
        let w = FloatWeights { n, k, order: Order::KxN, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let lhs = vec![1.0f32; 2 * k];
        let mut dst = vec![0f32; 2 * n];
        kern.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        for i in 0..2 {
            assert_eq!(dst[i * n], f32::MAX, "clamped to the f32 range");
            assert_eq!(dst[i * n + 1], 1.25);
            assert_eq!(dst[i * n + 2], 1.25);
        }
    }
}
