//! `matmul_clamp_qai8_qai8_qsi8cxp`: statically quantised int8 GEMV with int8 weights:
//! `dst (int8, m x n) = requantize(lhs (int8, m x k) · wᵀ + bias)`.
//!
//! Kernels (2, SME2, one LHS row per call, LHS read as plain int8 rows):
//! `kai_matmul_clamp_qai8_qai8_qsi8cxp2vlx4sb_1x16vl_sme2_dot` (interface;
//! RHS `kai_rhs_pack_kxn_qsi8cxp2vlx4sb_qs8cx_f32_i32_sme`, packed format
//! `qsi8cxp2vlx4sb`, the one the MOPA kernels of
//! `matmul_clamp_qai8_qai8p_qsi8cxp` read) and
//! `kai_matmul_clamp_qai8_qai8_qsi8cxp4vsx4bi32sf32_1x32vs_sme2_dot`
//! (`kai_matmul_uker_api`; RHS
//! `kai_matmul_pack_rhs_kxn_qsi8cxp4vsx4bi32sf32_qsi8_i32_f32_sme`, format
//! `qsi8cxp4vsx4bi32sf32`). Both packers read K x N weights; N x K weights
//! are transposed into a temporary first.
//!
//! Math (shared with the other three `qai8` families, `families/qai8.rs`):
//! the LHS is `x = (a - lhs_zero_point) * lhs_scale`, the weights
//! `w = q * scale[j]`, the bias an int32 in accumulator units; each output is
//! `requantize(bias'[j] + sum_k a * q, scale[j] * lhs_scale / dst_scale)`
//! where the RHS packer folded the zero point into `bias'` and the scale
//! ratio into the per-channel scale ([`crate::quant::requantize`]: f32
//! conversion, multiply, round half to even, saturate, add the output zero
//! point, clamp). A packed RHS is therefore tied to its [`Qai8Quant`].
//!
//! Tolerance of the conformance test: none. The reference performs the
//! packers' int32 bias correction and f32 scale product and the kernels'
//! requantisation (read from their source) in the same order, so every
//! output must be equal (upstream's own test allows a difference of 1).

use super::qai8 as shared;
use crate::error::Result;
use crate::formats::StaticInt8Weights;
use crate::quant::{Qai8Output, Qai8Quant};

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_qai8_qai8_qsi8cxp";

/// The portable reference (test oracle and fallback): `lhs` is dense
/// `m x w.k`, `dst` dense `m x w.n`; errors where packing would (a bias
/// whose zero-point correction leaves int32, zero points outside int8).
///
/// ```
/// use kleidiai::families::matmul_clamp_qai8_qai8_qsi8cxp::reference;
/// use kleidiai::formats::{Order, StaticInt8Weights};
/// use kleidiai::quant::{Qai8Output, Qai8Quant};
/// // One channel, weights [1, -2], bias 3.
/// let w = StaticInt8Weights { n: 1, k: 2, order: Order::NxK, data: &[1, -2], scales: &[0.5], bias: Some(&[3]) };
/// let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 1, dst_scale: 1.0 };
/// let mut y = [0i8];
/// reference(1, &[5, 2], &w, &q, &Qai8Output::unclamped(0), &mut y).unwrap();
/// // (3 + (5-1)*1 + (2-1)*(-2)) * 0.5 = 2.5, rounded to even.
/// assert_eq!(y[0], 2);
/// ```
pub fn reference(
    m: usize,
    lhs: &[i8],
    w: &StaticInt8Weights<'_>,
    q: &Qai8Quant,
    out: &Qai8Output,
    dst: &mut [i8],
) -> Result<()> {
    shared::reference_impl(m, lhs, w.into(), q, out, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::packed::PackedRhs;
    use crate::registry::KernelInfo;
    use kleidiai_sys as sys;
    use shared::{Call, Entry, IfaceFns, Lhs, Rhs, entry, qai8_kernel_common, qai8_plain_run};
    use std::sync::OnceLock;

    pub(super) fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            let mut v = Vec::new();
            for (u, i) in sys::interfaces::matmul_clamp_qai8_qai8_qsi8cxp::KERNELS {
                let fns = IfaceFns {
                    m_step: i.get_m_step.expect("m_step"),
                    n_step: i.get_n_step.expect("n_step"),
                    mr: None,
                    nr: i.get_nr.expect("nr"),
                    kr: i.get_kr.expect("kr"),
                    sr: i.get_sr.expect("sr"),
                    lhs_offset: None,
                    rhs_offset: i.get_rhs_packed_offset.expect("rhs offset"),
                    run: i.run_matmul.expect("run"),
                };
                v.push(entry(FAMILY, u, Call::Iface(fns), Lhs::Unpacked, Rhs::Qsi8cxp2vlx4sb));
            }
            for &(u, ctor) in sys::interfaces::matmul_clamp_qai8_qai8_qsi8cxp::API_KERNELS {
                v.push(entry(FAMILY, u, Call::Uker(ctor), Lhs::Unpacked, Rhs::Qsi8cxp4vsx4));
            }
            v
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
        qai8_kernel_common!(entries, StaticInt8Weights);
        qai8_plain_run!();
    }

    /// The quantised values of weight row `row` of a packed RHS of this
    /// family, as f32 (exact). The packed bytes hold the weight scale only
    /// multiplied by `lhs_scale / dst_scale`: multiply by your weight scale
    /// to dequantise.
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        shared::unpack_rhs_row(rhs, row, out)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::formats::Order;
    use crate::par::Parallelism;

    #[test]
    fn conformance() {
        shared::tests::conformance(FAMILY, imp::entries(), false);
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(2, &f) else {
            return;
        };
        let w = StaticInt8Weights { n: 3, k: 8, order: Order::NxK, data: &[1; 24], scales: &[1.0; 3], bias: None };
        let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 0, dst_scale: 1.0 };
        let out = Qai8Output::unclamped(0);
        let packed = kern.pack_rhs(&w, &q).unwrap();
        let seq = Parallelism::Sequential;
        let mut dst = [0i8; 6];
        kern.run(2, &[2; 16], 8, &packed, &out, &mut dst, seq).unwrap();
        assert_eq!(dst, [16; 6]);
        // Every other kernel of the family takes the packed RHS only if it
        // has the same layout.
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let r = other.rhs_layout(3, 8).unwrap();
            assert_eq!(r == *packed.layout(), r.format == packed.layout().format && r.r == packed.layout().r);
        }
        assert!(kern.run(2, &[0; 16], 7, &packed, &out, &mut dst, seq).is_err(), "stride < k");
        assert!(kern.run(usize::MAX, &[0; 16], 8, &packed, &out, &mut dst, seq).is_err(), "overflowing m");
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let w = StaticInt8Weights { n: 3, k: 8, order: Order::NxK, data: &[1; 24], scales: &[1.0; 3], bias: None };
        let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 0, dst_scale: 1.0 };
        let out = Qai8Output::unclamped(0);
        let packed = kern.pack_rhs(&w, &q).unwrap();
        let seq = Parallelism::Sequential;
        let mut dst = [0i8; 3];
        assert!(kern.matmul(1, &[0; 7], &packed, &out, &mut dst, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0; 8], &packed, &out, &mut dst[..2], seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &out, &mut dst, seq).is_err(), "m = 0");
        let bad_out = Qai8Output { zero_point: 0, min: 5, max: 4 };
        assert!(kern.matmul(1, &[0; 8], &packed, &bad_out, &mut dst, seq).is_err(), "empty clamp");
        assert!(kern.matmul(1, &[0; 8], &packed, &Qai8Output::unclamped(300), &mut dst, seq).is_err(), "zero point");
        assert!(kern.pack_rhs(&StaticInt8Weights { data: &[1; 23], ..w }, &q).is_err(), "short weights");
        assert!(kern.pack_rhs(&StaticInt8Weights { n: usize::MAX, ..w }, &q).is_err(), "overflow");
        let zp = Qai8Quant { lhs_zero_point: -200, ..q };
        assert!(kern.pack_rhs(&w, &zp).is_err(), "lhs zero point outside int8");
        let neg = Qai8Quant { dst_scale: 0.0, ..q };
        assert!(kern.pack_rhs(&w, &neg).is_err(), "zero scale");
        // The zero-point correction must stay in int32.
        let big = StaticInt8Weights { bias: Some(&[i32::MAX, 0, 0]), ..w };
        assert!(kern.pack_rhs(&big, &Qai8Quant { lhs_zero_point: -1, ..q }).is_err(), "bias overflow");
        let mut d = [0i8; 3];
        assert!(reference(1, &[0; 8], &big, &Qai8Quant { lhs_zero_point: -1, ..q }, &out, &mut d).is_err());
        let mut r = [0f32; 8];
        assert!(unpack_rhs_row(&packed, 3, &mut r).is_err(), "row out of range");
        kern.matmul(1, &[1; 8], &packed, &out, &mut dst, seq).unwrap();
        assert_eq!(dst, [8; 3]);
    }
}
