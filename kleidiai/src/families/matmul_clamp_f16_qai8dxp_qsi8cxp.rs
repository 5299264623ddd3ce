//! `matmul_clamp_f16_qai8dxp_qsi8cxp`: `dst (f16, m x n) = clamp(lhs (f16,
//! m x k) · wᵀ + bias)` with int8 weights and one f32 scale per output
//! channel ([`Int8PerChannel`]). The LHS is quantised per row to int8 on the
//! fly (`qai8dx`); products accumulate exactly in int32, are scaled, biased
//! and clamped in f32, and rounded to f16 (nearest even).
//!
//! Kernels (6 upstream): NEON fp16+dotprod GEMV (`1x4`, `1x8` blocks) and
//! GEMM (`16x4`), NEON fp16+i8mm GEMM, SME2 MOPA GEMM and dot GEMV. Packing:
//! LHS `kai_lhs_quant_pack_qai8dxp_f16_neon` for all (so every kernel here
//! also needs FEAT_FP16, which the SME2 ones do not list themselves); RHS
//! `kai_rhs_pack_{nxk,kxn}_qsi8cxp_qsi8cx_neon` (packed format `qsi8cxp`, the
//! one of `matmul_clamp_f32_qai8dxp_qsi8cxp`).
//!
//! The f16 LHS packer rounds values in its vector loop to nearest even and
//! the rest half away from zero, and where the loop stops depends on the
//! kernel's block length `kr / sr` (see [`crate::quant::qai8dx_rows_f16`]),
//! so the [`reference()`] takes a [`Qai8dxF16Block`] (`Kernel::lhs_block`) to
//! reproduce a kernel bit for bit; either gives a valid fallback. The packer
//! is called one row at a time: its four-rows-at-once path (the `mr` 4
//! kernels) truncates, and with blocks of 4 (`..._qai8dxp4x4_...`) adds
//! another row's zero point to half the values, an upstream bug (v1.30.0)
//! that would make those kernels' results wrong whenever the rows of a group have
//! different zero points.
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (the test also compares the packed LHS
//! integers), so the int32 dot products are identical and only the f32
//! epilogue differs, by at most `d = 1e-5 * (|want| + sum_k |x_k * w_k|) +
//! 1e-6`; an f32 difference that straddles an f16 rounding boundary moves
//! the output by one f16 step, so `|err| <= d + 2^-10 * (|want| + d)`.

use crate::formats::Int8PerChannel;
use crate::quant::Qai8dxF16Block;
use half::f16;

crate::families::qai8dxp_common::qai8dxp_family! {
    family: matmul_clamp_f16_qai8dxp_qsi8cxp,
    lhs: f16,
    out: f16,
    weights: Int8PerChannel,
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the f16 packer does for a
    /// kernel with blocks of `block` values.
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::matmul_clamp_f16_qai8dxp_qsi8cxp::reference;
    /// use kleidiai::formats::{Int8PerChannel, Order};
    /// use kleidiai::Clamp;
    /// let w = Int8PerChannel { n: 1, k: 2, order: Order::NxK, data: &[1, 2], scales: &[1.0], bias: Some(&[0.5]) };
    /// let mut y = [f16::ZERO];
    /// reference(1, &[f16::ONE, f16::ONE], &w, Clamp::NONE, Default::default(), &mut y).unwrap();
    /// assert_eq!(y[0], f16::from_f32(3.5));
    /// ```
    reference(block: Qai8dxF16Block),
    entry: |(u, i)| Entry::new::<f16>(u, fns!(i, Half), RhsFormat::Qsi8cxp, &[CpuFeature::Fp16], false),
    tests: {
        conformance_ks: [32, 33, 96],
        matmul_rows: [5],
        matmul_data: data = (0..40 * 5).map(|i| (i * 37 % 255) as u8 as i8),
        matmul_weights: Int8PerChannel { n: 5, k: 40, order: Order::KxN, data: &data, scales: &[0.01; 5], bias: None },
        matmul_close: |g, w| (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
    },
}
