//! `matmul_clamp_f32_qai8dxp_qsi8cxp`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ + bias)` with int8 weights and one f32 scale per output
//! channel ([`Int8PerChannel`]). The LHS is quantised per row to int8 on the
//! fly (`qai8dx`, [`crate::quant::qai8dx_row`]); products accumulate exactly
//! in int32 and are scaled in f32. This is the family ggml's Q8_0 path uses
//! (weights requantised per row to int8 with one scale).
//!
//! Kernels (8 upstream): NEON dotprod GEMV (`1x4`, `1x8` blocks) and GEMM
//! (`16x4`), NEON i8mm GEMM, SME and SME2 MOPA GEMM and dot GEMV. Packing:
//! LHS `kai_lhs_quant_pack_qai8dxp_f32` for all; RHS
//! `kai_rhs_pack_{nxk,kxn}_qsi8cxp_qsi8cx_neon` (packed format `qsi8cxp`,
//! LHS zero point 1) for all, the SME ones included (as upstream's tests
//! pair them), with `nr` a multiple of the streaming vector length there.
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (the test also compares the packed LHS
//! integers), so the int32 dot products are identical and only the f32
//! epilogue (scale product, bias add, in another order or fused) differs:
//! `|err| <= 1e-5 * (|want| + sum_k |x_k * w_k|) + 1e-6`.

use crate::formats::Int8PerChannel;

crate::families::qai8dxp_common::qai8dxp_family! {
    family: matmul_clamp_f32_qai8dxp_qsi8cxp,
    lhs: f32,
    out: f32,
    weights: Int8PerChannel,
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the kernels' packer does.
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f32_qai8dxp_qsi8cxp::reference;
    /// use kleidiai::formats::{Int8PerChannel, Order};
    /// use kleidiai::Clamp;
    /// let w = Int8PerChannel { n: 1, k: 2, order: Order::NxK, data: &[1, 2], scales: &[1.0], bias: Some(&[0.5]) };
    /// let mut y = [0f32];
    /// reference(1, &[1.0, 1.0], &w, Clamp::NONE, &mut y).unwrap();
    /// assert!((y[0] - 3.5).abs() < 1e-6);
    /// ```
    reference,
    entry: |(u, i)| Entry::new::<f32>(u, fns!(i, F32), RhsFormat::Qsi8cxp, &[], false),
    tests: {
        conformance_ks: [32, 33, 96],
        matmul_rows: [3],
        matmul_data: data = (0..5 * 40).map(|i| (i * 37 % 255) as u8 as i8),
        matmul_weights: Int8PerChannel { n: 5, k: 40, order: Order::NxK, data: &data, scales: &[0.01; 5], bias: None },
        matmul_close: |g, w| (g - w).abs() <= 1e-4,
    },
}
