//! `matmul_clamp_f32_f32p_f32p`: `dst (f32, m x n) = clamp(lhs (f32, m x k)
//! · wᵀ + bias)` with both operands packed: f32 weights ([`FloatWeights`])
//! once, the LHS per call. All three kernels are SME outer-product (MOPA)
//! GEMM kernels.
//!
//! | kernel | tier | LHS format (packer) | RHS format (packers) |
//! |---|---|---|---|
//! | `f32p2vlx1_f32p2vlx1b_2vlx2vl_sme_mopa` | SME | `f32p2vlx1` (`lhs_pack_f32p2vlx1_f32_sme`) | `f32p2vlx1biasf32` (`rhs_pack_{nxk,kxn}_f32p2vlx1biasf32_f32_f32_sme`) |
//! | `f32p2vlx1_f32p2vlx1biasf32_sme2_mopa` | SME2 | `f32p2vlx1` | `f32p2vlx1biasf32` |
//! | `f32p4vsx1_f32p4vsx1bf32_8vsx8vs_sme2_mopa` (`kai_matmul_uker_api`) | SME2 | `x32p4vsx1` (`matmul_pack_lhs_mxk_x32p4vsx1_x32_sme`) | `x32p4vsx1bx32` (`matmul_pack_rhs_{nxk,kxn}_x32p4vsx1bx32_x32_x32_sme`) |
//!
//! The packed RHS formats are the ones the `matmul_clamp_f32_f32_f32p` SME
//! GEMV kernels read (`2vlx1b_1x{8,16}vl` and `4vsx1bf32_1x32vs`), so a
//! weight packed once serves both the GEMM (m > 1) and the GEMV (m = 1)
//! kernel, as ggml pairs them. A missing bias packs as zeros.
//!
//! Tolerance of the conformance test: as for `matmul_clamp_f32_f32_f32p`.
//! `fmopa za.s` accumulates f32 products in f32 (upstream's tests use an f32
//! reference), so for terms `t = (bias, x_1 w_1, ..., x_k w_k)` the test
//! allows `(k + 2) 2^-24 Σ|t| + 2^-24 |want|`: the worst case of any
//! summation order, plus the reference's single rounding.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_f32p_f32p";

/// The portable reference (test oracle and fallback): the same math as
/// [`super::matmul_clamp_f32_f32_f32p::reference`].
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_f32p_f32p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 2, k: 1, order: Order::KxN, data: &[1.0, -1.0], bias: None };
/// let mut y = [0f32; 2];
/// reference(1, &[3.0], &w, Clamp { min: -2.0, max: 2.0 }, &mut y).unwrap();
/// assert_eq!(y, [2.0, -2.0]);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
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
    use sys::interfaces::matmul_clamp_f32_f32p_f32p::{API_KERNELS, KERNELS};

    const FORMATS: [&RhsFormat; 2] = [&fc::F32P2VLX1BIASF32, &fc::X32P4VSX1BX32];

    /// The packed formats a kernel reads, from the operand tokens of its name.
    fn formats(name: &str) -> Option<(&'static LhsFormat, &'static RhsFormat)> {
        if name.contains("_f32p2vlx1_f32p2vlx1") {
            Some((&fc::F32P2VLX1, &fc::F32P2VLX1BIASF32))
        } else if name.contains("_f32p4vsx1_f32p4vsx1bf32_") {
            Some((&fc::X32P4VSX1, &fc::X32P4VSX1BX32))
        } else {
            None
        }
    }

    fn entries() -> &'static [FloatKernel] {
        static E: OnceLock<Vec<FloatKernel>> = OnceLock::new();
        E.get_or_init(|| {
            let mut v: Vec<FloatKernel> = KERNELS
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
                .collect();
            v.extend(API_KERNELS.iter().filter_map(|(u, api)| {
                let (l, r) = formats(u.name)?;
                Some(FloatKernel::new(u, FAMILY, Imp::PackedApi(*api), r, Some(l)))
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

        /// The packed-LHS layout this kernel reads for an `m x k` input.
        pub fn lhs_layout(&self, m: usize, k: usize) -> Result<PackedLayout> {
            self.0.lhs_layout(m, k)
        }

        /// Packs the weights (and bias; zeros without one) for this kernel
        /// and every kernel with the same [`rhs_layout`](Self::rhs_layout).
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f32>) -> Result<PackedRhs> {
            self.0.pack_rhs(w)
        }

        /// Packs an `m x k` LHS with rows `lhs_stride` elements apart.
        pub fn pack_lhs(
            &self,
            m: usize,
            k: usize,
            lhs: &[f32],
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
            lhs: &[f32],
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
            dst: &mut [f32],
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

    /// Weight row `row` of a packed RHS of this family, as f32 (bias not
    /// included): what ggml's `get_rows` needs.
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
            let pack = |w: &FloatWeights<'_, f32>| kernel.pack_rhs(w);
            let run = |m: usize, lhs: &[f32], rhs: &crate::PackedRhs, dst: &mut [f32], c: Clamp, par: Parallelism| {
                // Through the reusable scratch, with a row stride > k.
                let k = rhs.layout().k;
                let wide: Vec<f32> =
                    (0..m).flat_map(|r| lhs[r * k..(r + 1) * k].iter().copied().chain([9.0; 3])).collect();
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
        let data = vec![0.5f32; n * k];
        let w = FloatWeights { n, k, order: Order::NxK, data: &data, bias: None };
        let packed = k1.pack_rhs(&w).unwrap();
        let lhs = vec![0.5f32; 2 * k];
        for other in Kernel::all().filter(|k| k.info().supported(&f).is_ok()) {
            let mut dst = vec![0f32; 2 * n];
            let r = other.matmul(2, &lhs, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.rhs_layout(n, k).unwrap() == *packed.layout() {
                r.unwrap();
                assert!(dst.iter().all(|y| *y == k as f32 * 0.25), "{other:?}");
            } else {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
            // A packed LHS of another kernel or shape is rejected too.
            let lp = other.pack_lhs(2, k, &lhs, k, Parallelism::Sequential).unwrap();
            let wrong_k = other.pack_lhs(2, k - 1, &lhs, k, Parallelism::Sequential).unwrap();
            assert!(k1.run(&wrong_k, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential).is_err());
            let r = k1.run(&lp, &packed, &mut dst, Clamp::NONE, Parallelism::Sequential);
            if other.lhs_layout(2, k).unwrap() != k1.lhs_layout(2, k).unwrap() {
                assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{other:?}: {r:?}");
            }
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(8, &f) else {
            return;
        };
        let seq = Parallelism::Sequential;
        let data = vec![1.0f32; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::KxN, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![0f32; 8];
        assert!(kern.matmul(1, &[0.0; 7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(2, &[0.0; 16], &packed, &mut dst[..7], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.pack_lhs(2, 8, &[0.0; 15], 8, seq).is_err(), "short strided lhs");
        assert!(kern.pack_lhs(1, 8, &[0.0; 8], 7, seq).is_err(), "stride < k");
        assert!(kern.pack_lhs(1, 0, &[0.0; 8], 8, seq).is_err(), "k = 0");
        assert!(kern.pack_lhs(usize::MAX, 8, &[0.0; 8], 8, seq).is_err(), "overflowing m");
        let nan = Clamp { min: 0.0, max: f32::NAN };
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { k: 0, ..w }).is_err(), "k = 0");
        assert!(kern.pack_rhs(&FloatWeights { k: usize::MAX / 2, ..w }).is_err(), "overflowing k");
        let mut row = vec![0f32; 8];
        assert!(unpack_rhs_row(&packed, 4, &mut row).is_err(), "row out of range");
    }
}
