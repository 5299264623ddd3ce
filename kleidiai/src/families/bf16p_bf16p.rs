//! What the bf16 families share (`matmul_clamp_f32_bf16p_bf16p`,
//! `matmul_clamp_fp32_bf16p_bf16p`, `matmul_clamp_f16_bf16p_bf16p`): the
//! rounding to bf16 and the reference math, and the one kernel engine: a
//! kernel is data ([`Bf16Kernel`]: its upstream interface functions and its
//! LHS and RHS packers as function tables), one generic driver makes every
//! FFI call of the three families, and `bf16_kernel!` declares a family's
//! entries and its public `Kernel` API over it. Also the `bf16p{nr}x{kr}`
//! packed RHS addressing and the shared tests (`test_support`).

use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::bf16;

/// `x` rounded to bf16 the way upstream's packers round it (`BFCVT`: to
/// nearest, ties to even), as f32.
pub(crate) fn round_bf16(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

/// Shared core of the bf16 references: `m x k` LHS rows `lhs_stride` apart,
/// already bf16-rounded weights `n x k`, bias `n`; f64 accumulation, one
/// rounding to f32 at the end, then the clamp.
pub(crate) fn bf16_core(m: usize, lhs: &[f32], k: usize, wq: &[f32], bias: &[f32], clamp: Clamp, dst: &mut [f32]) {
    let n = bias.len();
    let xq: Vec<f32> = lhs[..m * k].iter().map(|&x| round_bf16(x)).collect();
    for i in 0..m {
        let row = &xq[i * k..(i + 1) * k];
        for j in 0..n {
            let w = &wq[j * k..(j + 1) * k];
            let acc: f64 = bias[j] as f64 + row.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
            dst[i * n + j] = (acc as f32).max(clamp.min).min(clamp.max);
        }
    }
}

/// The f32 reference of the bf16 families: `dst = clamp(bf16(lhs) ·
/// bf16(w)ᵀ + bias)` for a dense `m x k` f32 LHS, `dst` `m x n`.
pub(crate) fn reference_f32(
    m: usize,
    lhs: &[f32],
    w: &FloatWeights<'_, f32>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let wq: Vec<f32> = w.to_nxk()?.into_iter().map(round_bf16).collect();
    let bias: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
    bf16_core(m, lhs, k, &wq, &bias, clamp, dst);
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

/// The bf16 kernel glue: a kernel is data ([`Bf16Kernel`]: its upstream
/// interface functions and the packers it reads, as function tables) and
/// this module is its one driver, where every FFI call of the three
/// families is made.
#[cfg(target_arch = "aarch64")]
mod imp {
    use crate::buffer::AlignedBuf;
    use crate::cpu::{CpuFeature, Features};
    use crate::error::{self, Result};
    use crate::families::engine::{self, Gate, Prepared, Tiles, query};
    use crate::formats::{FloatElement, FloatWeights, Order};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::{KernelInfo, TileKind};
    use half::bf16;
    use kleidiai_sys as sys;

    // The upstream function types are the float families' (same C signatures).
    use crate::families::float_common::{Getter, OffsetFn, PackedRunFn as RunFn};

    use engine::FloatRhsSize as RhsSize;

    /// The interface functions of one kernel.
    #[derive(Clone, Copy)]
    pub(crate) struct Fns {
        pub m_step: Getter,
        pub n_step: Getter,
        pub mr: Getter,
        pub nr: Getter,
        pub kr: Getter,
        pub sr: Getter,
        pub lhs_offset: OffsetFn,
        pub rhs_offset: OffsetFn,
        pub run: RunFn,
    }

    /// [`Fns`] from a family's generated interface struct (upstream fills
    /// every function of these interfaces).
    macro_rules! fns {
        ($i:expr) => {
            $crate::families::engine::iface_fns!([$crate::families::bf16p_bf16p::Fns], $i)
        };
    }
    pub(crate) use fns;

    /// One upstream LHS packer (`kai_run_lhs_*`: `(m, k, mr, kr, sr,
    /// m_idx_start, lhs, lhs_stride, lhs_packed)`) and the format it writes.
    pub(crate) struct LhsPacker {
        pub name: &'static str,
        /// Format id of the packed LHS layout.
        pub format: &'static str,
        packer: engine::LhsPacker,
        /// One row per call, rows `roundup(k, kr) * 2` bytes apart, K tail
        /// zero-padded in Rust first (the GEMV packer, see `pack_lhs_into`).
        per_row: bool,
    }

    /// `kai_lhs_quant_pack_bf16p1x4_f32_neon` (GEMV, one row per call).
    pub(crate) static LHS_BF16P1X4_F32_NEON: LhsPacker = LhsPacker {
        name: "kai_lhs_quant_pack_bf16p1x4_f32_neon",
        format: "bf16p1x4",
        packer: engine::lhs_packers::BF16P1X4_F32,
        per_row: true,
    };
    /// `kai_lhs_quant_pack_bf16p8x4_f32_neon`.
    pub(crate) static LHS_BF16P8X4_F32_NEON: LhsPacker = LhsPacker {
        name: "kai_lhs_quant_pack_bf16p8x4_f32_neon",
        format: "bf16p8x4",
        packer: engine::lhs_packers::BF16P8X4_F32,
        per_row: false,
    };
    /// `kai_lhs_pack_bf16p8x4_f16_neon` (FEAT_FP16).
    pub(crate) static LHS_BF16P8X4_F16_NEON: LhsPacker = LhsPacker {
        name: "kai_lhs_pack_bf16p8x4_f16_neon",
        format: "bf16p8x4",
        packer: engine::lhs_packers::BF16P8X4_F16,
        per_row: false,
    };
    /// `kai_lhs_pack_bf16p2vlx2_f32_sme`.
    pub(crate) static LHS_BF16P2VLX2_F32_SME: LhsPacker = LhsPacker {
        name: "kai_lhs_pack_bf16p2vlx2_f32_sme",
        format: "bf16p2vlx2",
        packer: engine::lhs_packers::BF16P2VLX2_SME,
        per_row: false,
    };
    /// `kai_lhs_pack_bf16p2vlx2_f32_sme2` (same packed format).
    pub(crate) static LHS_BF16P2VLX2_F32_SME2: LhsPacker = LhsPacker {
        name: "kai_lhs_pack_bf16p2vlx2_f32_sme2",
        format: "bf16p2vlx2",
        packer: engine::lhs_packers::BF16P2VLX2_SME2,
        per_row: false,
    };

    /// One upstream K x N RHS packer (`kai_run_rhs_*`: `(num_groups, n, k,
    /// nr, kr, sr, rhs_stride, rhs, bias, scale, rhs_packed, extra_bytes,
    /// params)`) and the `bf16p{nr}x{kr}` format it writes (see
    /// [`bf16_rhs_offset`]).
    pub(crate) struct RhsPacker {
        pub name: &'static str,
        /// Format id of the packed RHS layout.
        pub format: &'static str,
        /// Bytes of one bias value in the packed blocks (f32 4, f16 2).
        pub bias_bytes: usize,
        run: engine::PackFloat,
        size: RhsSize,
        /// Bytes of the weights it reads.
        elem_bytes: usize,
        /// The packer's own n step, checked against the kernel's nr (it
        /// depends on the vector length); `None` where upstream asserts nr.
        n_step: Option<Getter>,
        /// The packer reads a bias always (zeros are passed when there is
        /// none); otherwise a null bias means zero.
        bias_required: bool,
        /// Every upstream packer of `format` (registry information).
        format_packers: &'static [&'static str],
    }

    /// The packers of `bf16p12x4biasf32`.
    const BF16P12X4BIASF32_PACKERS: &[&str] =
        &["kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon", "kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon"];

    /// `kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon`.
    pub(crate) static RHS_BF16P12X4BIASF32_F32_NEON: RhsPacker = RhsPacker {
        name: "kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon",
        format: "bf16p12x4biasf32",
        bias_bytes: 4,
        run: sys::kai_run_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon,
        size: RhsSize::NkNrKr(sys::kai_get_rhs_packed_size_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon),
        elem_bytes: 4,
        n_step: None,
        bias_required: false,
        format_packers: BF16P12X4BIASF32_PACKERS,
    };
    /// `kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon` (f16 weights and bias,
    /// the same packed format; FEAT_FP16).
    pub(crate) static RHS_BF16P12X4BIASF32_F16_NEON: RhsPacker = RhsPacker {
        name: "kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon",
        format: "bf16p12x4biasf32",
        bias_bytes: 4,
        run: sys::kai_run_rhs_pack_kxn_bf16p12x4biasf32_f16_neon,
        size: RhsSize::Nk(sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p12x4biasf32_f16_neon),
        elem_bytes: 2,
        n_step: None,
        bias_required: false,
        format_packers: BF16P12X4BIASF32_PACKERS,
    };
    /// `kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon`.
    pub(crate) static RHS_BF16P12X4BIASF16_F16_NEON: RhsPacker = RhsPacker {
        name: "kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon",
        format: "bf16p12x4biasf16",
        bias_bytes: 2,
        run: sys::kai_run_rhs_pack_kxn_bf16p12x4biasf16_f16_neon,
        size: RhsSize::Nk(sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p12x4biasf16_f16_neon),
        elem_bytes: 2,
        n_step: None,
        bias_required: false,
        format_packers: &["kai_rhs_pack_kxn_bf16p12x4biasf16_f16_neon"],
    };
    /// `kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme` (SME; it enters
    /// streaming mode itself).
    pub(crate) static RHS_BF16P2VLX2BIASF32_F32_SME: RhsPacker = RhsPacker {
        name: "kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme",
        format: "bf16p2vlx2biasf32",
        bias_bytes: 4,
        run: sys::kai_run_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme,
        size: RhsSize::Nk(sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme),
        elem_bytes: 4,
        n_step: Some(sys::kai_get_n_step_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme),
        bias_required: true,
        format_packers: &["kai_rhs_pack_kxn_bf16p2vlx2b_f32_x32_sme"],
    };

    /// The packers of one kernel.
    pub(crate) struct Packers {
        /// The LHS packer of [`Bf16Kernel::pack_lhs_into`] and of the
        /// steady-state path.
        pub lhs: &'static LhsPacker,
        /// The packer of an f16 LHS for a kernel whose `lhs` packs f32
        /// (FEAT_FP16 checked on use); `None`: the rows are widened to f32
        /// and packed by `lhs`.
        pub lhs_f16: Option<&'static LhsPacker>,
        /// The RHS packer of [`Bf16Kernel::pack_rhs`].
        pub rhs: &'static RhsPacker,
        /// The packer of f16 weights into `rhs`'s format (FEAT_FP16 checked
        /// on use).
        pub rhs_f16: Option<&'static RhsPacker>,
    }

    impl Packers {
        /// A kernel with one LHS and one RHS packer.
        pub(crate) fn new(lhs: &'static LhsPacker, rhs: &'static RhsPacker) -> Packers {
            Packers { lhs, lhs_f16: None, rhs, rhs_f16: None }
        }
    }

    /// One kernel of a bf16 family: its upstream functions and packers.
    pub(crate) struct Bf16Kernel {
        pub info: KernelInfo,
        fns: Fns,
        packers: Packers,
        /// Bytes of the kernel's output element (its family's).
        out_bytes: usize,
    }

    /// `roundup(v, m)`, or an overflow error.
    fn roundup(v: usize, m: usize, what: &str) -> Result<usize> {
        error::mul(v.div_ceil(m), m, what)
    }

    fn overflow(what: &str) -> crate::Error {
        crate::Error::Overflow(what.into())
    }

    /// The f16 packers need FEAT_FP16 besides the kernels' FEAT_BF16.
    fn need_fp16(packer: &'static str) -> Result<()> {
        if Features::current().has(CpuFeature::Fp16) {
            Ok(())
        } else {
            Err(crate::Error::Unsupported { kernel: packer, why: "needs fp16".into() })
        }
    }

    impl Bf16Kernel {
        /// Kernel `u` of `family` (whose output elements have `out_bytes`
        /// bytes) with its functions and packers.
        pub(crate) fn new(
            u: &'static sys::Ukernel,
            family: &'static str,
            fns: Fns,
            packers: Packers,
            out_bytes: usize,
        ) -> Bf16Kernel {
            Bf16Kernel {
                info: engine::kernel_info(u, family, Some(packers.lhs.name), packers.rhs.format_packers),
                fns,
                packers,
                out_bytes,
            }
        }

        fn is_gemv(&self) -> bool {
            self.info.tile == TileKind::Gemv
        }

        /// Blocking parameters, and the features in force.
        fn tiles(&self) -> Result<(Tiles, Gate)> {
            let g = engine::ensure_supported(&self.info)?;
            let i = &self.fns;
            Ok((g.tiles([i.m_step, i.n_step, i.mr, i.nr, i.kr, i.sr]), g))
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights (for
        /// the SME kernels it depends on the vector length in force).
        pub(crate) fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, self.packers.rhs.format, (n, k, 0), t.nr, &t))
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(f.layout(&self.info, self.packers.lhs.format, (m, k, 0), t.mr, &t))
        }

        /// Rounds the weights to bf16 and packs them with the bias: with the
        /// kernel's RHS packer, or (`f16`) its packer of f16 weights.
        pub(crate) fn pack_rhs<T: FloatElement>(&self, w: &FloatWeights<'_, T>, f16: bool) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            let g = engine::ensure_supported(&self.info)?;
            let p = if f16 {
                let p = self.packers.rhs_f16.expect("the family declares an f16 RHS packer");
                need_fp16(p.name)?;
                p
            } else {
                self.packers.rhs
            };
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            if let Some(n_step) = p.n_step {
                let packer_nr = query!(&g, n_step);
                if packer_nr != nr {
                    return Err(crate::Error::PackerMismatch {
                        kernel: self.info.name,
                        why: format!("RHS packer block {packer_nr} differs from the kernel's nr {nr}"),
                    });
                }
            }
            // Checked size: roundup(n, nr) * (bias_bytes + roundup(k, kr) * 2).
            let block = error::mul(roundup(k, kr, "k")?, 2, "packed rhs")?
                .checked_add(p.bias_bytes)
                .ok_or_else(|| overflow("packed rhs"))?;
            error::mul(roundup(n, nr, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, T::BYTES, "rhs stride")?;
            let kxn = w.kxn();
            // The bias as the packer reads it: the caller's (null if none,
            // unless the packer requires one: zeros), widened to f32 where
            // the packed bias is wider than the weights.
            let bias = if p.bias_required { Some(w.bias_or_zeros()) } else { w.bias.map(|b| b[..n].into()) };
            let wide: Option<Vec<f32>> =
                bias.as_ref().filter(|_| p.bias_bytes != T::BYTES).map(|b| b.iter().map(|v| v.to_f32()).collect());
            let packer = engine::FloatRhsPacker {
                run: p.run,
                size: p.size,
                order: Order::KxN,
                elem_bytes: p.elem_bytes,
                bias_bytes: p.bias_bytes,
                bias_required: p.bias_required,
            };
            // No overflow: checked above.
            let size = match p.size {
                RhsSize::Nk(f) => query!(&g, f, n, k),
                RhsSize::NkNrKr(f) => query!(&g, f, n, k, nr, kr),
            };
            let mut buf = AlignedBuf::zeroed(size);
            // nr, kr, sr are the kernel's, the values the packer asserts (or
            // its n step: checked above). The CPU has the kernel's features
            // (rhs_layout), which are the packer's, and FP16 for the f16
            // packer of an f32 kernel (need_fp16).
            let blocking = (nr, kr, sr);
            match (&wide, &bias) {
                (Some(b), _) => packer.pack(&g, (n, k), blocking, &kxn, stride, Some(b.as_slice()), buf.as_mut_slice()),
                (None, b) => packer.pack(&g, (n, k), blocking, &kxn, stride, b.as_deref(), buf.as_mut_slice()),
            }?;
            zero_k_padding_with_bias(buf.as_mut_slice(), n, k, nr, kr, p.bias_bytes);
            Ok(PackedRhs::new(layout, buf))
        }

        /// Rounds an `m x k` LHS (rows `lhs_stride` elements apart) to bf16
        /// and packs it: with the kernel's LHS packer, or (`f16`) its packer
        /// of f16 rows (none: the rows are widened to f32, exactly, and
        /// packed as f32, which rounds to the same bf16).
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn pack_lhs_into<T: FloatElement>(
            &self,
            m: usize,
            k: usize,
            lhs: &[T],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
            f16: bool,
        ) -> Result<()> {
            error::nonzero(m, "m")?;
            error::nonzero(k, "k")?;
            if lhs_stride < k {
                return Err(crate::Error::bad_value("lhs_stride", lhs_stride, format!("less than k = {k}")));
            }
            let need = error::mul(m - 1, lhs_stride, "lhs")?.checked_add(k).ok_or_else(|| overflow("lhs"))?;
            error::at_least(lhs.len(), need, "lhs")?;
            let (p, layout, _stride_bytes) = if f16 {
                let Some(p) = self.packers.lhs_f16 else {
                    let mut wide = Vec::with_capacity(error::mul(m, k, "lhs")?);
                    for r in 0..m {
                        wide.extend(lhs[r * lhs_stride..r * lhs_stride + k].iter().map(|v| v.to_f32()));
                    }
                    return self.pack_lhs_into(m, k, &wide, k, par, out, false);
                };
                let layout = self.lhs_layout(m, k)?;
                need_fp16(p.name)?;
                (p, layout, error::mul(lhs_stride, T::BYTES, "lhs stride")?)
            } else {
                let stride_bytes = error::mul(lhs_stride, T::BYTES, "lhs stride")?;
                (self.packers.lhs, self.lhs_layout(m, k)?, stride_bytes)
            };
            let g = engine::ensure_supported(&self.info)?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let row_bytes = error::mul(roundup(k, kr, "k")?, 2, "packed lhs")?;
            let size = error::mul(roundup(m, mr, "m")?, row_bytes, "packed lhs")?;
            out.reset(layout, size);
            // The GEMV packer converts a K tail that is not a multiple of 4
            // with `kai_cast_bf16_f32`, which truncates when the C compiler
            // does not define __ARM_FEATURE_BF16 (GCC 12) and rounds to
            // nearest otherwise (clang). A zero-padded copy of each row
            // keeps the packer on its vector path (BFCVTN: round to nearest
            // even) and gives the same bytes.
            let calls =
                if p.per_row { engine::LhsCalls::RowByRowPadded(row_bytes / 2) } else { engine::LhsCalls::Blocks };
            let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl: 0, blocking: (mr, kr, sr) };
            engine::pack_lhs(&g, &self.info, &p.packer, x, calls, out.data_mut().as_mut_slice(), par)?;
            Ok(())
        }

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](engine::PackedKernel::run) make for a dense `m x k` LHS and `rhs`, made
        /// once (the steady-state path of `PackedWeights::matmul`). `None`
        /// for the GEMV kernel when `k` is not a multiple of its `kr` (its
        /// rows are packed from zero-padded copies: the checked path).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<Prepared>> {
            let l = *rhs.layout();
            let (n, k) = (l.rows, l.k);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k)?, self.info.name)?;
            let layout = self.lhs_layout(m, k)?;
            let (t, g) = self.tiles()?;
            if self.packers.lhs.per_row && k % t.kr != 0 {
                return Ok(None);
            }
            let row_bytes = error::mul(roundup(k, layout.kr, "k")?, 2, "packed lhs")?;
            let lhs_bytes = error::mul(roundup(m, layout.r, "m")?, row_bytes, "packed lhs")?;
            let (pack, run) = (self.packers.lhs.packer, engine::KernelRun::Plain(self.fns.run));
            // The GEMV kernel takes one row per call (as in `run`), row i of
            // its packed LHS at i * 2k bytes (k a multiple of kr: above),
            // packed one row per packer call as `pack_lhs_into` does.
            let calls = if self.packers.lhs.per_row {
                (
                    engine::SteadyLhs::PackedPerRow(pack),
                    run,
                    engine::SteadyRows::EachRow(Some(engine::Offset::Rows(k * 2))),
                )
            } else {
                (engine::SteadyLhs::Packed(pack), run, engine::SteadyRows::Whole)
            };
            let steady = engine::Steady::new(g, calls, (pack.elem_bytes(), self.out_bytes));
            Ok(Some(Prepared { m, n, k, bl: 0, t, lhs_bytes, steady }))
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, its packers'
    // formats), the functions its own interface's, writing its family's
    // output type (`out_bytes`). The GEMV kernel takes one row per call (it
    // asserts m == 1 and its offset getter m_idx == 0): row r of its packed
    // LHS starts at r * roundup(k, kr) * 2 bytes (the packer's layout for
    // mr 1).
    unsafe impl engine::PackedKernel for Bf16Kernel {
        fn info(&self) -> &KernelInfo {
            &self.info
        }

        fn plan(&self, _: &PackedRhs, (m, n, k, _): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k)?, self.rhs_layout(n, k)?);
            let (t, g) = self.tiles()?;
            let gemv = self.is_gemv();
            let lhs_offset = if gemv {
                engine::Offset::Rows(k.div_ceil(t.kr) * t.kr * 2)
            } else {
                engine::Offset::K(self.fns.lhs_offset)
            };
            let offsets = (lhs_offset, engine::Offset::K(self.fns.rhs_offset));
            let fns = engine::PackedFns::new(engine::KernelRun::Plain(self.fns.run), offsets, gemv, self.out_bytes);
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    /// Weight row `row` of a packed RHS of `family` (format `p.format`), as
    /// the kernels see it (the bf16-rounded weights, as f32; bias not
    /// included).
    pub(crate) fn unpack_rhs_row(
        family: &str,
        p: &RhsPacker,
        rhs: &PackedRhs,
        row: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let l = *rhs.layout();
        if l.format != p.format {
            return Err(crate::Error::bad_value(
                "packed RHS format",
                l.format,
                format!("not a packed RHS of {family}"),
            ));
        }
        unpack_bf16_row(rhs, row, out, p.bias_bytes)
    }

    /// The items of a bf16 family module: `entries()` (one [`Bf16Kernel`]
    /// per kernel of the generated interface module `$iface`, its packers
    /// given by `$packers` for the upstream kernel `$u`), `infos`, `Kernel`
    /// (a handle on one entry) with its methods, and `unpack_rhs_row` for
    /// packed RHS of `$rhs`'s format. `$lhs` is the element type of the LHS
    /// and the weights, `$out` of the output.
    macro_rules! bf16_kernel {
        (interface: $iface:ident, lhs: $lhs:ty, out: $out:ty, rhs: $rhs:path, packers: |$u:ident| $packers:expr $(,)?) => {
            pub(super) fn entries() -> &'static [$crate::families::bf16p_bf16p::Bf16Kernel] {
                static E: std::sync::OnceLock<Vec<$crate::families::bf16p_bf16p::Bf16Kernel>> =
                    std::sync::OnceLock::new();
                E.get_or_init(|| {
                    kleidiai_sys::interfaces::$iface::KERNELS
                        .iter()
                        .map(|($u, i)| {
                            let fns = $crate::families::bf16p_bf16p::fns!(i);
                            $crate::families::bf16p_bf16p::Bf16Kernel::new($u, FAMILY, fns, $packers, core::mem::size_of::<$out>())
                        })
                        .collect()
                })
            }

            $crate::families::engine::kernel_type!($crate::families::bf16p_bf16p::Bf16Kernel);

            impl Kernel {
                /// The packed-RHS layout this kernel reads for `n x k`
                /// weights (for the SME kernels it depends on the vector
                /// length in force).
                pub fn rhs_layout(&self, n: usize, k: usize) -> $crate::Result<$crate::PackedLayout> {
                    self.0.rhs_layout(n, k)
                }

                /// Rounds the weights to bf16 and packs them (with the bias)
                /// for this kernel and every kernel with the same
                /// [`rhs_layout`](Self::rhs_layout).
                pub fn pack_rhs(
                    &self,
                    w: &$crate::formats::FloatWeights<'_, $lhs>,
                ) -> $crate::Result<$crate::PackedRhs> {
                    self.0.pack_rhs(w, false)
                }

                $crate::families::engine::lhs_methods!(
                    lhs: $lhs,
                    into: pack_lhs_into(false),
                    layout_doc: [
                        /// The packed-LHS layout this kernel reads for an `m x k` input.
                    ],
                    pack_doc: [
                        /// Rounds an `m x k` LHS (rows `lhs_stride` elements apart)
                        /// to bf16 and packs it.
                    ],
                );

                /// The checks of `pack_lhs_into` + `run`, made once (see
                /// `Bf16Kernel::prepare`).
                #[allow(dead_code)] // families the high-level API does not serve
                pub(crate) fn prepare(
                    &self,
                    m: usize,
                    rhs: &$crate::PackedRhs,
                ) -> $crate::Result<Option<$crate::families::engine::Prepared>> {
                    self.0.prepare(m, rhs)
                }

                $crate::families::engine::run_matmul_methods!(
                    lhs: $lhs,
                    out: $out,
                    run: run,
                    run_doc: [
                        /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n`
                        /// apart (for an f16 output the clamp applies in f32, before
                        /// the rounding to f16).
                    ],
                    matmul_doc: [
                        /// Packs the dense `m x k` LHS and runs: the one-call form.
                    ],
                );
            }

            /// Weight row `row` of a packed RHS of this family, as the
            /// kernels see it (the bf16-rounded weights, as f32; bias not
            /// included).
            pub fn unpack_rhs_row(rhs: &$crate::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                $crate::families::bf16p_bf16p::unpack_rhs_row(FAMILY, &$rhs, rhs, row, out)
            }
        };
    }
    pub(crate) use bf16_kernel;

    /// Byte offset of weight `(row, kk)` in a `bf16p{nr}x{kr}bias{bias_bytes}`
    /// buffer: per block of nr channels, nr biases, then for each group of kr
    /// inputs, nr channels of kr bf16 values.
    fn bf16_rhs_offset(row: usize, kk: usize, k: usize, nr: usize, kr: usize, bias_bytes: usize) -> usize {
        let kp = k.div_ceil(kr) * kr;
        let block = nr * (bias_bytes + kp * 2);
        (row / nr) * block + nr * bias_bytes + (kk / kr) * nr * kr * 2 + (row % nr) * kr * 2 + (kk % kr) * 2
    }

    /// Zeroes the K padding of a packed `bf16p{nr}x{kr}` RHS (which the
    /// packers fill with copies of weight row 0).
    fn zero_k_padding_with_bias(bytes: &mut [u8], n: usize, k: usize, nr: usize, kr: usize, bias: usize) {
        if k % kr == 0 {
            return;
        }
        for row in 0..n.div_ceil(nr) * nr {
            for kk in k..k.div_ceil(kr) * kr {
                let at = bf16_rhs_offset(row, kk, k, nr, kr, bias);
                bytes[at..at + 2].fill(0);
            }
        }
    }

    /// Row `row` of a `bf16p{nr}x{kr}` packed RHS whose blocks start with nr
    /// biases of `bias_bytes` each.
    fn unpack_bf16_row(rhs: &PackedRhs, row: usize, out: &mut [f32], bias_bytes: usize) -> Result<()> {
        let l = *rhs.layout();
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let bytes = rhs.as_bytes();
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let at = bf16_rhs_offset(row, kk, l.k, l.r, l.kr, bias_bytes);
            *o = bf16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32();
        }
        Ok(())
    }
}

/// Test helpers shared by the bf16 families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    use super::round_bf16;
    use crate::cpu::Features;
    use crate::error::Result;
    use crate::formats::{FloatElement, FloatWeights, Order};
    use crate::packed::{Clamp, PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use crate::testing::{self, Rng, THREADS, bit_identical, compare, tail_shapes};

    /// Per output: `Σ_k |x·w| + |bias|` with bf16-rounded operands (the scale
    /// the f32 accumulation error is relative to).
    pub(crate) fn magnitudes(m: usize, lhs: &[f32], k: usize, wq: &[f32], bias: &[f32]) -> Vec<f64> {
        let n = bias.len();
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| (round_bf16(lhs[i * k + p]) as f64 * wq[j * k + p] as f64).abs()).sum();
                out[i * n + j] = s + bias[j].abs() as f64;
            }
        }
        out
    }

    /// The documented bound `(2k + 4) · 2⁻²³ · magnitude`.
    pub(crate) fn bf16_tolerance(k: usize, mag: f64) -> f32 {
        ((2 * k + 4) as f64 * f64::powi(2.0, -23) * mag + 1e-30) as f32
    }

    /// A bf16 family's public API as function pointers (`bf16_tests!`
    /// fills them with the family's own `Kernel` methods, `unpack_rhs_row`
    /// and `reference`), so the checks below run through each family's API.
    /// `X` is the element of the LHS and the weights, `Y` of the output.
    #[allow(clippy::type_complexity)] // the families' own method signatures
    pub(crate) struct Ops<K, X: 'static, Y: 'static> {
        pub by_name: fn(&str) -> Option<K>,
        pub all: fn() -> Vec<K>,
        pub select: fn(usize, &Features) -> Option<K>,
        pub info: fn(&K) -> &'static KernelInfo,
        pub rhs_layout: fn(&K, usize, usize) -> Result<PackedLayout>,
        pub lhs_layout: fn(&K, usize, usize) -> Result<PackedLayout>,
        pub pack_rhs: fn(&K, &FloatWeights<'_, X>) -> Result<PackedRhs>,
        pub pack_lhs: fn(&K, usize, usize, &[X], usize, Parallelism) -> Result<PackedLhs>,
        pub pack_lhs_into: fn(&K, usize, usize, &[X], usize, Parallelism, &mut PackedLhs) -> Result<()>,
        pub run: fn(&K, &PackedLhs, &PackedRhs, &mut [Y], Clamp, Parallelism) -> Result<()>,
        pub matmul: fn(&K, usize, &[X], &PackedRhs, &mut [Y], Clamp, Parallelism) -> Result<()>,
        pub unpack_rhs_row: fn(&PackedRhs, usize, &mut [f32]) -> Result<()>,
        pub reference: Reference<X, Y>,
    }

    /// A family's reference.
    pub(crate) type Reference<X, Y> = fn(usize, &[X], &FloatWeights<'_, X>, Clamp, &mut [Y]) -> Result<()>;

    /// One conformance case, for a family's extra checks.
    pub(crate) struct Case<'a, X> {
        /// Cases done so far (the error index).
        pub cases: usize,
        /// Index in the list of shapes.
        pub ci: usize,
        pub m: usize,
        pub n: usize,
        pub k: usize,
        pub order: Order,
        pub data: &'a [X],
        /// Random bias values (used when `has_bias`).
        pub bias_v: &'a [X],
        pub has_bias: bool,
        pub lhs: &'a [X],
        pub clamp: Clamp,
    }

    fn as_f32<X: FloatElement>(v: &[X]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }

    /// The conformance check of a family: tail shapes around its blocking
    /// with the `ks` depths, both weight orders, with and without bias and
    /// clamp; outputs within the documented tolerance of `reference` (plus
    /// one ulp of an f16 output's rounding), bit-identical across thread
    /// counts, `unpack_rhs_row` giving the bf16-rounded weights; `extra`
    /// runs after each case (its error, if it checked one, joins the worst).
    pub(crate) fn conformance<K, X: FloatElement, Y: FloatElement>(
        o: &Ops<K, X, Y>,
        family: &str,
        seed: u64,
        ks: &[usize],
        mut extra: impl FnMut(&K, &Case<'_, X>) -> core::result::Result<Option<f64>, (usize, String)>,
    ) {
        testing::conformance(family, |info| {
            let kernel = (o.by_name)(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let lay = (o.rhs_layout)(&kernel, 1, ks[0]).map_err(e(0))?;
            let lhs_lay = (o.lhs_layout)(&kernel, 1, ks[0]).map_err(e(0))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let n_step = if mr == 1 { 3 * nr } else { nr };
            let shapes = tail_shapes(mr, mr, nr, n_step, ks);
            let mut rng = Rng::new(seed);
            let el = |v: Vec<f32>| -> Vec<X> { v.into_iter().map(X::from_f32).collect() };
            let (mut cases, mut worst) = (0, 0f64);
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let order = if ci % 2 == 0 { Order::KxN } else { Order::NxK };
                let data = el(rng.vec_f32(n * k));
                let bias_v = el(rng.vec_f32(n));
                let bias = if ci % 4 == 3 { None } else { Some(&bias_v[..]) };
                let w = FloatWeights { n, k, order, data: &data, bias };
                let lhs = el(rng.vec_f32(m * k));
                let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                let mut want = vec![Y::ZERO; m * n];
                (o.reference)(m, &lhs, &w, clamp, &mut want).map_err(e(cases))?;
                let want = as_f32(&want);
                let wq: Vec<f32> = w.to_nxk().unwrap().into_iter().map(|v| round_bf16(v.to_f32())).collect();
                let b: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
                let mags = magnitudes(m, &as_f32(&lhs), k, &wq, &b);
                // An f16 output adds its rounding: one f16 ulp.
                let f16_out = Y::BYTES == 2;
                let packed = (o.pack_rhs)(&kernel, &w).map_err(e(cases))?;
                let mut first: Option<Vec<f32>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![Y::from_f32(f32::NAN); m * n];
                    let mut scratch = PackedLhs::empty();
                    (o.pack_lhs_into)(&kernel, m, k, &lhs, k, par, &mut scratch).map_err(e(cases))?;
                    (o.run)(&kernel, &scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let dst = as_f32(&dst);
                    let err = compare(&dst, &want, |i, y| {
                        let tol = bf16_tolerance(k, mags[i]);
                        if f16_out { tol + y.abs() * f32::powi(2.0, -10) + f32::powi(2.0, -24) } else { tol }
                    })
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
                    (o.unpack_rhs_row)(&packed, r, &mut row).map_err(e(cases))?;
                    if row[..] != wq[r * k..(r + 1) * k] {
                        return Err((cases, format!("unpack_rhs_row({r}) n={n} k={k} differs from bf16(weights)")));
                    }
                }
                let case = Case {
                    cases,
                    ci,
                    m,
                    n,
                    k,
                    order,
                    data: &data,
                    bias_v: &bias_v,
                    has_bias: bias.is_some(),
                    lhs: &lhs,
                    clamp,
                };
                if let Some(err) = extra(&kernel, &case)? {
                    worst = worst.max(err);
                }
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    /// Every kernel runs on weights packed for another (same RHS format), a
    /// packed LHS of another format is refused, and one of another `k` too.
    pub(crate) fn mixing_layouts<K: core::fmt::Debug, X: FloatElement, Y: FloatElement>(o: &Ops<K, X, Y>) {
        let f = Features::current();
        let k1 = crate::testing::or_skip!((o.select)(4, &f));
        let h = X::from_f32;
        let (n, k) = (8, 16);
        let data = vec![h(0.5); n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = (o.pack_rhs)(&k1, &w).unwrap();
        let lhs = vec![h(0.5); 2 * k];
        let seq = Parallelism::Sequential;
        let mut dst = vec![Y::ZERO; 2 * n];
        for other in (o.all)().into_iter().filter(|x| (o.info)(x).supported(&f).is_ok()) {
            (o.matmul)(&other, 2, &lhs, &packed, &mut dst, Clamp::NONE, seq).unwrap();
            assert!(dst.iter().all(|y| y.to_f32() == 4.0), "{other:?}: {dst:?}");
            // The other kernel's packed LHS is refused unless it is the same format.
            let lp = (o.pack_lhs)(&other, 2, k, &lhs, k, seq).unwrap();
            let r = (o.run)(&k1, &lp, &packed, &mut dst, Clamp::NONE, seq);
            if (o.lhs_layout)(&other, 2, k).unwrap() == (o.lhs_layout)(&k1, 2, k).unwrap() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
            }
        }
        // A packed LHS of another k (one more group of kr) is rejected.
        let k2 = k + (o.lhs_layout)(&k1, 2, k).unwrap().kr;
        let lhs_p = (o.pack_lhs)(&k1, 2, k2, &vec![X::ZERO; 2 * k2], k2, seq).unwrap();
        assert!((o.run)(&k1, &lhs_p, &packed, &mut dst, Clamp::NONE, seq).is_err());
    }

    /// Bad operands are errors (not panics) in every entry point.
    pub(crate) fn bad_input<K, X: FloatElement, Y: FloatElement>(o: &Ops<K, X, Y>) {
        let f = Features::current();
        let kern = crate::testing::or_skip!((o.select)(1, &f));
        let z = X::ZERO;
        let data = vec![z; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::NxK, data: &data, bias: None };
        let packed = (o.pack_rhs)(&kern, &w).unwrap();
        let mut dst = vec![Y::ZERO; 4];
        let seq = Parallelism::Sequential;
        let none = Clamp::NONE;
        assert!((o.matmul)(&kern, 1, &[z; 7], &packed, &mut dst, none, seq).is_err(), "short lhs");
        assert!((o.matmul)(&kern, 1, &[z; 8], &packed, &mut dst[..3], none, seq).is_err(), "short dst");
        assert!((o.matmul)(&kern, 0, &[], &packed, &mut dst, none, seq).is_err(), "m = 0");
        for bad in [Clamp { min: f32::NAN, max: 1.0 }, Clamp { min: 0.0, max: f32::NAN }, Clamp { min: 1.0, max: 0.0 }]
        {
            assert!((o.matmul)(&kern, 1, &[z; 8], &packed, &mut dst, bad, seq).is_err(), "bad clamp {bad:?}");
        }
        assert!((o.pack_rhs)(&kern, &FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!((o.pack_rhs)(&kern, &FloatWeights { bias: Some(&[z; 3]), ..w }).is_err(), "short bias");
        for n in [usize::MAX / 2, usize::MAX / 4] {
            assert!((o.pack_rhs)(&kern, &FloatWeights { n, ..w }).is_err(), "overflow n");
        }
        assert!((o.pack_rhs)(&kern, &FloatWeights { k: usize::MAX / 2, ..w }).is_err(), "overflow k");
        assert!((o.pack_lhs)(&kern, usize::MAX, 8, &[z; 8], 8, seq).is_err(), "overflowing m");
        assert!((o.pack_lhs)(&kern, 2, 8, &[z; 16], 7, seq).is_err(), "stride < k");
        assert!((o.reference)(1, &[z; 7], &w, none, &mut dst).is_err());
        let mut row = vec![0f32; 7];
        assert!((o.unpack_rhs_row)(&packed, 0, &mut row).is_err(), "short row");
        assert!((o.unpack_rhs_row)(&packed, 4, &mut [0f32; 8]).is_err(), "row out of range");
    }

    /// The [`Ops`] of the family module in scope (its `Kernel`,
    /// `unpack_rhs_row` and `reference`).
    macro_rules! bf16_ops {
        () => {
            $crate::families::bf16p_bf16p::test_support::Ops {
                by_name: Kernel::by_name,
                all: || Kernel::all().collect(),
                select: Kernel::select,
                info: Kernel::info,
                rhs_layout: Kernel::rhs_layout,
                lhs_layout: Kernel::lhs_layout,
                pack_rhs: Kernel::pack_rhs,
                pack_lhs: Kernel::pack_lhs,
                pack_lhs_into: Kernel::pack_lhs_into,
                run: Kernel::run,
                matmul: Kernel::matmul,
                unpack_rhs_row,
                reference,
            }
        };
    }
    pub(crate) use bf16_ops;

    /// The tests of a bf16 family module (which has `FAMILY`, `Kernel`,
    /// `unpack_rhs_row` and `reference`): [`conformance`] with the `seed`,
    /// depths and per-case `extra` check given, [`mixing_layouts`] and
    /// [`bad_input`].
    macro_rules! bf16_tests {
        (seed: $seed:expr, ks: $ks:expr, extra: $extra:expr $(,)?) => {
            #[test]
            fn conformance() {
                let ops = $crate::families::bf16p_bf16p::test_support::bf16_ops!();
                $crate::families::bf16p_bf16p::test_support::conformance(&ops, FAMILY, $seed, $ks, $extra);
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                $crate::families::bf16p_bf16p::test_support::mixing_layouts(
                    &$crate::families::bf16p_bf16p::test_support::bf16_ops!(),
                );
            }

            #[test]
            fn bad_input_is_an_error() {
                $crate::families::bf16p_bf16p::test_support::bad_input(
                    &$crate::families::bf16p_bf16p::test_support::bf16_ops!(),
                );
            }
        };
    }
    pub(crate) use bf16_tests;
}
