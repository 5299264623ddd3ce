//! `matmul_clamp_qai8_qai8p_qsi8cxp`: statically quantised int8 GEMM with int8 weights:
//! `dst (int8, m x n) = requantize(lhs (int8, m x k) · wᵀ + bias)`.
//!
//! Kernels (3): `kai_matmul_clamp_qai8_qai8p2vlx4_qsi8cxp2vlx4sb_2vlx2vl_sme_mopa`
//! (SME) and `..._qsi8cxpsb2vlx4_2vlx2vl_sme2_mopa` (SME2), interface
//! kernels with LHS `kai_lhs_pack_x8p2vlx4_x8_sme` (format `qai8p2vlx4`)
//! and RHS `kai_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme` (format
//! `qsi8cxp2vlx4sb`, also read by the GEMV of `matmul_clamp_qai8_qai8_qsi8cxp`);
//! and `kai_matmul_clamp_qai8_qai8p4vsx4_qsi8cxp4vsx4bi32sf32_8vsx8vs_sme2_mopa`
//! (`kai_matmul_uker_api`) with LHS `kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme`
//! (format `qai8p4vsx4`) and RHS
//! `kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme` (format
//! `qsi8cxp4vsx4bi32sf32`). Both RHS packers read K x N weights; N x K
//! weights are transposed into a temporary first.
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
    /// use kleidiai::families::matmul_clamp_qai8_qai8p_qsi8cxp::reference;
    /// use kleidiai::formats::{Order, StaticInt8Weights};
    /// use kleidiai::quant::{Qai8Output, Qai8Quant};
    /// // One channel, weights [1, -2], bias 3.
    /// let w = StaticInt8Weights { n: 1, k: 2, order: Order::NxK, data: &[1, -2], scales: &[0.5], bias: Some(&[3]) };
    /// let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 1, dst_scale: 1.0 };
    /// let mut y = [0i8];
    /// reference(1, &[5, 2], &w, &q, &Qai8Output::unclamped(0), &mut y).unwrap();
    /// // (3 + (5-1)*1 + (2-1)*(-2)) * 0.5 = 2.5, rounded to even.
    /// assert_eq!(y[0], 2);
    /// ```
    family: matmul_clamp_qai8_qai8p_qsi8cxp,
    weights: StaticInt8Weights,
    lhs: packed,
    kernels: { iface: (X8p2vlx4, Qsi8cxp2vlx4sb), uker: (X8p4vsx4, Qsi8cxp4vsx4) },
}
