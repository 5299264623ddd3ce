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

use crate::error::Result;
use crate::formats::{FloatWeights, Indirection};
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "imatmul_clamp_f16_f16p_f16p";

/// The portable reference (test oracle and fallback): gathers the LHS rows
/// through the indirection, accumulates `lhs · wᵀ + bias` in f64, rounds to
/// f32, clamps, rounds to f16.
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
pub fn reference(lhs: &Indirection<'_, f16>, w: &FloatWeights<'_, f16>, clamp: Clamp, dst: &mut [f16]) -> Result<()> {
    super::indirect::reference_float(lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::families::indirect::{self as ind, imatmul_kernel};
    use kleidiai_sys::interfaces::imatmul_clamp_f16_f16p_f16p::KERNELS;

    imatmul_kernel! {
        kernels: KERNELS, run: Clamp, rhs: &ind::X16P2VLX2B, lhs: Some(&ind::X16P2VLX2),
        packed: (f16, f16, clamp: Clamp,
            /// `dst = clamp(f16(lhs · wᵀ + bias))`: `dst` is `m x n`, rows `n`
            /// apart; the clamp bounds are rounded to f16.
        ),
        float: f16
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::indirect::test_support::*;
    use crate::formats::Order;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    fn h(v: Vec<f32>) -> Vec<f16> {
        v.into_iter().map(f16::from_f32).collect()
    }

    fn f(v: &[f16]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }

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
            // Odd chunk lengths exercise the per-chunk padding to kr = 2.
            let kc = [(1usize, 3usize), (3, 5), (4, 7)];
            let shapes = tail_shapes(ms, ms, ns, ns, &[0, 1, 2]);
            let mut rng = Rng::new(0x1f16);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, kci)) in shapes.iter().enumerate() {
                let (kcc, kcl) = kc[kci];
                let k = kcc * kcl;
                let src = h(rng.vec_f32(m * k / 2 + kcl + 3));
                let table = chunks(&mut rng, m, kcc, kcl, src.len());
                let pad = f16::from_f32(if ci % 3 == 0 { 0.5 } else { 0.0 });
                let lhs = Indirection { m, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &table, pad };
                let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
                let data = h(rng.vec_f32(n * k));
                let bias_v = h(rng.vec_f32(n));
                let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
                let w = FloatWeights { n, k, order, data: &data, bias };
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![f16::ZERO; m * n];
                reference(&lhs, &w, clamp, &mut want).map_err(e(cases))?;
                let want = f(&want);
                let wd = f(&w.to_nxk().unwrap());
                let b: Vec<f32> = (0..n).map(|j| w.bias.map_or(0.0, |b| b[j].to_f32())).collect();
                let mags = magnitudes(m, &f(&lhs.gather().unwrap()), k, &wd, &b);
                let packed = kernel.pack_rhs(&w, kcc, kcl).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![f16::NAN; m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(&lhs, par, &mut scratch).map_err(e(cases))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let dst = f(&dst);
                    let err = compare(&dst, &want, |i, y| {
                        ((k + 3) as f64 * f64::powi(2.0, -24) * mags[i]) as f32
                            + y.abs() * f32::powi(2.0, -10)
                            + f32::powi(2.0, -24)
                    })
                    .map_err(|x| (cases, format!("m={m} n={n} k={kcc}x{kcl} threads={threads}: {x}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(dst),
                        Some(fst) if !bit_identical(fst, &dst) => {
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
        let feats = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &feats) else {
            return;
        };
        let (n, kcc, kcl) = (8, 2, 3);
        let half = f16::from_f32(0.5);
        let data = vec![half; n * kcc * kcl];
        let w = FloatWeights { n, k: kcc * kcl, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w, kcc, kcl).unwrap();
        let src = vec![half; 8];
        let chunks = [Some(0), Some(5), None, Some(2)];
        let lhs =
            Indirection { m: 2, k_chunk_count: kcc, k_chunk_length: kcl, src: &src, chunks: &chunks, pad: f16::ZERO };
        for other in Kernel::all().filter(|x| x.info().supported(&feats).is_ok()) {
            let mut dst = vec![f16::ZERO; 2 * n];
            other.imatmul(&lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
            let d = f(&dst);
            assert!(d[..n].iter().all(|&y| y == 1.5) && d[n..].iter().all(|&y| y == 0.75), "{d:?}");
        }
        let p2 = k1.pack_rhs(&w, 3, 2).unwrap();
        let mut dst = vec![f16::ZERO; 2 * n];
        let r = k1.imatmul(&lhs, &p2, &mut dst, Clamp::NONE, Parallelism::Sequential);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        let feats = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(4, &feats) else {
            return;
        };
        let data = vec![f16::ZERO; 4 * 6];
        let w = FloatWeights { n: 4, k: 6, order: Order::NxK, data: &data, bias: None };
        assert!(kern.pack_rhs(&w, 4, 2).is_err(), "k mismatch");
        let packed = kern.pack_rhs(&w, 2, 3).unwrap();
        let src = [f16::ZERO; 6];
        let ok = [Some(0), Some(3)];
        let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &ok, pad: f16::ZERO };
        let mut dst = vec![f16::ZERO; 4];
        let seq = Parallelism::Sequential;
        kern.imatmul(&lhs, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(kern.imatmul(&lhs, &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        let outside = [Some(4), Some(0)];
        assert!(kern.imatmul(&Indirection { chunks: &outside, ..lhs }, &packed, &mut dst, Clamp::NONE, seq).is_err());
        assert!(kern.pack_lhs(&Indirection { m: 0, ..lhs }, seq).is_err(), "m = 0");
        let bad = Clamp { min: 2.0, max: 1.0 };
        assert!(kern.imatmul(&lhs, &packed, &mut dst, bad, seq).is_err(), "empty clamp");
    }
}
