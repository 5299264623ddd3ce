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

use crate::error::{self, Result};
use crate::families::indirect::{check_k, f32_core};
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
    lhs.validate()?;
    w.validate()?;
    clamp.check()?;
    let k = check_k(w.k, lhs.k_chunk_count, lhs.k_chunk_length)?;
    error::at_least(dst.len(), error::mul(lhs.m, w.n, "dst")?, "dst")?;
    let x: Vec<f32> = lhs.gather()?.iter().map(|v| v.to_f32()).collect();
    let wd: Vec<f32> = w.to_nxk()?.iter().map(|v| v.to_f32()).collect();
    let bias: Vec<f32> = (0..w.n).map(|j| w.bias_f32(j)).collect();
    let mut y = vec![0f32; lhs.m * w.n];
    f32_core(lhs.m, &x, k, &wd, &bias, clamp, &mut y);
    for (d, v) in dst.iter_mut().zip(y) {
        *d = f16::from_f32(v);
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::cpu::Features;
    use crate::families::engine::{self, Tiles};
    use crate::families::indirect::{IndirectLhsPacker, imatmul_rhs_offset, pack_indirect_lhs};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::imatmul_clamp_f16_f16p_f16p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "x16p2vlx2b-imatmul";
    const LHS_FORMAT: &str = "x16p2vlx2-imatmul";
    const RHS_PACKERS: &[&str] = &["kai_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme"];
    const LHS_PACKER: &str = "kai_lhs_imatmul_pack_x16p2vlx2_x16p_sme";
    const KR: usize = 2;

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

    /// `k_chunk_count · roundup(k_chunk_length, 2)` (the packed K), checked.
    fn packed_k(kcc: usize, kcl: usize) -> Result<usize> {
        error::mul(kcc, error::mul(kcl.div_ceil(KR), KR, "k_chunk_length")?, "packed k")
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

        /// Packs `n x k` f16 weights (with f16 bias) for LHS rows made of
        /// `k_chunk_count` chunks of `k_chunk_length` (their product must be
        /// `w.k`).
        pub fn pack_rhs(
            &self,
            w: &FloatWeights<'_, f16>,
            k_chunk_count: usize,
            k_chunk_length: usize,
        ) -> Result<PackedRhs> {
            w.validate()?;
            check_k(w.k, k_chunk_count, k_chunk_length)?;
            let layout = self.rhs_layout(w.n, k_chunk_count, k_chunk_length)?;
            let n = w.n;
            // SAFETY: the kernel's features (SME) were checked by rhs_layout.
            let packer_nr = unsafe { sys::kai_get_n_step_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme() };
            if packer_nr != layout.r {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("RHS packer block {packer_nr} differs from the kernel's n step {}", layout.r),
                });
            }
            // Checked size: roundup(n, nr) * (2 + packed_k * 2).
            let block = error::mul(packed_k(k_chunk_count, k_chunk_length)?, 2, "packed rhs")?
                .checked_add(2)
                .ok_or_else(|| crate::Error::Overflow("packed rhs".into()))?;
            error::mul(error::mul(n.div_ceil(layout.r), layout.r, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 2, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias_or_zeros();
            // SAFETY: SME size query on an SME CPU; no overflow (checked).
            let size = unsafe {
                sys::kai_get_rhs_packed_size_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme(
                    n,
                    k_chunk_count,
                    k_chunk_length,
                )
            };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k = kcc * kcl rows of n f16 `stride` bytes
            // apart, `bias` n f16 (never null, as the packer requires); the
            // destination has the packer's size for (n, kcc, kcl). It runs in
            // streaming mode on a CPU with SME (rhs_layout).
            unsafe {
                sys::kai_run_rhs_imatmul_pack_kxn_x16p2vlx2b_x16_x16_sme(
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

        /// Packs the indirect f16 LHS (following its chunks).
        pub fn pack_lhs(&self, lhs: &Indirection<'_, f16>, par: Parallelism) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_into(lhs, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        pub fn pack_lhs_into(&self, lhs: &Indirection<'_, f16>, par: Parallelism, out: &mut PackedLhs) -> Result<()> {
            lhs.validate()?;
            let (m, kcc, kcl) = (lhs.m, lhs.k_chunk_count, lhs.k_chunk_length);
            let layout = self.lhs_layout(m, kcc, kcl)?;
            let m_step = layout.r;
            // SAFETY: the kernel's features (SME) were checked by lhs_layout.
            let packer_m_step = unsafe { sys::kai_get_m_step_lhs_imatmul_pack_x16p2vlx2_x16p_sme() };
            if packer_m_step != m_step {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("LHS packer block {packer_m_step} differs from the kernel's m step {m_step}"),
                });
            }
            let rows = error::mul(m.div_ceil(m_step), m_step, "m")?;
            let size = error::mul(rows, error::mul(packed_k(kcc, kcl)?, 2, "lhs")?, "lhs")?;
            // SAFETY: the CPU has SME (lhs_layout); m_step is the packer's
            // (checked); `size` equals its packed size for (m, kcc, kcl); it
            // reads kcl f16 through each pointer (predicated loads).
            unsafe {
                pack_indirect_lhs(
                    &self.0.info,
                    lhs,
                    m_step,
                    layout,
                    size,
                    IndirectLhsPacker {
                        pack: sys::kai_run_lhs_imatmul_pack_x16p2vlx2_x16p_sme,
                        offset: sys::kai_get_lhs_packed_offset_lhs_imatmul_pack_x16p2vlx2_x16p_sme,
                    },
                    par,
                    out,
                )
            }
        }

        /// `dst = clamp(f16(lhs · wᵀ + bias))`: `dst` is `m x n`, rows `n`
        /// apart; the clamp bounds are rounded to f16.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [f16],
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
                // m x n f16 and tiles are disjoint; the CPU supports the
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
                        n * 2,
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
            lhs: &Indirection<'_, f16>,
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let packed = self.pack_lhs(lhs, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }

    /// Weight row (output channel) `row` of a packed RHS of this family, `k`
    /// values as f32 (bias not included).
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
            let at = imatmul_rhs_offset(row, kk, l.k / l.bl, l.bl, l.r, KR, 2, (2, 0));
            *o = f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
        }
        Ok(())
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
