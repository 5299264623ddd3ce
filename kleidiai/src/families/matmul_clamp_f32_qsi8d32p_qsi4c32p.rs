//! `matmul_clamp_f32_qsi8d32p_qsi4c32p`: `dst (f32, m x n) = clamp(lhs (f32,
//! m x k) · wᵀ)` with block-quantised int4 weights ([`BlockInt4`], f16 block
//! scales; ggml's `Q4_0` for `bl = 32`). The LHS is quantised on the fly,
//! symmetrically per block of the same `bl` (`qsi8d32`,
//! [`crate::quant::qsi8d32_row`]): `y = Σ_b s_b d_b Σ_{k∈b} q_k w_k` with `s_b`
//! the LHS and `d_b` the weight block scales (both f16). Block dot products
//! are exact int32. This family has no bias (the packers take none).
//!
//! Kernels (12 upstream, pairings of upstream's
//! `matmul_clamp_f32_qsi8d32p_qsi4c32p_test.cpp`):
//! - NEON dotprod GEMV `1x4`, `1x4x32` and GEMM `16x4`, NEON i8mm GEMM
//!   `8x4x32`: LHS `kai_lhs_quant_pack_qsi8d32p_f32`, RHS
//!   `kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0` (format `qsi4c32pscalef16`);
//! - NEON i8mm GEMM `16x4`: LHS `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon`
//!   (ggml's choice; it rounds halves to even), same RHS;
//! - SVE dotprod GEMV `1x8` (two): same packers as the NEON GEMVs; SVE i8mm
//!   GEMM `16x8`: LHS `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon` as ggml
//!   pairs it. The SVE kernels only work with 256-bit SVE and `bl = 32`;
//! - SME2 MOPA GEMM and SDOT GEMV: LHS `kai_lhs_quant_pack_qsi8d32p_f32_neon`,
//!   RHS `kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon` (format
//!   `qsi4c32ps1s0scalef16`, shared with `matmul_clamp_f32_f16p_qsi4c32p`);
//! - SME MOPA GEMM and DOT GEMV: same LHS, RHS
//!   `kai_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon` (format
//!   `qsi4c32ps4s0sf16`). That packer stores `scale / 16` in f16, exact for
//!   scales of magnitude at least 2^-10; smaller scales lose bits there.
//!
//! All RHS packers read ggml's `Q4_0` byte layout (generalised to `bl`:
//! each block an f16 scale then `bl / 2` bytes pairing values `j` and
//! `j + bl / 2`): [`Q4_0`](crate::formats::Q4_0) input is passed through
//! untouched, other input is converted (bf16 scales rounded to f16, which
//! [`reference()`] does too).
//!
//! Tolerance of the conformance test: the reference quantises the LHS with
//! the packer's exact arithmetic (and rounding mode), so every int32 block
//! dot product is the kernel's; it evaluates the scaling exactly (f64) and
//! rounds once, while the kernels evaluate `s_b · d_b · dot_b` and the sum
//! over blocks in f32: a few roundings of terms bounded by
//! `M = Σ_k |s q_k| |d w_k|`, hence `|err| <= 1e-5 · (|want| + M) + 1e-6`.

pub use super::qsi8d32p_qsi4c32p::SCALE_TYPE;
use super::qsi8d32p_qsi4c32p::check_weights_no_bias;
use crate::error::{self, Result};
use crate::families::float_common::check_reference_operands;
use crate::formats::BlockInt4;
use crate::packed::Clamp;
use crate::quant::{Rounding, qsi8d32_row};

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_qsi8d32p_qsi4c32p";

/// The portable reference (test oracle and fallback), quantising the LHS as
/// `kai_lhs_quant_pack_qsi8d32p_f32` and `_neon` do (halves away from zero).
/// Use [`reference_with`] and `Kernel::lhs_rounding` to match the kernel
/// whose packer rounds halves to even.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_qsi8d32p_qsi4c32p::reference;
/// use kleidiai::formats::Q4_0;
/// use kleidiai::Clamp;
/// let mut block = [0x99u8; 18]; // every value 9 - 8 = 1
/// block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
/// let mut y = [0f32];
/// reference(1, &[1.0; 32], Q4_0 { n: 1, k: 32, data: &block, bias: None }, Clamp::NONE, &mut y).unwrap();
/// assert!((y[0] - 16.0).abs() < 1e-2);
/// ```
pub fn reference<'a>(m: usize, lhs: &[f32], w: impl Into<BlockInt4<'a>>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    reference_with(m, lhs, w, clamp, Rounding::HalfAwayFromZero, dst)
}

/// [`reference()`] with the LHS quantiser's `rounding` of halves.
pub fn reference_with<'a>(
    m: usize,
    lhs: &[f32],
    w: impl Into<BlockInt4<'a>>,
    clamp: Clamp,
    rounding: Rounding,
    dst: &mut [f32],
) -> Result<()> {
    let w = w.into();
    let weights = check_weights_no_bias(&w, FAMILY).map(|(n, k, _)| (n, k));
    let (n, k) = check_reference_operands(weights, clamp, m, lhs.len(), dst.len())?;
    let bl = w.bl();
    let blocks = k / bl;
    let scales: Vec<f64> = w.scale_bits(SCALE_TYPE)?.iter().map(|b| SCALE_TYPE.value_of(*b) as f64).collect();
    let wq: Vec<i32> = (0..n * k).map(|i| w.value(i / k, i % k) as i32).collect();
    for i in 0..m {
        let row = qsi8d32_row(&lhs[i * k..(i + 1) * k], bl, rounding);
        for j in 0..n {
            let mut acc = 0f64;
            for b in 0..blocks {
                let dot: i32 = (b * bl..(b + 1) * bl).map(|p| row.q[p] as i32 * wq[j * k + p]).sum();
                acc += dot as f64 * row.scales[b].to_f64() * scales[j * blocks + b];
            }
            dst[i * n + j] = (acc as f32).max(clamp.min).min(clamp.max);
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
    pub use crate::families::qsi8d32p_qsi4c32p::unpack_rhs_row;
    use crate::families::qsi8d32p_qsi4c32p::{
        FORMAT_PS1S0SCALEF16, FORMAT_PS4S0SF16, FORMAT_SCALEF16, check_bl, dense_lhs, max_bl, pack_f16_rhs,
    };
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f32_qsi8d32p_qsi4c32p::{Interface, KERNELS};

    /// LHS of the scalar and `4x8sb` packers (scales ahead of each block).
    const LHS_QSI8D32P: &str = "qsi8d32p";
    /// LHS of the `_neon` packer (scales after all blocks of a row group).
    const LHS_QSI8D32P_SCALES_LAST: &str = "qsi8d32p_scales_last";

    const RHS_SCALEF16: &[&str] = &["kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0"];
    const RHS_PS1S0SCALEF16: &[&str] = &["kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon"];
    const RHS_PS4S0SF16: &[&str] = &["kai_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon"];

    /// The LHS packers of this family.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum LhsPacker {
        Scalar,
        Neon,
        Sb4x8,
    }

    impl LhsPacker {
        fn name(self) -> &'static str {
            match self {
                LhsPacker::Scalar => "kai_lhs_quant_pack_qsi8d32p_f32",
                LhsPacker::Neon => "kai_lhs_quant_pack_qsi8d32p_f32_neon",
                LhsPacker::Sb4x8 => "kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon",
            }
        }
    }

    struct Entry {
        info: KernelInfo,
        iface: &'static Interface,
        rhs_format: &'static str,
        lhs: LhsPacker,
        /// The SVE kernels handle only `bl = 32`.
        bl_32_only: bool,
    }

    fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            KERNELS
                .iter()
                .map(|(u, iface)| {
                    let sme = u.features.contains(&CpuFeature::Sme);
                    let sme2 = u.features.contains(&CpuFeature::Sme2);
                    let sve = u.features.contains(&CpuFeature::Sve);
                    let lhs = if sme {
                        LhsPacker::Neon
                    } else if u.name.contains("qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm")
                        || u.name.contains("qsi8d32p4x8_qsi4c32p8x8_16x8_sve_i8mm")
                    {
                        // ggml's LHS packer for these two GEMMs.
                        LhsPacker::Sb4x8
                    } else {
                        LhsPacker::Scalar
                    };
                    let (rhs_format, rhs_packers) = if sme2 {
                        (FORMAT_PS1S0SCALEF16, RHS_PS1S0SCALEF16)
                    } else if sme {
                        (FORMAT_PS4S0SF16, RHS_PS4S0SF16)
                    } else {
                        (FORMAT_SCALEF16, RHS_SCALEF16)
                    };
                    Entry {
                        info: KernelInfo {
                            name: u.name,
                            family: FAMILY,
                            features: u.features,
                            // Upstream tests these with cpu_has_sve_vl256 only.
                            vector_length: if sve { VectorLength::SveBytes(32) } else { VectorLength::Any },
                            tile: tile_kind_for(u.name),
                            lhs_packer: Some(lhs.name()),
                            rhs_packers,
                            rank: rank_for(u.name, u.features),
                        },
                        iface,
                        rhs_format,
                        lhs,
                        bl_32_only: sve,
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

        /// How this kernel's LHS packer rounds halves (see
        /// [`reference_with`](super::reference_with)).
        pub fn lhs_rounding(&self) -> Rounding {
            if self.0.lhs == LhsPacker::Sb4x8 { Rounding::HalfToEven } else { Rounding::HalfAwayFromZero }
        }

        /// The largest block length this kernel takes.
        pub fn max_bl(&self) -> usize {
            if self.0.bl_32_only { 32 } else { max_bl(self.0.rhs_format) }
        }

        fn tiles(&self) -> Result<(Tiles, Features)> {
            let f = engine::ensure_supported(&self.0.info)?;
            let i = self.0.iface;
            // SAFETY: the CPU has every feature (and the SVE vector length)
            // the kernel needs (ensure_supported), so even SME getters may
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
        /// blocks of `bl`.
        pub fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(PackedLayout {
                format: self.0.rhs_format,
                rows: n,
                k,
                r: t.nr,
                kr: t.kr,
                sr: t.sr,
                bl,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input
        /// quantised in blocks of `bl`.
        pub fn lhs_layout(&self, m: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            let format = if self.0.lhs == LhsPacker::Neon { LHS_QSI8D32P_SCALES_LAST } else { LHS_QSI8D32P };
            Ok(PackedLayout {
                format,
                rows: m,
                k,
                r: t.mr,
                kr: t.kr,
                sr: t.sr,
                bl,
                vector_bytes: engine::layout_vector_bytes(&self.0.info, &f),
            })
        }

        fn check(&self, k: usize, bl: usize, t: &Tiles) -> Result<()> {
            check_bl(k, bl, t.kr, self.max_bl())
        }

        /// Packs the weights (no bias) for this kernel and every kernel with
        /// the same [`rhs_layout`](Self::rhs_layout). ggml `Q4_0` bytes are
        /// read in place.
        pub fn pack_rhs<'a>(&self, w: impl Into<BlockInt4<'a>>) -> Result<PackedRhs> {
            let w = w.into();
            let (n, k, bl) = check_weights_no_bias(&w, FAMILY)?;
            let (t, _) = self.tiles()?;
            self.check(k, bl, &t)?;
            pack_f16_rhs(self.rhs_layout(n, k, bl)?, &w, FAMILY)
        }

        /// Quantises (blocks of `bl`) and packs an `m x k` f32 LHS (rows
        /// `lhs_stride` elements apart; `k` for a dense matrix).
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            bl: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_into(m, k, bl, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        #[allow(clippy::too_many_arguments)]
        pub fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            bl: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            let dense = dense_lhs(m, k, lhs, lhs_stride)?;
            let layout = self.lhs_layout(m, k, bl)?;
            let (t, _) = self.tiles()?;
            self.check(k, bl, &t)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let packer = self.0.lhs;
            let ok = match packer {
                LhsPacker::Scalar => sr != 0 && kr % sr == 0 && bl % (kr / sr).max(1) == 0,
                LhsPacker::Neon => kr == 4,
                LhsPacker::Sb4x8 => mr == 4 && kr == 16 && sr == 2,
            };
            if !ok {
                return Err(crate::Error::bad_value(
                    "mr, kr, sr",
                    format!("{mr}, {kr}, {sr}"),
                    format!("unsupported by {}", packer.name()),
                ));
            }
            // SAFETY: size queries, pure arithmetic (k % bl, k % kr, k even
            // checked above).
            let size = unsafe {
                match packer {
                    LhsPacker::Scalar => sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32(m, k, bl, mr, kr, sr),
                    LhsPacker::Neon => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon(m, k, bl, mr, kr, sr)
                    }
                    LhsPacker::Sb4x8 => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, bl, mr, kr, sr)
                    }
                }
            };
            out.reset(layout, size);
            let dst = SendPtr(out.data_mut().as_mut_ptr());
            let src = SendPtr(dense.as_ptr() as *mut f32);
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                // SAFETY: `rows` starts at a multiple of mr (split_aligned),
                // so the packed offset of rows.start begins a row group no
                // other range writes; both pointers are pre-offset (hence
                // m_idx_start 0) into the dense m x k source (rows k floats
                // apart, as the NEON packers assume) and the `size` bytes
                // reserved; block length, k, mr, kr and sr meet the packer's
                // assumptions (checked above). The packers are C / NEON code.
                unsafe {
                    let s = src.0.add(rows.start * k);
                    let (h, st) = (rows.len(), k * 4);
                    match packer {
                        LhsPacker::Scalar => {
                            let off = sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32(
                                rows.start, k, bl, mr, kr, sr,
                            );
                            sys::kai_run_lhs_quant_pack_qsi8d32p_f32(
                                h,
                                k,
                                bl,
                                mr,
                                kr,
                                sr,
                                0,
                                s,
                                st,
                                dst.0.add(off).cast(),
                            );
                        }
                        LhsPacker::Neon => {
                            let off = sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p_f32_neon(
                                rows.start, k, bl, mr, kr, sr,
                            );
                            sys::kai_run_lhs_quant_pack_qsi8d32p_f32_neon(
                                h,
                                k,
                                bl,
                                mr,
                                kr,
                                sr,
                                0,
                                s,
                                st,
                                dst.0.add(off).cast(),
                            );
                        }
                        LhsPacker::Sb4x8 => {
                            let off = sys::kai_get_lhs_packed_offset_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(
                                rows.start, k, bl, mr, kr, sr,
                            );
                            sys::kai_run_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(
                                h,
                                k,
                                bl,
                                mr,
                                kr,
                                sr,
                                0,
                                s,
                                st,
                                dst.0.add(off).cast(),
                            );
                        }
                    }
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
            lhs.expect(&self.lhs_layout(m, k, bl)?, self.0.info.name)?;
            error::nonzero(m, "m")?;
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let (t, _) = self.tiles()?;
            self.check(k, bl, &t)?;
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
            // The GEMV kernels (mr 1) assume one row per call.
            let rows_per_call = if t.mr == 1 { 1 } else { usize::MAX };
            engine::run_grid(par, &self.0.info, m, n, k, &t, |rows, cols| {
                let (lp, rp, dp) = (lp, rp, dp);
                let mut r0 = rows.start;
                while r0 < rows.end {
                    let r1 = rows.end.min(r0.saturating_add(rows_per_call));
                    // SAFETY: both packed buffers have exactly the layouts
                    // this kernel computes for (m, n, k, bl) (checked above),
                    // so the offsets of a row start that is a multiple of
                    // m_step (any row for mr 1) and a column start that is a
                    // multiple of n_step (plan_grid) lie inside them; dst
                    // holds m x n f32 and tiles are disjoint; k and bl meet
                    // the kernel's rules (check); the CPU supports the
                    // kernel, at its vector length (tiles()).
                    unsafe {
                        let lo = get_lhs(r0, k, bl);
                        let ro = get_rhs(cols.start, k, bl);
                        run(
                            r1 - r0,
                            cols.len(),
                            k,
                            bl,
                            lp.0.add(lo).cast(),
                            rp.0.add(ro).cast(),
                            dp.0.add(r0 * n + cols.start),
                            n * 4,
                            4,
                            clamp.min,
                            clamp.max,
                        );
                    }
                    r0 = r1;
                }
            });
            Ok(())
        }

        /// The checks of [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](Self::run) for a dense `m x k` LHS and `rhs`, made once
        /// (the steady-state path of `PackedWeights::matmul`).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k, bl) = (l.rows, l.k, l.bl);
            error::nonzero(m, "m")?;
            error::nonzero(k, "k")?;
            rhs.expect(&self.rhs_layout(n, k, bl)?, self.0.info.name)?;
            let (t, _) = self.tiles()?;
            self.check(k, bl, &t)?;
            let layout = self.lhs_layout(m, k, bl)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let ok = match self.0.lhs {
                LhsPacker::Scalar => sr != 0 && kr % sr == 0 && bl % (kr / sr).max(1) == 0,
                LhsPacker::Neon => kr == 4,
                LhsPacker::Sb4x8 => mr == 4 && kr == 16 && sr == 2,
            };
            if !ok {
                return Ok(None);
            }
            error::mul(error::mul(m, k, "lhs")?, 4, "lhs")?;
            error::mul(error::mul(m, n, "dst")?, 4, "dst")?;
            // SAFETY: size queries, pure arithmetic (k % bl, k % kr checked).
            let lhs_bytes = unsafe {
                match self.0.lhs {
                    LhsPacker::Scalar => sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32(m, k, bl, mr, kr, sr),
                    LhsPacker::Neon => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon(m, k, bl, mr, kr, sr)
                    }
                    LhsPacker::Sb4x8 => {
                        sys::kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, bl, mr, kr, sr)
                    }
                }
            };
            Ok(Some(engine::Prepared { m, n, k, bl, t, lhs_bytes }))
        }

        /// What `pack_lhs_into` then `run` do on one thread for the whole
        /// output, without their checks.
        ///
        /// # Safety
        /// `p` is what [`prepare`](Self::prepare) returned (`Some`) for this
        /// `rhs`; the CPU still runs the kernel at the vector length it ran at
        /// then; `x` holds `p.m x p.k` f32, `lhs` `p.lhs_bytes` writable bytes
        /// (64-byte aligned), `y` `p.m x p.n` f32; `clamp` is valid.
        pub(crate) unsafe fn run_prepared(
            &self,
            p: &engine::Prepared,
            x: *const f32,
            lhs: *mut u8,
            rhs: &PackedRhs,
            y: *mut f32,
            clamp: Clamp,
        ) {
            let (m, n, k, bl, t) = (p.m, p.n, p.k, p.bl, p.t);
            let (mr, kr, sr) = (t.mr, t.kr, t.sr);
            let i = self.0.iface;
            // SAFETY: the caller's contract: `prepare` checked layout,
            // shape, block rules, packer parameters and the packed size for
            // exactly these operands and this kernel; one packer call from
            // row 0 (offset 0) writes what the row-range calls of
            // `pack_lhs_into` write; GEMV kernels (mr 1) get one row per
            // call at the packer's offset of that row, as in `run`.
            unsafe {
                let dst = lhs.cast::<core::ffi::c_void>();
                match self.0.lhs {
                    LhsPacker::Scalar => {
                        sys::kai_run_lhs_quant_pack_qsi8d32p_f32(m, k, bl, mr, kr, sr, 0, x, k * 4, dst)
                    }
                    LhsPacker::Neon => {
                        sys::kai_run_lhs_quant_pack_qsi8d32p_f32_neon(m, k, bl, mr, kr, sr, 0, x, k * 4, dst)
                    }
                    LhsPacker::Sb4x8 => {
                        sys::kai_run_lhs_quant_pack_qsi8d32p4x8sb_f32_neon(m, k, bl, mr, kr, sr, 0, x, k * 4, dst)
                    }
                }
                let (get_lhs, run) = (i.get_lhs_packed_offset.expect("lhs offset"), i.run_matmul.expect("run"));
                let rp = rhs.data().as_ptr().cast();
                let step = if mr == 1 { 1 } else { m };
                let mut r0 = 0;
                while r0 < m {
                    let h = step.min(m - r0);
                    let lo = if r0 == 0 { 0 } else { get_lhs(r0, k, bl) };
                    run(h, n, k, bl, lhs.add(lo).cast(), rp, y.add(r0 * n), n * 4, 4, clamp.min, clamp.max);
                    r0 += h;
                }
            }
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
            let (k, bl) = (rhs.layout().k, rhs.layout().bl);
            let packed = self.pack_lhs(m, k, bl, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
        }
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::testing::qsi4c32::{TestWeights, magnitudes};
    use crate::formats::{BlockScales, Int4Blocks, Int4Encoding, Order, Q4_0};
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};
    use half::f16;

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let lay = kernel.rhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let lhs_lay = kernel.lhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let rounding = kernel.lhs_rounding();
            let mut rng = Rng::new(0x8d32);
            let mut cases = 0;
            let mut worst = 0f64;
            for (bl, k) in [(32, 32), (32, 96), (64, 128)] {
                if bl > kernel.max_bl() {
                    continue;
                }
                for (ci, &(m, n, k)) in tail_shapes(mr, mr, nr, nr, &[k]).iter().enumerate() {
                    let tw = TestWeights::new(&mut rng, n, k, bl);
                    let w = tw.view(ci + bl, true, false);
                    let lhs = rng.vec_f32(m * k);
                    let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                    let mut want = vec![0f32; m * n];
                    reference_with(m, &lhs, w, clamp, rounding, &mut want).map_err(|e| (cases, e.to_string()))?;
                    let wd = w.dequantize_as(SCALE_TYPE).unwrap();
                    // M is taken over the dequantised LHS the kernel sees.
                    let xq: Vec<f32> = lhs
                        .chunks(k)
                        .flat_map(|x| {
                            let q = qsi8d32_row(x, bl, rounding);
                            (0..k).map(move |p| q.q[p] as f32 * q.scales[p / bl].to_f32())
                        })
                        .collect();
                    let mags = magnitudes(m, n, k, &xq, &wd, |_| 0.0);
                    let packed = kernel.pack_rhs(w).map_err(|e| (cases, e.to_string()))?;
                    let mut first: Option<Vec<f32>> = None;
                    for threads in THREADS {
                        let par = Parallelism::Rayon(threads);
                        let mut dst = vec![f32::NAN; m * n];
                        let mut scratch = PackedLhs::empty();
                        kernel
                            .pack_lhs_into(m, k, bl, &lhs, k, par, &mut scratch)
                            .map_err(|e| (cases, e.to_string()))?;
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

    /// The packed LHS bytes decode to exactly the values and scales the
    /// `qsi8d32` scheme gives, for each packer (the reference relies on it).
    #[test]
    fn lhs_packers_match_the_scheme() {
        let f = crate::cpu::Features::current();
        let mut rng = Rng::new(5);
        for kernel in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let (m, k, bl) = (5, 64, 32);
            let mut lhs = rng.vec_f32(m * k);
            // Exact ties for the rounding mode: amax 127 gives scale 1.
            lhs[0] = 127.0;
            lhs[1] = 2.5;
            lhs[2] = -3.5;
            let p = kernel.pack_lhs(m, k, bl, &lhs, k, Parallelism::Sequential).unwrap();
            let l = *p.layout();
            let (mr, kbl) = (l.r, l.kr / l.sr);
            let bytes = p.as_bytes();
            let blocks = k / bl;
            let group = mr * blocks * (bl + 2);
            for i in 0..m {
                let want = qsi8d32_row(&lhs[i * k..(i + 1) * k], bl, kernel.lhs_rounding());
                let g = &bytes[(i / mr) * group..(i / mr + 1) * group];
                let x = i % mr;
                for b in 0..blocks {
                    let (scale_at, value_at): (usize, Box<dyn Fn(usize) -> usize>) = if l.format == "qsi8d32p" {
                        let base = b * mr * (bl + 2);
                        (base + 2 * x, Box::new(move |j| base + mr * 2 + (j / kbl) * mr * kbl + x * kbl + j % kbl))
                    } else {
                        let kr = l.kr;
                        (
                            group - mr * blocks * 2 + (b * mr + x) * 2,
                            Box::new(move |j| (b * bl / kr + j / kr) * mr * kr + x * kr + j % kr),
                        )
                    };
                    let s = f16::from_bits(u16::from_le_bytes([g[scale_at], g[scale_at + 1]]));
                    assert_eq!(s, want.scales[b], "{}: row {i} block {b} scale", kernel.info().name);
                    for j in 0..bl {
                        assert_eq!(
                            g[value_at(j)] as i8,
                            want.q[b * bl + j],
                            "{}: row {i} k {}",
                            kernel.info().name,
                            b * bl + j
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &f) else {
            return;
        };
        let mut rng = Rng::new(3);
        let (n, k) = (8, 64);
        let tw = TestWeights::new(&mut rng, n, k, 32);
        let packed = k1.pack_rhs(tw.view(2, false, false)).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![0f32; 2 * n];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.rhs_layout(n, k, 32).unwrap() == *packed.layout() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{:?}: {r:?}", other);
            }
        }
        // An LHS quantised with another block length is rejected.
        if k1.max_bl() >= 64 {
            let lhs64 = k1.pack_lhs(2, k, 64, &lhs, k, Parallelism::Sequential).unwrap();
            let mut dst = vec![0f32; 2 * n];
            assert!(matches!(
                k1.run(&lhs64, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential),
                Err(crate::Error::LayoutMismatch { .. })
            ));
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
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
        assert!(kern.pack_rhs(Q4_0 { data: &q[..35], ..w }).is_err(), "short data");
        assert!(kern.pack_rhs(Q4_0 { k: 48, ..w }).is_err(), "k not whole blocks");
        assert!(kern.pack_rhs(Q4_0 { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(Q4_0 { n: usize::MAX / 4, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(1, 32, 48, &[0.0; 32], 32, seq).is_err(), "bl not a multiple of 32");
        assert!(kern.pack_lhs(1, 64, 512, &[0.0; 64], 64, seq).is_err(), "k not a multiple of bl");
        assert!(kern.pack_lhs(2, 32, 32, &[0.0; 40], 20, seq).is_err(), "stride < k");
        let s = [half::bf16::from_f32(1.0e6); 2];
        let big = Int4Blocks {
            n: 2,
            k: 32,
            bl: 32,
            order: Order::NxK,
            encoding: Int4Encoding::Signed,
            data: &[0; 32],
            scales: BlockScales::Bf16(&s),
            bias: None,
        };
        assert!(kern.pack_rhs(big).is_err(), "bf16 scale beyond the f16 range");
        // A strided LHS gives the dense result.
        let lhs: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
        let strided: Vec<f32> = lhs.chunks(32).flat_map(|r| r.iter().copied().chain([9.0; 8])).collect();
        let (mut a, mut b) = (vec![0f32; 4], vec![0f32; 4]);
        let pl = kern.pack_lhs(2, 32, 32, &lhs, 32, seq).unwrap();
        let ps = kern.pack_lhs(2, 32, 32, &strided, 40, seq).unwrap();
        kern.run(&pl, &packed, &mut a, Clamp::NONE, seq).unwrap();
        kern.run(&ps, &packed, &mut b, Clamp::NONE, seq).unwrap();
        assert_eq!(a, b);
    }
}
