//! `matmul_clamp_bf16_qai8dxp_qsi4cxp`: `dst (bf16, m x n) = clamp(lhs
//! (bf16, m x k) · wᵀ + bias)` with int4 weights and one f32 scale per
//! output channel ([`Int4PerChannel`]). The LHS is quantised per row to int8
//! on the fly (`qai8dx`); products accumulate exactly in int32, are scaled,
//! biased and clamped in f32, and rounded to bf16 (nearest even, `bfcvtn`).
//!
//! Kernels (2 upstream): NEON bf16+dotprod GEMV (`1x8`) and bf16+i8mm GEMM
//! (`8x8`). Packing: LHS `kai_lhs_quant_pack_qai8dxp_bf16_neon` (blocks of 8
//! values only, which both kernels use); RHS
//! `kai_rhs_pack_{nxk,kxn}_qsi4cxp_qs4cxs1s0` (packed format `qsi4cxp`, the
//! one of `matmul_clamp_f32_qai8dxp_qsi4cxp`).
//!
//! The bf16 packer rounds the first `8 * (k / 8)` values of a row to nearest
//! even and the rest half away from zero ([`crate::quant::qai8dx_rows_bf16`]);
//! the reference does the same.
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (the test also compares the packed LHS
//! integers), so the int32 dot products are identical and only the f32
//! epilogue differs, by at most `d = 1e-5 * (|want| + sum_k |x_k * w_k|) +
//! 1e-6`; an f32 difference that straddles a bf16 rounding boundary moves
//! the output by one bf16 step, so `|err| <= d + 2^-7 * (|want| + d)`.

use crate::formats::Int4PerChannel;
use half::bf16;

crate::families::qai8dxp_common::qai8dxp_family! {
    family: matmul_clamp_bf16_qai8dxp_qsi4cxp,
    lhs: bf16,
    out: bf16,
    weights: Int4PerChannel,
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the bf16 packer does.
    ///
    /// ```
    /// use half::bf16;
    /// use kleidiai::families::matmul_clamp_bf16_qai8dxp_qsi4cxp::reference;
    /// use kleidiai::formats::{Int4Encoding, Int4PerChannel, Order};
    /// use kleidiai::Clamp;
    /// let w = Int4PerChannel { n: 1, k: 2, order: Order::NxK, encoding: Int4Encoding::Signed,
    ///                          data: &[0x21], scales: &[1.0], bias: Some(&[0.5]) }; // [1, 2]
    /// let mut y = [bf16::ZERO];
    /// reference(1, &[bf16::ONE, bf16::ONE], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0], bf16::from_f32(3.5));
    /// ```
    reference,
    entry: |(u, i)| Entry::new::<bf16>(u, fns!(i, Half), RhsFormat::Qsi4cxp, &[], false),
    tests: {
        conformance_ks: [32, 33, 96],
        matmul_rows: [5],
        matmul_data: data = (0..40 * 3).map(|i| (i * 37 % 256) as u8),
        matmul_weights: {
            let (enc, order) = (Int4Encoding::Signed, Order::KxN);
            Int4PerChannel { n: 5, k: 40, order, encoding: enc, data: &data, scales: &[0.01; 5], bias: None }
        },
        matmul_close: |g, w| (g - w).abs() <= 1e-2 * (1.0 + w.abs()),
    },
}
