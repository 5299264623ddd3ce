//! `matmul_clamp_f16_f16p_f16p`: `dst (f16, m x n) = clamp(lhs (f16, m x k)
//! · wᵀ + bias)` with both operands packed: f16 weights and f16 bias
//! ([`FloatWeights`] of [`half::f16`]) once, the LHS per call. Both kernels
//! are SME outer-product (MOPA) GEMM kernels; clamp bounds are given as f32
//! and rounded to f16 by the kernels.
//!
//! | kernel | tier | LHS format (packer) | RHS format (packers) |
//! |---|---|---|---|
//! | `f16p2vlx2_f16p2vlx2b_2vlx2vl_sme_mopa` | SME | `x16p2vlx2` (`lhs_pack_x16p2vlx2_x16_sme`) | `x16p2vlx2b` (`rhs_pack_{nxk,kxn}_x16p2vlx2b_x16_x16_sme`) |
//! | `f16p2vlx2_f16p2vlx2_2vlx2vl_sme2_mopa` | SME2 | `x16p2vlx2` | `x16p2vlx2b` |
//!
//! The packed RHS format is the one the `matmul_clamp_f16_f16_f16p` SME
//! GEMV kernels read, so a weight packed once serves both the GEMM and the
//! GEMV kernel. A missing bias packs as zeros.
//!
//! Accumulation: `fmopa za.s` with f16 operands (widening, f32 accumulators;
//! upstream's tests set `acc_dt = FP32`), one rounding to f16 at the end.
//! The reference computes in f64 and rounds once to f16, so the test allows,
//! per output with terms `t = (bias, x_1 w_1, ..., x_k w_k)`,
//! `(k + 2) 2^-24 Σ|t| + (ulp16(want) + ulp16(got)) / 2`: the worst f32
//! summation error of any order, plus the two roundings to f16 landing on
//! either side of a rounding boundary.

super::float_common::float_family! {
    family: matmul_clamp_f16_f16p_f16p,
    elem: half::f16,
    /// The portable reference (test oracle and fallback): the same math as
    /// [`super::matmul_clamp_f16_f16_f16p::reference`] (f64, one rounding to f16).
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::matmul_clamp_f16_f16p_f16p::reference;
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::Clamp;
    /// let h = |v: f32| f16::from_f32(v);
    /// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[h(1.0), h(-1.0)], bias: None };
    /// let mut y = [f16::ZERO; 2];
    /// reference(1, &[h(3.0)], &w, Clamp { min: -2.0, max: 2.0 }, &mut y).unwrap();
    /// assert_eq!(y, [h(2.0), h(-2.0)]);
    /// ```
    reference,
    packed: [("_f16p2vlx2_f16p2vlx2", &fc::X16P2VLX2, &fc::X16P2VLX2B)],
}
