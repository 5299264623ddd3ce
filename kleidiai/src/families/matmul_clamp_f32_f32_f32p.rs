//! `matmul_clamp_f32_f32_f32p`: `dst (f32, m x n) = clamp(lhs (f32, m x k)
//! · wᵀ + bias)` with f32 weights ([`FloatWeights`]) packed once, and the LHS
//! read as it is (no LHS packing).
//!
//! Kernels (8 upstream), with the packed RHS format each reads (see
//! `float_common` for the layout; format = upstream packer):
//!
//! | kernel | tier | tile | RHS format (packers) |
//! |---|---|---|---|
//! | `f32p16x1b_6x16_neon_mla`, `..._cortexa55` | NEON | 6 x 16 | `x32p16x1b` (`rhs_pack_nxk_x32p16x1bx32_x32_x32_neon`, `rhs_pack_kxn_x32p16x1b_x32_x32_neon`) |
//! | `f32p8x1biasf32_6x8x4_neon_mla` | NEON | 6 x 8 | `f32p8x1biasf32` (`rhs_pack_kxn_f32p8x1biasf32_f32_f32_neon`) |
//! | `f32p4vlx1b_6x4vl_sve_mla` | SVE, any VL | 6 x 4 VL | `x32p4vlx1b` (`rhs_pack_kxn_x32p4vlx1b_x32_x32_sve`) |
//! | `f32p2vlx1b_1x8vl_sme_mla` | SME | GEMV, 8 SVL | `f32p2vlx1biasf32` (`rhs_pack_{nxk,kxn}_f32p2vlx1biasf32_f32_f32_sme`) |
//! | `f32p2vlx1b_1x16vl_sme2_mla` | SME2 | GEMV, 16 SVL | `f32p2vlx1biasf32` |
//! | `f32p16vlx1b_1x16vl_sme2_mla` | SME2 | GEMV, 16 SVL | `f32p16vlx1b` (`rhs_pack_kxn_f32p16vlx1b_f32_f32_sme`) |
//! | `f32p4vsx1bf32_1x32vs_sme2_mla` (`kai_matmul_uker_api`) | SME2 | GEMV, 1 SVL | `x32p4vsx1bx32` (`matmul_pack_rhs_{nxk,kxn}_x32p4vsx1bx32_x32_x32_sme`) |
//!
//! The GEMV kernels take one LHS row per call (upstream asserts `m == 1`);
//! `Kernel::run` calls them once per row, so every kernel accepts any `m`.
//! Where upstream has a packer for one weight order only, weights in the
//! other order are transposed into a temporary first. A missing bias packs
//! as zeros (upstream's packers require one). The `f32p2vlx1biasf32` and
//! `x32p4vsx1bx32` formats are also read by the `matmul_clamp_f32_f32p_f32p`
//! MOPA kernels: one packed RHS serves the GEMM and the GEMV kernel.
//!
//! Tolerance of the conformance test. Every kernel accumulates in f32
//! (upstream's tests use an f32 reference; the NEON and SVE kernels use
//! `fmla .4s`, the SME ones `fmla za.s`, in an order of their choosing), so
//! for one output with terms `t = (bias, x_1 w_1, ..., x_k w_k)` the error of
//! any summation order, fused or not, is at most `γ_{k+1} Σ|t|` with
//! `u = 2^-24`; the reference accumulates exact products in f64 (error
//! `≤ k 2^-53 Σ|t|`) and rounds once (`≤ u |want|`). The test allows
//! `(k + 2) u Σ|t| + u |want|`, which covers both.

use crate::error::Result;
use crate::formats::FloatWeights;
use crate::packed::Clamp;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_f32_f32p";

/// The portable reference (test oracle and fallback):
/// `dst = clamp(lhs · wᵀ + bias)` for a dense `m x k` LHS, accumulated in
/// f64 and rounded once.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_f32_f32p::reference;
/// use kleidiai::formats::{FloatWeights, Order};
/// use kleidiai::Clamp;
/// let w = FloatWeights { n: 1, k: 2, order: Order::NxK, data: &[1.0, 2.0], bias: Some(&[0.5]) };
/// let mut y = [0f32];
/// reference(1, &[1.0, 1.0], &w, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 3.5);
/// ```
pub fn reference(m: usize, lhs: &[f32], w: &FloatWeights<'_, f32>, clamp: Clamp, dst: &mut [f32]) -> Result<()> {
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
    use sys::interfaces::matmul_clamp_f32_f32_f32p::{API_KERNELS, KERNELS};

    /// The RHS formats of this family.
    const FORMATS: [&RhsFormat; 6] = [
        &fc::X32P16X1B,
        &fc::F32P8X1BIASF32,
        &fc::X32P4VLX1B,
        &fc::F32P2VLX1BIASF32,
        &fc::F32P16VLX1B,
        &fc::X32P4VSX1BX32,
    ];

    /// The RHS format a kernel reads, from the packed-operand token of its name.
    fn rhs_format(name: &str) -> Option<&'static RhsFormat> {
        let table: [(&str, &'static RhsFormat); 6] = [
            ("_f32p16x1b_", &fc::X32P16X1B),
            ("_f32p8x1biasf32_", &fc::F32P8X1BIASF32),
            ("_f32p4vlx1b_", &fc::X32P4VLX1B),
            ("_f32p2vlx1b_", &fc::F32P2VLX1BIASF32),
            ("_f32p16vlx1b_", &fc::F32P16VLX1B),
            ("_f32p4vsx1bf32_", &fc::X32P4VSX1BX32),
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
        pub fn pack_rhs(&self, w: &FloatWeights<'_, f32>) -> Result<PackedRhs> {
            self.0.pack_rhs(w)
        }

        /// `dst = clamp(lhs · wᵀ + bias)`: `lhs` is `m x k` with rows
        /// `lhs_stride` elements apart, `dst` is `m x n` with rows `n` apart.
        #[allow(clippy::too_many_arguments)] // the strided LHS needs them all
        pub fn run(
            &self,
            m: usize,
            lhs: &[f32],
            lhs_stride: usize,
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.0.run_direct(m, lhs, lhs_stride, rhs, dst, clamp, par)
        }

        /// [`run`](Self::run) for a dense LHS (rows `k` apart).
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[f32],
            rhs: &PackedRhs,
            dst: &mut [f32],
            clamp: Clamp,
            par: Parallelism,
        ) -> Result<()> {
            self.run(m, lhs, rhs.layout().k, rhs, dst, clamp, par)
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
    use crate::par::Parallelism;
    use crate::testing;

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let pack = |w: &FloatWeights<'_, f32>| kernel.pack_rhs(w);
            let run = |m: usize, lhs: &[f32], rhs: &crate::PackedRhs, dst: &mut [f32], c: Clamp, par: Parallelism| {
                kernel.matmul(m, lhs, rhs, dst, c, par)
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
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let seq = Parallelism::Sequential;
        let data = vec![1.0f32; 32];
        let w = FloatWeights { n: 4, k: 8, order: Order::NxK, data: &data, bias: None };
        let packed = kern.pack_rhs(&w).unwrap();
        let mut dst = vec![0f32; 8];
        assert!(kern.matmul(1, &[0.0; 7], &packed, &mut dst, Clamp::NONE, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst[..3], Clamp::NONE, seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &mut dst, Clamp::NONE, seq).is_err(), "m = 0");
        assert!(kern.run(2, &[0.0; 15], 8, &packed, &mut dst, Clamp::NONE, seq).is_err(), "short strided lhs");
        assert!(kern.run(1, &[0.0; 8], 7, &packed, &mut dst, Clamp::NONE, seq).is_err(), "stride < k");
        assert!(kern.run(usize::MAX, &[0.0; 8], 8, &packed, &mut dst, Clamp::NONE, seq).is_err(), "overflowing m");
        let nan = Clamp { min: f32::NAN, max: 1.0 };
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst, nan, seq).is_err(), "NaN clamp");
        let empty = Clamp { min: 1.0, max: 0.0 };
        assert!(kern.matmul(1, &[0.0; 8], &packed, &mut dst, empty, seq).is_err(), "empty clamp");
        assert!(kern.pack_rhs(&FloatWeights { data: &data[..31], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&FloatWeights { bias: Some(&data[..3]), ..w }).is_err(), "short bias");
        assert!(kern.pack_rhs(&FloatWeights { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(&FloatWeights { n: usize::MAX / 2, ..w }).is_err(), "overflowing n");
        let mut row = vec![0f32; 8];
        assert!(unpack_rhs_row(&packed, 4, &mut row).is_err(), "row out of range");
        assert!(unpack_rhs_row(&packed, 0, &mut row[..7]).is_err(), "short row");
        assert!(reference(1, &[0.0; 7], &w, Clamp::NONE, &mut dst).is_err());
    }
}
