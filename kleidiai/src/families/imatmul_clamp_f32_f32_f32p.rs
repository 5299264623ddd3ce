//! `imatmul_clamp_f32_f32_f32p`: indirect matmul with an unpacked LHS,
//! `dst (f32, m x n) = clamp(gather(lhs) · wᵀ + bias)`, on SVE: the kernel
//! follows the indirection table itself (no LHS packing step).
//!
//! Kernel (1 upstream): `f32p4vlx1b_6x4vl_sve_mla` (6 rows x 4 SVE vectors of
//! columns, `FMLA`); it runs at any SVE vector length, and its packed RHS
//! depends on it. RHS packer `kai_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve`
//! (K x N weights in chunks, bias required: zeros when there is none; format
//! `x32p4vlx1b-imatmul`, `k = k_chunk_count · k_chunk_length`, `bl =
//! k_chunk_length`). The LHS is an [`Indirection`](crate::formats::Indirection) (element offsets checked in
//! Rust; the pointer table, in blocks of 6 rows, is built here). Upstream
//! passes the chunk count and length to the kernel as 32-bit integers: both
//! must fit in `u32`.
//!
//! Tolerance of the conformance test: fused multiply-adds in f32, as for
//! [`imatmul_clamp_f32_f32p_f32p`](super::imatmul_clamp_f32_f32p_f32p):
//! `|err| <= (k + 3) · 2⁻²⁴ · (Σ_k |x·w| + |bias|)`.

crate::families::indirect::float_family! {
    family: "imatmul_clamp_f32_f32_f32p",
    elem: f32,
    /// The portable reference: identical to
    /// [`imatmul_clamp_f32_f32p_f32p::reference`](super::imatmul_clamp_f32_f32p_f32p::reference).
    ///
    /// ```
    /// # use kleidiai::families::imatmul_clamp_f32_f32_f32p::reference;
    /// # use kleidiai::{formats::*, Clamp};
    /// let src = [1.0f32, 2.0, 3.0];
    /// // Two rows of one chunk of 2: src[0..2] and src[1..3].
    /// let chunks = [Some(0), Some(1)];
    /// let lhs = Indirection { m: 2, k_chunk_count: 1, k_chunk_length: 2, src: &src, chunks: &chunks, pad: 0.0 };
    /// let mut y = [0f32; 2];
    /// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0f32, 10.0], bias: None };
    /// reference(&lhs, &w, Clamp::NONE, &mut y).unwrap();
    /// assert_eq!(y, [21.0, 32.0]);
    /// ```
    reference,
    kernels: kleidiai_sys::interfaces::imatmul_clamp_f32_f32_f32p::KERNELS,
    run: Direct,
    rhs: &crate::families::indirect::X32P4VLX1B,
    lhs: None,
    direct: (f32,
        /// `dst = clamp(gather(lhs) · wᵀ + bias)`: `dst` is `m x n`, rows
        /// `n` apart. The kernel reads the LHS through the indirection
        /// directly.
    ),
    float: f32
}

// The tolerance of imatmul_clamp_f32_f32p_f32p.
#[cfg(all(test, target_arch = "aarch64"))]
crate::families::indirect::test_support::float_tests!(seed: 0x5e, pad: -0.5, tol: |k, mag, _| {
    ((k + 3) as f64 * f64::powi(2.0, -24) * mag + 1e-30) as f32
});
