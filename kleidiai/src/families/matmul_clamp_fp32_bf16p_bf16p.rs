//! `matmul_clamp_fp32_bf16p_bf16p`: the SME/SME2 kernels of
//! `dst (f32, m x n) = clamp(bf16(lhs) · bf16(w)ᵀ + bias)`: the same math as
//! [`matmul_clamp_f32_bf16p_bf16p`](super::matmul_clamp_f32_bf16p_bf16p)
//! (upstream keeps them in a directory of their own, with the same
//! interface type), computed with `BFMOPA` outer products in streaming mode.
//! ggml runs the SME2 kernel for F16 weights (converted to f32 K x N first).
//!
//! Kernels (2 upstream): `bf16p2vlx2_bf16p2vlx2_2vlx2vl_sme_mopa` (SME) and
//! `..._sme2_mopa` (SME2); tiles of `2·SVL/32 x 2·SVL/32`, so packed layouts
//! depend on the streaming vector length. LHS packers
//! `kai_lhs_pack_bf16p2vlx2_f32_sme` / `kai_lhs_pack_bf16p2vlx2_f32_sme2`
//! (same packed format); RHS packer `kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme`
//! (format `bf16p2vlx2biasf32`, K x N input, bias required: zeros are passed
//! when there is none). Upstream lists that RHS packer in its SME2 source
//! group, but it executes only SME instructions and upstream's own tests use
//! it with the SME kernel on SME-only CPUs, as this module does. Its K
//! padding (odd `k`) holds copies of weight row 0; it is zeroed after packing.
//!
//! Tolerance of the conformance test: as for the NEON family (same rounding
//! of the operands, exact bf16 products, at most `2k` rounded f32 additions):
//! `|err| <= (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)`.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_fp32_bf16p_bf16p";

/// The portable reference: identical to
/// [`matmul_clamp_f32_bf16p_bf16p::reference`](super::matmul_clamp_f32_bf16p_bf16p::reference)
/// (operands rounded to bf16 as the packers do, f64 accumulation).
///
/// ```
/// use kleidiai::families::matmul_clamp_fp32_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[2.0f32, -1.0], bias: None };
/// let mut y = [0f32; 2];
/// reference(1, &[3.0], &w, Clamp { min: -2.0, max: 5.0 }, &mut y).unwrap();
/// assert_eq!(y, [5.0, -2.0]);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    super::bf16p_bf16p::reference_f32(m, lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::cpu::{CpuFeature, Features};
    use crate::error;
    use crate::families::engine::{self, Tiles};
    use crate::families::bf16p_bf16p::{unpack_bf16_row, zero_k_padding_with_bias};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_fp32_bf16p_bf16p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "bf16p2vlx2biasf32";
    const LHS_FORMAT: &str = "bf16p2vlx2";
    const RHS_PACKERS: &[&str] = &["kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme"];
    const LHS_SME: &str = "kai_lhs_pack_bf16p2vlx2_f32_sme";
    const LHS_SME2: &str = "kai_lhs_pack_bf16p2vlx2_f32_sme2";

    struct Entry {
        info: KernelInfo,
        iface: &'static Interface,
        sme2: bool,
    }

    fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            KERNELS
                .iter()
                .map(|(u, iface)| {
                    let sme2 = u.features.contains(&CpuFeature::Sme2);
                    Entry {
                        info: KernelInfo {
                            name: u.name,
                            family: FAMILY,
                            features: u.features,
                            vector_length: VectorLength::Any,
                            tile: tile_kind_for(u.name),
                            lhs_packer: Some(if sme2 { LHS_SME2 } else { LHS_SME }),
                            rhs_packers: RHS_PACKERS,
                            rank: rank_for(u.name, u.features),
                        },
                        iface,
                        sme2,
                    }
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

    fn roundup(v: usize, m: usize, what: &str) -> Result<usize> {
        error::mul(v.div_ceil(m), m, what)
    }

    fn overflow(what: &str) -> crate::Error {
        crate::Error::Overflow(what.into())
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
            // every getter of this interface (generated table).
            let t = unsafe {
                Tiles {
                    m_step: i.get_m_step.expect("m_step")(),
                    n_step: i.get_n_step.expect("n_step")(),
                    mr: i.get_mr.expect("mr")(),
                    nr: i.get_nr.expect("nr")(),
                    kr: i.get_kr.expect("kr")(),
                    sr: i.get_sr.expect("sr")(),
                }
            };
            Ok((t, f))
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights (it
        /// depends on the SME vector length in force).
        pub fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format: RHS_FORMAT,
                rows: n,
                k,
                r: t.nr,
                kr: t.kr,
                sr: t.sr,
                bl: 0,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format: LHS_FORMAT,
                rows: m,
                k,
                r: t.mr,
                kr: t.kr,
                sr: t.sr,
                bl: 0,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        /// Rounds the weights to bf16 and packs them with the bias.
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f32>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            // SAFETY: the kernel's features (SME) were checked by rhs_layout;
            // the getter only reads the streaming vector length.
            let packer_nr = unsafe { sys::kai_get_n_step_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme() };
            if packer_nr != nr {
                return Err(crate::Error::PackerMismatch {
                    kernel: self.0.info.name,
                    why: format!("RHS packer block {packer_nr} differs from the kernel's nr {nr}"),
                });
            }
            let block = error::mul(roundup(k, kr, "k")?, 2, "packed rhs")?
                .checked_add(4)
                .ok_or_else(|| overflow("packed rhs"))?;
            error::mul(roundup(n, nr, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 4, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias_or_zeros();
            // SAFETY: size query of an SME packer on a CPU with SME (checked);
            // arithmetic cannot overflow (checked above).
            let size = unsafe { sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme(n, k) };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k rows of n f32 `stride` bytes apart, `bias`
            // n f32 (never null: the packer requires one); the destination
            // has the packer's size for (n, k); nr is the packer's n step
            // (checked), kr 2 and sr 1 the kernel's; one group, no scale, no
            // extra bytes, no params. It enters streaming mode itself; the
            // CPU has SME (rhs_layout).
            unsafe {
                sys::kai_run_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme(
                    1,
                    n,
                    k,
                    nr,
                    kr,
                    sr,
                    stride,
                    kxn.as_ptr().cast(),
                    bias.as_ptr().cast(),
                    core::ptr::null(),
                    buf.as_mut_ptr().cast(),
                    0,
                    core::ptr::null(),
                );
            }
            zero_k_padding_with_bias(buf.as_mut_slice(), n, k, nr, kr, 4);
            Ok(PackedRhs::new(layout, buf))
        }

        /// Rounds an `m x k` f32 LHS (rows `lhs_stride` elements apart) to
        /// bf16 and packs it.
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_into(m, k, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        pub fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            error::nonzero(m, "m")?;
            error::nonzero(k, "k")?;
            if lhs_stride < k {
                return Err(crate::Error::bad_value("lhs_stride", lhs_stride, format!("less than k = {k}")));
            }
            let need = error::mul(m - 1, lhs_stride, "lhs")?.checked_add(k).ok_or_else(|| overflow("lhs"))?;
            error::at_least(lhs.len(), need, "lhs")?;
            let stride_bytes = error::mul(lhs_stride, 4, "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let row_bytes = error::mul(roundup(k, kr, "k")?, 2, "packed lhs")?;
            let size = error::mul(roundup(m, mr, "m")?, row_bytes, "packed lhs")?;
            out.reset(layout, size);
            let dst = SendPtr(out.data_mut().as_mut_ptr());
            let src = SendPtr(lhs.as_ptr() as *mut f32);
            let sme2 = self.0.sme2;
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                // SAFETY: the CPU has the kernel's features (lhs_layout), which
                // include the packer's (SME, or SME2 for the _sme2 packer).
                // `rows` starts at a multiple of mr (split_aligned), so the
                // packer's offset for rows.start begins a whole row block no
                // other range writes; pointers are pre-offset (m_idx_start 0).
                // Source rows lie inside `lhs`, the destination inside the
                // `size` bytes reserved (= the packer's own size). mr, kr, sr
                // are the kernel's, which the packer asserts.
                unsafe {
                    let s = src.0.add(rows.start * lhs_stride).cast();
                    if sme2 {
                        let off =
                            sys::kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme2(rows.start, k, mr, kr, sr);
                        sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme2(
                            rows.len(),
                            k,
                            mr,
                            kr,
                            sr,
                            0,
                            s,
                            stride_bytes,
                            dst.0.add(off).cast(),
                        );
                    } else {
                        let off = sys::kai_get_lhs_packed_offset_lhs_pack_bf16p2vlx2_f32_sme(rows.start, k, mr, kr, sr);
                        sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme(
                            rows.len(),
                            k,
                            mr,
                            kr,
                            sr,
                            0,
                            s,
                            stride_bytes,
                            dst.0.add(off).cast(),
                        );
                    }
                }
            });
            Ok(())
        }

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](Self::run) make for a dense `m x k` LHS and `rhs`, made
        /// once (the steady-state path of `PackedWeights::matmul`).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k) = (l.rows, l.k);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k)?, self.0.info.name)?;
            let layout = self.lhs_layout(m, k)?;
            let (t, _) = self.tiles()?;
            let row_bytes = error::mul(roundup(k, layout.kr, "k")?, 2, "packed lhs")?;
            let lhs_bytes = error::mul(roundup(m, layout.r, "m")?, row_bytes, "packed lhs")?;
            Ok(Some(engine::Prepared { m, n, k, bl: 0, t, lhs_bytes }))
        }

        /// What `pack_lhs_into` then `run` do on one thread for the whole
        /// output, without their checks.
        ///
        /// # Safety
        /// `p` is what [`prepare`](Self::prepare) returned for this `rhs`;
        /// the CPU still runs the kernel at the vector length it ran at
        /// then; `x` holds `p.m x p.k` f32, `lhs` `p.lhs_bytes` writable
        /// bytes (64-byte aligned), `y` `p.m x p.n` f32; `clamp` is valid.
        pub(crate) unsafe fn run_prepared(
            &self,
            p: &engine::Prepared,
            x: *const f32,
            lhs: *mut u8,
            rhs: &PackedRhs,
            y: *mut f32,
            clamp: Clamp,
        ) {
            let (m, n, k, t) = (p.m, p.n, p.k, p.t);
            let run = self.0.iface.run_matmul.expect("run");
            let (x, l, r) = (x.cast(), lhs.cast(), rhs.data().as_ptr().cast());
            // SAFETY: the caller's contract: every size and layout rule was
            // checked by `prepare` for exactly these operands at this vector
            // length, the buffers have the sizes it computed, the offsets of
            // row 0 and column 0 are 0, and the CPU has the packer's and the
            // kernel's features.
            unsafe {
                if self.0.sme2 {
                    sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme2(m, k, t.mr, t.kr, t.sr, 0, x, k * 4, l);
                } else {
                    sys::kai_run_lhs_pack_bf16p2vlx2_f32_sme(m, k, t.mr, t.kr, t.sr, 0, x, k * 4, l);
                }
                run(m, n, k, l, r, y.cast(), n * 4, 4, clamp.min, clamp.max);
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
            let (m, n, k) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().k);
            rhs.expect(&self.rhs_layout(n, k)?, self.0.info.name)?;
            lhs.expect(&self.lhs_layout(m, k)?, self.0.info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let (t, _) = self.tiles()?;
            let i = self.0.iface;
            let (get_lhs, get_rhs, run) = (
                i.get_lhs_packed_offset.expect("lhs offset"),
                i.get_rhs_packed_offset.expect("rhs offset"),
                i.run_matmul.expect("run"),
            );
            let (lp, rp, dp) = (
                SendPtr(lhs.data().as_ptr() as *mut u8),
                SendPtr(rhs.data().as_ptr() as *mut u8),
                SendPtr(dst.as_mut_ptr()),
            );
            engine::run_grid(par, &self.0.info, m, n, k, &t, |rows, cols| {
                let (lp, rp, dp) = (lp, rp, dp);
                // SAFETY: both packed buffers have exactly the layouts this
                // kernel computes for (m, n, k) at the current vector length
                // (checked above), so the offsets of a row start that is a
                // multiple of m_step and a column start that is a multiple of
                // n_step (plan_grid) lie inside them; dst holds m x n f32 and
                // tiles are disjoint; the CPU supports the kernel (tiles()).
                unsafe {
                    let lo = get_lhs(rows.start, k);
                    let ro = get_rhs(cols.start, k);
                    run(
                        rows.len(),
                        cols.len(),
                        k,
                        lp.0.add(lo).cast(),
                        rp.0.add(ro).cast(),
                        dp.0.add(rows.start * n + cols.start).cast(),
                        n * 4,
                        4,
                        clamp.min,
                        clamp.max,
                    );
                }
            });
            Ok(())
        }

        /// Packs the dense `m x k` LHS and runs: the one-call form.
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[f32],
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }

    /// Weight row `row` of a packed RHS of this family, as the kernels see
    /// it (the bf16-rounded weights, as f32; bias not included).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != RHS_FORMAT {
            return Err(crate::Error::bad_value(
                "packed RHS format",
                l.format,
                format!("not a packed RHS of {FAMILY}"),
            ));
        }
        unpack_bf16_row(rhs, row, out, 4)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::families::bf16p_bf16p::round_bf16;
    use crate::families::bf16p_bf16p::test_support::*;
    use crate::formats::Order;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let lay = kernel.rhs_layout(1, 2).map_err(e(0))?;
            let lhs_lay = kernel.lhs_layout(1, 2).map_err(e(0))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let shapes = tail_shapes(mr, mr, nr, nr, &[2, 7, 34]);
            let mut rng = Rng::new(0xf32b);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
                let data = rng.vec_f32(n * k);
                let bias_v = rng.vec_f32(n);
                let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
                let w = FloatWeights { n, k, order, data: &data, bias };
                let lhs = rng.vec_f32(m * k);
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![0f32; m * n];
                reference(m, &lhs, &w, clamp, &mut want).map_err(e(cases))?;
                let wq: Vec<f32> = w.to_nxk().unwrap().into_iter().map(round_bf16).collect();
                let b: Vec<f32> = (0..n).map(|j| w.bias.map_or(0.0, |b| b[j])).collect();
                let mags = magnitudes(m, &lhs, k, &wq, &b);
                let packed = kernel.pack_rhs(&w).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![f32::NAN; m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(e(cases))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let err = compare(&dst, &want, |i, _| bf16_tolerance(k, mags[i]))
                        .map_err(|x| (cases, format!("m={m} n={n} k={k} threads={threads}: {x}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(dst),
                        Some(f) if !bit_identical(f, &dst) => {
                            return Err((cases, format!("m={m} n={n} k={k}: {threads} threads differ from 1")));
                        }
                        _ => {}
                    }
                }
                let mut row = vec![0f32; k];
                for r in [0, n / 2, n - 1] {
                    unpack_rhs_row(&packed, r, &mut row).map_err(e(cases))?;
                    if row[..] != wq[r * k..(r + 1) * k] {
                        return Err((cases, format!("unpack_rhs_row({r}) n={n} k={k} differs from bf16(weights)")));
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
        let (n, k) = (8, 16);
        let data = vec![0.5f32; n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        for other in Kernel::all().filter(|x| x.info().supported(&f).is_ok()) {
            // Same formats: SME and SME2 share their packed operands.
            let mut dst = vec![0f32; 2 * n];
            other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
            assert!(dst.iter().all(|&y| y == 4.0), "{other:?}: {dst:?}");
        }
        // A packed LHS of another k is rejected.
        let lhs_p = k1.pack_lhs(2, k + 2, &vec![0.0; 2 * (k + 2)], k + 2, Parallelism::Sequential).unwrap();
        let mut dst = vec![0f32; 2 * n];
        assert!(k1.run(&lhs_p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let data = vec![0f32; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::NxK, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![0f32; 4];
        let seq = Parallelism::Sequential;
        assert!(kern.matmul(1, &[0.0; 7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        let bad = Clamp { min: 1.0, max: 0.0 };
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst, bad, seq).is_err(), "empty clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { k: usize::MAX / 2, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(usize::MAX, 8, &[0.0; 8], 8, seq).is_err(), "overflowing m");
        assert!(unpack_rhs_row(&packed, 4, &mut [0f32; 8]).is_err(), "row out of range");
    }
}
