//! `matmul_clamp_f32_f32p_f32p`: `dst (f32, m x n) = clamp(lhs (f32, m x k)
//! · wᵀ + bias)` with both operands packed: f32 weights ([`FloatWeights`])
//! once, the LHS per call. All three kernels are SME outer-product (MOPA)
//! GEMM kernels.
//!
//! | kernel | tier | LHS format (packer) | RHS format (packers) |
//! |---|---|---|---|
//! | `f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa` | SME | `f32p2vlx1` (`lhs_pack_f32p2vlx1_f32_sme`) | `f32p2vlx1biasf32` (`rhs_pack_{nxk,kxn}_f32p2vlx1biasf32_f32_f32_sme`) |
//! | `f32p2vlx1_f32p2vlx1biasf32_sme2_mopa` | SME2 | `f32p2vlx1` | `f32p2vlx1biasf32` |
//! | `f32p4vsx1_f32p4vsx1bf32_8vsx8vs_sme2_mopa` (`kai_matmul_uker_api`) | SME2 | `x32p4vsx1` (`matmul_pack_lhs_mxk_x32p4vsx1_x32_sme`) | `x32p4vsx1bx32` (`matmul_pack_rhs_{nxk,kxn}_x32p4vsx1bx32_x32_x32_sme`) |
//!
//! The packed RHS formats are the ones the `matmul_clamp_f32_f32_f32p` SME
//! GEMV kernels read (`2vlx1b_1x{8,16}vl` and `4vsx1bf32_1x32vs`), so a
//! weight packed once serves both the GEMM (m > 1) and the GEMV (m = 1)
//! kernel, as ggml pairs them. A missing bias packs as zeros.
//!
//! Tolerance of the conformance test: as for `matmul_clamp_f32_f32_f32p`.
//! `fmopa za.s` accumulates f32 products in f32 (upstream's tests use an f32
//! reference), so for terms `t = (bias, x_1 w_1, ..., x_k w_k)` the test
//! allows `(k + 2) 2^-24 Σ|t| + 2^-24 |want|`: the worst case of any
//! summation order, plus the reference's single rounding.

super::float_common::float_family! {
    family: matmul_clamp_f32_f32p_f32p,
    elem: f32,
    /// The portable reference (test oracle and fallback): the same math as
    /// [`super::matmul_clamp_f32_f32_f32p::reference`].
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f32_f32p_f32p::reference;
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::Clamp;
    /// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[1.0, -1.0], bias: None };
    /// let mut y = [0f32; 2];
    /// reference(1, &[3.0], &w, Clamp { min: -2.0, max: 2.0 }, &mut y).unwrap();
    /// assert_eq!(y, [2.0, -2.0]);
    /// ```
    reference,
    packed: [("_f32p2vlx1_f32p2vlx1", &fc::F32P2VLX1, &fc::F32P2VLX1BIASF32),
             ("_f32p4vsx1_f32p4vsx1bf32_", &fc::X32P4VSX1, &fc::X32P4VSX1BX32)],
}
