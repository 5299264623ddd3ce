//! `matmul_clamp_f32_f32_f32p`: `dst (f32, m x n) = clamp(lhs (f32, m x k)
//! · wᵀ + bias)` with f32 weights ([`FloatWeights`]) packed once, and the LHS
//! read as it is (no LHS packing).
//!
//! Kernels (8 upstream), with the packed RHS format each reads (see
//! `float_common` for the layout; format = upstream packer):
//!
//! | kernel | tier | tile | RHS format (packers) |
//! |---|---|---|---|
//! | `f32p16x1b_6x16_neon_mla`, `..._cortexa55` | NEON | 6 x 16 | `x32p16x1b` (`rhs_pack_nxk_x32p16x1bx32_x32_x32_neon`, `rhs_pack_kxn_x32p16x1b_x32_x32_neon`) |
//! | `f32p8x1biasf32_6x8x4_neon_mla` | NEON | 6 x 8 | `f32p8x1biasf32` (`rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon`) |
//! | `f32p4vlx1b_6x4vl_sve_mla` | SVE, any VL | 6 x 4 VL | `x32p4vlx1b` (`rhs_pack_kxn_x32p4vlx1b_x32_x32_sve`) |
//! | `f32p2vlx1b_1x8vl_sme_mla` | SME | GEMV, 8 SVL | `f32p2vlx1biasf32` (`rhs_pack_{nxk,kxn}_f32p2vlx1biasf32_f32_f32_sme`) |
//! | `f32p2vlx1b_1x16vl_sme2_mla` | SME2 | GEMV, 16 SVL | `f32p2vlx1biasf32` |
//! | `f32p16vlx1b_1x16vl_sme2_mla` | SME2 | GEMV, 16 SVL | `f32p16vlx1b` (`rhs_pack_kxn_f32p16vlx1b_f32_f32_sme`) |
//! | `f32p4vsx1bf32_1x32vs_sme2_mla` (`kai_matmul_uker_api`) | SME2 | GEMV, 1 SVL | `x32p4vsx1bx32` (`matmul_pack_rhs_{nxk,kxn}_x32p4vsx1bx32_x32_x32_sme`) |
//!
//! The GEMV kernels take one LHS row per call (upstream asserts `m == 1`);
//! `Kernel::run` calls them once per row, so every kernel accepts any `m`.
//! Where upstream has a packer for one weight order only, weights in the
//! other order are transposed into a temporary first. A missing bias packs
//! as zeros (upstream's packers require one). The `f32p2vlx1biasf32` and
//! `x32p4vsx1bx32` formats are also read by the `matmul_clamp_f32_f32p_f32p`
//! MOPA kernels: one packed RHS serves the GEMM and the GEMV kernel.
//!
//! Tolerance of the conformance test. Every kernel accumulates in f32
//! (upstream's tests use an f32 reference; the NEON and SVE kernels use
//! `fmla .4s`, the SME ones `fmla za.s`, in an order of their choosing), so
//! for one output with terms `t = (bias, x_1 w_1, ..., x_k w_k)` the error of
//! any summation order, fused or not, is at most `γ_{k+1} Σ|t|` with
//! `u = 2^-24`; the reference accumulates exact products in f64 (error
//! `≤ k 2^-53 Σ|t|`) and rounds once (`≤ u |want|`). The test allows
//! `(k + 2) u Σ|t| + u |want|`, which covers both.

super::float_common::float_family! {
    family: matmul_clamp_f32_f32_f32p,
    elem: f32,
    /// The portable reference (test oracle and fallback):
    /// `dst = clamp(lhs · wᵀ + bias)` for a dense `m x k` LHS, accumulated in
    /// f64 and rounded once.
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f32_f32_f32p::reference;
    /// use kleidiai::formats::{FloatWeights, Order};
    /// use kleidiai::Clamp;
    /// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0, 2.0], bias: Some(&[0.5]) };
    /// let mut y = [0f32];
    /// reference(1, &[1.0, 1.0], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0], 3.5);
    /// ```
    reference,
    direct: [("_f32p16x1b_", &fc::X32P16X1B), ("_f32p8x1biasf32_", &fc::F32P8X1BIASF32),
             ("_f32p4vlx1b_", &fc::X32P4VLX1B), ("_f32p2vlx1b_", &fc::F32P2VLX1BIASF32),
             ("_f32p16vlx1b_", &fc::F32P16VLX1B), ("_f32p4vsx1bf32_", &fc::X32P4VSX1BX32)],
}
