//! `matmul_clamp_qai8_qai8p_qsi4cxp`: statically quantised int8 GEMM with int4 weights:
//! `dst (int8, m x n) = requantize(lhs (int8, m x k) · wᵀ + bias)`.
//!
//! Kernel (1, `kai_matmul_uker_api`, SME2):
//! `kai_matmul_clamp_qai8_qai8p8vsx4_qsi4cxp8vsx4sf32bi32_8vsx8vs_sme2_mopa`.
//! LHS `kai_lhs_pack_x8p2vlx4_x8_sme` (format `qai8p2vlx4`: its `mr`, two
//! streaming vectors of int32, is the kernel's `8 * vscale`); RHS
//! `kai_matmul_pack_rhs_{nxk,kxn}_qsi4cxp8vsx4sf32bi32_{qsi4cx,qsu4cx}_f32_i32_sme`
//! (upstream files `kai_rhs_pack_*`), the one matching the weights' order
//! and [`Int4Encoding`](crate::formats::Int4Encoding); packed format
//! `qsi4cxp8vsx4sf32bi32`, shared with `matmul_clamp_qai8_qai8_qsi4cxp`.
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
use crate::formats::StaticInt4Weights;
use crate::quant::{Qai8Output, Qai8Quant};

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_qai8_qai8p_qsi4cxp";

/// The portable reference (test oracle and fallback): `lhs` is dense
/// `m x w.k`, `dst` dense `m x w.n`; errors where packing would (a bias
/// whose zero-point correction leaves int32, zero points outside int8).
///
/// ```
/// use kleidiai::families::matmul_clamp_qai8_qai8p_qsi4cxp::reference;
/// use kleidiai::formats::{Int4Encoding, Order, StaticInt4Weights};
/// use kleidiai::quant::{Qai8Output, Qai8Quant};
/// // One channel, weights [1, -2] (signed nibbles), bias 3.
/// let w = StaticInt4Weights { n: 1, k: 2, order: Order::NxK, encoding: Int4Encoding::Signed,
///     data: &[0xE1], scales: &[0.5], bias: Some(&[3]) };
/// let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 1, dst_scale: 1.0 };
/// let mut y = [0i8];
/// reference(1, &[5, 2], &w, &q, &Qai8Output::unclamped(0), &mut y).unwrap();
/// // (3 + (5-1)*1 + (2-1)*(-2)) * 0.5 = 2.5, rounded to even.
/// assert_eq!(y[0], 2);
/// ```
pub fn reference(
    m: usize,
    lhs: &[i8],
    w: &StaticInt4Weights<'_>,
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
    use shared::{Call, Entry, Lhs, Rhs, entry, qai8_kernel_common, qai8_packed_run};
    use std::sync::OnceLock;

    pub(super) fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| {
            let mut v = Vec::new();
            for &(u, ctor) in sys::interfaces::matmul_clamp_qai8_qai8p_qsi4cxp::API_KERNELS {
                v.push(entry(FAMILY, u, Call::Uker(ctor), Lhs::X8p2vlx4, Rhs::Qsi4cxp8vsx4));
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
        qai8_kernel_common!(entries, StaticInt4Weights);
        qai8_packed_run!();
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
        shared::tests::conformance(FAMILY, imp::entries(), true);
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(2, &f) else {
            return;
        };
        let w = StaticInt4Weights {
            n: 3,
            k: 8,
            order: Order::NxK,
            encoding: crate::formats::Int4Encoding::Offset8,
            data: &[0x99; 12],
            scales: &[1.0; 3],
            bias: None,
        };
        let q = Qai8Quant { lhs_scale: 1.0, lhs_zero_point: 0, dst_scale: 1.0 };
        let out = Qai8Output::unclamped(0);
        let packed = kern.pack_rhs(&w, &q).unwrap();
        let seq = Parallelism::Sequential;
        let mut dst = [0i8; 6];
        kern.run(&kern.pack_lhs(2, 8, &[2; 16], 8, seq).unwrap(), &packed, &out, &mut dst, seq).unwrap();
        assert_eq!(dst, [16; 6]);
        // Every other kernel of the family takes the packed RHS only if it
        // has the same layout.
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let r = other.rhs_layout(3, 8).unwrap();
            assert_eq!(r == *packed.layout(), r.format == packed.layout().format && r.r == packed.layout().r);
        }
        // A packed LHS of another k is rejected.
        let lhs = kern.pack_lhs(2, 12, &[1; 24], 12, seq).unwrap();
        let r = kern.run(&lhs, &packed, &out, &mut dst, seq);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
        assert!(kern.pack_lhs(usize::MAX, 8, &[0; 8], 8, seq).is_err(), "overflowing m");
        assert!(kern.pack_lhs(1, 8, &[0; 8], 7, seq).is_err(), "stride < k");
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let w = StaticInt4Weights {
            n: 3,
            k: 8,
            order: Order::NxK,
            encoding: crate::formats::Int4Encoding::Offset8,
            data: &[0x99; 12],
            scales: &[1.0; 3],
            bias: None,
        };
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
        assert!(kern.pack_rhs(&StaticInt4Weights { data: &[0x99; 11], ..w }, &q).is_err(), "short weights");
        assert!(kern.pack_rhs(&StaticInt4Weights { n: usize::MAX, ..w }, &q).is_err(), "overflow");
        let zp = Qai8Quant { lhs_zero_point: -200, ..q };
        assert!(kern.pack_rhs(&w, &zp).is_err(), "lhs zero point outside int8");
        let neg = Qai8Quant { dst_scale: 0.0, ..q };
        assert!(kern.pack_rhs(&w, &neg).is_err(), "zero scale");
        // The zero-point correction must stay in int32.
        let big = StaticInt4Weights { bias: Some(&[i32::MAX, 0, 0]), ..w };
        assert!(kern.pack_rhs(&big, &Qai8Quant { lhs_zero_point: -1, ..q }).is_err(), "bias overflow");
        let mut d = [0i8; 3];
        assert!(reference(1, &[0; 8], &big, &Qai8Quant { lhs_zero_point: -1, ..q }, &out, &mut d).is_err());
        let mut r = [0f32; 8];
        assert!(unpack_rhs_row(&packed, 3, &mut r).is_err(), "row out of range");
        kern.matmul(1, &[1; 8], &packed, &out, &mut dst, seq).unwrap();
        assert_eq!(dst, [8; 3]);
    }
}
