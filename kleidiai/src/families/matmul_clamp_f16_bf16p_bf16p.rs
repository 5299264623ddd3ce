//! `matmul_clamp_f16_bf16p_bf16p`: `dst (f16, m x n) = f16(clamp(bf16(lhs) ·
//! bf16(w)ᵀ + bias))` with f16 LHS, weights and bias, on NEON with FEAT_FP16
//! and FEAT_BF16. The packers widen f16 to f32 (exact) and round to bf16
//! (`BFCVTN`: nearest, ties to even); the kernel accumulates in f32 from the
//! bias (f16 widened), clamps in f32, and rounds to f16 (`FCVTN`: nearest,
//! ties to even).
//!
//! Kernel (1 upstream): `bf16p8x4_bf16p12x4b_8x12_neon_mmla` (`BFMMLA`). LHS
//! packer `kai_lhs_pack_bf16p8x4_f16_neon`, RHS packer
//! `kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon` (format `bf16p12x4biasf16`,
//! K x N input; N x K weights are transposed in Rust first). The RHS K
//! padding (copies of weight row 0) is zeroed after packing.
//!
//! Tolerance of the conformance test: the f32 result before the final
//! rounding differs from the reference's by at most
//! `E = (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)` (as in
//! [`matmul_clamp_f32_bf16p_bf16p`](super::matmul_clamp_f32_bf16p_bf16p));
//! both are then rounded to f16, which can put them one f16 ulp apart:
//! `|err| <= E + 2⁻¹⁰ · |want| + 2⁻²⁴`.

use crate::error::{self, Result};
use crate::families::float_common::check_reference_operands;
use crate::families::bf16p_bf16p::{bf16_core, round_bf16};
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f16_bf16p_bf16p";

/// The portable reference (test oracle and fallback): `dst = f16(clamp(bf16(lhs)
/// · bf16(w)ᵀ + bias))` for a dense `m x k` f16 LHS, `dst` `m x n`.
///
/// ```
/// use half::f16;
/// use kleidiai::families::matmul_clamp_f16_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let h = |x: f32| f16::from_f32(x);
/// let data = [h(1.0), h(2.0)];
/// let bias = [h(0.5)];
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &data, bias: Some(&bias) };
/// let mut y = [f16::ZERO];
/// reference(1, &[h(1.0), h(1.0)], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], h(3.5));
/// ```
pub fn reference(m: usize, lhs: &[f16], w: &FloatWeights<'_, f16>, clamp: Clamp, dst: &mut [f16]) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let x: Vec<f32> = lhs[..m * k].iter().map(|v| v.to_f32()).collect();
    let wq: Vec<f32> =
        w.to_nxk()?.into_iter().map(|v| round_bf16(v.to_f32())).collect();
    let bias: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
    let mut y = vec![0f32; m * n];
    bf16_core(m, &x, k, &wq, &bias, clamp, &mut y);
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
    use crate::families::bf16p_bf16p::{unpack_bf16_row, zero_k_padding_with_bias};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use core::ffi::c_void;
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f16_bf16p_bf16p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "bf16p12x4biasf16";
    const LHS_FORMAT: &str = "bf16p8x4";
    const RHS_PACKERS: &[&str] = &["kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon"];
    const LHS_PACKER: &str = "kai_lhs_pack_bf16p8x4_f16_neon";

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

        fn tiles(&self) -> Result<Tiles> {
            engine::ensure_supported(&self.0.info)?;
            let i = self.0.iface;
            // SAFETY: the CPU has every feature the kernel needs
            // (ensure_supported); upstream fills every getter (generated table).
            Ok(unsafe {
                Tiles {
                    m_step: i.get_m_step.expect("m_step")(),
                    n_step: i.get_n_step.expect("n_step")(),
                    mr: i.get_mr.expect("mr")(),
                    nr: i.get_nr.expect("nr")(),
                    kr: i.get_kr.expect("kr")(),
                    sr: i.get_sr.expect("sr")(),
                }
            })
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights.
        pub fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let t = self.tiles()?;
            Ok(PackedLayout { format: RHS_FORMAT, rows: n, k, r: t.nr, kr: t.kr, sr: t.sr, bl: 0, vector_bytes: 0 })
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let t = self.tiles()?;
            Ok(PackedLayout { format: LHS_FORMAT, rows: m, k, r: t.mr, kr: t.kr, sr: t.sr, bl: 0, vector_bytes: 0 })
        }

        /// Rounds the f16 weights to bf16 and packs them with the f16 bias.
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f16>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            let block = error::mul(roundup(k, kr, "k")?, 2, "packed rhs")?
                .checked_add(2)
                .ok_or_else(|| overflow("packed rhs"))?;
            error::mul(roundup(n, nr, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 2, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias.map_or(core::ptr::null(), |b| b.as_ptr().cast::<c_void>());
            // SAFETY: size query, arithmetic only (no overflow: checked above).
            let size = unsafe { sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p12x4biasf16_f16_neon(n, k) };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k rows of n f16 `stride` bytes apart, `bias`
            // is null or n f16 (validate); the destination has the packer's
            // size for (n, k); nr 12, kr 4, sr 1 are the kernel's and the
            // values the packer asserts; one group, no scale, no extra bytes,
            // no params. NEON + FP16 + BF16 code, checked by rhs_layout.
            unsafe {
                sys::kai_run_rhs_pack_kxn_bf16p12x4biasf16_f16_neon(
                    1,
                    n,
                    k,
                    nr,
                    kr,
                    sr,
                    stride,
                    kxn.as_ptr().cast(),
                    bias,
                    core::ptr::null(),
                    buf.as_mut_ptr().cast(),
                    0,
                    core::ptr::null(),
                );
            }
            zero_k_padding_with_bias(buf.as_mut_slice(), n, k, nr, kr, 2);
            Ok(PackedRhs::new(layout, buf))
        }

        /// Rounds an `m x k` f16 LHS (rows `lhs_stride` elements apart) to
        /// bf16 and packs it.
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            lhs: &[f16],
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
            lhs: &[f16],
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
            let stride_bytes = error::mul(lhs_stride, 2, "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let row_bytes = error::mul(roundup(k, kr, "k")?, 2, "packed lhs")?;
            let size = error::mul(roundup(m, mr, "m")?, row_bytes, "packed lhs")?;
            out.reset(layout, size);
            let dst = SendPtr(out.data_mut().as_mut_ptr());
            let src = SendPtr(lhs.as_ptr() as *mut f16);
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                // SAFETY: `rows` starts at a multiple of mr (split_aligned), so
                // the packer's offset for rows.start begins a whole row block
                // no other range writes; pointers are pre-offset (m_idx_start
                // 0). Source rows lie inside `lhs`, the destination inside the
                // `size` bytes reserved; mr/kr/sr are the kernel's (8, 4, 1),
                // as the packer asserts; the CPU has FP16 + BF16 (lhs_layout).
                unsafe {
                    let off = sys::kai_get_lhs_packed_offset_lhs_pack_bf16p8x4_f16_neon(rows.start, k, mr, kr, sr);
                    sys::kai_run_lhs_pack_bf16p8x4_f16_neon(
                        rows.len(),
                        k,
                        mr,
                        kr,
                        sr,
                        0,
                        src.0.add(rows.start * lhs_stride).cast(),
                        stride_bytes,
                        dst.0.add(off).cast(),
                    );
                }
            });
            Ok(())
        }

        /// `dst = f16(clamp(lhs · wᵀ + bias))`: `dst` is `m x n`, rows `n`
        /// apart. The clamp bounds apply in f32, before the rounding to f16.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            let (m, n, k) = (lhs.layout().rows, rhs.layout().rows, rhs.layout().k);
            rhs.expect(&self.rhs_layout(n, k)?, self.0.info.name)?;
            lhs.expect(&self.lhs_layout(m, k)?, self.0.info.name)?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let t = self.tiles()?;
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
                // kernel computes for (m, n, k) (checked above), so the
                // offsets of a row start that is a multiple of m_step and a
                // column start that is a multiple of n_step (plan_grid) lie
                // inside them; dst holds m x n f16 (column stride 2, which the
                // kernel asserts) and tiles are disjoint; the CPU supports the
                // kernel (tiles()).
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
                        n * 2,
                        2,
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
            lhs: &[f16],
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }

    /// Weight row `row` of a packed RHS of this family, as the kernel sees
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
        unpack_bf16_row(rhs, row, out, 2)
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
            let lay = kernel.rhs_layout(1, 4).map_err(e(0))?;
            let lhs_lay = kernel.lhs_layout(1, 4).map_err(e(0))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let shapes = tail_shapes(mr, mr, nr, nr, &[4, 7, 66]);
            let mut rng = Rng::new(0xf16b);
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
                let data = h(rng.vec_f32(n * k));
                let bias_v = h(rng.vec_f32(n));
                let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
                let w = FloatWeights { n, k, order, data: &data, bias };
                let lhs = h(rng.vec_f32(m * k));
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![f16::ZERO; m * n];
                reference(m, &lhs, &w, clamp, &mut want).map_err(e(cases))?;
                let want = f(&want);
                let wq: Vec<f32> = f(&w.to_nxk().unwrap()).into_iter().map(round_bf16).collect();
                let b: Vec<f32> = (0..n).map(|j| w.bias.map_or(0.0, |b| b[j].to_f32())).collect();
                let mags = magnitudes(m, &f(&lhs), k, &wq, &b);
                let packed = kernel.pack_rhs(&w).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![f16::NAN; m * n];
                    let mut scratch = PackedLhs::empty();
                    kernel.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(e(cases))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let dst = f(&dst);
                    let err = compare(&dst, &want, |i, y| {
                        bf16_tolerance(k, mags[i]) + y.abs() * f32::powi(2.0, -10) + f32::powi(2.0, -24)
                    })
                    .map_err(|x| (cases, format!("m={m} n={n} k={k} threads={threads}: {x}")))?;
                    worst = worst.max(err);
                    match &first {
                        None => first = Some(dst),
                        Some(fst) if !bit_identical(fst, &dst) => {
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
        let feats = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &feats) else {
            return;
        };
        let (n, k) = (8, 16);
        let data = vec![f16::from_f32(0.5); n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![f16::from_f32(0.5); 2 * k];
        let mut dst = vec![f16::ZERO; 2 * n];
        k1.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        assert!(dst.iter().all(|y| y.to_f32() == 4.0), "{dst:?}");
        let z = vec![f16::ZERO; 2 * (k + 4)];
        let lhs_p = k1.pack_lhs(2, k + 4, &z, k + 4, Parallelism::Sequential).unwrap();
        assert!(k1.run(&lhs_p, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let feats = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &feats) else {
            return;
        };
        let data = vec![f16::ZERO; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::NxK, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![f16::ZERO; 4];
        let seq = Parallelism::Sequential;
        let z = [f16::ZERO; 8];
        assert!(kern.matmul(1, &z[..7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &z, &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        let nan = Clamp { min: 0.0, max: f32::NAN };
        assert!(kern.matmul(1, &z, &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { n: usize::MAX / 4, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(usize::MAX, 8, &z, 8, seq).is_err(), "overflowing m");
        assert!(unpack_rhs_row(&packed, 4, &mut [0f32; 8]).is_err(), "row out of range");
    }
}
