//! `imatmul_clamp_f32_f32p_f32p`: indirect matmul, `dst (f32, m x n) =
//! clamp(gather(lhs) · wᵀ + bias)` where row `i` of the LHS is the
//! concatenation of `k_chunk_count` chunks of `k_chunk_length` f32 values
//! found through an [`Indirection`](crate::formats::Indirection) (a convolution's taps without an im2col
//! copy), on SME/SME2 with `FMOPA` outer products.
//!
//! Kernels (2 upstream): `f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa` (SME) and
//! `..._sme2_mopa` (SME2), tiles of `2·SVL/32 x 2·SVL/32`. LHS packer
//! `kai_lhs_imatmul_pack_x32p2vlx1_x32p_sme` (it follows the indirection
//! table; format `x32p2vlx1-imatmul`), RHS packer
//! `kai_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme` (K x N weights split in
//! the same chunks, bias required: zeros when there is none; format
//! `x32p2vlx1b-imatmul`). Packed layouts record `k = k_chunk_count ·
//! k_chunk_length` and `bl = k_chunk_length`.
//!
//! The safe API never takes pointers: chunks are element offsets into one
//! source slice, checked by [`Indirection::validate`](crate::formats::Indirection::validate); the pointer table
//! upstream reads is built here from them (padding chunks point at a buffer
//! of `pad` values owned by the call).
//!
//! Tolerance of the conformance test: the products are accumulated in f32
//! with fused multiply-adds (one rounding per step, at most `k + 1` steps
//! with the bias), each off by at most 2⁻²⁴ of a partial sum bounded by
//! `Σ_k |x·w| + |bias|`; the reference (f64) rounds once more:
//! `|err| <= (k + 3) · 2⁻²⁴ · (Σ_k |x·w| + |bias|)`.

crate::families::indirect::float_family! {
    family: "imatmul_clamp_f32_f32p_f32p",
    elem: f32,
    /// The portable reference (test oracle and fallback): gathers the LHS
    /// rows through the indirection and computes `clamp(lhs · wᵀ + bias)`
    /// (f64 accumulation); `dst` is `m x n`.
    ///
    /// ```
    /// use kleidiai::{Clamp, families::imatmul_clamp_f32_f32p_f32p::reference};
    /// use kleidiai::formats::{FloatWeights, Indirection, Order};
    /// // One output row made of chunk src[2..4] then a padding chunk.
    /// let src = [0.0f32, 0.0, 1.0, 2.0];
    /// let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 2, src: &src, chunks: &[Some(2), None], pad: 0.0 };
    /// let w = FloatWeights { n: 1, k: 4, order: Order::NxK, data: &[1.0f32, 1.0, 5.0, 5.0], bias: Some(&[0.5]) };
    /// let mut y = [0f32];
    /// reference(&lhs, &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y[0], 3.5);
    /// ```
    reference,
    kernels: kleidiai_sys::interfaces::imatmul_clamp_f32_f32p_f32p::KERNELS,
    run: Clamp,
    rhs: &crate::families::indirect::X32P2VLX1B,
    lhs: Some(&crate::families::indirect::X32P2VLX1),
    packed: (f32, f32, clamp: crate::Clamp,
        /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
    ),
    float: f32
}

#[cfg(all(test, target_arch = "aarch64"))]
crate::families::indirect::test_support::float_tests!(seed: 0x1a7, pad: 0.25, tol: |k, mag, _| {
    ((k + 3) as f64 * f64::powi(2.0, -24) * mag + 1e-30) as f32
});
