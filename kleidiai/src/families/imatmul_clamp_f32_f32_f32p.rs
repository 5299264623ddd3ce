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
    super::indirect::reference_f32(lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::cpu::Features;
    use crate::error;
    use crate::families::engine::{self, Tiles};
    use crate::families::indirect::{check_k, imatmul_rhs_offset};
    use crate::packed::{PackedLayout, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::imatmul_clamp_f32_f32_f32p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "x32p4vlx1b-imatmul";
    const RHS_PACKERS: &[&str] = &["kai_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve"];

    struct Entry {
        info: KernelInfo,
        iface: &'static Interface,
    }

    fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            KERNELS
                .iter()
                .map(|(u, iface)| Entry {
                    info: KernelInfo {
                        name: u.name,
                        family: FAMILY,
                        features: u.features,
                        vector_length: VectorLength::Any,
                        tile: tile_kind_for(u.name),
                        lhs_packer: None,
                        rhs_packers: RHS_PACKERS,
                        rank: rank_for(u.name, u.features),
                    },
                    iface,
                })
                .collect()
        })
    }

    pub(crate) fn infos() -> Vec<&'static KernelInfo> {
        entries().iter().map(|e| &e.info).collect()
    }

    /// One kernel of the family, with its packing.
    #[derive(Clone, Copy)]
    pub struct Kernel(&'static Entry);

    impl core::fmt::Debug for Kernel {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_tuple("Kernel").field(&self.0.info.name).finish()
        }
    }

    /// Upstream hands the chunk count and length to the kernel as `unsigned int`.
    fn check_u32(kcc: usize, kcl: usize) -> Result<()> {
        if u32::try_from(kcc).is_err() || u32::try_from(kcl).is_err() {
            return Err(crate::Error::bad_value(
                "k_chunk_count, k_chunk_length",
                format!("{kcc}, {kcl}"),
                "must fit in 32 bits",
            ));
        }
        Ok(())
    }

    impl Kernel {
        /// Every kernel of the family in this build.
        pub fn all() -> impl Iterator<Item = Kernel> {
            entries().iter().map(Kernel)
        }

        /// The kernel with this upstream name.
        pub fn by_name(name: &str) -> Option<Kernel> {
            entries().iter().find(|e| e.info.name == name).map(Kernel)
        }

        /// The best kernel that can run with `f` for `m` output rows.
        pub fn select(m: usize, f: &Features) -> Option<Kernel> {
            let best = crate::registry::select_from(entries().iter().map(|e| &e.info), m, f)?;
            Self::by_name(best.name)
        }

        /// Registry information.
        pub fn info(&self) -> &'static KernelInfo {
            &self.0.info
        }

        fn tiles(&self) -> Result<(Tiles, Features)> {
            let f = engine::ensure_supported(&self.0.info)?;
            let i = self.0.iface;
            // SAFETY: the CPU has SVE (ensure_supported); upstream fills both
            // getters (generated table).
            let (m_step, n_step) = unsafe { (i.get_m_step.expect("m_step")(), i.get_n_step.expect("n_step")()) };
            Ok((Tiles { m_step, n_step, mr: m_step, nr: n_step, kr: 1, sr: 1 }, f))
        }

        /// The packed-RHS layout for `n` channels of `k_chunk_count` chunks
        /// of `k_chunk_length` inputs (depends on the SVE vector length).
        pub fn rhs_layout(&self, n: usize, k_chunk_count: usize, k_chunk_length: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format: RHS_FORMAT,
                rows: n,
                k: error::mul(k_chunk_count, k_chunk_length, "k_chunk_count * k_chunk_length")?,
                r: t.n_step,
                kr: 1,
                sr: 1,
                bl: k_chunk_length,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        /// Packs `n x k` weights (with bias) for LHS rows made of
        /// `k_chunk_count` chunks of `k_chunk_length` (their product must be
        /// `w.k`).
        pub fn pack_rhs(
            &self,
            w: &FloatWeights<'_, f32>,
            k_chunk_count: usize,
            k_chunk_length: usize,
        ) -> Result<PackedRhs> {
            w.validate()?;
            check_k(w.k, k_chunk_count, k_chunk_length)?;
            check_u32(k_chunk_count, k_chunk_length)?;
            let layout = self.rhs_layout(w.n, k_chunk_count, k_chunk_length)?;
            let (n, k) = (w.n, w.k);
            // SAFETY: the CPU has SVE (rhs_layout); the getter reads the VL.
            let packer_nr = unsafe { sys::kai_get_n_step_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve() };
            if packer_nr != layout.r {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("RHS packer block {packer_nr} differs from the kernel's n step {}", layout.r),
                });
            }
            let block = error::mul(k, 4, "packed rhs")?
                .checked_add(4)
                .ok_or_else(|| crate::Error::Overflow("packed rhs".into()))?;
            error::mul(error::mul(n.div_ceil(layout.r), layout.r, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 4, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias_or_zeros();
            // SAFETY: size query (SVE getter on an SVE CPU); no overflow (checked).
            let size = unsafe {
                sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve(
                    n,
                    k_chunk_count,
                    k_chunk_length,
                )
            };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k rows of n f32 `stride` bytes apart, `bias`
            // n f32 (never null); the destination has the packer's size for
            // (n, kcc, kcl); SVE code on an SVE CPU.
            unsafe {
                sys::kai_run_rhs_imatmul_pack_kxn_x32p4vlx1b_x32_x32_sve(
                    n,
                    k_chunk_count,
                    k_chunk_length,
                    stride,
                    kxn.as_ptr().cast(),
                    bias.as_ptr().cast(),
                    buf.as_mut_ptr().cast(),
                );
            }
            Ok(PackedRhs::new(layout, buf))
        }

        /// `dst = clamp(gather(lhs) · wᵀ + bias)`: `dst` is `m x n`, rows `n`
        /// apart. The kernel reads the LHS through the indirection directly.
        pub fn run(
            &self,
            lhs: &Indirection<'_, f32>,
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            lhs.validate()?;
            let (m, n, kcc, kcl) = (lhs.m, rhs.layout().rows, lhs.k_chunk_count, lhs.k_chunk_length);
            check_u32(kcc, kcl)?;
            rhs.expect(&self.rhs_layout(n, kcc, kcl)?, self.0.info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let (t, _) = self.tiles()?;
            let pad = vec![lhs.pad; kcl];
            let table = lhs.pointer_table(t.m_step, pad.as_ptr());
            let i = self.0.iface;
            let (get_rhs, run) = (i.get_rhs_packed_offset.expect("rhs offset"), i.run_imatmul.expect("run"));
            let (tp, pp, rp, dp) = (
                SendPtr(table.as_ptr() as *mut *const f32),
                SendPtr(pad.as_ptr() as *mut f32),
                SendPtr(rhs.data().as_ptr() as *mut u8),
                SendPtr(dst.as_mut_ptr()),
            );
            engine::run_grid(par, &self.0.info, m, n, kcc * kcl, &t, |rows, cols| {
                let (tp, pp, rp, dp) = (tp, pp, rp, dp);
                // SAFETY: rows.start is a multiple of m_step (plan_grid), so
                // this tile's pointers start at table index rows.start * kcc
                // (blocks of m_step rows); each pointer it reads is valid for
                // kcl f32 (into `src`, checked by validate, or the `pad`
                // buffer), both alive for the call; lhs_ptr_offset 0. The
                // packed RHS has exactly this kernel's layout for (n, kcc,
                // kcl) at the current VL (checked), so the offset of a column
                // start that is a multiple of n_step lies inside it; dst holds
                // m x n f32 and tiles are disjoint; the CPU has SVE (tiles()).
                unsafe {
                    let ro = get_rhs(cols.start, kcc, kcl);
                    run(
                        rows.len(),
                        cols.len(),
                        kcc,
                        kcl,
                        tp.0.add(rows.start * kcc).cast(),
                        pp.0.cast(),
                        0,
                        rp.0.add(ro).cast(),
                        dp.0.add(rows.start * n + cols.start).cast(),
                        n * 4,
                        clamp.min,
                        clamp.max,
                    );
                }
            });
            drop((table, pad));
            Ok(())
        }
    }

    /// Weight row (output channel) `row` of a packed RHS of this family, `k`
    /// values (bias not included).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != RHS_FORMAT || l.bl == 0 {
            return Err(crate::Error::bad_value(
                "packed RHS format",
                l.format,
                format!("not a packed RHS of {FAMILY}"),
            ));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let b = rhs.as_bytes();
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let at = imatmul_rhs_offset(row, kk, l.k / l.bl, l.bl, l.r, 1, 4, (4, 0));
            *o = f32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        }
        Ok(())
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
