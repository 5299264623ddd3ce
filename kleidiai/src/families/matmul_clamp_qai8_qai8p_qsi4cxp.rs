//! `matmul_clamp_qai8_qai8p_qsi4cxp`: statically quantised int8 GEMM with int4 weights:
//! `dst (int8, m x n) = requantize(lhs (int8, m x k) · wᵀ + bias)`.
//!
//! Kernel (1, `kai_matmul_uker_api`, SME2):
//! `kai_matmul_clamp_qai8_qai8p8vsx4_qsi4cxp8vsx4sf32bi32_8vsx8vs_sme2_mopa`.
//! LHS `kai_lhs_pack_x8p2vlx4_x8_sme` (format `qai8p2vlx4`: its `mr`, two
//! streaming vectors of int32, is the kernel's `8 * vscale`); RHS
//! `kai_matmul_pack_rhs_{nxk,kxn}_qsi4cxp8vsx4sf32bi32_{qsi4cx,qsu4cx}_f32_i32_sme`
//! (upstream files `kai_rhs_pack_*`), the one matching the weights' order
//! and [`Int4Encoding`](crate::formats::Int4Encoding); packed format
//! `qsi4cxp8vsx4sf32bi32`, shared with `matmul_clamp_qai8_qai8_qsi4cxp`.
//!
//! Math (shared with the other three `qai8` families, `families/qai8.rs`):
//! the LHS is `x = (a - lhs_zero_point) * lhs_scale`, the weights
//! `w = q * scale[j]`, the bias an int32 in accumulator units; each output is
//! `requantize(bias'[j] + sum_k a * q, scale[j] * lhs_scale / dst_scale)`
//! where the RHS packer folded the zero point into `bias'` and the scale
//! ratio into the per-channel scale ([`crate::quant::requantize`]: f32
//! conversion, multiply, round half to even, saturate, add the output zero
//! point, clamp). A packed RHS is therefore tied to its [`Qai8Quant`](crate::quant::Qai8Quant).
//!
//! Tolerance of the conformance test: none. The reference performs the
//! packers' int32 bias correction and f32 scale product and the kernels'
//! requantisation (read from their source) in the same order, so every
//! output must be equal (upstream's own test allows a difference of 1).

super::qai8::qai8_family! {
    /// ```
    /// use kleidiai::families::matmul_clamp_qai8_qai8p_qsi4cxp::reference;
    /// use kleidiai::formats::{Int4Encoding, Order, StaticInt4Weights};
    /// use kleidiai::quant::{Qai8Output, Qai8Quant};
    /// // One channel, weights [1, -2] (signed nibbles), bias 3.
    /// let w = StaticInt4Weights { n: 1, k: 2, order: Order::NxK, encoding: Int4Encoding::Signed,
    ///     data: &[0xE1], scales: &[0.5], bias: Some(&[3]) };
    /// let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 1, dst_scale: 1.0 };
    /// let mut y = [0i8];
    /// reference(1, &[5, 2], &w, &q, &Qai8Output::unclamped(0), &mut y).unwrap();
    /// // (3 + (5-1)*1 + (2-1)*(-2)) * 0.5 = 2.5, rounded to even.
    /// assert_eq!(y[0], 2);
    /// ```
    family: matmul_clamp_qai8_qai8p_qsi4cxp,
    weights: StaticInt4Weights,
    lhs: packed,
    kernels: { uker: (X8p2vlx4, Qsi4cxp8vsx4) },
}
