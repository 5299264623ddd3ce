//! `matmul_clamp_f32_bf16p_bf16p`: `dst (f32, m x n) = clamp(bf16(lhs) ·
//! bf16(w)ᵀ + bias)` on NEON with FEAT_BF16. Both operands are f32 in the
//! API; the packers round them to bf16 (round to nearest, ties to even: the
//! `BFCVT`/`BFCVTN` instructions under the default FPCR), the kernels multiply
//! bf16 pairs exactly and accumulate in f32, and the f32 bias is added in f32.
//!
//! Kernels (2 upstream): `bf16p1x4_bf16p12x4b_1x36_neon_dot` (GEMV, one LHS
//! row per call, `BFDOT`) and `bf16p8x4_bf16p12x4b_8x12_neon_mmla` (GEMM,
//! `BFMMLA`). LHS packers `kai_lhs_quant_pack_bf16p1x4_f32_neon` (GEMV) and
//! `kai_lhs_quant_pack_bf16p8x4_f32_neon` (GEMM); both kernels read the same
//! RHS format, `bf16p12x4biasf32` from `kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon`
//! (K x N input; N x K weights are transposed in Rust first), so one packed
//! RHS serves both. For f16 inputs upstream also has
//! `kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon` (same packed format, f32
//! bias) and `kai_lhs_pack_bf16p8x4_f16_neon` (GEMM), which need FEAT_FP16:
//! `Kernel::pack_rhs_f16`, `Kernel::pack_lhs_f16_into` and
//! [`reference_f16`].
//!
//! Upstream's RHS packer fills the K padding of the last group of 4 (when
//! `k % 4 != 0`) with copies of weight row 0 (the LHS padding is zero, so the
//! products vanish unless a weight is infinite or NaN); `Kernel::pack_rhs`
//! zeroes that padding after packing, so non-finite weights cannot leak into
//! other outputs.
//!
//! Tolerance of the conformance test: the reference rounds both operands
//! exactly as the packers do (bf16, RNE), so the products are the kernel's
//! products, exact in f32 (8-bit significands). Only the f32 sums differ:
//! `BFDOT`/`BFMMLA` round each partial sum (round-to-odd in the standard
//! BF16 mode), at most `2k` additions per output plus the bias, each off by
//! at most one f32 ulp of a partial sum bounded by `Σ|x·w| + |b|`:
//! `|err| <= (2k + 4) · 2⁻²³ · (Σ_k |x·w| + |bias|)`.

use crate::error::{self, Result};
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_bf16p_bf16p";

/// The portable reference (test oracle and fallback): `dst = clamp(bf16(lhs)
/// · bf16(w)ᵀ + bias)` for a dense `m x k` f32 LHS, `dst` `m x n`.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_bf16p_bf16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0f32, 2.0], bias: Some(&[0.5]) };
/// let mut y = [0f32];
/// // 1.001 is not a bf16 value: it rounds to 1.0 first.
/// reference(1, &[1.001, 1.0], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 3.5);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
    super::bf16p_bf16p::reference_f32(m, lhs, w, clamp, dst)
}

/// The reference for f16 inputs (upstream's f16 packers of this family):
/// f16 widens to f32 exactly, so this is [`fn@reference`] on the widened
/// values; the bias is f16 here, f32 in the packed weights (exact too).
pub fn reference_f16(
    m: usize,
    lhs: &[half::f16],
    w: &FloatWeights<'_, half::f16>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    w.validate()?;
    error::nonzero(m, "m")?;
    error::at_least(lhs.len(), error::mul(m, w.k, "lhs")?, "lhs")?;
    let x: Vec<f32> = lhs[..m * w.k].iter().map(|v| v.to_f32()).collect();
    let data: Vec<f32> = w.data[..w.n * w.k].iter().map(|v| v.to_f32()).collect();
    let bias: Option<Vec<f32>> = w.bias.map(|b| b[..w.n].iter().map(|v| v.to_f32()).collect());
    let wf = FloatWeights { n: w.n, k: w.k, order: w.order, data: &data, bias: bias.as_deref() };
    reference(m, &x, &wf, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::{AlignedBuf, SendPtr};
    use crate::cpu::Features;
    use crate::families::bf16p_bf16p::{unpack_bf16_row, zero_k_padding_with_bias};
    use crate::families::engine::{self, Tiles};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::{KernelInfo, TileKind, VectorLength, rank_for, tile_kind_for};
    use core::ffi::c_void;
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f32_bf16p_bf16p::{Interface, KERNELS};

    pub(super) const RHS_FORMAT: &str = "bf16p12x4biasf32";
    const RHS_PACKERS: &[&str] =
        &["kai_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon", "kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon"];
    const RHS_F16_PACKER: &str = "kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon";
    const LHS_F16_PACKER: &str = "kai_lhs_pack_bf16p8x4_f16_neon";

    /// The f16 packers need FEAT_FP16 besides the kernels' FEAT_BF16.
    fn need_fp16(packer: &'static str) -> Result<()> {
        if Features::current().has(crate::cpu::CpuFeature::Fp16) {
            Ok(())
        } else {
            Err(crate::Error::Unsupported { kernel: packer, why: "needs fp16".into() })
        }
    }
    const LHS_GEMV: &str = "kai_lhs_quant_pack_bf16p1x4_f32_neon";
    const LHS_GEMM: &str = "kai_lhs_quant_pack_bf16p8x4_f32_neon";

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
                    let tile = tile_kind_for(u.name);
                    Entry {
                        info: KernelInfo {
                            name: u.name,
                            family: FAMILY,
                            features: u.features,
                            vector_length: VectorLength::Any,
                            tile,
                            lhs_packer: Some(if tile == TileKind::Gemv { LHS_GEMV } else { LHS_GEMM }),
                            rhs_packers: RHS_PACKERS,
                            rank: rank_for(u.name, u.features),
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

    /// `roundup(v, m)`, or an overflow error.
    fn roundup(v: usize, m: usize, what: &str) -> Result<usize> {
        error::mul(v.div_ceil(m), m, what)
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

        fn is_gemv(&self) -> bool {
            self.0.info.tile == TileKind::Gemv
        }

        fn tiles(&self) -> Result<Tiles> {
            engine::ensure_supported(&self.0.info)?;
            let i = self.0.iface;
            // SAFETY: the CPU has every feature the kernel needs
            // (ensure_supported); the getters take no arguments and upstream
            // fills every one of this interface (generated table).
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
            let format = if self.is_gemv() { "bf16p1x4" } else { "bf16p8x4" };
            Ok(PackedLayout { format, rows: m, k, r: t.mr, kr: t.kr, sr: t.sr, bl: 0, vector_bytes: 0 })
        }

        /// Rounds the weights to bf16 and packs them (with the bias) for this
        /// kernel and every kernel with the same [`rhs_layout`](Self::rhs_layout).
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f32>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            // Checked size: roundup(n, nr) * (4 + roundup(k, kr) * 2).
            let kp = roundup(k, kr, "k")?;
            let block = error::mul(kp, 2, "packed rhs")?.checked_add(4).ok_or_else(|| overflow("packed rhs"))?;
            error::mul(roundup(n, nr, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 4, "rhs stride")?;
            let kxn = w.kxn();
            let bias = w.bias.map_or(core::ptr::null(), |b| b.as_ptr().cast::<c_void>());
            // SAFETY: size query, arithmetic only (no overflow: checked above).
            let size =
                unsafe { sys::kai_get_rhs_packed_size_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon(n, k, nr, kr) };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k rows of n f32 (`stride` bytes apart),
            // `bias` is null or holds n f32 (validate); the destination has
            // the packer's own size for (n, k, nr, kr); nr, kr, sr are the
            // kernel's (12, 4, 1: the values the packer asserts), one group,
            // no scale, no extra bytes, no params. NEON + BF16 code: the
            // kernel's features were checked by rhs_layout.
            unsafe {
                sys::kai_run_rhs_quant_pack_kxn_bf16p12x4biasf32_f32_neon(
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
            zero_k_padding(buf.as_mut_slice(), n, k, nr, kr);
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
            let gemv = self.is_gemv();
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                if gemv {
                    // The packer converts a K tail that is not a multiple of
                    // 4 with `kai_cast_bf16_f32`, which truncates when the C
                    // compiler does not define __ARM_FEATURE_BF16 (GCC 12)
                    // and rounds to nearest otherwise (clang). A zero-padded
                    // copy of the row keeps the packer on its vector path
                    // (BFCVTN: round to nearest even) and gives the same bytes.
                    let kp = row_bytes / 2;
                    let mut padded = if kp == k { Vec::new() } else { vec![0f32; kp] };
                    for r in rows {
                        // SAFETY: (slice) row r < m lies inside `lhs` (length
                        // checked above).
                        let row = unsafe { core::slice::from_raw_parts(src.0.add(r * lhs_stride), k) };
                        let (p, kk) = if padded.is_empty() {
                            (row.as_ptr(), k)
                        } else {
                            padded[..k].copy_from_slice(row);
                            (padded.as_ptr(), kp)
                        };
                        // SAFETY: `p` holds kk f32 (the row or its padded
                        // copy); its packed row (row_bytes = roundup(k, 4) * 2
                        // = kk * 2 at r * row_bytes, the packer's layout for
                        // mr = 1) lies inside the `size` bytes reserved; rows
                        // are disjoint between workers. One row per call,
                        // m_idx_start 0, mr/kr/sr the kernel's (1, 4, 1) as
                        // the packer asserts.
                        unsafe {
                            sys::kai_run_lhs_quant_pack_bf16p1x4_f32_neon(
                                1,
                                kk,
                                mr,
                                kr,
                                sr,
                                0,
                                p.cast(),
                                stride_bytes,
                                dst.0.add(r * row_bytes).cast(),
                            );
                        }
                    }
                } else {
                    // SAFETY: `rows` starts at a multiple of mr (split_aligned),
                    // so the packer's offset for rows.start begins a whole
                    // row block no other range writes; the pointers are
                    // pre-offset (m_idx_start 0). Source rows lie inside
                    // `lhs`, destination inside the `size` bytes reserved.
                    unsafe {
                        let off =
                            sys::kai_get_lhs_packed_offset_lhs_quant_pack_bf16p8x4_f32_neon(rows.start, k, mr, kr, sr);
                        sys::kai_run_lhs_quant_pack_bf16p8x4_f32_neon(
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
                }
            });
            Ok(())
        }

        /// As [`pack_rhs`](Self::pack_rhs) for f16 weights and bias (upstream's
        /// `kai_rhs_pack_kxn_bf16p12x4biasf32_f16_neon`, which also needs
        /// FEAT_FP16): the same packed format, usable by both kernels.
        pub fn pack_rhs_f16(&self, w: &FloatWeights<'_, half::f16>) -> Result<PackedRhs> {
            w.validate()?;
            let layout = self.rhs_layout(w.n, w.k)?;
            need_fp16(RHS_F16_PACKER)?;
            let (n, k, nr, kr, sr) = (w.n, w.k, layout.r, layout.kr, layout.sr);
            let kp = roundup(k, kr, "k")?;
            let block = error::mul(kp, 2, "packed rhs")?.checked_add(4).ok_or_else(|| overflow("packed rhs"))?;
            error::mul(roundup(n, nr, "n")?, block, "packed rhs")?;
            let stride = error::mul(n, 2, "rhs stride")?;
            let kxn = w.kxn();
            let bias: Option<Vec<f32>> = w.bias.map(|b| b[..n].iter().map(|v| v.to_f32()).collect());
            let bias_ptr = bias.as_ref().map_or(core::ptr::null(), |b| b.as_ptr().cast::<c_void>());
            // SAFETY: size query, arithmetic only (no overflow: checked above).
            let size = unsafe { sys::kai_get_rhs_packed_size_rhs_pack_kxn_bf16p12x4biasf32_f16_neon(n, k) };
            let mut buf = AlignedBuf::zeroed(size);
            // SAFETY: `kxn` holds k rows of n f16 `stride` bytes apart, the
            // bias is null or n f32; the destination has the packer's size
            // for (n, k); nr 12, kr 4, sr 1 are the values it asserts; one
            // group, no scale, no extra bytes, no params. The CPU has BF16
            // (rhs_layout) and FP16 (need_fp16).
            unsafe {
                sys::kai_run_rhs_pack_kxn_bf16p12x4biasf32_f16_neon(
                    1,
                    n,
                    k,
                    nr,
                    kr,
                    sr,
                    stride,
                    kxn.as_ptr().cast(),
                    bias_ptr,
                    core::ptr::null(),
                    buf.as_mut_ptr().cast(),
                    0,
                    core::ptr::null(),
                );
            }
            zero_k_padding(buf.as_mut_slice(), n, k, nr, kr);
            Ok(PackedRhs::new(layout, buf))
        }

        /// As [`pack_lhs_f16_into`](Self::pack_lhs_f16_into), allocating.
        pub fn pack_lhs_f16(
            &self,
            m: usize,
            k: usize,
            lhs: &[half::f16],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::empty();
            self.pack_lhs_f16_into(m, k, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs) for an f16 LHS: the GEMM kernel
        /// uses upstream's `kai_lhs_pack_bf16p8x4_f16_neon` (FEAT_FP16); the
        /// GEMV kernel has no f16 packer upstream, so rows are widened to
        /// f32 (exactly) and packed as f32, which rounds to the same bf16.
        pub fn pack_lhs_f16_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[half::f16],
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
            if self.is_gemv() {
                let mut wide = Vec::with_capacity(error::mul(m, k, "lhs")?);
                for r in 0..m {
                    wide.extend(lhs[r * lhs_stride..r * lhs_stride + k].iter().map(|v| v.to_f32()));
                }
                return self.pack_lhs_into(m, k, &wide, k, par, out);
            }
            let layout = self.lhs_layout(m, k)?;
            need_fp16(LHS_F16_PACKER)?;
            let stride_bytes = error::mul(lhs_stride, 2, "lhs stride")?;
            let (mr, kr, sr) = (layout.r, layout.kr, layout.sr);
            let row_bytes = error::mul(roundup(k, kr, "k")?, 2, "packed lhs")?;
            let size = error::mul(roundup(m, mr, "m")?, row_bytes, "packed lhs")?;
            out.reset(layout, size);
            let dst = SendPtr(out.data_mut().as_mut_ptr());
            let src = SendPtr(lhs.as_ptr() as *mut half::f16);
            engine::run_rows(par, &self.0.info, m, k, mr, |rows| {
                let (src, dst) = (src, dst);
                // SAFETY: as in pack_lhs_into: whole row blocks from a
                // multiple of mr, pre-offset pointers (m_idx_start 0), source
                // rows inside `lhs`, destination inside the `size` bytes
                // reserved; mr/kr/sr (8, 4, 1) as the packer asserts; the CPU
                // has BF16 (lhs_layout) and FP16 (need_fp16).
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

        /// Every check [`pack_lhs_into`](Self::pack_lhs_into) and
        /// [`run`](Self::run) make for a dense `m x k` LHS and `rhs`, made
        /// once (the steady-state path of `PackedWeights::matmul`). `None`
        /// for the GEMV kernel when `k` is not a multiple of its `kr` (its
        /// rows are packed from zero-padded copies: the checked path).
        pub(crate) fn prepare(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k) = (l.rows, l.k);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k)?, self.0.info.name)?;
            let layout = self.lhs_layout(m, k)?;
            let t = self.tiles()?;
            if self.is_gemv() && k % t.kr != 0 {
                return Ok(None);
            }
            let row_bytes = error::mul(roundup(k, layout.kr, "k")?, 2, "packed lhs")?;
            let lhs_bytes = error::mul(roundup(m, layout.r, "m")?, row_bytes, "packed lhs")?;
            Ok(Some(engine::Prepared { m, n, k, bl: 0, t, lhs_bytes }))
        }

        /// What `pack_lhs_into` then `run` do on one thread for the whole
        /// output, without their checks.
        ///
        /// # Safety
        /// `p` is what [`prepare`](Self::prepare) returned for this `rhs`;
        /// the CPU still has the kernel's features; `x` holds `p.m x p.k`
        /// f32, `lhs` `p.lhs_bytes` writable bytes (64-byte aligned), `y`
        /// `p.m x p.n` f32; `clamp` is valid.
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
            let r = rhs.data().as_ptr().cast();
            // SAFETY: the caller's contract: every size and layout rule was
            // checked by `prepare` for exactly these operands, the buffers
            // have the sizes it computed and the offsets of row 0 and column
            // 0 are 0. The GEMV kernel takes one row per call (as in `run`),
            // row i of its packed LHS at i * 2k bytes (k a multiple of kr:
            // prepare), packed one row per packer call as `pack_lhs_into` does.
            unsafe {
                if self.is_gemv() {
                    for i in 0..m {
                        let (a, row) = (lhs.add(i * k * 2).cast(), x.add(i * k).cast());
                        sys::kai_run_lhs_quant_pack_bf16p1x4_f32_neon(1, k, t.mr, t.kr, t.sr, 0, row, k * 4, a);
                        run(1, n, k, a, r, y.add(i * n).cast(), n * 4, 4, clamp.min, clamp.max);
                    }
                } else {
                    let l = lhs.cast();
                    sys::kai_run_lhs_quant_pack_bf16p8x4_f32_neon(m, k, t.mr, t.kr, t.sr, 0, x.cast(), k * 4, l);
                    run(m, n, k, l, r, y.cast(), n * 4, 4, clamp.min, clamp.max);
                }
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
            let t = self.tiles()?;
            let i = self.0.iface;
            let (get_lhs, get_rhs, run) = (
                i.get_lhs_packed_offset.expect("lhs offset"),
                i.get_rhs_packed_offset.expect("rhs offset"),
                i.run_matmul.expect("run"),
            );
            let gemv = self.is_gemv();
            let lhs_row_bytes = k.div_ceil(t.kr) * t.kr * 2;
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
                // column start that is a multiple of n_step (a multiple of
                // nr: plan_grid) lie inside them; dst holds m x n f32 and
                // tiles are disjoint; the CPU supports the kernel (tiles()).
                // The GEMV kernel takes one row per call (it asserts m == 1
                // and its offset getter m_idx == 0): row r of its packed LHS
                // starts at r * lhs_row_bytes (the packer's layout for mr 1).
                unsafe {
                    let ro = get_rhs(cols.start, k);
                    if gemv {
                        for r in rows {
                            run(
                                1,
                                cols.len(),
                                k,
                                lp.0.add(r * lhs_row_bytes).cast(),
                                rp.0.add(ro).cast(),
                                dp.0.add(r * n + cols.start).cast(),
                                n * 4,
                                4,
                                clamp.min,
                                clamp.max,
                            );
                        }
                    } else {
                        let lo = get_lhs(rows.start, k);
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

    fn overflow(what: &str) -> crate::Error {
        crate::Error::Overflow(what.into())
    }

    fn zero_k_padding(bytes: &mut [u8], n: usize, k: usize, nr: usize, kr: usize) {
        zero_k_padding_with_bias(bytes, n, k, nr, kr, 4);
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

#[cfg(test)]
mod reference_tests {
    use super::*;
    use crate::families::bf16p_bf16p::round_bf16;

    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        // Halfway cases go to the even significand; others to the nearest.
        assert_eq!(round_bf16(1.0 + f32::powi(2.0, -8)), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 * f32::powi(2.0, -8)), 1.0 + f32::powi(2.0, -6));
        assert_eq!(round_bf16(1.0 + 1.5 * f32::powi(2.0, -8)), 1.0 + f32::powi(2.0, -7));
        assert_eq!(round_bf16(-1.0 - 1.5 * f32::powi(2.0, -8)), -1.0 - f32::powi(2.0, -7));
    }

    #[test]
    fn reference_orders_agree() {
        let kxn = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // k = 3 rows of n = 2
        let nxk = [1.0f32, 3.0, 5.0, 2.0, 4.0, 6.0];
        let a = FloatWeights { n: 2, k: 3, order: crate::formats::Order::KxN, data: &kxn, bias: None };
        let b = FloatWeights { n: 2, k: 3, order: crate::formats::Order::NxK, data: &nxk, bias: None };
        let (mut ya, mut yb) = ([0f32; 2], [0f32; 2]);
        reference(1, &[1.0, 1.0, 1.0], &a, Clamp::NONE, &mut ya).unwrap();
        reference(1, &[1.0, 1.0, 1.0], &b, Clamp::NONE, &mut yb).unwrap();
        assert_eq!(ya, [9.0, 12.0]);
        assert_eq!(ya, yb);
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
    use half::f16;

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let e = |c: usize| move |x: crate::Error| (c, x.to_string());
            let lay = kernel.rhs_layout(1, 4).map_err(e(0))?;
            let lhs_lay = kernel.lhs_layout(1, 4).map_err(e(0))?;
            let (mr, nr) = (lhs_lay.r, lay.r);
            let n_step = if mr == 1 { 3 * nr } else { nr };
            let shapes = tail_shapes(mr, mr, nr, n_step, &[4, 7, 66]);
            let mut rng = Rng::new(0xbf16);
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
                let b: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
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
                // The f16 packers, on every third case (where FP16 exists).
                if ci % 3 == 1 && crate::cpu::Features::current().has(crate::cpu::CpuFeature::Fp16) {
                    let h = |v: &[f32]| -> Vec<f16> { v.iter().map(|&x| f16::from_f32(x)).collect() };
                    let (dh, bh, lh) = (h(&data), h(&bias_v), h(&lhs));
                    let wh = FloatWeights { n, k, order, data: &dh, bias: bias.map(|_| &bh[..]) };
                    let mut want = vec![0f32; m * n];
                    reference_f16(m, &lh, &wh, clamp, &mut want).map_err(e(cases))?;
                    let wq: Vec<f32> = wh.to_nxk().unwrap().iter().map(|v| round_bf16(v.to_f32())).collect();
                    let b: Vec<f32> = (0..n).map(|j| wh.bias_f32(j)).collect();
                    let lf: Vec<f32> = lh.iter().map(|v| v.to_f32()).collect();
                    let mags = magnitudes(m, &lf, k, &wq, &b);
                    let packed = kernel.pack_rhs_f16(&wh).map_err(e(cases))?;
                    let mut scratch = PackedLhs::empty();
                    let mut dst = vec![f32::NAN; m * n];
                    let par = Parallelism::Rayon(3);
                    kernel.pack_lhs_f16_into(m, k, &lh, k, par, &mut scratch).map_err(e(cases))?;
                    kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(e(cases))?;
                    let err = compare(&dst, &want, |i, _| bf16_tolerance(k, mags[i]))
                        .map_err(|x| (cases, format!("f16 inputs m={m} n={n} k={k}: {x}")))?;
                    worst = worst.max(err);
                    unpack_rhs_row(&packed, n - 1, &mut row).map_err(e(cases))?;
                    if row[..] != wq[(n - 1) * k..n * k] {
                        return Err((cases, format!("f16-packed unpack_rhs_row n={n} k={k} differs")));
                    }
                }
                cases += 1;
            }
            Ok((cases, worst))
        });
    }

    #[test]
    fn padding_is_zero_and_nonfinite_weights_stay_local() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(4, &f) else {
            return;
        };
        // k = 5: one padded group; an infinite weight in row 0 must only
        // affect the outputs of its own channel.
        let (n, k) = (3, 5);
        let mut data = vec![0.25f32; k * n];
        data[0] = f32::INFINITY; // (k 0, n 0) in K x N order
        let w = FloatWeights { n, k, order: Order::KxN, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let lhs = vec![1.0f32; 2 * k];
        let mut dst = vec![0f32; 2 * n];
        kern.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
        for i in 0..2 {
            assert_eq!(dst[i * n], f32::MAX, "clamped to the f32 range");
            assert_eq!(dst[i * n + 1], 1.25);
            assert_eq!(dst[i * n + 2], 1.25);
        }
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
            let mut dst = vec![0f32; 2 * n];
            other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).unwrap();
            assert!(dst.iter().all(|&y| y == 4.0), "{other:?}: {dst:?}");
            // The other kernel's packed LHS is refused unless it is the same format.
            let lp = other.pack_lhs(2, k, &lhs, k, Parallelism::Sequential).unwrap();
            let r = k1.run(&lp, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.lhs_layout(2, k).unwrap() == k1.lhs_layout(2, k).unwrap() {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
            }
        }
        // A packed LHS of another k is rejected.
        let lhs_p = k1.pack_lhs(2, k + 4, &vec![0.0; 2 * (k + 4)], k + 4, Parallelism::Sequential).unwrap();
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
        let nan = Clamp { min: f32::NAN, max: 1.0 };
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { bias: Some(&[0.0; 3]), ..w }).is_err(), "short bias");
        assert!(kern.pack_rhs(&FloatWeights { n: usize::MAX / 2, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(usize::MAX, 8, &[0.0; 8], 8, seq).is_err(), "overflowing m");
        assert!(kern.pack_lhs(2, 8, &[0.0; 16], 7, seq).is_err(), "stride < k");
        assert!(reference(1, &[0.0; 7], &w, Clamp::NONE, &mut dst).is_err());
        let mut row = vec![0f32; 7];
        assert!(unpack_rhs_row(&packed, 0, &mut row).is_err(), "short row");
        assert!(unpack_rhs_row(&packed, 4, &mut [0f32; 8]).is_err(), "row out of range");
    }
}
