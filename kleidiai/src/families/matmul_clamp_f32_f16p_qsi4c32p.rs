//! `matmul_clamp_f32_f16p_qsi4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ)` with block-quantised int4 weights ([`BlockInt4`], f16 block
//! scales; ggml's `Q4_0` for `bl = 32`) and the LHS in half precision:
//! `y = Σ_k h(x_k) · h(v_k · d_b)`, where `h` rounds to f16 (nearest, ties to
//! even). The kernel converts each nibble `v` to f16 through a lookup table,
//! multiplies it by its block scale `d_b` in f16 arithmetic (rounded), and
//! accumulates the f16 x f16 products in f32 (FMOPA into ZA). No bias.
//!
//! Kernel (1 upstream): SME2 MOPA GEMM `1vlx4vl` (ggml's SME2 `Q4_0` GEMM;
//! ggml pairs it with the SDOT GEMV of `matmul_clamp_f32_qsi8d32p_qsi4c32p`,
//! which reads the same packed weights). Packing (pairing of upstream's
//! `matmul_clamp_f32_f16p_qsi4c32p_test.cpp` and of ggml): LHS
//! `kai_lhs_pack_f16pmrx2_f32_neon` (f32 in, f16 out: needs FP16), RHS
//! `kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon` (format
//! `qsi4c32ps1s0scalef16`, ggml `Q4_0` bytes read in place).
//!
//! Tolerance of the conformance test: the reference reproduces both f16
//! roundings exactly and sums the products in f64; the kernel sums `k`
//! exact f32 products in f32, so `|err| <= k · 2^-24 · M` with
//! `M = Σ_k |h(x_k) h(v_k d_b)|` (the classic summation bound). The tests use
//! `k <= 128`, where that is below `1e-5 · M`: the check is
//! `1e-5 · (|want| + M) + 1e-6`.

use super::qsi8d32p_qsi4c32p::{SCALE_TYPE, check_weights_no_bias};
use crate::error::{self, Result};
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_f16p_qsi4c32p";

/// The weights as the kernel multiplies them: `h(v · d)` for each `(n, k)`,
/// `n x k`.
pub fn kernel_weights(w: &BlockInt4<'_>) -> Result<Vec<f16>> {
    let (n, k, bl) = check_weights_no_bias(w, FAMILY)?;
    let scales = w.scale_bits(SCALE_TYPE)?;
    let mut out = Vec::with_capacity(n * k);
    for i in 0..n {
        for p in 0..k {
            let d = f16::from_bits(scales[i * (k / bl) + p / bl]).to_f32();
            // v * d is exact in f32 (a 4-bit times an 11-bit significand).
            out.push(f16::from_f32(w.value(i, p) as f32 * d));
        }
    }
    Ok(out)
}

/// The portable reference (test oracle and fallback): the family's math in
/// scalar Rust, with the kernel's two f16 roundings.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_f16p_qsi4c32p::reference;
/// use kleidiai::formats::Q4_0;
/// use kleidiai::Clamp;
/// let mut block = [0xAAu8; 18]; // every value 10 - 8 = 2
/// block[..2].copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
/// let mut y = [0f32];
/// reference(1, &[1.0; 32], Q4_0 { n: 1, k: 32, data: &block, bias: None }, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 16.0);
/// ```
pub fn reference<'a>(m: usize, lhs: &[f32], w: impl Into<BlockInt4<'a>>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    let w = w.into();
    let weights = check_weights_no_bias(&w, FAMILY).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    let wh = kernel_weights(&w)?;
    for i in 0..m {
        let x: Vec<f64> = lhs[i * k..(i + 1) * k].iter().map(|v| f16::from_f32(*v).to_f64()).collect();
        for j in 0..n {
            let y: f64 = x.iter().zip(&wh[j * k..(j + 1) * k]).map(|(a, b)| a * b.to_f64()).sum();
            dst[i * n + j] = (y as f32).max(clamp.min).min(clamp.max);
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::SendPtr;
    use crate::cpu::{CpuFeature, Features};
    use crate::families::engine::{self, Tiles};
    use crate::families::qsi8d32p_qsi4c32p::{
        FORMAT_PS1S0SCALEF16, check_bl, dense_lhs, max_bl, pack_f16_rhs,
    };
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f32_f16p_qsi4c32p::{Interface, KERNELS};

    const LHS_FORMAT: &str = "f16pmrx2";
    const LHS_PACKER: &str = "kai_lhs_pack_f16pmrx2_f32_neon";
    const RHS_PACKERS: &[&str] = &["kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon"];
    /// The kernel needs SME2; its LHS packer (f32 -> f16) needs FP16.
    const FEATURES: &[CpuFeature] = &[CpuFeature::Sme, CpuFeature::Sme2, CpuFeature::Fp16];

    struct Entry {
        info: KernelInfo,
        iface: &'static Interface,
    }

    fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            KERNELS
                .iter()
                .map(|(u, iface)| {
                    let features = if u.features.contains(&CpuFeature::Fp16) { u.features } else { FEATURES };
                    Entry {
                        info: KernelInfo {
                            name: u.name,
                            family: FAMILY,
                            features,
                            vector_length: VectorLength::Any,
                            tile: tile_kind_for(u.name),
                            lhs_packer: Some(LHS_PACKER),
                            rhs_packers: RHS_PACKERS,
                            rank: rank_for(u.name, features),
                        },
                        iface,
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
            // SAFETY: the CPU has every feature the kernel (SME2) and its LHS
            // packer (FP16) need (ensure_supported), so the SME getters may
            // run; the generated table fills every getter.
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

        /// The packed-RHS layout this kernel reads for `n x k` weights in
        /// blocks of `bl` (format `qsi4c32ps1s0scalef16`, the one the SME2
        /// kernels of `matmul_clamp_f32_qsi8d32p_qsi4c32p` read too).
        pub fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format: FORMAT_PS1S0SCALEF16,
                rows: n,
                k,
                r: t.nr,
                kr: t.kr,
                sr: t.sr,
                bl,
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

        /// Packs the weights (no bias). ggml `Q4_0` bytes are read in place.
        pub fn pack_rhs<'a>(&self, w: impl Into<BlockInt4<'a>>) -> Result<PackedRhs> {
            let w = w.into();
            let (n, k, bl) = check_weights_no_bias(&w, FAMILY)?;
            pack_f16_rhs(self.rhs_layout(n, k, bl)?, &w, FAMILY)
        }

        /// Converts to f16 and packs an `m x k` f32 LHS (rows `lhs_stride`
        /// elements apart; `k` for a dense matrix). `k` must be a multiple
        /// of 32 (whole weight blocks).
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
            let dense = dense_lhs(m, k, lhs, lhs_stride)?;
            let layout = self.lhs_layout(m, k)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            // The packer converts 16 values per step and assumes sr = 2;
            // with bl = 32 its size query needs k % 32 == 0.
            check_bl(k, 32, kr, usize::MAX)?;
            if sr != 2 {
                return Err(crate::Error::bad_value("sr", sr, format!("{LHS_PACKER} needs sr = 2")));
            }
            // SAFETY: size query, pure arithmetic (k % 32 == 0, k % kr == 0).
            let size = unsafe { sys::kai_get_lhs_packed_size_lhs_pack_f16pmrx2_f32_neon(m, k, 32, mr, kr, sr) };
            out.reset(layout, size);
            let dst = SendPtr(out.data_mut().as_mut_ptr());
            let src = SendPtr(dense.as_ptr() as *mut f32);
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                // SAFETY: `rows` starts at a multiple of mr (split_aligned),
                // so its packed offset begins a row group no other range
                // writes; both pointers are pre-offset (m_idx_start 0) into
                // the dense source (rows k floats apart, as the packer
                // assumes) and the `size` bytes reserved; k is a multiple of
                // 16 and sr = 2 (checked); the CPU has FP16 (ensure_supported
                // in lhs_layout).
                unsafe {
                    let off = sys::kai_get_lhs_packed_offset_lhs_pack_f16pmrx2_f32_neon(rows.start, k, 32, mr, kr, sr);
                    sys::kai_run_lhs_pack_f16pmrx2_f32_neon(
                        rows.len(),
                        k,
                        32,
                        mr,
                        kr,
                        sr,
                        0,
                        src.0.add(rows.start * k).cast(),
                        k * 4,
                        dst.0.add(off).cast(),
                    );
                }
            });
            Ok(())
        }

        /// `dst = clamp(lhs · wᵀ)`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            clamp.check()?;
            let l = *rhs.layout();
            let (m, n, k, bl) = (lhs.layout().rows, l.rows, l.k, l.bl);
            rhs.expect(&self.rhs_layout(n, k, bl)?, self.0.info.name)?;
            lhs.expect(&self.lhs_layout(m, k)?, self.0.info.name)?;
            error::nonzero(m, "m")?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let (t, _) = self.tiles()?;
            check_bl(k, bl, t.kr, max_bl(FORMAT_PS1S0SCALEF16))?;
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
                // kernel computes for (m, n, k, bl) (checked above), so the
                // offsets of a row start that is a multiple of m_step and a
                // column start that is a multiple of n_step (plan_grid) lie
                // inside them; dst holds m x n f32 and tiles are disjoint;
                // k and bl meet the kernel's rules (check_bl); the CPU has
                // SME2 (tiles()).
                unsafe {
                    let lo = get_lhs(rows.start, k, bl);
                    let ro = get_rhs(cols.start, k, bl);
                    run(
                        rows.len(),
                        cols.len(),
                        k,
                        bl,
                        lp.0.add(lo).cast(),
                        rp.0.add(ro).cast(),
                        dp.0.add(rows.start * n + cols.start),
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

    /// Weight row `row` of a packed RHS of this family (format
    /// `qsi4c32ps1s0scalef16`), as f32 (`value * f16 scale`; note the
    /// kernel itself multiplies in f16, see [`kernel_weights`]).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        crate::families::qsi8d32p_qsi4c32p::unpack_rhs_row(rhs, row, out)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::testing::qsi4c32::{TestWeights, magnitudes};
    use crate::formats::Q4_0;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let lay = kernel.rhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let lhs_lay = kernel.lhs_layout(1, 32).map_err(|e| (0, e.to_string()))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let mut rng = Rng::new(0xf16);
            let mut cases = 0;
            let mut worst = 0f64;
            for (bl, k) in [(32, 32), (32, 96), (64, 128)] {
                for (ci, &(m, n, k)) in tail_shapes(mr, mr, nr, nr, &[k]).iter().enumerate() {
                    let tw = TestWeights::new(&mut rng, n, k, bl);
                    let w = tw.view(ci + bl, true, false);
                    let lhs = rng.vec_f32(m * k);
                    let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                    let mut want = vec![0f32; m * n];
                    reference(m, &lhs, w, clamp, &mut want).map_err(|e| (cases, e.to_string()))?;
                    let wh: Vec<f32> = kernel_weights(&w).unwrap().iter().map(|x| x.to_f32()).collect();
                    let xh: Vec<f32> = lhs.iter().map(|x| f16::from_f32(*x).to_f32()).collect();
                    let mags = magnitudes(m, n, k, &xh, &wh, |_| 0.0);
                    let packed = kernel.pack_rhs(w).map_err(|e| (cases, e.to_string()))?;
                    let mut first: Option<Vec<f32>> = None;
                    for threads in THREADS {
                        let par = Parallelism::Rayon(threads);
                        let mut dst = vec![f32::NAN; m * n];
                        let mut scratch = PackedLhs::empty();
                        kernel.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(|e| (cases, e.to_string()))?;
                        kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(|e| (cases, e.to_string()))?;
                        let err = compare(&dst, &want, |i, y| 1e-5 * (y.abs() + mags[i]) + 1e-6)
                            .map_err(|e| (cases, format!("m={m} n={n} k={k} bl={bl} threads={threads}: {e}")))?;
                        worst = worst.max(err);
                        match &first {
                            None => first = Some(dst),
                            Some(f) if !bit_identical(f, &dst) => {
                                return Err((cases, format!("m={m} n={n} k={k}: {threads} threads differ from 1")));
                            }
                            _ => {}
                        }
                    }
                    let wd = w.dequantize_as(SCALE_TYPE).unwrap();
                    let mut row = vec![0f32; k];
                    for r in [0, n / 2, n - 1] {
                        unpack_rhs_row(&packed, r, &mut row).map_err(|e| (cases, e.to_string()))?;
                        if row[..] != wd[r * k..(r + 1) * k] {
                            return Err((cases, format!("unpack_rhs_row({r}) n={n} k={k} bl={bl} differs")));
                        }
                    }
                    cases += 1;
                }
            }
            Ok((cases, worst))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(8, &f) else {
            return;
        };
        let mut rng = Rng::new(4);
        let tw = TestWeights::new(&mut rng, 8, 64, 32);
        let w = Q4_0 { n: 8, k: 64, data: &tw.q4_0, bias: None };
        let lhs = vec![0.25f32; 2 * 64];
        let mut dst = vec![0f32; 16];
        let p = kern.pack_rhs(w).unwrap();
        let short = kern.pack_lhs(2, 32, &lhs, 32, Parallelism::Sequential).unwrap();
        assert!(kern.run(&short, &p, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(8, &f) else {
            return;
        };
        let q = vec![0x88u8; 2 * 18];
        let w = Q4_0 { n: 2, k: 32, data: &q, bias: None };
        let packed = kern.pack_rhs(w).unwrap();
        let mut dst = vec![0f32; 2];
        let seq = Parallelism::Sequential;
        assert!(kern.matmul(1, &[0.0; 31], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0.0; 32], &packed, &mut dst[..1], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.pack_rhs(Q4_0 { bias: Some(&[0.0, 0.0]), ..w }).is_err(), "bias");
        assert!(kern.pack_rhs(Q4_0 { k: 64, ..w }).is_err(), "short data");
        assert!(kern.pack_lhs(1, 48, &[0.0; 48], 48, seq).is_err(), "k not a multiple of 32");
        assert!(kern.pack_lhs(usize::MAX, 32, &[0.0; 32], 32, seq).is_err(), "overflowing m");
        assert!(reference(1, &[0.0; 32], Q4_0 { bias: Some(&[0.0; 2]), ..w }, Clamp::NONE, &mut dst).is_err());
    }
}
