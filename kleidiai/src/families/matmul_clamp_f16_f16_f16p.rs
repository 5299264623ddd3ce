//! `matmul_clamp_f16_f16_f16p`: `dst (f16, m x n) = clamp(lhs (f16, m x k)
//! · wᵀ + bias)` with f16 weights and an f16 bias ([`FloatWeights`] of
//! [`half::f16`]) packed once, and the LHS read as it is. Clamp bounds are
//! given as f32 and rounded to f16 by the kernels.
//!
//! | kernel | tier | tile | accumulates in | RHS format (packers) |
//! |---|---|---|---|---|
//! | `f16p32x1b_6x32_neon_mla`, `..._cortexa55` | NEON FP16 | 6 x 32 | f16 (`fmla .8h`) | `x16p32x1b` (`rhs_pack_nxk_x16p32x1bx16_x16_x16_neon`, `rhs_pack_kxn_x16p32x1b_x16_x16_neon`) |
//! | `f16p16x1biasf16_6x16x8_neon_mla` | NEON FP16 | 6 x 16 | f16 (`fmla .8h`) | `f16p16x1biasf16` (`rhs_pack_kxn_f16p16x1biasf16_f16_f16_neon`) |
//! | `f16p2vlx2b_1x8vl_sme_mla` | SME | GEMV, 8 SVL | f32 (`fmlalb/fmlalt`) | `x16p2vlx2b` (`rhs_pack_{nxk,kxn}_x16p2vlx2b_x16_x16_sme`) |
//! | `f16p2vlx2b_1x16vl_sme2_dot` | SME2 | GEMV, 16 SVL | f32 (`fdot za.s`) | `x16p2vlx2b` |
//! | `f16p16vsx2bf16_6x16vs_sve2p1_dot` (`kai_matmul_uker_api`) | SVE2.1, any VL | 6 x 16 vscale | f32 (`fdot z.s`) | `x16p16vsx2bx16` (`rhs_pack_kxn_x16p16vsx2bx16_x16_x16_sve`) |
//!
//! The GEMV kernels take one LHS row per call (upstream asserts `m == 1`);
//! `Kernel::run` calls them once per row. Weights in an order upstream
//! has no packer for are transposed into a temporary first; a missing bias
//! packs as zeros. `x16p2vlx2b` is also the RHS format of the
//! `matmul_clamp_f16_f16p_f16p` MOPA kernels: one packed RHS serves both.
//!
//! Accumulation, from upstream's tests (`acc_dt = FP32` for the SME
//! kernels, `FP32` for the SVE2.1 kernel in the next-generation tests) and
//! the kernels' instructions: the NEON kernels load the bias into f16
//! accumulators and apply one fused f16 multiply-add per `k`, in order; the
//! others accumulate in f32 and round once to f16.
//!
//! The reference computes in f64 from the f16 inputs and rounds once to f16.
//! Tolerance of the conformance test, per output with terms
//! `t = (bias, x_1 w_1, ..., x_k w_k)`:
//! - f32 accumulation: the kernel's f32 sum is within `(k + 2) 2^-24 Σ|t|`
//!   of the exact one (any order); both sides then round to f16, so they
//!   can differ by that plus half an f16 ulp at each result:
//!   `(k + 2) 2^-24 Σ|t| + (ulp16(want) + ulp16(got)) / 2`.
//! - f16 accumulation: each fused step `s_p = fl(s_{p-1} + x_p w_p)` errs by
//!   at most `u |s_p|` (`u = 2^-11`), so the running-error bound is
//!   `u Σ_p |s_p| / (1 - k u)` with `s_p` the exact partial sums from the
//!   bias, plus `k 2^-25` for f16 underflow, plus half an ulp for the
//!   reference's own rounding. This is the worst case of f16 accumulation,
//!   not a loosened f32 bound: for `k = 40` and inputs in [-1, 1] it is
//!   typically 0.02 (observed: up to 0.012), while the f32-accumulating
//!   kernels stay within one f16 ulp.

super::float_common::float_family! {
    family: matmul_clamp_f16_f16_f16p,
    elem: half::f16,
    /// The portable reference (test oracle and fallback):
    /// `dst = clamp(lhs · wᵀ + bias)` computed in f64 from the f16 inputs,
    /// clamped, rounded once to f16.
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::matmul_clamp_f16_f16_f16p::reference;
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::Clamp;
    /// let h = |v: f32| f16::from_f32(v);
    /// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[h(1.0), h(2.0)], bias: Some(&[h(0.5)]) };
    /// let mut y = [f16::ZERO];
    /// reference(1, &[h(1.0), h(1.0)], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0], h(3.5));
    /// ```
    reference,
    direct: [("_f16p32x1b_", &fc::X16P32X1B), ("_f16p16x1biasf16_", &fc::F16P16X1BIASF16),
             ("_f16p2vlx2b_", &fc::X16P2VLX2B), ("_f16p16vsx2bf16_", &fc::X16P16VSX2BX16)],
}
