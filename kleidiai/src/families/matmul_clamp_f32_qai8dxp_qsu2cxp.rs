//! `matmul_clamp_f32_qai8dxp_qsu2cxp`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ + bias)` with 2-bit weight codes, a table mapping each code
//! to an int8 value, and one f32 scale per output channel
//! ([`UInt2PerChannel`]: `w = lut[code] * scale`). The LHS is quantised per
//! row to int8 on the fly (`qai8dx`, [`crate::quant::qai8dx_row`]); products
//! accumulate exactly in int32 and are scaled in f32.
//!
//! Kernels (4 upstream): NEON dotprod GEMV (`1x4`) and GEMM (`8x4`), SME2
//! MOPA GEMM and dot GEMV. `k` must be a multiple of 32 (packers and
//! kernels assume it). Packing: LHS `kai_lhs_quant_pack_qai8dxp_f32`; RHS
//! `kai_rhs_pack_nxk_qsu2cxp4x4bf32sf32_qsu2cx_neon` (packed format
//! `qsu2cxp4x4bf32sf32`, `nr` 4) for the NEON kernels and
//! `kai_rhs_pack_nxk_qsu2cxp4vlx4_qsu2cx_neon` (format `qsu2cxp4vlx4`) for
//! the SME2 ones, N x K input only. The packers bake the table into the
//! per-channel sums and the kernels read it again at run time, so the packed
//! buffer carries the table after the packer's bytes (16 i32, 4 used: the
//! SME2 kernels load 64 bytes into ZT0) and `Kernel::run` passes that one:
//! weights and table cannot be mismatched. The NEON GEMV kernel assumes one
//! row per call; `run` calls it row by row.
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (the test also compares the packed LHS
//! integers), so the int32 dot products are identical and only the f32
//! epilogue (scale product, bias add, in another order or fused) differs:
//! `|err| <= 1e-5 * (|want| + sum_k |x_k * w_k|) + 1e-6`.

use crate::formats::UInt2PerChannel;

/// Kernels whose run function has `KAI_ASSUME(m == 1)`.
#[cfg(target_arch = "aarch64")]
const SINGLE_ROW: &[&str] = &["kai_matmul_clamp_f32_qai8dxp1x4_qsu2cxp4x4bf32sf32_1x4_neon_dotprod"];

crate::families::qai8dxp_common::qai8dxp_family! {
    family: matmul_clamp_f32_qai8dxp_qsu2cxp,
    lhs: f32,
    out: f32,
    weights: UInt2PerChannel,
    /// The portable reference (test oracle and fallback): the family's math in
    /// scalar Rust, with the LHS quantised exactly as the kernels' packer does.
    /// Any `k` is accepted here; the kernels need a multiple of 32.
    ///
    /// ```
    /// use kleidiai::families::matmul_clamp_f32_qai8dxp_qsu2cxp::reference;
    /// use kleidiai::formats::UInt2PerChannel;
    /// use kleidiai::Clamp;
    /// // Codes 3 and 1 through the signed table: weights [1, -1].
    /// let w = UInt2PerChannel { n: 1, k: 2, data: &[0b01_11], scales: &[1.0], bias: Some(&[0.5]),
    ///                           lut: UInt2PerChannel::SIGNED_LUT };
    /// let mut y = [0f32];
    /// reference(1, &[1.0, -1.0], &w, Clamp::NONE, &mut y).unwrap();
    /// assert!((y[0] - 2.5).abs() < 1e-2);
    /// ```
    reference,
    entry: |(u, i)| {
        let sme2 = u.features.contains(&CpuFeature::Sme2);
        let rhs = if sme2 { RhsFormat::Qsu2cxp4vlx4 } else { RhsFormat::Qsu2cxp4x4 };
        Entry::new::<f32>(u, fns!(i, F32Lut), rhs, &[], SINGLE_ROW.contains(&u.name))
    },
    tests: {
        conformance_ks: [32, 96],
        matmul_rows: [1, 3],
        matmul_data: data = (0..5 * 16).map(|i| (i * 37 % 256) as u8),
        matmul_weights: UInt2PerChannel { n: 5, k: 64, data: &data, scales: &[0.01; 5], bias: None, lut: [3, -1, 0, 7] },
        matmul_close: |g, w| (g - w).abs() <= 1e-4,
    },
}
