//! `matmul_clamp_f16_f16_f16p`: `dst (f16, m x n) = clamp(lhs (f16, m x k)
//! · wᵀ + bias)` with f16 weights and an f16 bias ([`FloatWeights`] of
//! [`half::f16`]) packed once, and the LHS read as it is. Clamp bounds are
//! given as f32 and rounded to f16 by the kernels.
//!
//! | kernel | tier | tile | accumulates in | RHS format (packers) |
//! |---|---|---|---|---|
//! | `f16p32x1b_6x32_neon_mla`, `..._cortexa55` | NEON FP16 | 6 x 32 | f16 (`fmla .8h`) | `x16p32x1b` (`rhs_pack_nxk_x16p32x1bx16_x16_x16_neon`, `rhs_pack_kxn_x16p32x1b_x16_x16_neon`) |
//! | `f16p16x1biasf16_6x16x8_neon_mla` | NEON FP16 | 6 x 16 | f16 (`fmla .8h`) | `f16p16x1biasf16` (`rhs_pack_kxn_f16p16x1biasf16_f16_f16_neon`) |
//! | `f16p2vlx2b_1x8vl_sme_mla` | SME | GEMV, 8 SVL | f32 (`fmlalb/fmlalt`) | `x16p2vlx2b` (`rhs_pack_{nxk,kxn}_x16p2vlx2b_x16_x16_sme`) |
//! | `f16p2vlx2b_1x16vl_sme2_dot` | SME2 | GEMV, 16 SVL | f32 (`fdot za.s`) | `x16p2vlx2b` |
//! | `f16p16vsx2bf16_6x16vs_sve2p1_dot` (`kai_matmul_uker_api`) | SVE2.1, any VL | 6 x 16 vscale | f32 (`fdot z.s`) | `x16p16vsx2bx16` (`rhs_pack_kxn_x16p16vsx2bx16_x16_x16_sve`) |
//!
//! The GEMV kernels take one LHS row per call (upstream asserts `m == 1`);
//! `Kernel::run` calls them once per row. Weights in an order upstream
//! has no packer for are transposed into a temporary first; a missing bias
//! packs as zeros. `x16p2vlx2b` is also the RHS format of the
//! `matmul_clamp_f16_f16p_f16p` MOPA kernels: one packed RHS serves both.
//!
//! Accumulation, from upstream's tests (`acc_dt = FP32` for the SME
//! kernels, `FP32` for the SVE2.1 kernel in the next-generation tests) and
//! the kernels' instructions: the NEON kernels load the bias into f16
//! accumulators and apply one fused f16 multiply-add per `k`, in order; the
//! others accumulate in f32 and round once to f16.
//!
//! The reference computes in f64 from the f16 inputs and rounds once to f16.
//! Tolerance of the conformance test, per output with terms
//! `t = (bias, x_1 w_1, ..., x_k w_k)`:
//! - f32 accumulation: the kernel's f32 sum is within `(k + 2) 2^-24 Σ|t|`
//!   of the exact one (any order); both sides then round to f16, so they
//!   can differ by that plus half an f16 ulp at each result:
//!   `(k + 2) 2^-24 Σ|t| + (ulp16(want) + ulp16(got)) / 2`.
//! - f16 accumulation: each fused step `s_p = fl(s_{p-1} + x_p w_p)` errs by
//!   at most `u |s_p|` (`u = 2^-11`), so the running-error bound is
//!   `u Σ_p |s_p| / (1 - k u)` with `s_p` the exact partial sums from the
//!   bias, plus `k 2^-25` for f16 underflow, plus half an ulp for the
//!   reference's own rounding. This is the worst case of f16 accumulation,
//!   not a loosened f32 bound: for `k = 40` and inputs in [-1, 1] it is
//!   typically 0.02 (observed: up to 0.012), while the f32-accumulating
//!   kernels stay within one f16 ulp.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f16_f16_f16p";

/// The portable reference (test oracle and fallback):
/// `dst = clamp(lhs · wᵀ + bias)` computed in f64 from the f16 inputs,
/// clamped, rounded once to f16.
///
/// ```
/// use half::f16;
/// use kleidiai::families::matmul_clamp_f16_f16_f16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let h = |v: f32| f16::from_f32(v);
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[h(1.0), h(2.0)], bias: Some(&[h(0.5)]) };
/// let mut y = [f16::ZERO];
/// reference(1, &[h(1.0), h(1.0)], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], h(3.5));
/// ```
pub fn reference(m: usize, lhs: &[f16], w: &FloatWeights<'_, f16>, clamp: Clamp, dst: &mut [f16]) -> Result<()> {
    super::float_common::reference(m, lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::cpu::Features;
    use crate::families::float_common::{self as fc, FloatKernel, Imp, RhsFormat};
    use crate::packed::{PackedLayout, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::KernelInfo;
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f16_f16_f16p::{API_KERNELS, KERNELS};

    const FORMATS: [&RhsFormat; 4] = [&fc::X16P32X1B, &fc::F16P16X1BIASF16, &fc::X16P2VLX2B, &fc::X16P16VSX2BX16];

    /// The RHS format a kernel reads, from the packed-operand token of its name.
    fn rhs_format(name: &str) -> Option<&'static RhsFormat> {
        let table: [(&str, &'static RhsFormat); 4] = [
            ("_f16p32x1b_", &fc::X16P32X1B),
            ("_f16p16x1biasf16_", &fc::F16P16X1BIASF16),
            ("_f16p2vlx2b_", &fc::X16P2VLX2B),
            ("_f16p16vsx2bf16_", &fc::X16P16VSX2BX16),
        ];
        table.iter().find(|(t, _)| name.contains(t)).map(|(_, f)| *f)
    }

    fn entries() -> &'static [FloatKernel] {
        static E: OnceLock<Vec<FloatKernel>> = OnceLock::new();
        E.get_or_init(|| {
            let mut v: Vec<FloatKernel> = KERNELS
                .iter()
                .filter_map(|(u, i)| {
                    let imp = Imp::Direct {
                        m_step: i.get_m_step.expect("m_step"),
                        n_step: i.get_n_step.expect("n_step"),
                        nr: i.get_nr.expect("nr"),
                        kr: i.get_kr.expect("kr"),
                        sr: i.get_sr.expect("sr"),
                        rhs_offset: i.get_rhs_packed_offset.expect("rhs offset"),
                        run: i.run_matmul.expect("run"),
                    };
                    Some(FloatKernel::new(u, FAMILY, imp, rhs_format(u.name)?, None))
                })
                .collect();
            v.extend(API_KERNELS.iter().filter_map(|(u, api)| {
                Some(FloatKernel::new(u, FAMILY, Imp::DirectApi(*api), rhs_format(u.name)?, None))
            }));
            v
        })
    }

    pub(crate) fn infos() -> Vec<&'static KernelInfo> {
        entries().iter().map(|e| &e.info).collect()
    }

    /// One kernel of the family, with its packing.
    #[derive(Clone, Copy)]
    pub struct Kernel(&'static FloatKernel);

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

        /// The shared float-kernel glue (the steady-state path of the
        /// high-level API calls it directly).
        pub(crate) fn float_kernel(&self) -> &'static FloatKernel {
            self.0
        }

        /// The packed-RHS layout this kernel reads for `n x k` weights.
        pub fn rhs_layout(&self, n: usize, k: usize) -> Result<PackedLayout> {
            self.0.rhs_layout(n, k)
        }

        /// Packs the weights (and bias; zeros without one) for this kernel
        /// and every kernel with the same [`rhs_layout`](Self::rhs_layout).
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f16>) -> Result<PackedRhs> {
            self.0.pack_rhs(w)
        }

        /// `dst = clamp(lhs · wᵀ + bias)`: `lhs` is `m x k` with rows
        /// `lhs_stride` elements apart, `dst` is `m x n` with rows `n` apart.
        #[allow(clippy::too_many_arguments)] // the strided LHS needs them all
        pub fn run(
            &self,
            m: usize,
            lhs: &[f16],
            lhs_stride: usize,
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.0.run_direct(m, lhs, lhs_stride, rhs, dst, clamp, par)
        }

        /// [`run`](Self::run) for a dense LHS (rows `k` apart).
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[f16],
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.run(m, lhs, rhs.layout().k, rhs, dst, clamp, par)
        }
    }

    /// Weight row `row` of a packed RHS of this family, as f32 (exact; bias
    /// not included): what ggml's `get_rows` needs.
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        fc::unpack_rhs_row(rhs, row, out, &FORMATS)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::cpu::CpuFeature;
    use crate::families::float_common::test_support::{self as ts, Accum};
    use crate::formats::Order;
    use crate::par::Parallelism;
    use crate::testing;

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let pack = |w: &FloatWeights<'_, f16>| kernel.pack_rhs(w);
            let run = |m: usize, lhs: &[f16], rhs: &crate::PackedRhs, dst: &mut [f16], c: Clamp, par: Parallelism| {
                kernel.matmul(m, lhs, rhs, dst, c, par)
            };
            let api = ts::Api { pack: &pack, run: &run, unpack: &unpack_rhs_row };
            // The NEON FP16 kernels accumulate in f16, the others in f32.
            let accum = if info.tier() == CpuFeature::Fp16 { Accum::F16Sequential } else { Accum::F32 };
            ts::conformance(kernel.float_kernel(), accum, &[1, 17, 40], api)
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &f) else {
            return;
        };
        let (n, k) = (9, 8);
        let data = vec![f16::from_f32(0.5); n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![f16::from_f32(0.5); 2 * k];
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![f16::ZERO; 2 * n];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.rhs_layout(n, k).unwrap() == *packed.layout() {
                r.unwrap();
                assert!(dst.iter().all(|y| y.to_f32() == k as f32 * 0.25), "{other:?}");
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let seq = Parallelism::Sequential;
        let z = f16::ZERO;
        let data = vec![f16::ONE; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::NxK, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![z; 8];
        assert!(kern.matmul(1, &[z; 7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[z; 8], &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.run(2, &[z; 15], 8, &packed, &mut dst, Clamp::NONE, seq).is_err(), "short strided lhs");
        assert!(kern.run(1, &[z; 8], 7, &packed, &mut dst, Clamp::NONE, seq).is_err(), "stride < k");
        let nan = Clamp { min: f32::NAN, max: 1.0 };
        assert!(kern.matmul(1, &[z; 8], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { bias: Some(&data[..3]), ..w }).is_err(), "short bias");
        assert!(kern.pack_rhs(&FloatWeights { n: usize::MAX / 2, ..w }).is_err(), "overflowing n");
        let mut row = vec![0f32; 8];
        assert!(unpack_rhs_row(&packed, 4, &mut row).is_err(), "row out of range");
        assert!(unpack_rhs_row(&packed, 0, &mut row[..7]).is_err(), "short row");
    }
}
