//! `matmul_clamp_f32_qsi8d32p_qai4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ + bias)` with int4 weights quantised asymmetrically per block
//! of `bl` values (a multiple of 32) with an f32 scale and an f32 offset each
//! ([`Int4AsymBlock`](crate::formats::Int4AsymBlock)). The LHS is quantised
//! on the fly to int8, symmetric per block of `bl`
//! ([`crate::quant::qsi8d32_block`]); per block the kernels compute
//! `dot(q, v) * d * scale + offset * sum(q) * d`, exact integer dots then
//! f32.
//!
//! Kernels (6 upstream): NEON dotprod GEMV `1x4` and `1x8`, dotprod GEMM
//! `8x4`, i8mm GEMM `8x4`; SME2 SDOT GEMV `1x4vl` and MOPA GEMM `1vlx4vl`.
//! Packing: LHS `kai_lhs_quant_pack_qsi8d32pscalef32_f32_neon` for all; RHS
//! `kai_rhs_pack_nxk_qai4c32p_qau4c32s0s1_f32_f32_f32_neon` (packed format
//! `qai4c32p`) for the NEON kernels, and for the SME2 kernels
//! `kai_rhs_pack_nxk_qai4c32ps1s0nrx4_qau4c32s1s0_f32_f32_f32_neon` or its
//! `s0s1` twin, whichever reads the weights' nibble order (format
//! `qai4c32ps1s0nrx4`). N x K weights only (upstream has no K x N packer).
//! The LHS must be finite (the packer's scale is undefined otherwise).
//!
//! Everything is shared with the f16 family (`families/qsi8d32p_qai4c32p.rs`,
//! generic over the element types); this module binds the upstream tables
//! (one `qai4_module!`).
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (same scale, ties to even), so every integer
//! dot product is identical and only the f32 combination differs (a few
//! roundings per block, in another order): `|err| <= 1e-5 * (sum_b (|dot_b d
//! scale_b| + |offset_b s_b|) + |bias|) + 1e-6`, about 20x the worst case of
//! `3 * nblocks` roundings of 2^-24 each for the shapes tested.

super::qsi8d32p_qai4c32p::qai4_module! {
    family: matmul_clamp_f32_qsi8d32p_qai4c32p,
    elem: f32,
    quantize: crate::quant::qsi8d32_block,
    lhs: F32,
    lhs_features: &[],
    run: F32,
    tests: (0.0, &[]),
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the kernels' packer does.
    /// `lhs` is dense `m x w.k`; `w.bl` must be a multiple of 32.
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f32_qsi8d32p_qai4c32p::reference;
    /// use kleidiai::formats::{Int4AsymBlock, Int4Encoding, NibbleOrder};
    /// use kleidiai::Clamp;
    /// // One channel of 32 weights, all `(9 - 8) * 0.5 + 0.25 = 0.75`.
    /// let w = Int4AsymBlock { n: 1, k: 32, bl: 32, encoding: Int4Encoding::Offset8,
    ///     nibbles: NibbleOrder::LowFirst, data: &[0x99; 16], scales: &[0.5], offsets: &[0.25], bias: None };
    /// let mut y = [0f32];
    /// reference(1, &[1.0; 32], &w, Clamp::NONE, &mut y).unwrap();
    /// assert!((y[0] - 24.0).abs() < 1e-4);
    /// ```
    reference,
}
