//! `matmul_clamp_f16_f16p_f16p`: `dst (f16, m x n) = clamp(lhs (f16, m x k)
//! · wᵀ + bias)` with both operands packed: f16 weights and f16 bias
//! ([`FloatWeights`] of [`half::f16`]) once, the LHS per call. Both kernels
//! are SME outer-product (MOPA) GEMM kernels; clamp bounds are given as f32
//! and rounded to f16 by the kernels.
//!
//! | kernel | tier | LHS format (packer) | RHS format (packers) |
//! |---|---|---|---|
//! | `f16p2vlx2_f16p2vlx2b_2vlx2vl_sme_mopa` | SME | `x16p2vlx2` (`lhs_pack_x16p2vlx2_x16_sme`) | `x16p2vlx2b` (`rhs_pack_{nxk,kxn}_x16p2vlx2b_x16_x16_sme`) |
//! | `f16p2vlx2_f16p2vlx2_2vlx2vl_sme2_mopa` | SME2 | `x16p2vlx2` | `x16p2vlx2b` |
//!
//! The packed RHS format is the one the `matmul_clamp_f16_f16_f16p` SME
//! GEMV kernels read, so a weight packed once serves both the GEMM and the
//! GEMV kernel. A missing bias packs as zeros.
//!
//! Accumulation: `fmopa za.s` with f16 operands (widening, f32 accumulators;
//! upstream's tests set `acc_dt = FP32`), one rounding to f16 at the end.
//! The reference computes in f64 and rounds once to f16, so the test allows,
//! per output with terms `t = (bias, x_1 w_1, ..., x_k w_k)`,
//! `(k + 2) 2^-24 Σ|t| + (ulp16(want) + ulp16(got)) / 2`: the worst f32
//! summation error of any order, plus the two roundings to f16 landing on
//! either side of a rounding boundary.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::f16;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f16_f16p_f16p";

/// The portable reference (test oracle and fallback): the same math as
/// [`super::matmul_clamp_f16_f16_f16p::reference`] (f64, one rounding to f16).
///
/// ```
/// use half::f16;
/// use kleidiai::families::matmul_clamp_f16_f16p_f16p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let h = |v: f32| f16::from_f32(v);
/// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[h(1.0), h(-1.0)], bias: None };
/// let mut y = [f16::ZERO; 2];
/// reference(1, &[h(3.0)], &w, Clamp { min: -2.0, max: 2.0 }, &mut y).unwrap();
/// assert_eq!(y, [h(2.0), h(-2.0)]);
/// ```
pub fn reference(m: usize, lhs: &[f16], w: &FloatWeights<'_, f16>, clamp: Clamp, dst: &mut [f16]) -> Result<()> {
    super::float_common::reference(m, lhs, w, clamp, dst)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::AlignedBuf;
    use crate::cpu::Features;
    use crate::families::float_common::{self as fc, FloatKernel, Imp, LhsFormat, RhsFormat};
    use crate::packed::{PackedLayout, PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::KernelInfo;
    use kleidiai_sys as sys;
    use std::sync::OnceLock;
    use sys::interfaces::matmul_clamp_f16_f16p_f16p::KERNELS;

    const FORMATS: [&RhsFormat; 1] = [&fc::X16P2VLX2B];

    /// The packed formats a kernel reads, from the operand tokens of its name.
    fn formats(name: &str) -> Option<(&'static LhsFormat, &'static RhsFormat)> {
        name.contains("_f16p2vlx2_f16p2vlx2").then_some((&fc::X16P2VLX2, &fc::X16P2VLX2B))
    }

    fn entries() -> &'static [FloatKernel] {
        static E: OnceLock<Vec<FloatKernel>> = OnceLock::new();
        E.get_or_init(|| {
            KERNELS
                .iter()
                .filter_map(|(u, i)| {
                    let imp = Imp::Packed {
                        m_step: i.get_m_step.expect("m_step"),
                        n_step: i.get_n_step.expect("n_step"),
                        mr: i.get_mr.expect("mr"),
                        nr: i.get_nr.expect("nr"),
                        kr: i.get_kr.expect("kr"),
                        sr: i.get_sr.expect("sr"),
                        lhs_offset: i.get_lhs_packed_offset.expect("lhs offset"),
                        rhs_offset: i.get_rhs_packed_offset.expect("rhs offset"),
                        run: i.run_matmul.expect("run"),
                    };
                    let (l, r) = formats(u.name)?;
                    Some(FloatKernel::new(u, FAMILY, imp, r, Some(l)))
                })
                .collect()
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

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            self.0.lhs_layout(m, k)
        }

        /// Packs the weights (and bias; zeros without one) for this kernel
        /// and every kernel with the same [`rhs_layout`](Self::rhs_layout).
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f16>) -> Result<PackedRhs> {
            self.0.pack_rhs(w)
        }

        /// Packs an `m x k` LHS with rows `lhs_stride` elements apart.
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            lhs: &[f16],
            lhs_stride: usize,
            par: Parallelism,
        ) -> Result<PackedLhs> {
            let mut out = PackedLhs::new(self.lhs_layout(m, k)?, AlignedBuf::default());
            self.pack_lhs_into(m, k, lhs, lhs_stride, par, &mut out)?;
            Ok(out)
        }

        /// As [`pack_lhs`](Self::pack_lhs), reusing `out`'s allocation.
        pub fn pack_lhs_into(
            &self,
            m: usize,
            k: usize,
            lhs: &[f16],
            lhs_stride: usize,
            par: Parallelism,
            out: &mut PackedLhs,
        ) -> Result<()> {
            self.0.pack_lhs_into(m, k, lhs, lhs_stride, par, out)
        }

        /// `dst = clamp(lhs · wᵀ + bias)`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.0.run_packed(lhs, rhs, dst, clamp, par)
        }

        /// Packs the dense `m x k` LHS and runs: the one-call form (use
        /// [`pack_lhs_into`](Self::pack_lhs_into) and [`run`](Self::run) to
        /// reuse the packed-LHS allocation).
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[f16],
            rhs: &PackedRhs,
            dst: &mut [f16],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, dst, clamp, par)
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
    use crate::families::float_common::test_support::{self as ts, Accum};
    use crate::formats::Order;
    use crate::packed::PackedLhs;
    use crate::par::Parallelism;
    use crate::testing;

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let pack = |w: &FloatWeights<'_, f16>| kernel.pack_rhs(w);
            let run = |m: usize, lhs: &[f16], rhs: &crate::PackedRhs, dst: &mut [f16], c: Clamp, par: Parallelism| {
                // Through the reusable scratch, with a row stride > k.
                let k = rhs.layout().k;
                let pad = [f16::from_f32(9.0); 3];
                let wide: Vec<f16> = (0..m).flat_map(|r| lhs[r * k..(r + 1) * k].iter().copied().chain(pad)).collect();
                let mut scratch = PackedLhs::empty();
                kernel.pack_lhs_into(m, k, &wide, k + 3, par, &mut scratch)?;
                kernel.run(&scratch, rhs, dst, c, par)
            };
            let api = ts::Api { pack: &pack, run: &run, unpack: &unpack_rhs_row };
            ts::conformance(kernel.float_kernel(), Accum::F32, &[1, 17, 40], api)
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(k1) = Kernel::select(4, &f) else {
            return;
        };
        let (n, k) = (9, 8);
        let half = f16::from_f32(0.5);
        let data = vec![half; n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![half; 2 * k];
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![f16::ZERO; 2 * n];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            assert_eq!(other.rhs_layout(n, k).unwrap(), *packed.layout(), "one format for the family");
            r.unwrap();
            assert!(dst.iter().all(|y| y.to_f32() == k as f32 * 0.25), "{other:?}");
            let wrong_k = other.pack_lhs(2, k - 1, &lhs, k, Parallelism::Sequential).unwrap();
            let r = k1.run(&wrong_k, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(8, &f) else {
            return;
        };
        let seq = Parallelism::Sequential;
        let z = f16::ZERO;
        let data = vec![f16::ONE; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::KxN, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![z; 8];
        assert!(kern.matmul(1, &[z; 7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(2, &[z; 16], &packed, &mut dst[..7], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.pack_lhs(2, 8, &[z; 15], 8, seq).is_err(), "short strided lhs");
        assert!(kern.pack_lhs(1, 8, &[z; 8], 7, seq).is_err(), "stride < k");
        assert!(kern.pack_lhs(usize::MAX, 8, &[z; 8], 8, seq).is_err(), "overflowing m");
        let nan = Clamp { min: 0.0, max: f32::NAN };
        assert!(kern.matmul(1, &[z; 8], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { k: usize::MAX / 2, ..w }).is_err(), "overflowing k");
        let mut row = vec![0f32; 8];
        assert!(unpack_rhs_row(&packed, 4, &mut row).is_err(), "row out of range");
        assert!(unpack_rhs_row(&packed, 0, &mut row[..7]).is_err(), "short row");
    }
}
