//! `imatmul_clamp_f32_f32p_f32p`: indirect matmul, `dst (f32, m x n) =
//! clamp(gather(lhs) · wᵀ + bias)` where row `i` of the LHS is the
//! concatenation of `k_chunk_count` chunks of `k_chunk_length` f32 values
//! found through an [`Indirection`] (a convolution's taps without an im2col
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
//! source slice, checked by [`Indirection::validate`]; the pointer table
//! upstream reads is built here from them (padding chunks point at a buffer
//! of `pad` values owned by the call).
//!
//! Tolerance of the conformance test: the products are accumulated in f32
//! with fused multiply-adds (one rounding per step, at most `k + 1` steps
//! with the bias), each off by at most 2⁻²⁴ of a partial sum bounded by
//! `Σ_k |x·w| + |bias|`; the reference (f64) rounds once more:
//! `|err| <= (k + 3) · 2⁻²⁴ · (Σ_k |x·w| + |bias|)`.

use crate::error::Result;
use crate::formats::{FloatWeights, Indirection};
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "imatmul_clamp_f32_f32p_f32p";

/// The portable reference (test oracle and fallback): gathers the LHS rows
/// through the indirection and computes `clamp(lhs · wᵀ + bias)` (f64
/// accumulation); `dst` is `m x n`.
///
/// ```
/// use kleidiai::families::imatmul_clamp_f32_f32p_f32p::reference;
/// use kleidiai::formats::{FloatWeights, Indirection, Order};
/// use kleidiai::Clamp;
/// // One output row made of chunk src[2..4] then a padding chunk.
/// let src = [0.0f32, 0.0, 1.0, 2.0];
/// let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 2, src: &src, chunks: &[Some(2), None], pad: 0.0 };
/// let w = FloatWeights { n: 1, k: 4, order: Order::NxK, data: &[1.0f32, 1.0, 5.0, 5.0], bias: Some(&[0.5]) };
/// let mut y = [0f32];
/// reference(&lhs, &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 3.5);
/// ```
pub fn reference(lhs: &Indirection<'_, f32>, w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    super::indirect::reference_float(lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::indirect::{self as ind, imatmul_kernel};
    use kleidiai_sys::interfaces::imatmul_clamp_f32_f32p_f32p::KERNELS;

    imatmul_kernel! {
        kernels: KERNELS, run: Clamp, rhs: &ind::X32P2VLX1B, lhs: Some(&ind::X32P2VLX1),
        packed: (f32, f32, clamp: Clamp,
            /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
        ),
        float: f32
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use crate::families::indirect::test_support::*;
    use super::*;
    use crate::formats::Order;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let (ms, ns) = {
                let l = kernel.lhs_layout(1, 1, 1).map_err(e(0))?;
                let r = kernel.rhs_layout(1, 1, 1).map_err(e(0))?;
                (l.r, r.r)
            };
            // k as (chunks, chunk length): one chunk, odd lengths, several chunks.
            let kc = [(1usize, 3usize), (3, 5), (4, 7)];
            let shapes = tail_shapes(ms, ms, ns, ns, &[0, 1, 2]);
            let mut rng = Rng::new(0x1a7);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, kci)) in shapes.iter().enumerate() {
                let (kcc, kcl) = kc[kci];
                let k = kcc * kcl;
                let src = rng.vec_f32(m * k / 2 + kcl + 3);
                let table = chunks(&mut rng, m, kcc, kcl, src.len());
                let pad = if ci % 3 == 0 { 0.25 } else { 0.0 };
                let lhs = Indirection { m, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &table, pad };
                let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
                let data = rng.vec_f32(n * k);
                let bias_v = rng.vec_f32(n);
                let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
                let w = FloatWeights { n, k, order, data: &data, bias };
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![0f32; m * n];
                reference(&lhs, &w, clamp, &mut want).map_err(e(cases))?;
                let wd = w.to_nxk().unwrap();
                let b: Vec<f32> = (0..n).map(|j| w.bias.map_or(0.0, |b| b[j])).collect();
                let mags = magnitudes(m, &lhs.gather().unwrap(), k, &wd, &b);
                let packed = kernel.pack_rhs(&w, kcc, kcl).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![f32::NAN; m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(&lhs, par, &mut scratch).map_err(e(cases))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let err =
                        compare(&dst, &want, |i, _| ((k + 3) as f64 * f64::powi(2.0, -24) * mags[i] + 1e-30) as f32)
                            .map_err(|x| (cases, format!("m={m} n={n} k={kcc}x{kcl} threads={threads}: {x}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(dst),
                        Some(f) if !bit_identical(f, &dst) => {
                            return Err((cases, format!("m={m} n={n}: {threads} threads differ from 1")));
                        }
                        _ => {}
                    }
                }
                let mut row = vec![0f32; k];
                for r in [0, n / 2, n - 1] {
                    unpack_rhs_row(&packed, r, &mut row).map_err(e(cases))?;
                    if row[..] != wd[r * k..(r + 1) * k] {
                        return Err((cases, format!("unpack_rhs_row({r}) n={n} k={kcc}x{kcl} differs")));
                    }
                }
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &f) else {
            return;
        };
        let (n, kcc, kcl) = (8, 2, 3);
        let data = vec![0.5f32; n * kcc * kcl];
        let w = FloatWeights { n, k: kcc * kcl, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w, kcc, kcl).unwrap();
        let src = vec![0.5f32; 8];
        let chunks = [Some(0), Some(5), None, Some(2)];
        let lhs = Indirection { m: 2, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &chunks, pad: 0.0 };
        for other in Kernel::all().filter(|x| x.info().supported(&f).is_ok()) {
            let mut dst = vec![0f32; 2 * n];
            other.imatmul(&lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
            assert!(dst[..n].iter().all(|&y| y == 1.5) && dst[n..].iter().all(|&y| y == 0.75), "{dst:?}");
        }
        // Same k, other chunking: refused.
        let p2 = k1.pack_rhs(&w, 3, 2).unwrap();
        let mut dst = vec![0f32; 2 * n];
        let r = k1.imatmul(&lhs, &p2, &mut dst, Clamp::NONE, Parallelism::Sequential);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(4, &f) else {
            return;
        };
        let data = vec![0f32; 4 * 6];
        let w = FloatWeights { n: 4, k: 6, order: Order::NxK, data: &data, bias: None };
        assert!(kern.pack_rhs(&w, 4, 2).is_err(), "k mismatch");
        assert!(kern.pack_rhs(&w, 0, 6).is_err(), "zero chunks");
        let packed = kern.pack_rhs(&w, 2, 3).unwrap();
        let src = [0f32; 6];
        let ok = [Some(0), Some(3)];
        let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &ok, pad: 0.0 };
        let mut dst = vec![0f32; 4];
        let seq = Parallelism::Sequential;
        kern.imatmul(&lhs, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(kern.imatmul(&lhs, &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        let outside = [Some(0), Some(4)];
        let bad = Indirection { chunks: &outside, ..lhs };
        assert!(kern.imatmul(&bad, &packed, &mut dst, Clamp::NONE, seq).is_err(), "chunk outside src");
        let short = Indirection { chunks: &ok[..1], ..lhs };
        assert!(kern.imatmul(&short, &packed, &mut dst, Clamp::NONE, seq).is_err(), "short table");
        let zero = Indirection { m: 0, ..lhs };
        assert!(kern.pack_lhs(&zero, seq).is_err(), "m = 0");
        let huge = Indirection { m: usize::MAX / 2, ..lhs };
        assert!(kern.pack_lhs(&huge, seq).is_err(), "overflow");
        assert!(reference(&lhs, &FloatWeights { k: 5, data: &data[..20], ..w }, Clamp::NONE, &mut dst).is_err());
    }
}
