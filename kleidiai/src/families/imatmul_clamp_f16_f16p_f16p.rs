//! `imatmul_clamp_f16_f16p_f16p`: indirect matmul in half precision, `dst
//! (f16, m x n) = clamp(f16(gather(lhs) · wᵀ + bias))` with f16 LHS,
//! weights and bias, on SME/SME2: widening `FMOPA` (f16 products,
//! f32 accumulation from the bias), one rounding to f16 at the end, then the
//! clamp with the bounds rounded to f16 (equivalent to clamping in f32 and
//! rounding, as rounding is monotonic).
//!
//! Kernels (2 upstream): `f16p2vlx2_f16p2vlx2_2vlx2vl_sme2_mopa` (SME2) and
//! `f16p2vlx2_f16p2vlx2b_2vlx2vl_sme_mopa` (SME); tiles of `2·SVL/32 x
//! 2·SVL/32`. Both read the same packed operands: LHS packer
//! `kai_lhs_imatmul_pack_x16p2vlx2_x16p_sme` (format `x16p2vlx2-imatmul`,
//! each chunk padded with zeros to an even length), RHS packer
//! `kai_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme` (K x N weights in the
//! same chunks, f16 bias required: zeros when there is none; format
//! `x16p2vlx2b-imatmul`). Packed layouts record `k = k_chunk_count ·
//! k_chunk_length` and `bl = k_chunk_length`.
//!
//! Tolerance of the conformance test: f16 products are exact in f32; the
//! f32 accumulation rounds at most once per product (at most `k + 1` steps
//! with the bias), each off by at most 2⁻²⁴ of a partial sum bounded by
//! `M = Σ_k |x·w| + |bias|`, and the reference rounds once more; both
//! results are then rounded to f16, which can put them one f16 ulp apart:
//! `|err| <= (k + 3) · 2⁻²⁴ · M + 2⁻¹⁰ · |want| + 2⁻²⁴`.

crate::families::indirect::float_family! {
    family: "imatmul_clamp_f16_f16p_f16p",
    elem: half::f16,
    /// The portable reference (test oracle and fallback): gathers the LHS
    /// rows through the indirection, accumulates `lhs · wᵀ + bias` in f64,
    /// rounds to f32, clamps, rounds to f16.
    ///
    /// ```
    /// use half::f16;
    /// use kleidiai::families::imatmul_clamp_f16_f16p_f16p::reference;
    /// use kleidiai::formats::{FloatWeights, Indirection, Order};
    /// use kleidiai::Clamp;
    /// let h = |x: f32| f16::from_f32(x);
    /// let src = [h(1.0), h(2.0)];
    /// let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 1, src: &src, chunks: &[Some(1), None], pad: h(0.0) };
    /// let data = [h(3.0), h(7.0)];
    /// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &data, bias: None };
    /// let mut y = [f16::ZERO];
    /// reference(&lhs, &w, Clamp { min: 0.0, max: 5.0 }, &mut y).unwrap();
    /// assert_eq!(y[0], h(5.0));
    /// ```
    reference,
    kernels: kleidiai_sys::interfaces::imatmul_clamp_f16_f16p_f16p::KERNELS,
    run: Clamp,
    rhs: &crate::families::indirect::X16P2VLX2B,
    lhs: Some(&crate::families::indirect::X16P2VLX2),
    packed: (half::f16, half::f16, clamp: crate::Clamp,
        /// `dst = clamp(f16(lhs · wᵀ + bias))`: `dst` is `m x n`, rows `n`
        /// apart; the clamp bounds are rounded to f16.
    ),
    float: half::f16
}

// Odd chunk lengths exercise the per-chunk padding to kr = 2; the tolerance
// is the module docs'.
#[cfg(all(test, target_arch = "aarch64"))]
crate::families::indirect::test_support::float_tests!(seed: 0x1f16, pad: 0.5, tol: |k, mag, y| {
    ((k + 3) as f64 * f64::powi(2.0, -24) * mag) as f32 + y.abs() * f32::powi(2.0, -10) + f32::powi(2.0, -24)
});
