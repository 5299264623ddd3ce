//! What the four static int8 families share (`matmul_clamp_qai8_qai8_qsi8cxp`,
//! `..._qai8p_qsi8cxp`, `..._qai8_qsi4cxp`, `..._qai8p_qsi4cxp`): the math,
//! the reference, the RHS and LHS packers, and the kernel glue for upstream's
//! interface and `kai_matmul_uker_api` kernels.
//!
//! Math: with the LHS `x = (a - zp) * lhs_scale` (int8 `a`), weights
//! `w = q * scale[j]` (int8 or int4 `q`) and an int32 bias `b[j]` in
//! accumulator units, every kernel computes, per output,
//! `acc = b'[j] + sum_k a * q` in int32 where the packer folded the zero
//! point into the bias, `b'[j] = b[j] - zp * sum_k q`, and then
//! [`requantize`]s `acc` with
//! `scale'[j] = scale[j] * (lhs_scale / dst_scale)` (both f32 products, made
//! by the packer): f32 conversion, multiply, round half to even, saturate,
//! add the output zero point, clamp. All of it is exact integer or
//! correctly rounded f32 arithmetic in a fixed order, so the reference
//! reproduces the kernels bit for bit.

use crate::error::{self, Result};
use crate::formats::{StaticInt4Weights, StaticInt8Weights};
use crate::quant::{Qai8Output, Qai8Quant, requantize};

/// Either weight type.
#[derive(Clone, Copy)]
pub(crate) enum Weights<'w, 'a> {
    I8(&'w StaticInt8Weights<'a>),
    I4(&'w StaticInt4Weights<'a>),
}

impl Weights<'_, '_> {
    fn validate(&self) -> Result<()> {
        match self {
            Weights::I8(w) => w.validate(),
            Weights::I4(w) => w.validate(),
        }
    }
    fn n(&self) -> usize {
        match self {
            Weights::I8(w) => w.n,
            Weights::I4(w) => w.n,
        }
    }
    fn k(&self) -> usize {
        match self {
            Weights::I8(w) => w.k,
            Weights::I4(w) => w.k,
        }
    }
    fn value(&self, j: usize, p: usize) -> i32 {
        match self {
            Weights::I8(w) => w.value_unchecked(j, p) as i32,
            Weights::I4(w) => w.value_unchecked(j, p) as i32,
        }
    }
    fn scales(&self) -> &[f32] {
        match self {
            Weights::I8(w) => w.scales,
            Weights::I4(w) => w.scales,
        }
    }
    fn bias(&self) -> Option<&[i32]> {
        match self {
            Weights::I8(w) => w.bias,
            Weights::I4(w) => w.bias,
        }
    }
}

impl<'w, 'a> From<&'w StaticInt8Weights<'a>> for Weights<'w, 'a> {
    fn from(w: &'w StaticInt8Weights<'a>) -> Self {
        Weights::I8(w)
    }
}

impl<'w, 'a> From<&'w StaticInt4Weights<'a>> for Weights<'w, 'a> {
    fn from(w: &'w StaticInt4Weights<'a>) -> Self {
        Weights::I4(w)
    }
}

/// The per-channel bias and scale the packers compute. Errors when a bias
/// plus its zero-point correction leaves int32 (the packers' int32
/// arithmetic would overflow).
pub(crate) fn channel_params(w: Weights<'_, '_>, q: &Qai8Quant) -> Result<(Vec<i32>, Vec<f32>)> {
    w.validate()?;
    q.check()?;
    let (n, k) = (w.n(), w.k());
    let mult = q.scale_multiplier();
    let mut bias = Vec::with_capacity(n);
    for j in 0..n {
        let colsum: i64 = (0..k).map(|p| w.value(j, p) as i64).sum();
        let b = w.bias().map_or(0, |b| b[j]) as i64 - q.lhs_zero_point as i64 * colsum;
        bias.push(i32::try_from(b).map_err(|_| {
            crate::Error::Overflow(format!("bias of channel {j} plus its zero-point correction ({b}) leaves int32"))
        })?);
    }
    let scales = w.scales()[..n].iter().map(|s| s * mult).collect();
    Ok((bias, scales))
}

/// Checks an `m x k` int8 LHS with rows `stride` values apart.
pub(crate) fn check_lhs(m: usize, k: usize, lhs: &[i8], stride: usize) -> Result<()> {
    crate::families::engine::check_lhs_rows(m, k, lhs.len(), stride)
}

/// The reference of all four families.
pub(crate) fn reference_impl(
    m: usize,
    lhs: &[i8],
    w: Weights<'_, '_>,
    q: &Qai8Quant,
    out: &Qai8Output,
    dst: &mut [i8],
) -> Result<()> {
    out.check()?;
    let (bias, scales) = channel_params(w, q)?;
    let (n, k) = (w.n(), w.k());
    check_lhs(m, k, lhs, k)?;
    error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
    let wq: Vec<i32> = (0..n * k).map(|i| w.value(i / k, i % k)).collect();
    for i in 0..m {
        let row = &lhs[i * k..(i + 1) * k];
        for j in 0..n {
            let acc =
                row.iter().zip(&wq[j * k..(j + 1) * k]).fold(bias[j], |acc, (&a, &b)| acc.wrapping_add(a as i32 * b));
            dst[i * n + j] = requantize(acc, scales[j], out);
        }
    }
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::cpu::{CpuFeature, Features};
    use crate::families::engine::{self, Gate, Tiles, query};
    use crate::families::uker::{PackLhs, PackRhs, Uker, UkerCtor};
    use crate::formats::{Int4Encoding, Order};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::info::KernelInfo;
    use kleidiai_sys as sys;

    /// Packed by `kai_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme`.
    pub(crate) const FORMAT_QSI8CXP2VLX4SB: &str = "qsi8cxp2vlx4sb";
    /// Packed by `kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme`.
    pub(crate) const FORMAT_QSI8CXP4VSX4: &str = "qsi8cxp4vsx4bi32sf32";
    /// Packed by the four `kai_matmul_pack_rhs_*_qsi4cxp8vsx4sf32bi32_*` packers.
    pub(crate) const FORMAT_QSI4CXP8VSX4: &str = "qsi4cxp8vsx4sf32bi32";
    const LHS_FORMAT_2VLX4: &str = "qai8p2vlx4";
    const LHS_FORMAT_4VSX4: &str = "qai8p4vsx4";
    const KR: usize = 4;

    /// How a kernel takes its LHS.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Lhs {
        /// Plain int8 rows (the GEMV kernels: one row per call).
        Unpacked,
        /// `kai_lhs_pack_x8p2vlx4_x8_sme` (`mr` = two SME vectors of int32).
        X8p2vlx4,
        /// `kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme`.
        X8p4vsx4,
    }

    /// The packed RHS a kernel reads.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Rhs {
        Qsi8cxp2vlx4sb,
        Qsi8cxp4vsx4,
        Qsi4cxp8vsx4,
    }

    impl Rhs {
        fn format(self) -> &'static str {
            match self {
                Rhs::Qsi8cxp2vlx4sb => FORMAT_QSI8CXP2VLX4SB,
                Rhs::Qsi8cxp4vsx4 => FORMAT_QSI8CXP4VSX4,
                Rhs::Qsi4cxp8vsx4 => FORMAT_QSI4CXP8VSX4,
            }
        }
        fn packers(self) -> &'static [&'static str] {
            match self {
                Rhs::Qsi8cxp2vlx4sb => &["kai_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme"],
                Rhs::Qsi8cxp4vsx4 => &["kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme"],
                Rhs::Qsi4cxp8vsx4 => &[
                    "kai_rhs_pack_nxk_qsi4cxp8vsx4sf32bi32_qsi4cx_f32_i32_sme",
                    "kai_rhs_pack_nxk_qsi4cxp8vsx4sf32bi32_qsu4cx_f32_i32_sme",
                    "kai_rhs_pack_kxn_qsi4cxp8vsx4sf32bi32_qsi4cx_f32_i32_sme",
                    "kai_rhs_pack_kxn_qsi4cxp8vsx4sf32bi32_qsu4cx_f32_i32_sme",
                ],
            }
        }
        /// K values a packed column holds (K padded to this).
        fn k_multiple(self) -> usize {
            if self == Rhs::Qsi4cxp8vsx4 { 32 } else { KR }
        }
    }

    /// An interface kernel's functions (`mr` and the LHS offset are absent
    /// for the GEMV kernel, whose LHS is not packed).
    #[derive(Clone, Copy)]
    pub(crate) struct IfaceFns {
        pub m_step: unsafe extern "C" fn() -> usize,
        pub n_step: unsafe extern "C" fn() -> usize,
        pub mr: Option<unsafe extern "C" fn() -> usize>,
        pub nr: unsafe extern "C" fn() -> usize,
        pub kr: unsafe extern "C" fn() -> usize,
        pub sr: unsafe extern "C" fn() -> usize,
        pub lhs_offset: Option<unsafe extern "C" fn(usize, usize) -> usize>,
        pub rhs_offset: unsafe extern "C" fn(usize, usize) -> usize,
        pub run: engine::RunRequant,
    }

    /// The GEMV interface (`matmul_clamp_qai8_qai8_qsi8cxp`): no `mr`, and
    /// its LHS is plain rows, not packed.
    impl From<&sys::kai_matmul_clamp_qai8_qai8p_qsi8cxp_ukernel> for IfaceFns {
        fn from(i: &sys::kai_matmul_clamp_qai8_qai8p_qsi8cxp_ukernel) -> Self {
            IfaceFns {
                m_step: i.get_m_step.expect("m_step"),
                n_step: i.get_n_step.expect("n_step"),
                mr: None,
                nr: i.get_nr.expect("nr"),
                kr: i.get_kr.expect("kr"),
                sr: i.get_sr.expect("sr"),
                lhs_offset: None,
                rhs_offset: i.get_rhs_packed_offset.expect("rhs offset"),
                run: i.run_matmul.expect("run"),
            }
        }
    }

    /// The GEMM interface (`matmul_clamp_qai8_qai8p_qsi8cxp`), packed LHS.
    impl From<&sys::kai_matmul_clamp_qai8_qai8p_qsi8cxpsb_ukernel> for IfaceFns {
        fn from(i: &sys::kai_matmul_clamp_qai8_qai8p_qsi8cxpsb_ukernel) -> Self {
            IfaceFns {
                m_step: i.get_m_step.expect("m_step"),
                n_step: i.get_n_step.expect("n_step"),
                mr: Some(i.get_mr.expect("mr")),
                nr: i.get_nr.expect("nr"),
                kr: i.get_kr.expect("kr"),
                sr: i.get_sr.expect("sr"),
                lhs_offset: Some(i.get_lhs_packed_offset.expect("lhs offset")),
                rhs_offset: i.get_rhs_packed_offset.expect("rhs offset"),
                run: i.run_matmul.expect("run"),
            }
        }
    }

    /// How a kernel is called.
    #[derive(Clone, Copy)]
    pub(crate) enum Call {
        Iface(IfaceFns),
        Uker(UkerCtor),
    }

    /// A kernel of one of the four families.
    pub(crate) struct Entry {
        pub(crate) info: KernelInfo,
        call: Call,
        pub(crate) lhs: Lhs,
        rhs: Rhs,
    }

    /// An entry for a kernel (`u`) of `family`.
    pub(crate) fn entry(family: &'static str, u: &'static sys::Ukernel, call: Call, lhs: Lhs, rhs: Rhs) -> Entry {
        Entry {
            info: engine::kernel_info(
                u,
                family,
                match lhs {
                    Lhs::Unpacked => None,
                    Lhs::X8p2vlx4 => Some("kai_lhs_pack_x8p2vlx4_x8_sme"),
                    Lhs::X8p4vsx4 => Some("kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme"),
                },
                rhs.packers(),
            ),
            call,
            lhs,
            rhs,
        }
    }

    /// `mr` of `kai_lhs_pack_x8p2vlx4_x8_sme` (not exported upstream): two
    /// streaming vectors of int32.
    fn mr_2vlx4(f: &Features) -> usize {
        2 * f.sme_vector_bytes().unwrap_or(0) / 4
    }

    impl Entry {
        /// Tiles, features, and the table of a uker kernel.
        pub(crate) fn tiles(&self) -> Result<(Tiles, Gate, Option<Uker>)> {
            let g = engine::ensure_supported(&self.info)?;
            // Every kernel here needs SME, which is all the packers queried
            // need.
            debug_assert!(self.info.features.contains(&CpuFeature::Sme));
            match self.call {
                Call::Iface(x) => {
                    let t = Tiles {
                        m_step: query!(&g, x.m_step),
                        n_step: query!(&g, x.n_step),
                        mr: x.mr.map_or(1, |mr| query!(&g, mr)),
                        nr: query!(&g, x.nr),
                        kr: query!(&g, x.kr),
                        sr: query!(&g, x.sr),
                    };
                    Ok((t, g, None))
                }
                Call::Uker(ctor) => {
                    let uker = Uker::new(ctor, &g);
                    let (m_step, n_step) = uker.step();
                    let mr = match self.lhs {
                        Lhs::Unpacked => 1,
                        Lhs::X8p2vlx4 => mr_2vlx4(&g),
                        Lhs::X8p4vsx4 => PackLhs::new(sys::kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme, &g).step_m(),
                    };
                    let nr = match self.rhs {
                        Rhs::Qsi8cxp2vlx4sb => {
                            query!(&g, sys::kai_get_n_step_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme)
                        }
                        Rhs::Qsi8cxp4vsx4 => {
                            PackRhs::new(sys::kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme, &g)
                                .step_n()
                        }
                        Rhs::Qsi4cxp8vsx4 => {
                            PackRhs::new(sys::kai_matmul_pack_rhs_nxk_qsi4cxp8vsx4sf32bi32_qsi4cx_f32_i32_sme, &g)
                                .step_n()
                        }
                    };
                    Ok((Tiles { m_step, n_step, mr, nr, kr: KR, sr: 1 }, g, Some(uker)))
                }
            }
        }

        fn check_tiles(&self, t: &Tiles, g: &Gate) -> Result<()> {
            // The packers' own block sizes must be the kernel's.
            let packer_nr = match self.rhs {
                Rhs::Qsi8cxp2vlx4sb => query!(g, sys::kai_get_n_step_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme),
                _ => t.nr,
            };
            let packer_mr = if self.lhs == Lhs::X8p2vlx4 { mr_2vlx4(g) } else { t.mr };
            if t.kr != KR || t.sr != 1 || packer_nr != t.nr || packer_mr != t.mr {
                return Err(crate::Error::WrongFamily {
                    kernel: self.info.name,
                    why: format!(
                        "kernel blocks mr {} nr {} kr {} sr {} do not match its packers",
                        t.mr, t.nr, t.kr, t.sr
                    ),
                });
            }
            Ok(())
        }

        pub(crate) fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            let (t, f, _) = self.tiles()?;
            self.check_tiles(&t, &f)?;
            Ok(f.layout(&self.info, self.rhs.format(), (n, k, 0), t.nr, &t))
        }

        pub(crate) fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            let (t, f, _) = self.tiles()?;
            self.check_tiles(&t, &f)?;
            let format = match self.lhs {
                Lhs::Unpacked => {
                    return Err(crate::Error::WrongFamily {
                        kernel: self.info.name,
                        why: "this kernel reads a plain int8 LHS".into(),
                    });
                }
                Lhs::X8p2vlx4 => LHS_FORMAT_2VLX4,
                Lhs::X8p4vsx4 => LHS_FORMAT_4VSX4,
            };
            Ok(f.layout(&self.info, format, (m, k, 0), t.mr, &t))
        }

        /// Packs the weights with the quantisation `q` baked in.
        pub(crate) fn pack_rhs(&self, w: Weights<'_, '_>, q: &Qai8Quant) -> Result<PackedRhs> {
            // Validates, and checks the packers' int32 bias arithmetic.
            channel_params(w, q)?;
            let (n, k) = (w.n(), w.k());
            let layout = self.rhs_layout(n, k)?;
            let g = engine::ensure_supported(&self.info)?;
            match (self.rhs, w) {
                (Rhs::Qsi4cxp8vsx4, Weights::I4(_)) | (Rhs::Qsi8cxp2vlx4sb | Rhs::Qsi8cxp4vsx4, Weights::I8(_)) => {}
                _ => {
                    return Err(crate::Error::WrongFamily {
                        kernel: self.info.name,
                        why: "these weights are not the kernel's int8 / int4 type".into(),
                    });
                }
            }
            let kp = k.next_multiple_of(self.rhs.k_multiple());
            error::mul(n.div_ceil(layout.r), error::mul(layout.r, kp + 8, "packed rhs")?, "packed rhs")?;
            // The packers read a bias unconditionally.
            let zeros;
            let bias = match w.bias() {
                Some(b) => b,
                None => {
                    zeros = vec![0i32; n];
                    &zeros[..]
                }
            };
            let (zp, mult) = (q.lhs_zero_point, q.scale_multiplier());
            let neg_zp = -zp;
            let scales = w.scales();
            let kxn;
            // The uker packer and the values it reads.
            type Ctor = unsafe extern "C" fn() -> sys::kai_matmul_pack_rhs_uker_api;
            let (ctor, values, bits, order): (Ctor, &[u8], usize, Order) = match w {
                Weights::I8(w8) => {
                    // Both int8 packers read K x N.
                    kxn = match w8.order {
                        Order::KxN => std::borrow::Cow::Borrowed(&w8.data[..n * k]),
                        Order::NxK => (0..k * n).map(|i| w8.data[(i % n) * k + i / n]).collect(),
                    };
                    if self.rhs == Rhs::Qsi8cxp2vlx4sb {
                        let params = sys::kai_rhs_pack_qsi8cx_params { lhs_zero_point: zp, scale_multiplier: mult };
                        // The CPU runs SME (rhs_layout); nr is the packer's
                        // n_step, kr 4, sr 1 (check_tiles); the zero-point
                        // correction fits int32 (channel_params).
                        let buf = engine::pack_rhs_int8_kxn(
                            &g,
                            (
                                sys::kai_run_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme,
                                sys::kai_get_rhs_packed_size_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme,
                            ),
                            (n, k),
                            (layout.r, KR, 1),
                            &kxn,
                            (bias, scales),
                            params,
                        )?;
                        return Ok(PackedRhs::new(layout, buf));
                    }
                    let ctor = sys::kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme;
                    (ctor, zerocopy::IntoBytes::as_bytes(&kxn[..]), 8, Order::KxN)
                }
                Weights::I4(w4) => {
                    let ctor = match (w4.order, w4.encoding) {
                        (Order::NxK, Int4Encoding::Signed) => {
                            sys::kai_matmul_pack_rhs_nxk_qsi4cxp8vsx4sf32bi32_qsi4cx_f32_i32_sme
                        }
                        (Order::NxK, Int4Encoding::Offset8) => {
                            sys::kai_matmul_pack_rhs_nxk_qsi4cxp8vsx4sf32bi32_qsu4cx_f32_i32_sme
                        }
                        (Order::KxN, Int4Encoding::Signed) => {
                            sys::kai_matmul_pack_rhs_kxn_qsi4cxp8vsx4sf32bi32_qsi4cx_f32_i32_sme
                        }
                        (Order::KxN, Int4Encoding::Offset8) => {
                            sys::kai_matmul_pack_rhs_kxn_qsi4cxp8vsx4sf32bi32_qsu4cx_f32_i32_sme
                        }
                    };
                    (ctor, w4.data, 4, w4.order)
                }
            };
            let p = PackRhs::new(ctor, &g);
            // `values` are the int8 weights K x N, or the int4 nibbles in the
            // order and encoding of the packer picked (validated); the
            // zero-point correction fits int32 (channel_params), so the
            // packer's C arithmetic does not overflow.
            let mut buf = AlignedBuf::zeroed(p.packed_size(n, k));
            let x = engine::TableRhs {
                dims: (n, k),
                order,
                values: (values, bits),
                bias: Some(bias),
                scales: Some(scales),
                globals: Some((neg_zp, mult)),
            };
            engine::pack_rhs_table(&p, x, buf.as_mut_slice())?;
            Ok(PackedRhs::new(layout, buf))
        }

        pub(crate) fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[i8],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            check_lhs(m, k, lhs, lhs_stride)?;
            let layout = self.lhs_layout(m, k)?;
            let mr = layout.r;
            error::mul(error::mul(m.div_ceil(mr), mr, "packed lhs")?, k.next_multiple_of(KR), "packed lhs")?;
            let g = engine::ensure_supported(&self.info)?;
            // mr is the packer's (check_tiles), kr 4, sr 1.
            let p = match self.lhs {
                Lhs::X8p4vsx4 => {
                    engine::LhsPacker::api(PackLhs::new(sys::kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme, &g), 1)
                }
                _ => engine::lhs_packers::X8P2VLX4_SME,
            };
            let size = p.size(&g, m, k, 0, (mr, KR, 1));
            out.reset(layout, size);
            let x = engine::LhsSource { src: lhs, stride: lhs_stride, m, k, bl: 0, blocking: (mr, KR, 1) };
            engine::pack_lhs(&g, &self.info, &p, x, engine::LhsCalls::Blocks, out.data_mut().as_mut_slice(), par)?;
            Ok(())
        }

        /// Runs with either a packed LHS or plain int8 rows (`lhs_plain`:
        /// rows, stride); `dst` is `m x n`.
        #[allow(clippy::too_many_arguments)]
        fn run_any(
            &self,
            m: usize,
            lhs_packed: Option<&PackedLhs>,
            lhs_plain: Option<(&[i8], usize)>,
            rhs: &PackedRhs,
            out: &Qai8Output,
            dst: &mut [i8],
            par: Parallelism,
        ) -> Result<()> {
            out.check()?;
            let (n, k) = (rhs.layout().rows, rhs.layout().k);
            let rhs_layout = self.rhs_layout(n, k)?;
            let lhs = match (lhs_packed, lhs_plain) {
                (Some(l), None) => engine::IntLhs::Packed(l, self.lhs_layout(m, k)?),
                (None, Some((l, stride))) => engine::IntLhs::Plain(zerocopy::IntoBytes::as_bytes(l), stride),
                _ => unreachable!("one LHS"),
            };
            let (t, g, uker) = self.tiles()?;
            let run = match (self.call, uker) {
                (Call::Iface(x), _) => engine::IntRun::Requant(x.run, x.lhs_offset, x.rhs_offset),
                (Call::Uker(_), Some(u)) => engine::IntRun::Table(u),
                (Call::Uker(_), None) => unreachable!("a uker kernel has its table"),
            };
            let params = sys::kai_matmul_requantize32_params {
                min_value: out.min as i32,
                max_value: out.max as i32,
                output_zero_point: out.zero_point,
            };
            // The engine checks the layouts, the plain rows and `dst`.
            let call = engine::IntCall { info: &self.info, tiles: (t, g), rhs_layout };
            run.run(&call, (m, lhs), rhs, &engine::IntStage::Requant(params), (dst, par))
        }

        /// Runs a kernel that reads a packed LHS.
        pub(crate) fn run_packed(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            out: &Qai8Output,
            dst: &mut [i8],
            par: Parallelism,
        ) -> Result<()> {
            self.run_any(lhs.layout().rows, Some(lhs), None, rhs, out, dst, par)
        }

        /// Runs on a dense `m x k` LHS, packing it first if the kernel reads
        /// a packed LHS.
        pub(crate) fn matmul(
            &self,
            m: usize,
            lhs: &[i8],
            rhs: &PackedRhs,
            out: &Qai8Output,
            dst: &mut [i8],
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            if self.lhs == Lhs::Unpacked {
                return self.run_plain(m, lhs, k, rhs, out, dst, par);
            }
            let mut packed = PackedLhs::empty();
            self.pack_lhs_into(m, k, lhs, k, par, &mut packed)?;
            self.run_packed(&packed, rhs, out, dst, par)
        }

        /// Runs a kernel that reads plain int8 rows (`lhs_stride` apart).
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn run_plain(
            &self,
            m: usize,
            lhs: &[i8],
            lhs_stride: usize,
            rhs: &PackedRhs,
            out: &Qai8Output,
            dst: &mut [i8],
            par: Parallelism,
        ) -> Result<()> {
            if self.lhs != Lhs::Unpacked {
                return Err(crate::Error::WrongFamily {
                    kernel: self.info.name,
                    why: "this kernel reads a packed LHS".into(),
                });
            }
            self.run_any(m, None, Some((lhs, lhs_stride)), rhs, out, dst, par)
        }
    }

    /// The quantised values of weight row `row` of a packed RHS of these
    /// families, as f32. The packed bytes keep the integer weights, the
    /// zero-point-corrected bias and the weight scale already multiplied by
    /// `lhs_scale / dst_scale`, so the weight scale alone is not recoverable
    /// exactly: multiply by it to dequantise.
    pub(crate) fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        let l = *rhs.layout();
        let int4 = match l.format {
            FORMAT_QSI8CXP2VLX4SB | FORMAT_QSI8CXP4VSX4 => false,
            FORMAT_QSI4CXP8VSX4 => true,
            other => return Err(crate::Error::bad_value("packed RHS format", other, "not a qai8-family packed RHS")),
        };
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let nr = l.r;
        let data_bytes = if int4 { nr * l.k.next_multiple_of(32) / 2 } else { nr * l.k.next_multiple_of(KR) };
        let stride = nr * 8 + data_bytes;
        // Per block: nr int32 biases, the data, nr f32 scales.
        let data = &rhs.as_bytes()[(row / nr) * stride + nr * 4..][..data_bytes];
        let r = row % nr;
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            *o = if int4 {
                // Groups of 4 values: 2 bytes per column, low nibble first.
                let byte = data[(kk / 4) * nr * 2 + r * 2 + (kk % 4) / 2];
                let nib = if kk % 2 == 0 { byte << 4 } else { byte & 0xF0 };
                ((nib as i8) >> 4) as f32
            } else {
                data[(kk / KR) * nr * KR + r * KR + kk % KR] as i8 as f32
            };
        }
        Ok(())
    }
}

/// Defines one of the four families in its module, from its declaration:
/// `FAMILY`, `reference` (documented by the attributes given first, its
/// example), and on aarch64 the kernel list `entries()` (the interface
/// kernels of `sys::interfaces::<family>::KERNELS`, if `iface` is given,
/// then the `kai_matmul_uker_api` ones of `API_KERNELS`, each with its
/// [`Lhs`] and [`Rhs`]), `infos()`, the typed `Kernel` (`lhs: plain` or
/// `lhs: packed`: the methods of a kernel that reads plain int8 rows or a
/// packed LHS), `unpack_rhs_row`, and the family's tests.
macro_rules! qai8_family {
    (@int4 StaticInt4Weights) => {
        true
    };
    (@int4 StaticInt8Weights) => {
        false
    };
    // The weights of the error tests: n 3, k 8, every value 1.
    (@test_weights StaticInt4Weights) => {
        StaticInt4Weights {
            n: 3,
            k: 8,
            order: Order::NxK,
            encoding: $crate::formats::Int4Encoding::Offset8,
            data: &[0x99; 12],
            scales: &[1.0; 3],
            bias: None,
        }
    };
    (@test_weights StaticInt8Weights) => {
        StaticInt8Weights { n: 3, k: 8, order: Order::NxK, data: &[1; 24], scales: &[1.0; 3], bias: None }
    };
    // One value short of the test weights.
    (@short_data StaticInt4Weights) => {
        &[0x99; 11]
    };
    (@short_data StaticInt8Weights) => {
        &[1; 23]
    };
    // The mixing test's run on a 2 x 8 LHS of 2s.
    (@mix_run plain, $kern:ident, $packed:ident, $out:ident, $dst:ident, $seq:ident) => {
        $kern.run(2, &[2; 16], 8, &$packed, &$out, &mut $dst, $seq).unwrap();
    };
    (@mix_run packed, $kern:ident, $packed:ident, $out:ident, $dst:ident, $seq:ident) => {
        $kern.run(&$kern.pack_lhs(2, 8, &[2; 16], 8, $seq).unwrap(), &$packed, &$out, &mut $dst, $seq).unwrap();
    };
    // The mixing test's bad LHS.
    (@mix_errors plain, $kern:ident, $packed:ident, $out:ident, $dst:ident, $seq:ident) => {
        assert!($kern.run(2, &[0; 16], 7, &$packed, &$out, &mut $dst, $seq).is_err(), "stride < k");
        assert!($kern.run(usize::MAX, &[0; 16], 8, &$packed, &$out, &mut $dst, $seq).is_err(), "overflowing m");
    };
    (@mix_errors packed, $kern:ident, $packed:ident, $out:ident, $dst:ident, $seq:ident) => {
        // A packed LHS of another k is rejected.
        let lhs = $kern.pack_lhs(2, 12, &[1; 24], 12, $seq).unwrap();
        let r = $kern.run(&lhs, &$packed, &$out, &mut $dst, $seq);
        assert!(matches!(r, Err($crate::Error::LayoutMismatch { .. })), "{r:?}");
        assert!($kern.pack_lhs(usize::MAX, 8, &[0; 8], 8, $seq).is_err(), "overflowing m");
        assert!($kern.pack_lhs(1, 8, &[0; 8], 7, $seq).is_err(), "stride < k");
    };
    // `run` and `matmul` of the families whose kernels read plain int8 rows.
    (@run plain) => {
        /// `dst = requantize(lhs · wᵀ)`: `lhs` is `m x k`, rows
        /// `lhs_stride` values apart; `dst` is `m x n`, rows `n` apart.
        #[allow(clippy::too_many_arguments)]
        pub fn run(
            &self,
            m: usize,
            lhs: &[i8],
            lhs_stride: usize,
            rhs: &$crate::packed::PackedRhs,
            out: &$crate::quant::Qai8Output,
            dst: &mut [i8],
            par: $crate::par::Parallelism,
        ) -> $crate::Result<()> {
            self.0.run_plain(m, lhs, lhs_stride, rhs, out, dst, par)
        }
    };
    // LHS packing, `run` and `matmul` of the families whose kernels read a
    // packed LHS.
    (@run packed) => {
        $crate::families::engine::lhs_methods!(
            lhs: i8,
            into: pack_lhs_into,
            layout_doc: [
                /// The packed-LHS layout this kernel reads for an `m x k` input.
            ],
            pack_doc: [
                /// Packs an `m x k` int8 LHS, rows `lhs_stride` values apart.
            ],
        );

        /// `dst = requantize(lhs · wᵀ)`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &$crate::packed::PackedLhs,
            rhs: &$crate::packed::PackedRhs,
            out: &$crate::quant::Qai8Output,
            dst: &mut [i8],
            par: $crate::par::Parallelism,
        ) -> $crate::Result<()> {
            self.0.run_packed(lhs, rhs, out, dst, par)
        }
    };
    (
        $(#[$example:meta])*
        family: $family:ident,
        weights: $w:ident,
        lhs: $run:ident,
        kernels: { $(iface: ($il:ident, $ir:ident),)? uker: ($ul:ident, $ur:ident) $(,)? } $(,)?
    ) => {
        /// Upstream family directory.
        pub const FAMILY: &str = stringify!($family);

        /// The portable reference (test oracle and fallback): `lhs` is dense
        /// `m x w.k`, `dst` dense `m x w.n`; errors where packing would (a bias
        /// whose zero-point correction leaves int32, zero points outside int8).
        ///
        $(#[$example])*
        pub fn reference(
            m: usize,
            lhs: &[i8],
            w: &$crate::formats::$w<'_>,
            q: &$crate::quant::Qai8Quant,
            out: &$crate::quant::Qai8Output,
            dst: &mut [i8],
        ) -> $crate::Result<()> {
            $crate::families::qai8::reference_impl(m, lhs, w.into(), q, out, dst)
        }

        #[cfg(target_arch = "aarch64")]
        pub use imp::*;

        #[cfg(target_arch = "aarch64")]
        mod imp {
            use super::*;
            use $crate::families::qai8::{Call, Entry, Lhs, Rhs, entry};
            use std::sync::OnceLock;

            pub(super) fn entries() -> &'static [Entry] {
                static E: OnceLock<Vec<Entry>> = OnceLock::new();
                E.get_or_init(|| {
                    let mut v = Vec::new();
                    $(for (u, i) in kleidiai_sys::interfaces::$family::KERNELS {
                        v.push(entry(FAMILY, u, Call::Iface(i.into()), Lhs::$il, Rhs::$ir));
                    })?
                    for &(u, ctor) in kleidiai_sys::interfaces::$family::API_KERNELS {
                        v.push(entry(FAMILY, u, Call::Uker(ctor), Lhs::$ul, Rhs::$ur));
                    }
                    v
                })
            }

            $crate::families::engine::kernel_type!(Entry);

            impl Kernel {
                /// The packed-RHS layout this kernel reads for `n x k` weights.
                pub fn rhs_layout(&self, n: usize, k: usize) -> $crate::Result<$crate::packed::PackedLayout> {
                    self.0.rhs_layout(n, k)
                }

                /// Packs the weights with the quantisation `q` baked in (the LHS
                /// zero point into the bias, `lhs_scale / dst_scale` into the
                /// scales): the packed RHS is only valid with that `q`.
                pub fn pack_rhs(
                    &self,
                    w: &$crate::formats::$w<'_>,
                    q: &$crate::quant::Qai8Quant,
                ) -> $crate::Result<$crate::packed::PackedRhs> {
                    self.0.pack_rhs(w.into(), q)
                }

                /// [`run`](Self::run) on a dense `m x k` LHS (which this call
                /// packs first if the kernel reads a packed LHS): the one-call
                /// form.
                pub fn matmul(
                    &self,
                    m: usize,
                    lhs: &[i8],
                    rhs: &$crate::packed::PackedRhs,
                    out: &$crate::quant::Qai8Output,
                    dst: &mut [i8],
                    par: $crate::par::Parallelism,
                ) -> $crate::Result<()> {
                    self.0.matmul(m, lhs, rhs, out, dst, par)
                }

                $crate::families::qai8::qai8_family!(@run $run);
            }

            /// The quantised values of weight row `row` of a packed RHS of this
            /// family, as f32 (exact). The packed bytes hold the weight scale only
            /// multiplied by `lhs_scale / dst_scale`: multiply by your weight scale
            /// to dequantise.
            pub fn unpack_rhs_row(rhs: &$crate::packed::PackedRhs, row: usize, out: &mut [f32]) -> $crate::Result<()> {
                $crate::families::qai8::unpack_rhs_row(rhs, row, out)
            }
        }

        #[cfg(all(test, target_arch = "aarch64"))]
        mod tests {
            use super::*;
            use $crate::families::qai8::qai8_family;
            use $crate::formats::{$w, Order};
            use $crate::packed::PackedRhs;
            use $crate::par::Parallelism;
            use $crate::quant::{Qai8Output, Qai8Quant};

            #[test]
            fn conformance() {
                $crate::families::qai8::tests::conformance(FAMILY, imp::entries(), qai8_family!(@int4 $w));
            }

            /// The best kernel for `m` rows on this CPU (none: the test is
            /// skipped), the test weights, quantisation, output and the
            /// weights packed for the kernel.
            fn setup(m: usize) -> Option<(Kernel, $w<'static>, Qai8Quant, Qai8Output, PackedRhs, Parallelism)> {
                let kern = Kernel::select(m, &$crate::cpu::Features::current())?;
                let w = qai8_family!(@test_weights $w);
                let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 0, dst_scale: 1.0 };
                let packed = kern.pack_rhs(&w, &q).unwrap();
                Some((kern, w, q, Qai8Output::unclamped(0), packed, Parallelism::Sequential))
            }

            #[test]
            fn mixing_layouts_is_an_error() {
                let f = $crate::cpu::Features::current();
                let (kern, _, _, out, packed, seq) = crate::testing::or_skip!(setup(2));
                let mut dst = [0i8; 6];
                qai8_family!(@mix_run $run, kern, packed, out, dst, seq);
                assert_eq!(dst, [16; 6]);
                // Every other kernel of the family takes the packed RHS only if it
                // has the same layout.
                for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
                    let r = other.rhs_layout(3, 8).unwrap();
                    assert_eq!(r == *packed.layout(), r.format == packed.layout().format && r.r == packed.layout().r);
                }
                qai8_family!(@mix_errors $run, kern, packed, out, dst, seq);
            }

            #[test]
            fn bad_input_is_an_error() {
                let (kern, w, q, out, packed, seq) = crate::testing::or_skip!(setup(1));
                let mut dst = [0i8; 3];
                assert!(kern.matmul(1, &[0; 7], &packed, &out, &mut dst, seq).is_err(), "short lhs");
                assert!(kern.matmul(1, &[0; 8], &packed, &out, &mut dst[..2], seq).is_err(), "short dst");
                assert!(kern.matmul(0, &[], &packed, &out, &mut dst, seq).is_err(), "m = 0");
                let bad_out = Qai8Output { zero_point: 0, min: 5, max: 4 };
                assert!(kern.matmul(1, &[0; 8], &packed, &bad_out, &mut dst, seq).is_err(), "empty clamp");
                assert!(kern.matmul(1, &[0; 8], &packed, &Qai8Output::unclamped(300), &mut dst, seq).is_err(), "zero point");
                assert!(kern.pack_rhs(&$w { data: qai8_family!(@short_data $w), ..w }, &q).is_err(), "short weights");
                assert!(kern.pack_rhs(&$w { n: usize::MAX, ..w }, &q).is_err(), "overflow");
                let zp = Qai8Quant { lhs_zero_point: -200, ..q };
                assert!(kern.pack_rhs(&w, &zp).is_err(), "lhs zero point outside int8");
                let neg = Qai8Quant { dst_scale: 0.0, ..q };
                assert!(kern.pack_rhs(&w, &neg).is_err(), "zero scale");
                // The zero-point correction must stay in int32.
                let big = $w { bias: Some(&[i32::MAX, 0, 0]), ..w };
                assert!(kern.pack_rhs(&big, &Qai8Quant { lhs_zero_point: -1, ..q }).is_err(), "bias overflow");
                let mut d = [0i8; 3];
                assert!(reference(1, &[0; 8], &big, &Qai8Quant { lhs_zero_point: -1, ..q }, &out, &mut d).is_err());
                let mut r = [0f32; 8];
                assert!(unpack_rhs_row(&packed, 3, &mut r).is_err(), "row out of range");
                kern.matmul(1, &[1; 8], &packed, &out, &mut dst, seq).unwrap();
                assert_eq!(dst, [8; 3]);
            }
        }
    };
}
pub(crate) use qai8_family;

/// Conformance and error tests shared by the four families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod tests {
    use super::*;
    use crate::formats::{Int4Encoding, Order};
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing::{self, Rng, THREADS, tail_shapes};

    /// Runs the conformance test of `family` over `entries` (`int4`: the
    /// weights are int4).
    pub(crate) fn conformance(family: &str, entries: &'static [Entry], int4: bool) {
        testing::conformance(family, |info| {
            let e = entries.iter().find(|e| e.info.name == info.name).unwrap();
            let (t, _, _) = e.tiles().map_err(|x| (0, x.to_string()))?;
            let mut rng = Rng::new(0x18);
            let mut shapes = tail_shapes(t.mr, t.m_step, t.nr, t.n_step, &[1, 7, 64]);
            shapes.push((t.mr + 1, 3, 200));
            let mut count = 0;
            for (ci, &(m, n, k)) in shapes.iter().enumerate() {
                let order = if ci % 2 == 0 { Order::NxK } else { Order::KxN };
                let enc = if ci % 3 == 0 { Int4Encoding::Offset8 } else { Int4Encoding::Signed };
                let lhs: Vec<i8> = rng.bytes(m * k).into_iter().map(|b| b as i8).collect();
                let bias: Vec<i32> = (0..n).map(|_| (rng.next_u64() as i32) >> 16).collect();
                let scales: Vec<f32> = (0..n).map(|_| 0.01 + 0.01 * (rng.f32() + 1.0)).collect();
                let bias = if ci % 4 == 3 { None } else { Some(&bias[..]) };
                let data8: Vec<i8> = rng.bytes(n * k).into_iter().map(|b| b as i8).collect();
                let len4 = if order == Order::NxK { n * k.div_ceil(2) } else { k * n.div_ceil(2) };
                let data4 = rng.bytes(len4);
                let w8 = StaticInt8Weights { n, k, order, data: &data8, scales: &scales, bias };
                let w4 = StaticInt4Weights { n, k, order, encoding: enc, data: &data4, scales: &scales, bias };
                let w: Weights<'_, '_> = if int4 { (&w4).into() } else { (&w8).into() };
                // The output scale maps the largest |acc * scale| to 150:
                // results spread over the int8 range, the extremes saturate.
                let lhs_scale = 0.02 + 0.01 * rng.f32();
                let q1 = Qai8Quant { lhs_scale, lhs_zero_point: (rng.next_u64() % 256) as i32 - 128, dst_scale: 1.0 };
                let (b1, _) = channel_params(w, &q1).map_err(|x| (count, x.to_string()))?;
                let mut peak = 1e-3f32;
                for i in 0..m {
                    for j in 0..n {
                        let acc: i64 =
                            (0..k).map(|p| lhs[i * k + p] as i64 * w.value(j, p) as i64).sum::<i64>() + b1[j] as i64;
                        peak = peak.max(acc.abs() as f32 * scales[j]);
                    }
                }
                let q = Qai8Quant { dst_scale: lhs_scale * peak / 150.0, ..q1 };
                let out = if ci % 5 == 4 {
                    Qai8Output { zero_point: -7, min: -90, max: 60 }
                } else {
                    Qai8Output::unclamped((rng.next_u64() % 41) as i32 - 20)
                };
                let mut want = vec![0i8; m * n];
                reference_impl(m, &lhs, w, &q, &out, &mut want).map_err(|x| (count, x.to_string()))?;
                let packed = e.pack_rhs(w, &q).map_err(|x| (count, x.to_string()))?;
                let mut first: Option<Vec<i8>> = None;
                for threads in THREADS {
                    let par = Parallelism::Rayon(threads);
                    let mut dst = vec![0x55i8; m * n];
                    let r = if e.lhs == Lhs::Unpacked {
                        e.run_plain(m, &lhs, k, &packed, &out, &mut dst, par)
                    } else {
                        let mut scratch = PackedLhs::empty();
                        e.pack_lhs_into(m, k, &lhs, k, par, &mut scratch)
                            .and_then(|_| e.run_packed(&scratch, &packed, &out, &mut dst, par))
                    };
                    r.map_err(|x| (count, x.to_string()))?;
                    crate::testing::hash_outputs(dst.iter().map(|v| *v as u8 as u32));
                    if let Some(i) = (0..want.len()).find(|&i| dst[i] != want[i]) {
                        return Err((count, format!("m={m} n={n} k={k}: element {i}: {} != {}", dst[i], want[i])));
                    }
                    match &first {
                        None => first = Some(dst),
                        Some(f) if *f != dst => {
                            return Err((count, format!("m={m} n={n} k={k}: {threads} threads differ from 1")));
                        }
                        _ => {}
                    }
                }
                let mut row = vec![0f32; k];
                for r in [0, n / 2, n - 1] {
                    unpack_rhs_row(&packed, r, &mut row).map_err(|x| (count, x.to_string()))?;
                    if let Some(p) = (0..k).find(|&p| row[p] != w.value(r, p) as f32) {
                        return Err((count, format!("unpack_rhs_row({r}) n={n} k={k} differs at {p}")));
                    }
                }
                count += 1;
            }
            Ok((count, 0.0))
        });
    }
}
