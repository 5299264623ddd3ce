//! What the two qai8dxp x qsi4c32p families share
//! (`matmul_clamp_f32_qai8dxp_qsi4c32p`, `matmul_clamp_bf16_qai8dxp_qsi4c32p`):
//! the scale type, the reference math, the `qsi4c32p` / `qsi4c32ps1s0`
//! packed RHS formats with their packing and unpacking.

use crate::error::Result;
use crate::formats::{BlockInt4, ScaleType};
use crate::packed::Clamp;
use crate::quant::Qai8dxRow;

/// The scale type every packer of these families stores.
pub const SCALE_TYPE: ScaleType = ScaleType::Bf16;

/// Checks the shapes shared by the qai8dxp x qsi4c32p families' reference
/// and kernels; returns `(n, k, bl)`.
pub(crate) fn check_weights(w: &BlockInt4<'_>) -> Result<(usize, usize, usize)> {
    w.validate()?;
    Ok((w.n(), w.k(), w.bl()))
}

/// The math of the qai8dxp x qsi4c32p families for rows quantised by
/// `quantise(i)`; `out(i, j, y)` receives each clamped f32 result.
pub(crate) fn reference_core(
    m: usize,
    w: &BlockInt4<'_>,
    clamp: Clamp,
    quantise: impl Fn(usize) -> Qai8dxRow,
    mut out: impl FnMut(usize, usize, f32),
) -> Result<()> {
    let (n, k, bl) = check_weights(w)?;
    let blocks = k / bl;
    let scales: Vec<f64> = w.scale_bits(SCALE_TYPE)?.iter().map(|b| SCALE_TYPE.value_of(*b) as f64).collect();
    let wq: Vec<i32> = (0..n * k).map(|i| w.value(i / k, i % k) as i32).collect();
    for i in 0..m {
        let row = quantise(i);
        for j in 0..n {
            let mut acc = 0f64;
            for b in 0..blocks {
                let mut dot = 0i32;
                for p in b * bl..(b + 1) * bl {
                    dot += (row.q[p] as i32 - row.zero_point) * wq[j * k + p];
                }
                acc += dot as f64 * scales[j * blocks + b];
            }
            let mut y = acc * row.recip_scale as f64;
            if let Some(bias) = w.bias() {
                y += bias[j] as f64;
            }
            out(i, j, (y as f32).max(clamp.min).min(clamp.max));
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::{CpuFeature, Features};
    use crate::error;
    use crate::families::engine::{self, Tiles};
    use crate::families::qai8dxp_common::{LhsElem, pack_lhs_rows};
    use crate::formats::Order;
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use core::ffi::c_void;
    use half::bf16;
    use kleidiai_sys as sys;

    /// Packed RHS of the NEON kernels (bf16 scales, channel sums, bias).
    pub(crate) const FORMAT_QSI4C32P: &str = "qsi4c32p";
    /// Packed RHS of the SME2 kernels (same regions, values in K order).
    pub(crate) const FORMAT_QSI4C32PS1S0: &str = "qsi4c32ps1s0";
    pub(crate) const LHS_FORMAT: &str = "qai8dxp";

    const RHS_NRX4: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0"];
    const RHS_NRX8: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0"];

    const RHS_PS1S0: &[&str] =
        &["kai_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon", "kai_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon"];

    /// The NEON RHS packers for a kernel name (`..._qsi4c32p4x8_...`: the
    /// digit after the `x` is `kr / sr`).
    fn neon_rhs_packers(name: &str) -> &'static [&'static str] {
        let tok = name.split('_').find(|t| t.starts_with("qsi4c32p")).unwrap_or("");
        if tok.ends_with('8') { RHS_NRX8 } else { RHS_NRX4 }
    }

    /// The registry entry of kernel `u` of `family`, whose LHS packer is
    /// `lhs_packer`, and the packed RHS format it reads: `qsi4c32ps1s0` for
    /// the SME2 kernels, else `qsi4c32p` (packed by the NEON packer of its
    /// `kr / sr`).
    pub(crate) fn kernel_info(
        u: &'static sys::Ukernel,
        family: &'static str,
        lhs_packer: &'static str,
    ) -> (KernelInfo, &'static str) {
        let sme2 = u.features.contains(&CpuFeature::Sme2);
        let info =
            engine::kernel_info(u, family, Some(lhs_packer), if sme2 { RHS_PS1S0 } else { neon_rhs_packers(u.name) });
        (info, if sme2 { FORMAT_QSI4C32PS1S0 } else { FORMAT_QSI4C32P })
    }

    /// Checks the block length against the packers' and kernels' rules
    /// (`bl` a positive multiple of 32 dividing `k`, and of `kr`).
    pub(crate) fn check_bl(k: usize, bl: usize, kr: usize) -> Result<()> {
        error::nonzero(k, "k")?;
        error::nonzero(bl, "bl")?;
        error::multiple_of(bl, 32, "bl", "qsi4c32 block length")?;
        error::multiple_of(k, bl, "k", "qsi4c32: whole blocks")?;
        error::multiple_of(bl, kr, "bl", "qsi4c32 packing: bl must be a multiple of kr")
    }

    use engine::BlockRhsPacker::{Kxn, Nxk};

    /// Packs `w` into the `qsi4c32p` / `qsi4c32ps1s0` layout `layout`
    /// (bf16 scales, sums and bias), choosing upstream's packer by format,
    /// input order, `kr / sr` and the CPU. Shared with the bf16-output family.
    pub(crate) fn pack_qsi4c32p_rhs(g: &engine::Gate, layout: PackedLayout, w: &BlockInt4<'_>) -> Result<PackedRhs> {
        let (n, k, bl) = check_weights(w)?;
        let (nr, kr, sr) = (layout.r, layout.kr, layout.sr);
        check_bl(k, bl, kr)?;
        error::multiple_of(nr, 4, "nr", "qsi4c32 packing")?;
        error::multiple_of(kr, sr, "kr", "sr must divide kr")?;
        let f = Features::current();
        let kxn = match w {
            BlockInt4::Blocks(b) => b.order == Order::KxN,
            BlockInt4::Q4_0(_) => false,
        };
        let ps1s0 = layout.format == FORMAT_QSI4C32PS1S0;
        // The K x N s1s0 packer is built for FP16 + BF16: use it only where it
        // may run; otherwise transpose in Rust and use the N x K one.
        let kxn = kxn && (!ps1s0 || f.has_all(&[CpuFeature::Fp16, CpuFeature::Bf16]));
        if ps1s0 && kr / sr != 4 {
            return Err(crate::Error::bad_value("kr / sr", format!("{kr} / {sr}"), "qsi4c32ps1s0 packing needs 4"));
        }
        let order = if kxn { Order::KxN } else { Order::NxK };
        let values = w.qsu4_s1s0(order)?;
        let scales = w.scale_bits(SCALE_TYPE)?;
        let rhs_stride = if kxn { n.div_ceil(2) } else { k / 2 };
        let scale_stride = (k / bl) * 2;
        // Upstream's packer for the format, input order and `kr / sr`.
        let packer = match (ps1s0, kxn, kr / sr) {
            (true, true, _) => Kxn(
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_kxn_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
            ),
            (true, false, _) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32ps1s0nrx4_qsu4c32s1s0_neon,
            ),
            (false, true, _) => Kxn(
                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0,
                sys::kai_run_rhs_pack_kxn_qsi4c32p_qsu4c32s1s0,
            ),
            (false, false, 4) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32pnrx4_qsu4c32s1s0_neon,
            ),
            (false, false, 8) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon,
                sys::kai_run_rhs_pack_nxk_qsi4c32pnrx8_qsu4c32s1s0_neon,
            ),
            (false, false, _) => Nxk(
                sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
                sys::kai_run_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
            ),
        };
        // k % bl == 0, bl % 32 == 0, bl % kr == 0, kr % sr == 0, nr % 4 == 0
        // (checked above). The NEON packers need nothing beyond NEON except
        // the K x N s1s0 one (FP16 + BF16, checked).
        let x = engine::BlockRhs {
            dims: (n, k, bl),
            values: &values,
            rhs_stride,
            scales: engine::BlockScales::Bf16 { scales: &scales, stride: scale_stride },
            bias: w.bias(),
        };
        let buf = packer.pack(g, x, (nr, kr, sr))?;
        Ok(PackedRhs::new(layout, buf))
    }

    /// Weight row `row` of a packed RHS in format `qsi4c32p` or
    /// `qsi4c32ps1s0`, as f32 (`value * bf16 scale`; bias not included):
    /// what ggml's `get_rows` needs.
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        if l.format != FORMAT_QSI4C32P && l.format != FORMAT_QSI4C32PS1S0 {
            return Err(crate::Error::bad_value("packed RHS format", l.format, "not a qsi4c32p format"));
        }
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let (nr, bl, blocks) = (l.r, l.bl, l.k / l.bl);
        let block_bytes = nr * (bl / 2 + 2);
        let stride = blocks * block_bytes + nr * 8;
        let group = &rhs.as_bytes()[(row / nr) * stride..(row / nr + 1) * stride];
        let r = row % nr;
        let blen = l.kr / l.sr;
        let nib = |byte: u8, hi: bool| -> i8 { ((if hi { byte & 0xF0 } else { byte << 4 }) as i8) >> 4 };
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let (b, kb) = (kk / bl, kk % bl);
            let base = b * block_bytes;
            let at = base + nr * bl / 2 + 2 * r;
            let scale = SCALE_TYPE.value_of(u16::from_le_bytes([group[at], group[at + 1]]));
            let (byte, hi) = if l.format == FORMAT_QSI4C32P {
                // 32-value sub-blocks; byte j of a sub-block holds j and j + 16.
                let (sub, j) = (kb / 32, kb % 32);
                let j16 = j % 16;
                (base + sub * 16 * nr + (j16 / blen) * nr * blen + r * blen + j16 % blen, j >= 16)
            } else {
                // Values in K order, 4 per u16, u16s of the nr rows interleaved.
                (base + ((kb / 4) * nr + r) * 2 + (kb % 4) / 2, kb % 2 == 1)
            };
            *o = nib(group[byte], hi) as f32 * scale;
        }
        Ok(())
    }

    type RhsOffset = unsafe extern "C" fn(usize, usize, usize) -> usize;
    /// A kernel's run function writing outputs through `*mut D`.
    type RunFn<D> = engine::RunBl<D>;

    /// A kernel's run function, by output type.
    #[derive(Clone, Copy)]
    pub(crate) enum Run {
        /// f32 output.
        F32(RunFn<f32>),
        /// bf16 output (2 bytes).
        Half(RunFn<c_void>),
    }

    impl Run {
        fn dst_bytes(self) -> usize {
            match self {
                Run::F32(_) => 4,
                Run::Half(_) => 2,
            }
        }
    }

    /// The functions of one qai8dxp x qsi4c32p kernel (its upstream
    /// interface struct, without the output type).
    pub(crate) type Fns = crate::families::qai8dxp_common::Fns<RhsOffset, Run>;

    /// [`Fns`] from a family's generated interface struct; `$run` is the
    /// [`Run`] variant matching its `run_matmul` signature.
    macro_rules! c32_fns {
        ($i:expr, $run:ident) => {
            $crate::families::qai8dxp_common::fns!(@run $i, $crate::families::qai8dxp_qsi4c32p::Run::$run)
        };
    }
    pub(crate) use c32_fns;

    /// Defines a qsi4c32p family's typed `Kernel` (over its `entries()`),
    /// `infos()` and `unpack_rhs_row`: an LHS of `$lhs` packed by the
    /// entry's `$into`, outputs of `$out`; `$note` ends the first sentence
    /// of `rhs_layout`'s doc.
    macro_rules! c32_kernel {
        (lhs: $lhs:ty, out: $out:ty, pack_lhs_into: $into:ident, rhs_note: $note:literal) => {
            $crate::families::engine::kernel_type!($crate::families::qai8dxp_qsi4c32p::Entry);
            $crate::families::qai8dxp_common::kernel_methods!(lhs: $lhs, out: $out, pack_lhs_into: $into);
            pub use $crate::families::qai8dxp_qsi4c32p::unpack_rhs_row;

            impl Kernel {
                #[doc = concat!("The packed-RHS layout this kernel reads for `n x k` weights in blocks of `bl`", $note, ".")]
                pub fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> $crate::Result<$crate::PackedLayout> {
                    self.0.rhs_layout(n, k, bl)
                }

                /// Packs the weights for this kernel (and every kernel with
                /// the same [`rhs_layout`](Self::rhs_layout)). Scales are
                /// stored as bf16.
                pub fn pack_rhs<'a>(
                    &self,
                    w: impl Into<$crate::formats::BlockInt4<'a>>,
                ) -> $crate::Result<$crate::PackedRhs> {
                    self.0.pack_rhs(&w.into())
                }
            }
        };
    }
    pub(crate) use c32_kernel;

    /// The conformance test of a qsi4c32p family module (with `FAMILY`,
    /// `Kernel`, `reference` and `unpack_rhs_row`) whose LHS and outputs are
    /// `$t`, on random data from `$seed`: each supported kernel on the tail
    /// shapes of every `(bl, k)` of `BL_K`, at every thread count (outputs
    /// compared by `$same`), within `1e-5 · (|want| + M) + 1e-6 + $step(want)`
    /// (`M` from `$quantise`, which quantises an f32 row as the LHS packer
    /// does), with packed rows unpacking to the weights.
    #[cfg(test)]
    macro_rules! c32_conformance {
        (elem: $t:ty, seed: $seed:expr, quantise: $quant:expr, step: $step:expr, same: $same:expr $(,)?) => {
            #[test]
            fn conformance() {
                use $crate::families::qai8dxp_common::OutElem;
                use $crate::families::qai8dxp_common::tests::{across_threads, unpack_matches};
                use $crate::testing::qsi4c32::{BL_K, TestWeights, magnitudes};
                use $crate::testing::{Rng, tail_shapes};
                let to_f32 = |v: &[$t]| -> Vec<f32> { v.iter().map(|&x| OutElem::to_f32(x)).collect() };
                $crate::testing::conformance(FAMILY, |info| {
                    let kernel = Kernel::by_name(info.name).unwrap();
                    let lay = kernel.rhs_layout(1, 32, 32).map_err(|e| (0, e.to_string()))?;
                    let lhs_lay = kernel.lhs_layout(1, 32).map_err(|e| (0, e.to_string()))?;
                    let (mr, nr) = (lhs_lay.r, lay.r);
                    let mut rng = Rng::new($seed);
                    let mut cases = 0;
                    let mut worst = 0f64;
                    for (bl, k) in BL_K {
                        // m_step and n_step of these families are multiples of mr and nr.
                        for (ci, &(m, n, k)) in tail_shapes(mr, mr, nr, nr, &[k]).iter().enumerate() {
                            let tw = TestWeights::new(&mut rng, n, k, bl);
                            let w = tw.view(ci + bl, true, ci % 4 != 3);
                            let lhs: Vec<$t> = rng.vec_f32(m * k).into_iter().map(<$t as OutElem>::from_f32).collect();
                            let clamp = if ci % 5 == 4 { Clamp { min: -0.5, max: 0.5 } } else { Clamp::NONE };
                            let mut want = vec![<$t as OutElem>::from_f32(0.0); m * n];
                            reference(m, &lhs, w, clamp, &mut want).map_err(|e| (cases, e.to_string()))?;
                            let want = to_f32(&want);
                            let wd = w.dequantize_as($crate::families::qai8dxp_qsi4c32p::SCALE_TYPE).unwrap();
                            let mags = magnitudes(m, n, k, &to_f32(&lhs), &wd, |x| {
                                let q = ($quant)(x);
                                (q.zero_point as f32).abs() * q.recip_scale
                            });
                            let packed = kernel.pack_rhs(w).map_err(|e| (cases, e.to_string()))?;
                            let (shape, what) = ((m, n, k), format!(" bl={bl}"));
                            let tol = |i: usize, y: f32| 1e-5 * (y.abs() + mags[i]) + 1e-6 + ($step)(y);
                            let case_worst = across_threads(cases, shape, &what, &want, tol, $same, |par| {
                                let mut dst = vec![<$t as OutElem>::from_f32(f32::NAN); m * n];
                                let mut scratch = $crate::PackedLhs::empty();
                                let err = |e: $crate::Error| (cases, e.to_string());
                                kernel.pack_lhs_into(m, k, &lhs, k, par, &mut scratch).map_err(err)?;
                                kernel.run(&scratch, &packed, &mut dst, clamp, par).map_err(err)?;
                                Ok(to_f32(&dst))
                            })?;
                            worst = worst.max(case_worst);
                            let unpack = |r, row: &mut [f32]| unpack_rhs_row(&packed, r, row);
                            unpack_matches(cases, (n, k), &wd, &format!("{what} differs"), unpack)?;
                            cases += 1;
                        }
                    }
                    Ok((cases, worst))
                });
            }
        };
    }
    #[cfg(test)]
    pub(crate) use c32_conformance;

    /// One kernel of the qai8dxp x qsi4c32p families: registry data,
    /// functions, packed RHS format and the family's conventions.
    pub(crate) struct Entry {
        pub info: KernelInfo,
        fns: Fns,
        format: &'static str,
        /// Layouts carry the kernel's vector length (the f32 family).
        sized: bool,
        /// Kernels with `mr == 1` get one row per call (the f32 family).
        one_row: bool,
    }

    impl Entry {
        /// The entry of kernel `u` of the f32-output family (LHS packer
        /// `kai_lhs_quant_pack_qai8dxp_f32`): its format by [`kernel_info`],
        /// layouts with the vector length, GEMV kernels (`mr == 1`) run one
        /// row per call.
        pub(crate) fn f32_out(u: &'static sys::Ukernel, family: &'static str, fns: Fns) -> Entry {
            let (info, format) = kernel_info(u, family, <f32 as LhsElem>::PACKER);
            Entry { info, fns, format, sized: true, one_row: true }
        }

        /// The entry of kernel `u` of the bf16-output family (LHS packer
        /// `kai_lhs_quant_pack_qai8dxp_bf16_neon`): format `qsi4c32p`,
        /// layouts without the vector length, every tile in one call.
        pub(crate) fn bf16_out(u: &'static sys::Ukernel, family: &'static str, fns: Fns) -> Entry {
            let info = kernel_info(u, family, <bf16 as LhsElem>::PACKER).0;
            Entry { info, fns, format: FORMAT_QSI4C32P, sized: false, one_row: false }
        }

        pub(crate) fn tiles(&self) -> Result<(Tiles, engine::Gate)> {
            self.fns.tiles(&self.info)
        }

        fn vector_bytes(&self, f: &Features) -> usize {
            if self.sized { engine::layout_vector_bytes(&self.info, f) } else { 0 }
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights in
        /// blocks of `bl`.
        pub(crate) fn rhs_layout(&self, n: usize, k: usize, bl: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(engine::layout(self.format, (n, k, bl), t.nr, &t, self.vector_bytes(&f)))
        }

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let (t, f) = self.tiles()?;
            Ok(engine::layout(LHS_FORMAT, (m, k, 0), t.mr, &t, self.vector_bytes(&f)))
        }

        /// Packs the weights for this kernel (bf16 scales).
        pub(crate) fn pack_rhs(&self, w: &BlockInt4<'_>) -> Result<PackedRhs> {
            let (n, k, bl) = check_weights(w)?;
            let (_, g) = self.tiles()?;
            pack_qsi4c32p_rhs(&g, self.rhs_layout(n, k, bl)?, w)
        }

        /// Quantises and packs an f32 LHS with `kai_lhs_quant_pack_qai8dxp_f32`.
        pub(crate) fn pack_lhs_f32(
            &self,
            m: usize,
            k: usize,
            lhs: &[f32],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            let layout = self.lhs_layout(m, k)?;
            pack_qai8dxp_f32(&self.info, layout, lhs, lhs_stride, par, out)
        }

        /// Quantises and packs a bf16 LHS with
        /// `kai_lhs_quant_pack_qai8dxp_bf16_neon` (which needs `kr / sr = 8`).
        pub(crate) fn pack_lhs_bf16(
            &self,
            m: usize,
            k: usize,
            lhs: &[bf16],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            engine::check_lhs_rows(m, k, lhs.len(), lhs_stride)?;
            error::mul(lhs_stride, 2, "lhs stride")?;
            let layout = self.lhs_layout(m, k)?;
            let g = engine::ensure_supported(&self.info)?;
            let (kr, sr) = (layout.kr, layout.sr);
            if sr == 0 || kr % sr != 0 || kr / sr != 8 {
                return Err(crate::Error::bad_value(
                    "kr / sr",
                    format!("{kr} / {sr}"),
                    format!("{} needs 8", <bf16 as LhsElem>::PACKER),
                ));
            }
            pack_lhs_rows(&g, &self.info, layout, lhs, lhs_stride, par, out)
        }

        /// Every check the f32 family's `pack_lhs_into` and `run` make for
        /// a dense `m x k` f32 LHS and `rhs`, made once (the steady-state
        /// path of `PackedWeights::matmul`).
        pub(crate) fn prepare_f32(&self, m: usize, rhs: &PackedRhs) -> Result<Option<engine::Prepared>> {
            let l = *rhs.layout();
            let (n, k, bl) = (l.rows, l.k, l.bl);
            engine::check_prepared_sizes(m, n, k)?;
            rhs.expect(&self.rhs_layout(n, k, bl)?, self.info.name)?;
            let (t, g) = self.tiles()?;
            check_bl(k, bl, t.kr)?;
            error::multiple_of(t.kr, t.sr, "kr", "sr must divide kr")?;
            let Run::F32(run) = self.fns.run else { return Ok(None) };
            let lhs_bytes = <f32 as LhsElem>::LHS.size(&g, m, k, 0, (t.mr, t.kr, t.sr));
            // Single-row kernels (mr 1) one row per call at the packer's
            // offset of that row, as in `run`.
            let rows = if self.one_row && t.mr == 1 {
                engine::SteadyRows::EachRow(Some(engine::Offset::K(self.fns.lhs_offset)))
            } else {
                engine::SteadyRows::Whole
            };
            let calls = (engine::SteadyLhs::Packed(<f32 as LhsElem>::LHS), engine::KernelRun::BlF32(run), rows);
            let steady = engine::Steady::new(g, calls, (4, 4));
            Ok(Some(engine::Prepared { m, n, k, bl, t, lhs_bytes, steady }))
        }
    }

    // SAFETY: the layouts are the kernel's (its tiles, the qai8dxp LHS and
    // the RHS format its family declares), the functions its own interface's,
    // and `plan` checks what the kernel assumes besides: k and bl meet
    // its block rules (check_bl), m is nonzero; single-row kernels (mr 1)
    // take one row per call, from any row.
    unsafe impl engine::PackedKernel for Entry {
        fn info(&self) -> &KernelInfo {
            &self.info
        }

        fn plan(&self, _: &PackedRhs, (m, n, k, bl): (usize, usize, usize, usize)) -> Result<engine::PackedPlan> {
            let layouts = (self.lhs_layout(m, k)?, self.rhs_layout(n, k, bl)?);
            error::nonzero(m, "m")?;
            let (t, g) = self.tiles()?;
            check_bl(k, bl, t.kr)?;
            let run = match self.fns.run {
                Run::F32(f) => engine::KernelRun::BlF32(f),
                Run::Half(f) => engine::KernelRun::Bl(f),
            };
            let offsets = (engine::Offset::K(self.fns.lhs_offset), engine::Offset::KBl(self.fns.rhs_offset));
            // The f32 family's GEMV kernels (mr 1) assume one row per call.
            let fns = engine::PackedFns::new(run, offsets, self.one_row && t.mr == 1, self.fns.run.dst_bytes());
            Ok(engine::PackedPlan { layouts, tiles: (t, g), fns })
        }
    }

    /// Quantises and packs an f32 LHS with `kai_lhs_quant_pack_qai8dxp_f32`
    /// into `layout` (rows `m`, `k`, `mr`, `kr`, `sr` taken from it).
    pub(crate) fn pack_qai8dxp_f32(
        info: &KernelInfo,
        layout: PackedLayout,
        lhs: &[f32],
        lhs_stride: usize,
        par: Parallelism,
        out: &mut PackedLhs,
    ) -> Result<()> {
        let g = engine::ensure_supported(info)?;
        pack_lhs_rows(&g, info, layout, lhs, lhs_stride, par, out)
    }

    /// Test weights: N x K, signed, one block of 32 values per row (`k` 32,
    /// `n` the number of `scales`), no bias.
    #[cfg(test)]
    pub(crate) fn one_block_rows<'a>(data: &'a [u8], scales: &'a [bf16]) -> crate::formats::Int4Blocks<'a> {
        crate::formats::Int4Blocks {
            n: scales.len(),
            k: 32,
            bl: 32,
            order: Order::NxK,
            encoding: crate::formats::Int4Encoding::Signed,
            data,
            scales: crate::formats::BlockScales::Bf16(scales),
            bias: None,
        }
    }

    /// Packs N x K weights with upstream's scalar
    /// `kai_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0` (any `kr / sr`), for the
    /// tests comparing it with the NEON packers.
    #[cfg(test)]
    pub(crate) fn pack_scalar_nxk(g: &engine::Gate, layout: PackedLayout, w: &BlockInt4<'_>) -> Vec<u8> {
        let (n, k, bl, nr, kr, sr) = (w.n(), w.k(), w.bl(), layout.r, layout.kr, layout.sr);
        let values = w.qsu4_s1s0(Order::NxK).unwrap();
        let scales = w.scale_bits(SCALE_TYPE).unwrap();
        let packer = Nxk(
            sys::kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
            sys::kai_run_rhs_pack_nxk_qsi4c32p_qsu4c32s1s0,
        );
        let x = engine::BlockRhs {
            dims: (n, k, bl),
            values: &values,
            rhs_stride: k / 2,
            scales: engine::BlockScales::Bf16 { scales: &scales, stride: (k / bl) * 2 },
            bias: w.bias(),
        };
        packer.pack(g, x, (nr, kr, sr)).unwrap().as_slice().to_vec()
    }
}
