//! `matmul_clamp_f16_qsi8d32p_qai4c32p`: `dst (f16, m x n) = clamp(lhs (f16,
//! m x k) · wᵀ + bias)` with int4 weights quantised asymmetrically per block
//! of `bl` values (a multiple of 32) with an f32 scale and an f32 offset each
//! ([`Int4AsymBlock`](crate::formats::Int4AsymBlock)). The LHS is quantised
//! on the fly to int8, symmetric per block of `bl`
//! ([`crate::quant::qsi8d32_block_f16`]: ties away from zero); per block the
//! kernels compute `dot(q, v) * d * scale + offset * sum(q) * d`, exact
//! integer dots then f32, rounded to f16 at the end (clamp bounds are f32;
//! clamping and the monotonic rounding commute).
//!
//! Kernels (6 upstream): NEON dotprod GEMV `1x4` and `1x8`, dotprod GEMM
//! `8x4`, i8mm GEMM `8x4`; SME2 SDOT GEMV `1x4vl` and MOPA GEMM `1vlx4vl`.
//! Packing: LHS `kai_lhs_quant_pack_qsi8d32pscalef32_f16_neon` (FEAT_FP16,
//! counted among every kernel's features) for all; RHS
//! `kai_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon` (packed format
//! `qai4c32p`) for the NEON kernels, and for the SME2 kernels
//! `kai_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s1s0_f32_f32_f32_neon` or its
//! `s0s1` twin, whichever reads the weights' nibble order (format
//! `qai4c32ps1s0nrx4`). N x K weights only (upstream has no K x N packer).
//! The LHS must be finite (the packer's scale is undefined otherwise).
//!
//! Everything is shared with the f32 family (`families/qsi8d32p_qai4c32p.rs`,
//! generic over the element types); this module binds the upstream tables
//! (one `qai4_module!`).
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (same scale, ties to even), so every integer
//! dot product is identical and only the f32 combination differs (a few
//! roundings per block, in another order), after which both sides round to
//! f16: two f32 values that close can round to adjacent f16 values, so
//! `|err| <= 1e-5 * (sum_b (|dot_b d scale_b| + |offset_b s_b|) + |bias|) +
//! 2^-10 |want| + 1e-6` (one f16 ulp on top of the f32 bound). The SME2
//! MOPA kernel keeps its running sum in the f16 destination between blocks
//! (its source converts, adds one block, converts back), so for it each
//! block adds one more f16 rounding of a partial sum bounded by the same
//! magnitudes: `+ (k / bl) * 2^-11 * sum_b (...)`. The other five kernels
//! round once, at the end.

use half::f16;

super::qsi8d32p_qai4c32p::qai4_module! {
    family: matmul_clamp_f16_qsi8d32p_qai4c32p,
    elem: f16,
    quantize: crate::quant::qsi8d32_block_f16,
    lhs: F16,
    lhs_features: &[crate::cpu::CpuFeature::Fp16],
    run: Void,
    tests: (
        // Half an f16 ulp, relative; the SME2 MOPA kernel's running sum.
        1.0 / 2048.0,
        &["kai_matmul_clamp_f16_qsi8d32p1vlx4_qai4c32p4vlx4_1vlx4vl_sme2_mopa"],
    ),
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the kernels' packer does.
    /// `lhs` is dense `m x w.k`; `w.bl` must be a multiple of 32.
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f16_qsi8d32p_qai4c32p::reference;
    /// use kleidiai::formats::{Int4AsymBlock, Int4Encoding, NibbleOrder};
    /// use kleidiai::Clamp;
    /// use half::f16;
    /// // One channel of 32 weights, all `(9 - 8) * 0.5 + 0.25 = 0.75`.
    /// let w = Int4AsymBlock { n: 1, k: 32, bl: 32, encoding: Int4Encoding::Offset8,
    ///     nibbles: NibbleOrder::LowFirst, data: &[0x99; 16], scales: &[0.5], offsets: &[0.25], bias: None };
    /// let mut y = [f16::ZERO];
    /// reference(1, &[f16::ONE; 32], &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0].to_f32(), 24.0);
    /// ```
    reference,
}
