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

use crate::error::{self, Result};
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
    super::indirect::reference_f32(lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::cpu::Features;
    use crate::families::engine::{self, Tiles};
    use crate::families::indirect::{IndirectLhsPacker, check_k, imatmul_rhs_offset, pack_indirect_lhs};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::imatmul_clamp_f32_f32p_f32p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "x32p2vlx1b-imatmul";
    const LHS_FORMAT: &str = "x32p2vlx1-imatmul";
    const RHS_PACKERS: &[&str] = &["kai_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme"];
    const LHS_PACKER: &str = "kai_lhs_imatmul_pack_x32p2vlx1_x32p_sme";
    const KR: usize = 1;

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
                        lhs_packer: Some(LHS_PACKER),
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
            // SAFETY: the CPU has every feature the kernel needs
            // (ensure_supported), so its SME getters may run; upstream fills
            // both (generated table).
            let (m_step, n_step) = unsafe { (i.get_m_step.expect("m_step")(), i.get_n_step.expect("n_step")()) };
            Ok((Tiles { m_step, n_step, mr: m_step, nr: n_step, kr: KR, sr: 1 }, f))
        }

        fn layout(&self, format: &'static str, rows: usize, kcc: usize, kcl: usize, lhs: bool) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format,
                rows,
                k: error::mul(kcc, kcl, "k_chunk_count * k_chunk_length")?,
                r: if lhs { t.m_step } else { t.n_step },
                kr: KR,
                sr: 1,
                bl: kcl,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        /// The packed-RHS layout for `n` channels of `k_chunk_count` chunks
        /// of `k_chunk_length` inputs.
        pub fn rhs_layout(&self, n: usize, k_chunk_count: usize, k_chunk_length: usize) -> Result<PackedLayout> {
            self.layout(RHS_FORMAT, n, k_chunk_count, k_chunk_length, false)
        }

        /// The packed-LHS layout for `m` rows of `k_chunk_count` chunks of
        /// `k_chunk_length` inputs.
        pub fn lhs_layout(&self, m: usize, k_chunk_count: usize, k_chunk_length: usize) -> Result<PackedLayout> {
            self.layout(LHS_FORMAT, m, k_chunk_count, k_chunk_length, true)
        }

        /// Packs `n x k` weights (with bias) for LHS rows made of
        /// `k_chunk_count` chunks of `k_chunk_length` (their product must be
        /// `w.k`; weight input `c · k_chunk_length + j` meets element `j` of
        /// chunk `c`).
        pub fn pack_rhs(
            &self,
            w: &FloatWeights<'_, f32>,
            k_chunk_count: usize,
            k_chunk_length: usize,
        ) -> Result<PackedRhs> {
            w.validate()?;
            check_k(w.k, k_chunk_count, k_chunk_length)?;
            let layout = self.rhs_layout(w.n, k_chunk_count, k_chunk_length)?;
            let (n, k) = (w.n, w.k);
            // SAFETY: the kernel's features (SME) were checked by rhs_layout.
            let packer_nr = unsafe { sys::kai_get_n_step_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme() };
            if packer_nr != layout.r {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("RHS packer block {packer_nr} differs from the kernel's n step {}", layout.r),
                });
            }
            // Checked size: roundup(n, nr) * (4 + k * 4).
            let block = error::mul(k, 4, "packed rhs")?.checked_add(4).ok_or_else(overflow)?;
            error::mul(error::mul(n.div_ceil(layout.r), layout.r, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 4, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias_or_zeros();
            // SAFETY: SME size query on an SME CPU; no overflow (checked).
            let size = unsafe {
                sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme(
                    n,
                    k_chunk_count,
                    k_chunk_length,
                )
            };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k = kcc * kcl rows of n f32 `stride` bytes
            // apart, `bias` n f32 (never null, as the packer requires); the
            // destination has the packer's size for (n, kcc, kcl). It runs in
            // streaming mode on a CPU with SME (rhs_layout).
            unsafe {
                sys::kai_run_rhs_imatmul_pack_kxn_x32p2vlx1b_x32_x32_sme(
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

        /// Packs the indirect LHS (following its chunks).
        pub fn pack_lhs(&self, lhs: &Indirection<'_, f32>, par: Parallelism) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_into(lhs, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        pub fn pack_lhs_into(&self, lhs: &Indirection<'_, f32>, par: Parallelism, out: &mut PackedLhs) -> Result<()> {
            lhs.validate()?;
            let (m, kcc, kcl) = (lhs.m, lhs.k_chunk_count, lhs.k_chunk_length);
            let layout = self.lhs_layout(m, kcc, kcl)?;
            let m_step = layout.r;
            // SAFETY: the kernel's features (SME) were checked by lhs_layout.
            let packer_m_step = unsafe { sys::kai_get_m_step_lhs_imatmul_pack_x32p2vlx1_x32p_sme() };
            if packer_m_step != m_step {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("LHS packer block {packer_m_step} differs from the kernel's m step {m_step}"),
                });
            }
            // Checked size: roundup(m, m_step) * k * 4.
            let size =
                error::mul(error::mul(m.div_ceil(m_step), m_step, "m")?, error::mul(layout.k, 4, "lhs")?, "lhs")?;
            // SAFETY: the CPU has SME (lhs_layout); m_step is the packer's
            // (checked); `size` equals its packed size for (m, kcc, kcl); it
            // reads kcl f32 through each pointer (predicated loads).
            unsafe {
                pack_indirect_lhs(
                    &self.0.info,
                    lhs,
                    m_step,
                    layout,
                    size,
                    IndirectLhsPacker {
                        pack: sys::kai_run_lhs_imatmul_pack_x32p2vlx1_x32p_sme,
                        offset: sys::kai_get_lhs_packed_offset_lhs_imatmul_pack_x32p2vlx1_x32p_sme,
                    },
                    par,
                    out,
                )
            }
        }

        /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            let (m, n, kcl) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().bl);
            if kcl == 0 {
                return Err(crate::Error::bad_value("packed RHS k_chunk_length", kcl, "0: not an imatmul packed RHS"));
            }
            let kcc = rhs.layout().k / kcl;
            rhs.expect(&self.rhs_layout(n, kcc, kcl)?, self.0.info.name)?;
            lhs.expect(&self.lhs_layout(m, kcc, kcl)?, self.0.info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let (t, _) = self.tiles()?;
            let i = self.0.iface;
            let (get_lhs, get_rhs, run) = (
                i.get_lhs_packed_offset.expect("lhs offset"),
                i.get_rhs_packed_offset.expect("rhs offset"),
                i.run_imatmul.expect("run"),
            );
            let (lp, rp, dp) = (
                SendPtr(lhs.data().as_ptr() as *mut u8),
                SendPtr(rhs.data().as_ptr() as *mut u8),
                SendPtr(dst.as_mut_ptr()),
            );
            engine::run_grid(par, &self.0.info, m, n, kcc * kcl, &t, |rows, cols| {
                let (lp, rp, dp) = (lp, rp, dp);
                // SAFETY: both packed buffers have exactly the layouts this
                // kernel computes for (m, n, kcc, kcl) at the current vector
                // length (checked above), so the offsets of a row start that
                // is a multiple of m_step and a column start that is a
                // multiple of n_step (plan_grid) lie inside them; dst holds
                // m x n f32 and tiles are disjoint; the CPU supports the
                // kernel (tiles()).
                unsafe {
                    let lo = get_lhs(rows.start, kcc, kcl);
                    let ro = get_rhs(cols.start, kcc, kcl);
                    run(
                        rows.len(),
                        cols.len(),
                        kcc,
                        kcl,
                        lp.0.add(lo).cast(),
                        rp.0.add(ro).cast(),
                        dp.0.add(rows.start * n + cols.start).cast(),
                        n * 4,
                        clamp.min,
                        clamp.max,
                    );
                }
            });
            Ok(())
        }

        /// Packs the indirect LHS and runs: the one-call form.
        pub fn imatmul(
            &self,
            lhs: &Indirection<'_, f32>,
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let packed = self.pack_lhs(lhs, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }

    fn overflow() -> crate::Error {
        crate::Error::Overflow("packed rhs".into())
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
            let at = imatmul_rhs_offset(row, kk, l.k / l.bl, l.bl, l.r, l.kr, 4, (4, 0));
            *o = f32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        }
        Ok(())
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
