//! `matmul_clamp_f16_qai8dxp_qsi4cxp`: `dst (f16, m x n) = clamp(lhs (f16,
//! m x k) · wᵀ + bias)` with int4 weights and one f32 scale per output
//! channel ([`Int4PerChannel`]). The LHS is quantised per row to int8 on the
//! fly (`qai8dx`); products accumulate exactly in int32, are scaled, biased
//! and clamped in f32, and rounded to f16 (nearest even).
//!
//! Kernels (6 upstream): NEON fp16+dotprod GEMV (`1x4`, `1x8` blocks) and
//! GEMM (`16x4`), NEON fp16+i8mm GEMM, SME2 MOPA GEMM and SDOT GEMV. Packing:
//! LHS `kai_lhs_quant_pack_qai8dxp_f16_neon` for all (so every kernel here
//! also needs FEAT_FP16, which the SME2 ones do not list themselves); RHS
//! `kai_rhs_pack_{nxk,kxn}_qsi4cxp_qs4cxs1s0` (packed format `qsi4cxp`) for
//! the NEON kernels, `kai_rhs_pack_nxk_qsi4cxps1s0_qsu4cxs1s0_neon` (format
//! `qsi4cxps1s0`, N x K input only) for the SME2 ones, as upstream's tests
//! pair them. Both formats are byte for byte those of
//! `matmul_clamp_f32_qai8dxp_qsi4cxp`, so one packed weight serves both
//! families.
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

use crate::formats::Int4PerChannel;
use crate::quant::Qai8dxF16Block;
use half::f16;

crate::families::qai8dxp_common::qai8dxp_family! {
    family: matmul_clamp_f16_qai8dxp_qsi4cxp,
    lhs: f16,
    out: f16,
    weights: Int4PerChannel,
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the f16 packer does for a
    /// kernel with blocks of `block` values.
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::matmul_clamp_f16_qai8dxp_qsi4cxp::reference;
    /// use kleidiai::formats::{Int4Encoding, Int4PerChannel, Order};
    /// use kleidiai::Clamp;
    /// let w = Int4PerChannel { n: 1, k: 2, order: Order::NxK, encoding: Int4Encoding::Signed,
    ///                          data: &[0x21], scales: &[1.0], bias: Some(&[0.5]) }; // [1, 2]
    /// let mut y = [f16::ZERO];
    /// reference(1, &[f16::ONE, f16::ONE], &w, Clamp::NONE, Default::default(), &mut y).unwrap();
    /// assert_eq!(y[0], f16::from_f32(3.5));
    /// ```
    reference(block: Qai8dxF16Block),
    entry: |(u, i)| {
        // The SME2 kernels read the s1s0 layout of the NEON packer.
        let sme2 = u.features.contains(&CpuFeature::Sme2);
        let rhs = if sme2 { RhsFormat::Qsi4cxps1s0 } else { RhsFormat::Qsi4cxp };
        Entry::new::<f16>(u, fns!(i, Half), rhs, &[CpuFeature::Fp16], false)
    },
    tests: {
        conformance_ks: [32, 33, 96],
        matmul_rows: [5],
        matmul_data: data = (0..5 * 20).map(|i| (i * 37 % 256) as u8),
        matmul_weights: {
            let (enc, order) = (Int4Encoding::Offset8, Order::NxK);
            Int4PerChannel { n: 5, k: 40, order, encoding: enc, data: &data, scales: &[0.01; 5], bias: None }
        },
        matmul_close: |g, w| (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
    },
}
