//! `imatmul_clamp_f32_f32_f32p`: indirect matmul with an unpacked LHS,
//! `dst (f32, m x n) = clamp(gather(lhs) · wᵀ + bias)`, on SVE: the kernel
//! follows the indirection table itself (no LHS packing step).
//!
//! Kernel (1 upstream): `f32p4vlx1b_6x4vl_sve_mla` (6 rows x 4 SVE vectors of
//! columns, `FMLA`); it runs at any SVE vector length, and its packed RHS
//! depends on it. RHS packer `kai_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve`
//! (K x N weights in chunks, bias required: zeros when there is none; format
//! `x32p4vlx1b-imatmul`, `k = k_chunk_count · k_chunk_length`, `bl =
//! k_chunk_length`). The LHS is an [`Indirection`] (element offsets checked in
//! Rust; the pointer table, in blocks of 6 rows, is built here). Upstream
//! passes the chunk count and length to the kernel as 32-bit integers: both
//! must fit in `u32`.
//!
//! Tolerance of the conformance test: fused multiply-adds in f32, as for
//! [`imatmul_clamp_f32_f32p_f32p`](super::imatmul_clamp_f32_f32p_f32p):
//! `|err| <= (k + 3) · 2⁻²⁴ · (Σ_k |x·w| + |bias|)`.

use crate::error::Result;
use crate::formats::{FloatWeights, Indirection};
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "imatmul_clamp_f32_f32_f32p";

/// The portable reference: identical to
/// [`imatmul_clamp_f32_f32p_f32p::reference`](super::imatmul_clamp_f32_f32p_f32p::reference).
///
/// ```
/// use kleidiai::families::imatmul_clamp_f32_f32_f32p::reference;
/// use kleidiai::formats::{FloatWeights, Indirection, Order};
/// use kleidiai::Clamp;
/// let src = [1.0f32, 2.0, 3.0];
/// // Two rows of one chunk of 2: src[0..2] and src[1..3].
/// let lhs = Indirection { m: 2, k_chunk_count: 1, k_chunk_length: 2, src: &src, chunks: &[Some(0), Some(1)], pad: 0.0 };
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0f32, 10.0], bias: None };
/// let mut y = [0f32; 2];
/// reference(&lhs, &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y, [21.0, 32.0]);
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
    use crate::par::Parallelism;
    use kleidiai_sys::interfaces::imatmul_clamp_f32_f32_f32p::KERNELS;

    imatmul_kernel! { kernels: KERNELS, run: Direct, rhs: &ind::X32P4VLX1B, lhs: None, float: f32 }

    impl Kernel {
        /// `dst = clamp(gather(lhs) · wᵀ + bias)`: `dst` is `m x n`, rows `n`
        /// apart. The kernel reads the LHS through the indirection directly.
        pub fn run(
            &self,
            lhs: &Indirection<'_, f32>,
            rhs: &crate::PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.0.run_direct(lhs, rhs, dst, clamp, par)
        }
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::indirect::test_support::*;
    use crate::formats::Order;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let ns = kernel.rhs_layout(1, 1, 1).map_err(e(0))?.r;
            let kc = [(1usize, 3usize), (3, 5), (4, 7)];
            let shapes = tail_shapes(6, 6, ns, ns, &[0, 1, 2]);
            let mut rng = Rng::new(0x5e);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, kci)) in shapes.iter().enumerate() {
                let (kcc, kcl) = kc[kci];
                let k = kcc * kcl;
                let src = rng.vec_f32(m * k / 2 + kcl + 3);
                let table = chunks(&mut rng, m, kcc, kcl, src.len());
                let pad = if ci % 3 == 0 { -0.5 } else { 0.0 };
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
                    kernel.run(&lhs, &packed, &mut dst, clamp, par).map_err(e(cases))?;
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
        let mut dst = vec![0f32; 2 * n];
        k1.run(&lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        assert!(dst[..n].iter().all(|&y| y == 1.5) && dst[n..].iter().all(|&y| y == 0.75), "{dst:?}");
        let p2 = k1.pack_rhs(&w, 3, 2).unwrap();
        let r = k1.run(&lhs, &p2, &mut dst, Clamp::NONE, Parallelism::Sequential);
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
        let packed = kern.pack_rhs(&w, 2, 3).unwrap();
        let src = [0f32; 6];
        let ok = [Some(0), Some(3)];
        let lhs = Indirection { m: 1, k_chunk_count: 2, k_chunk_length: 3, src: &src, chunks: &ok, pad: 0.0 };
        let mut dst = vec![0f32; 4];
        let seq = Parallelism::Sequential;
        kern.run(&lhs, &packed, &mut dst, Clamp::NONE, seq).unwrap();
        assert!(kern.run(&lhs, &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        let outside = [Some(0), Some(4)];
        assert!(kern.run(&Indirection { chunks: &outside, ..lhs }, &packed, &mut dst, Clamp::NONE, seq).is_err());
        assert!(kern.run(&Indirection { m: 0, ..lhs }, &packed, &mut dst, Clamp::NONE, seq).is_err());
        let big = Indirection { k_chunk_count: 1 << 33, ..lhs };
        assert!(kern.run(&big, &packed, &mut dst, Clamp::NONE, seq).is_err(), "chunk count past u32");
    }
}
