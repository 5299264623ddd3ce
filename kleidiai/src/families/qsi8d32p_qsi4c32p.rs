//! What the two qsi4c32p families with f16 scales share
//! (`matmul_clamp_f32_qsi8d32p_qsi4c32p`, `matmul_clamp_f32_f16p_qsi4c32p`):
//! the scale type, the weight checks, the f16-scale packed RHS formats with
//! their packing and unpacking, the dense LHS view, and the one kernel
//! engine: a kernel is data (`Q4Kernel`: its upstream interface functions,
//! its LHS packer and its packed RHS format), one generic driver makes every
//! FFI call of the two families, and `q4_kernel!` declares a family's
//! entries and the common part of its public `Kernel` API over it. Also the
//! shared conformance test (`tests`).

use crate::error::Result;
use crate::formats::{BlockInt4, ScaleType};

/// The scale type every packer of these families stores.
pub const SCALE_TYPE: ScaleType = ScaleType::F16;

/// Checks the weights of a family whose packers take no bias; returns
/// `(n, k, bl)`.
pub(crate) fn check_weights_no_bias(w: &BlockInt4<'_>, family: &str) -> Result<(usize, usize, usize)> {
    w.validate()?;
    if w.bias().is_some() {
        return Err(crate::Error::bad_value(
            "bias",
            "given",
            format!("{family} has no bias (its packers take none): add it to the output instead"),
        ));
    }
    Ok((w.n(), w.k(), w.bl()))
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::CpuFeature;
    use crate::error;
    use crate::families::engine::{self, Gate, PackedKernel as _, Prepared, Tiles};
    use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::quant::Rounding;
    use crate::registry::info::{KernelInfo, VectorLength, rank_for, tile_kind_for};
    use kleidiai_sys as sys;
    use std::borrow::Cow;

    /// RHS of the NEON and SVE kernels (f16 scales ahead of each block).
    pub(crate) const FORMAT_SCALEF16: &str = "qsi4c32pscalef16";
    /// RHS of the SME2 kernels (values in K order, unsigned; scales last).
    pub(crate) const FORMAT_PS1S0SCALEF16: &str = "qsi4c32ps1s0scalef16";
    /// RHS of the SME kernels (values paired k / k + 4, scales / 16 last).
    pub(crate) const FORMAT_PS4S0SF16: &str = "qsi4c32ps4s0sf16";

    /// Checks `k` and `bl` against the packers' and kernels' rules: `bl` a
    /// positive multiple of 32 dividing `k`, `kr` dividing `k`, at most 256
    /// for the SME packers.
    pub(crate) fn check_bl(k: usize, bl: usize, kr: usize, max_bl: usize) -> Result<()> {
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(bl, 32, "bl", "qsi4c32 block length")?;
        error::multiple_of(k, bl, "k", "qsi4c32: whole blocks")?;
        error::multiple_of(k, kr, "k", "qsi4c32 packing: k must be a multiple of kr")?;
        if bl > max_bl {
            return Err(crate::Error::bad_value("bl", bl, format!("above this kernel's maximum {max_bl}")));
        }
        Ok(())
    }

    /// The largest block length for a packed RHS format.
    pub(crate) fn max_bl(format: &str) -> usize {
        if format == FORMAT_SCALEF16 { usize::MAX } else { sys::KAI_SME_VEC_LENGTH_MAX_BYTES as usize }
    }

    /// Packs `w` (no bias) into one of the f16-scale formats `layout`
    /// describes. Shared with `matmul_clamp_f32_f16p_qsi4c32p`.
    pub(crate) fn pack_f16_rhs(g: &Gate, layout: PackedLayout, w: &BlockInt4<'_>, family: &str) -> Result<PackedRhs> {
        let (n, k, bl) = check_weights_no_bias(w, family)?;
        let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
        check_bl(k, bl, kr, max_bl(layout.format))?;
        let ok = match layout.format {
            FORMAT_SCALEF16 => sr == 2 && (1..=16).contains(&kr),
            _ => kr == 4 && sr == 2,
        };
        if !ok || nr == 0 {
            return Err(crate::Error::bad_value(
                "nr, kr, sr",
                format!("{nr}, {kr}, {sr}"),
                format!("unsupported by {} packing", layout.format),
            ));
        }
        let src: Cow<'_, [u8]> = w.qsu4c32s16s0()?;
        let (size, run): (engine::RhsSizeNkBlocks, engine::PackS16s0) = match layout.format {
            FORMAT_SCALEF16 => (
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0,
                sys::kai_run_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0,
            ),
            FORMAT_PS1S0SCALEF16 => (
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon,
            ),
            _ => (
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon,
            ),
        };
        // (every packer) k % bl == 0, bl % 32 == 0, k % kr == 0, k even,
        // bl <= 256 for the SME packers, kr / sr as each packer assumes
        // (checked above); the destination is zeroed (the s1s0 packer leaves
        // padding rows unwritten). The packers are plain C / NEON code.
        let x = engine::BlockRhs {
            dims: (n, k, bl),
            values: &src,
            rhs_stride: 0,
            scales: engine::BlockScales::None,
            bias: None,
        };
        let buf = engine::BlockRhsPacker::S16s0(size, run).pack(g, x, (nr, kr, sr))?;
        Ok(PackedRhs::new(layout, buf))
    }

    /// `lhs` as a dense `m x k` matrix: the NEON packers ignore the stride.
    pub(crate) fn dense_lhs(m: usize, k: usize, lhs: &[f32], lhs_stride: usize) -> Result<Cow<'_, [f32]>> {
        error::nonzero(m, "m")?;
        error::nonzero(k, "k")?;
        if lhs_stride < k {
            return Err(crate::Error::bad_value("lhs_stride", lhs_stride, format!("less than k = {k}")));
        }
        let need =
            error::mul(m - 1, lhs_stride, "lhs")?.checked_add(k).ok_or_else(|| crate::Error::Overflow("lhs".into()))?;
        error::at_least(lhs.len(), need, "lhs")?;
        if lhs_stride == k {
            return Ok(Cow::Borrowed(&lhs[..m * k]));
        }
        Ok(Cow::Owned((0..m).flat_map(|i| lhs[i * lhs_stride..i * lhs_stride + k].iter().copied()).collect()))
    }

    /// Weight row `row` of a packed RHS in format `qsi4c32pscalef16`,
    /// `qsi4c32ps1s0scalef16` or `qsi4c32ps4s0sf16`, as f32
    /// (`value * scale` with the scale the packer stored).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if ![FORMAT_SCALEF16, FORMAT_PS1S0SCALEF16, FORMAT_PS4S0SF16].contains(&l.format) {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "not an f16-scale qsi4c32 format"));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, bl, blocks) = (l.r, l.bl, l.k / l.bl);
        let stride = nr * blocks * (bl / 2 + 2);
        let group = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let signed = |byte: u8, hi: bool| -> i8 { ((if hi { byte & 0xF0 } else { byte << 4 }) as i8) >> 4 };
        let f16_at = |at: usize| SCALE_TYPE.value_of(u16::from_le_bytes([group[at], group[at + 1]]));
        let scales_last = stride - nr * blocks * 2;
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let (b, kb) = (kk / bl, kk % bl);
            *o = match l.format {
                FORMAT_SCALEF16 => {
                    // Per block: nr scales, then segments of kr / 2 source
                    // bytes per row; byte j pairs values j and j + bl / 2.
                    let base = b * nr * (bl / 2 + 2);
                    let seg = l.kr / 2;
                    let j = kb % (bl / 2);
                    let byte = group[base + nr * 2 + (j / seg) * nr * seg + r * seg + j % seg];
                    signed(byte, kb >= bl / 2) as f32 * f16_at(base + 2 * r)
                }
                FORMAT_PS1S0SCALEF16 => {
                    // u16 q of a block (values 4q..4q+3, unsigned) per row.
                    let at = ((b * bl / 4 + kb / 4) * nr + r) * 2 + (kb % 4) / 2;
                    let nib = if kb % 2 == 1 { group[at] >> 4 } else { group[at] & 0xF };
                    (nib as i32 - 8) as f32 * f16_at(scales_last + (b * nr + r) * 2)
                }
                _ => {
                    // u32 packet p of a block: byte i pairs 8p + i and 8p + i + 4.
                    let within = kb % 8;
                    let at = ((b * bl / 8 + kb / 8) * nr + r) * 4 + within % 4;
                    // Stored scale is scale / 16: both factors exact in f32.
                    signed(group[at], within >= 4) as f32 * (f16_at(scales_last + (b * nr + r) * 2) * 16.0)
                }
            };
        }
        Ok(())
    }

    pub(crate) use crate::families::float_common::Getter;
    /// A kernel's packed offset query (`(m_idx | n_idx, k, bl)`).
    pub(crate) type OffsetFn = unsafe extern "C" fn(usize, usize, usize) -> usize;
    /// A kernel's `run_matmul` writing `D` (the C signature of every
    /// qsi4c32p and qai4c32p kernel but for the destination type).
    pub(crate) type Run<D> = engine::RunBl<D>;

    /// One kernel's functions, taken from its interface struct, with its
    /// `run_matmul` as `R` (shared with `qsi8d32p_qai4c32p`).
    #[derive(Clone, Copy)]
    pub(crate) struct Fns<R> {
        pub m_step: Getter,
        pub n_step: Getter,
        pub mr: Getter,
        pub nr: Getter,
        pub kr: Getter,
        pub sr: Getter,
        pub lhs_offset: OffsetFn,
        pub rhs_offset: OffsetFn,
        pub run: R,
    }

    impl<R> Fns<R> {
        /// The kernel's tile sizes (SME getters read the vector length),
        /// through the kernel's gate.
        pub(crate) fn tiles(&self, g: &Gate) -> Tiles {
            g.tiles([self.m_step, self.n_step, self.mr, self.nr, self.kr, self.sr])
        }
    }

    /// [`Fns`] from an upstream interface struct of any of the four
    /// families, `run_matmul` wrapped by `$run` (the identity by default).
    macro_rules! q4_fns {
        ($i:expr) => {
            $crate::families::engine::iface_fns!([$crate::families::qsi8d32p_qsi4c32p::Fns], $i)
        };
        ($i:expr, $run:expr) => {
            $crate::families::engine::iface_fns!([$crate::families::qsi8d32p_qsi4c32p::Fns], $i, $run)
        };
    }
    pub(crate) use q4_fns;

    /// LHS of the scalar and `4x8sb` packers (scales ahead of each block).
    const LHS_QSI8D32P: &str = "qsi8d32p";
    /// LHS of the `_neon` packer (scales after all blocks of a row group).
    const LHS_QSI8D32P_SCALES_LAST: &str = "qsi8d32p_scales_last";
    /// LHS of the f16 packer (`matmul_clamp_f32_f16p_qsi4c32p`).
    const LHS_F16PMRX2: &str = "f16pmrx2";

    /// The LHS packers of the two families (all read f32 rows).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum LhsPacker {
        /// `kai_lhs_quant_pack_qsi8d32p_f32`.
        Scalar,
        /// `kai_lhs_quant_pack_qsi8d32p_f32_neon`.
        Neon,
        /// `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon` (ggml's choice).
        Sb4x8,
        /// `kai_lhs_pack_f16pmrx2_f32_neon` (f32 -> f16, no block length).
        F16,
    }

    impl LhsPacker {
        pub(crate) fn name(self) -> &'static str {
            match self {
                LhsPacker::Scalar => "kai_lhs_quant_pack_qsi8d32p_f32",
                LhsPacker::Neon => "kai_lhs_quant_pack_qsi8d32p_f32_neon",
                LhsPacker::Sb4x8 => "kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon",
                LhsPacker::F16 => "kai_lhs_pack_f16pmrx2_f32_neon",
            }
        }

        fn format(self) -> &'static str {
            match self {
                LhsPacker::Neon => LHS_QSI8D32P_SCALES_LAST,
                LhsPacker::F16 => LHS_F16PMRX2,
                LhsPacker::Scalar | LhsPacker::Sb4x8 => LHS_QSI8D32P,
            }
        }

        /// The block length the packer is called with: the f16 packer takes
        /// none of its own (its size query needs `k % 32 == 0`: 32).
        fn bl(self, bl: usize) -> usize {
            if self == LhsPacker::F16 { 32 } else { bl }
        }

        /// Whether the packer takes these tile parameters.
        fn takes(self, mr: usize, kr: usize, sr: usize, bl: usize) -> bool {
            match self {
                LhsPacker::Scalar => sr != 0 && kr % sr == 0 && bl % (kr / sr).max(1) == 0,
                LhsPacker::Neon => kr == 4,
                LhsPacker::Sb4x8 => mr == 4 && kr == 16 && sr == 2,
                // It converts 16 values per step and assumes sr = 2.
                LhsPacker::F16 => sr == 2,
            }
        }

        /// [`takes`](Self::takes) as the error `pack_lhs_into` returns.
        fn check(self, mr: usize, kr: usize, sr: usize, bl: usize) -> Result<()> {
            if self.takes(mr, kr, sr, bl) {
                Ok(())
            } else if self == LhsPacker::F16 {
                Err(crate::Error::bad_value("sr", sr, format!("{} needs sr = 2", self.name())))
            } else {
                Err(crate::Error::bad_value(
                    "mr, kr, sr",
                    format!("{mr}, {kr}, {sr}"),
                    format!("unsupported by {}", self.name()),
                ))
            }
        }

        /// The upstream packer (`k % bl == 0` and `k % kr == 0`, which
        /// `check_bl` checks, or its queries abort).
        #[inline(always)]
        pub(crate) const fn packer(self) -> engine::LhsPacker {
            use engine::lhs_packers as P;
            match self {
                LhsPacker::Scalar => P::QSI8D32P_F32,
                LhsPacker::Neon => P::QSI8D32P_F32_NEON,
                LhsPacker::Sb4x8 => P::QSI8D32P4X8SB_F32,
                LhsPacker::F16 => P::F16PMRX2_F32,
            }
        }
    }

    /// One kernel of either family as data: registry information, upstream
    /// functions, LHS packer and packed RHS format. Its methods are the one
    /// driver of both families.
    pub(crate) struct Q4Kernel {
        pub info: KernelInfo,
        fns: Fns<Run<f32>>,
        rhs_format: &'static str,
        lhs: LhsPacker,
        /// The SVE kernels handle only `bl = 32`.
        bl_32_only: bool,
    }

    impl Q4Kernel {
        /// A kernel reading `rhs_format` (its RHS packer follows from it)
        /// with `lhs` as its LHS packer.
        pub(crate) fn new(
            u: &'static sys::Ukernel,
            family: &'static str,
            fns: Fns<Run<f32>>,
            (features, vector_length): (&'static [CpuFeature], VectorLength),
            lhs: LhsPacker,
            rhs_format: &'static str,
            bl_32_only: bool,
        ) -> Q4Kernel {
            let rhs_packers: &'static [&'static str] = match rhs_format {
                FORMAT_SCALEF16 => &["kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0"],
                FORMAT_PS1S0SCALEF16 => &["kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon"],
                _ => &["kai_rhs_pack_nxk_qsi4c32ps4s0sf16_qsu4c32s16s0_neon"],
            };
            Q4Kernel {
                info: KernelInfo {
                    name: u.name,
                    family,
                    features,
                    vector_length,
                    tile: tile_kind_for(u.name),
                    lhs_packer: Some(lhs.name()),
                    rhs_packers,
                    rank: rank_for(u.name, features),
                },
                fns,
                rhs_format,
                lhs,
                bl_32_only,
            }
        }

        /// How this kernel's LHS packer rounds halves.
        pub(crate) fn lhs_rounding(&self) -> Rounding {
            if self.lhs == LhsPacker::Sb4x8 { Rounding::HalfToEven } else { Rounding::HalfAwayFromZero }
        }

        /// The largest block length this kernel takes.
        pub(crate) fn max_bl(&self) -> usize {
            if self.bl_32_only { 32 } else { max_bl(self.rhs_format) }
        }

        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(&self.info)?;
            Ok((self.fns.tiles(&g), g))
        }

        fn check(&self, k: usize, bl: usize, t: &Tiles) -> Result<()> {
            check_bl(k, bl, t.kr, self.max_bl())
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights in
        /// blocks of `bl`.
        pub(crate) fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, self.rhs_format, (n, k, bl), t.nr, &t))
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input
        /// quantised in blocks of `bl` (ignored, 0, for the f16 packer).
        pub(crate) fn lhs_layout(&self, m: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(
                &self.info,
                self.lhs.format(),
                (m, k, if self.lhs == LhsPacker::F16 { 0 } else { bl }),
                t.mr,
                &t,
            ))
        }

        /// Packs the weights (no bias) for this kernel and every kernel with
        /// the same layout.
        pub(crate) fn pack_rhs(&self, w: &BlockInt4<'_>) -> Result<PackedRhs> {
            let (n, k, bl) = check_weights_no_bias(w, self.info.family)?;
            let (t, g) = self.tiles()?;
            self.check(k, bl, &t)?;
            pack_f16_rhs(&g, self.rhs_layout(n, k, bl)?, w, self.info.family)
        }

        /// Packs an `m x k` f32 LHS (rows `lhs_stride` apart), quantised in
        /// blocks of `bl` (the f16 packer takes whole blocks of 32).
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn pack_lhs_into(
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
            let (t, g) = self.tiles()?;
            let packer = self.lhs;
            let bl = packer.bl(bl);
            if packer == LhsPacker::F16 {
                check_bl(k, bl, t.kr, usize::MAX)?;
            } else {
                self.check(k, bl, &t)?;
            }
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            packer.check(mr, kr, sr, bl)?;
            // k % bl, k % kr: checked above by check_bl.
            let p = packer.packer();
            let size = p.size(&g, m, k, bl, (mr, kr, sr));
            out.reset(layout, size);
            // The dense m x k matrix: rows k floats apart, as the NEON
            // packers assume.
            let x = engine::LhsSource { src: &dense, stride: k, m, k, bl, blocking: (mr, kr, sr) };
            engine::pack_lhs(&g, &self.info, &p, x, engine::LhsCalls::Blocks, out.data_mut().as_mut_slice(), par)?;
            Ok(())
        }

        /// Packs the dense `m x k` LHS (blocks of the weights' `bl`; the f16
        /// packer takes none) and runs: the one-call form.
        pub(crate) fn matmul(
            &self,
            m: usize,
            lhs: &[f32],
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let (k, bl) = (rhs.layout().k, rhs.layout().bl);
            let mut packed = PackedLhs::empty();
            self.pack_lhs_into(m, k, bl, lhs, k, par, &mut packed)?;
            self.run(&packed, rhs, dst, clamp, par)
        }

        /// The checks of [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](Self::run) for a dense `m x k` LHS and `rhs`, made once
        /// (the steady-state path of `PackedWeights::matmul`).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<Prepared>> {
            let l = *rhs.layout();
            let (n, k, bl) = (l.rows, l.k, l.bl);
            error::nonzero(m, "m")?;
            error::nonzero(k, "k")?;
            rhs.expect(&self.rhs_layout(n, k, bl)?, self.info.name)?;
            let (t, g) = self.tiles()?;
            self.check(k, bl, &t)?;
            let layout = self.lhs_layout(m, k, bl)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            if !self.lhs.takes(mr, kr, sr, bl) {
                return Ok(None);
            }
            error::mul(error::mul(m, k, "lhs")?, 4, "lhs")?;
            error::mul(error::mul(m, n, "dst")?, 4, "dst")?;
            // k % bl, k % kr: checked.
            let lhs_bytes = self.lhs.packer().size(&g, m, k, bl, (mr, kr, sr));
            // One packer call from row 0 writes what the row-range calls of
            // `pack_lhs_into` write; GEMV kernels (mr 1) one row per call at
            // the packer's offset of that row, as in `run`.
            let rows = if t.mr == 1 {
                engine::SteadyRows::EachRow(Some(engine::Offset::KBl(self.fns.lhs_offset)))
            } else {
                engine::SteadyRows::Whole
            };
            let calls = (engine::SteadyLhs::Packed(self.lhs.packer()), engine::KernelRun::BlF32(self.fns.run), rows);
            let steady = engine::Steady::new(g, calls, (4, 4));
            Ok(Some(Prepared { m, n, k, bl, t, lhs_bytes, steady }))
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, its LHS packer's and
    // RHS format's), the functions its own interface's, and `plan`
    // checks what the kernel assumes besides: m is nonzero, k and bl meet
    // its block rules (`check`); GEMV kernels (mr 1) take one row per call,
    // from any row.
    unsafe impl engine::PackedKernel for Q4Kernel {
        fn info(&self) -> &KernelInfo {
            &self.info
        }

        fn plan(&self, _: &PackedRhs, (m, n, k, bl): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k, bl)?, self.rhs_layout(n, k, bl)?);
            error::nonzero(m, "m")?;
            let (t, g) = self.tiles()?;
            self.check(k, bl, &t)?;
            let offsets = (engine::Offset::KBl(self.fns.lhs_offset), engine::Offset::KBl(self.fns.rhs_offset));
            let fns = engine::PackedFns::new(engine::KernelRun::BlF32(self.fns.run), offsets, t.mr == 1, 4);
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    /// A family's kernel table (`entries`, `infos`) and the part of its
    /// public `Kernel` API both families share, over [`Q4Kernel`]. `entry`
    /// maps `(upstream entry, functions)` to the kernel; `lhs_bl: [bl]`
    /// gives the LHS API a block length argument (`[]`: none), documented
    /// `pack_lhs` by the attributes before it; `fast: true` adds
    /// `prepare` (the steady-state path of `PackedWeights`, which then runs
    /// `engine::run_steady`).
    macro_rules! q4_kernel {
        (
            interface: $iface:ident,
            fast: true,
            lhs_bl: [$($bl:ident)?],
            $(#[$lhs_doc:meta])*
            pack_lhs,
            entry: $entry:expr $(,)?
        ) => {
            $crate::families::qsi8d32p_qsi4c32p::q4_kernel! {
                interface: $iface,
                fast: false,
                lhs_bl: [$($bl)?],
                $(#[$lhs_doc])*
                pack_lhs,
                entry: $entry,
            }

            impl Kernel {
                /// The checks of `pack_lhs_into` and [`run`](Self::run) for a
                /// dense `m x k` LHS and `rhs`, made once (the steady-state
                /// path of `PackedWeights::matmul`).
                pub(crate) fn prepare(
                    &self,
                    m: usize,
                    rhs: &$crate::packed::PackedRhs,
                ) -> $crate::Result<Option<$crate::families::engine::Prepared>> {
                    self.0.prepare(m, rhs)
                }
            }
        };
        (
            interface: $iface:ident,
            fast: false,
            lhs_bl: [$($bl:ident)?],
            $(#[$lhs_doc:meta])*
            pack_lhs,
            entry: $entry:expr $(,)?
        ) => {
            fn entries() -> &'static [$crate::families::qsi8d32p_qsi4c32p::Q4Kernel] {
                static E: std::sync::OnceLock<Vec<$crate::families::qsi8d32p_qsi4c32p::Q4Kernel>> =
                    std::sync::OnceLock::new();
                E.get_or_init(|| {
                    kleidiai_sys::interfaces::$iface::KERNELS
                        .iter()
                        .map(|(u, i)| ($entry)(*u, $crate::families::qsi8d32p_qsi4c32p::q4_fns!(i)))
                        .collect()
                })
            }

            $crate::families::engine::kernel_type!($crate::families::qsi8d32p_qsi4c32p::Q4Kernel);

            impl Kernel {
                /// The kernel's description, for the shared tests.
                #[cfg(test)]
                pub(crate) fn q4(&self) -> &'static $crate::families::qsi8d32p_qsi4c32p::Q4Kernel {
                    self.0
                }

                /// The packed-RHS layout this kernel reads for `n x k`
                /// weights in blocks of `bl`.
                pub fn rhs_layout(
                    &self,
                    n: usize,
                    k: usize,
                    bl: usize,
                ) -> $crate::Result<$crate::packed::PackedLayout> {
                    self.0.rhs_layout(n, k, bl)
                }

                /// Packs the weights (no bias) for this kernel and every
                /// kernel with the same [`rhs_layout`](Self::rhs_layout).
                /// ggml `Q4_0` bytes are read in place.
                pub fn pack_rhs<'a>(
                    &self,
                    w: impl Into<$crate::formats::BlockInt4<'a>>,
                ) -> $crate::Result<$crate::packed::PackedRhs> {
                    self.0.pack_rhs(&w.into())
                }

                /// `dst = clamp(lhs · wᵀ)`: `dst` is `m x n`, rows `n` apart.
                pub fn run(
                    &self,
                    lhs: &$crate::packed::PackedLhs,
                    rhs: &$crate::packed::PackedRhs,
                    dst: &mut [f32],
                    clamp: $crate::packed::Clamp,
                    par: $crate::par::Parallelism,
                ) -> $crate::Result<()> {
                    $crate::families::engine::PackedKernel::run(self.0, lhs, rhs, dst, clamp, par)
                }

                /// Packs the dense `m x k` LHS and runs: the one-call form.
                pub fn matmul(
                    &self,
                    m: usize,
                    lhs: &[f32],
                    rhs: &$crate::packed::PackedRhs,
                    dst: &mut [f32],
                    clamp: $crate::packed::Clamp,
                    par: $crate::par::Parallelism,
                ) -> $crate::Result<()> {
                    self.0.matmul(m, lhs, rhs, dst, clamp, par)
                }

                $crate::families::engine::lhs_methods!(
                    lhs: f32,
                    $(bl: $bl,)?
                    inner_bl: 0 $(+ $bl)?,
                    into: pack_lhs_into,
                    layout_doc: [
                        /// The packed-LHS layout this kernel reads for an `m x k`
                        /// input (quantised in blocks of `bl` where the family's
                        /// packer takes one).
                    ],
                    pack_doc: [$(#[$lhs_doc])*],
                );
            }
        };
    }
    pub(crate) use q4_kernel;
}

/// The conformance test both families run, over the shared driver.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::families::engine::PackedKernel as _;
    use crate::families::qai8dxp_common::tests::{across_threads, unpack_matches};
    use crate::formats::Q4_0;
    use crate::packed::{Clamp, PackedLhs};
    use crate::par::Parallelism;
    use crate::testing::qsi4c32::TestWeights;
    use crate::testing::{self, Rng, bit_identical, tail_shapes};

    /// The checks both families' `bad_input_is_an_error` start with, on
    /// `q` (2 x 32 ggml `Q4_0` bytes, 36): short LHS, short output, `m = 0`
    /// in the one-call form, weights with a bias. Returns the weights.
    pub(crate) fn bad_operands<'a>(kern: &Q4Kernel, q: &'a [u8]) -> Q4_0<'a> {
        let w = Q4_0 { n: 2, k: 32, data: q, bias: None };
        let packed = kern.pack_rhs(&w.into()).unwrap();
        let mut dst = vec![0f32; 2];
        let seq = Parallelism::Sequential;
        assert!(kern.matmul(1, &[0.0; 31], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0.0; 32], &packed, &mut dst[..1], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.pack_rhs(&Q4_0 { bias: Some(&[0.0, 0.0]), ..w }.into()).is_err(), "bias");
        w
    }

    /// A family's expected output for one case (`m`, dense LHS, weights,
    /// clamp) and, per output, the magnitude `M` its tolerance
    /// `1e-5 · (|want| + M) + 1e-6` scales with.
    pub(crate) type Expect = fn(&Q4Kernel, usize, &[f32], BlockInt4<'_>, Clamp) -> Result<(Vec<f32>, Vec<f32>)>;

    /// Every kernel of `family` (found by `kernel`) against `expect`, on
    /// tail shapes for `(bl, k)` in `(32, 32)`, `(32, 96)`, `(64, 128)`
    /// (`bl` up to the kernel's maximum), 1 to `THREADS` threads (bit
    /// identical), and `unpack_rhs_row` against the dequantised weights.
    pub(crate) fn conformance(family: &str, seed: u64, kernel: fn(&str) -> Option<&'static Q4Kernel>, expect: Expect) {
        testing::conformance(family, |info| {
            let kernel = kernel(info.name).unwrap();
            let lay = kernel.rhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let lhs_lay = kernel.lhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let mut rng = Rng::new(seed);
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
                    let (want, mags) = expect(kernel, m, &lhs, w, clamp).map_err(|e| (cases, e.to_string()))?;
                    let packed = kernel.pack_rhs(&w).map_err(|e| (cases, e.to_string()))?;
                    let tol = |i: usize, y: f32| 1e-5 * (y.abs() + mags[i]) + 1e-6;
                    let what = format!(" bl={bl}");
                    let case_worst = across_threads(cases, (m, n, k), &what, &want, tol, bit_identical, |par| {
                        let mut dst = vec![f32::NAN; m * n];
                        let mut scratch = PackedLhs::empty();
                        kernel
                            .pack_lhs_into(m, k, bl, &lhs, k, par, &mut scratch)
                            .map_err(|e| (cases, e.to_string()))?;
                        kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(|e| (cases, e.to_string()))?;
                        Ok(dst)
                    })?;
                    worst = worst.max(case_worst);
                    let wd = w.dequantize_as(SCALE_TYPE).unwrap();
                    let unpack = |r, row: &mut [f32]| unpack_rhs_row(&packed, r, row);
                    unpack_matches(cases, (n, k), &wd, &format!("{what} differs"), unpack)?;
                    cases += 1;
                }
            }
            Ok((cases, worst))
        });
    }
}
