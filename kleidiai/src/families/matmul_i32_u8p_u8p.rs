//! `matmul_i32_u8p_u8p`: `dst (i32, m x n) = lhs (u8, m x k) · wᵀ (u8) +
//! per_row[i] + per_col[j]`, accumulated in int32 with wrap-around (as the
//! hardware does; `255 * 255 * k` passes `i32::MAX` beyond k = 33025).
//!
//! Kernel (1 upstream, `kai_matmul_uker_api`):
//! `kai_matmul_i32_u8p4vsx4_u8p4vsx4_i32_i32_8vsx8vs_sme2_mopa` (SME2 UMOPA,
//! tiles of `8 * vscale` rows and columns). Packing: LHS
//! `kai_matmul_pack_lhs_mxk_x8p4vsx4_x8_sme`, RHS
//! `kai_matmul_pack_rhs_nxk_x8p4vsx4_x8_sme` or `..._kxn_...` (one packed
//! format, `u8p4vsx4`, shared with `matmul_clamp_f32_u8p_u8p`). Both biases
//! are run-time arguments; a missing one is zero.
//!
//! Tolerance of the conformance test: none. Integer arithmetic modulo 2^32
//! is exact; results must equal the reference bit for bit.

pub use super::u8p_u8p::AccBias;
use super::u8p_u8p as shared;
use crate::error::{self, Result};
use crate::formats::U8Weights;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_i32_u8p_u8p";

/// The portable reference (test oracle and fallback): `lhs` is dense
/// `m x w.k`, `dst` dense `m x w.n`.
///
/// ```
/// use kleidiai::families::matmul_i32_u8p_u8p::{reference, AccBias};
/// use kleidiai::formats::{Order, U8Weights};
/// let w = U8Weights { n: 1, k: 2, order: Order::NxK, data: &[3, 4] };
/// let mut y = [0i32];
/// reference(1, &[10, 20], &w, &AccBias { per_row: Some(&[1]), per_col: Some(&[-2]) }, &mut y).unwrap();
/// assert_eq!(y[0], 30 + 80 + 1 - 2);
/// ```
pub fn reference(m: usize, lhs: &[u8], w: &U8Weights<'_>, bias: &AccBias<'_>, dst: &mut [i32]) -> Result<()> {
    error::at_least(dst.len(), error::mul(m, w.n, "dst")?, "dst")?;
    let n = w.n;
    shared::accumulate(m, lhs, w, bias, |i, j, acc| dst[i * n + j] = acc)
}

#[cfg(target_arch = "aarch64")]
pub use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use super::*;
    use crate::buffer::SendPtr;
    use crate::packed::{PackedLhs, PackedRhs};
    use crate::par::Parallelism;
    use crate::registry::KernelInfo;
    use shared::{Entry, Stage, u8_kernel_common};
    use std::sync::OnceLock;

    fn entries() -> &'static [Entry] {
        static E: OnceLock<Vec<Entry>> = OnceLock::new();
        E.get_or_init(|| shared::build_entries(FAMILY, kleidiai_sys::interfaces::matmul_i32_u8p_u8p::API_KERNELS))
    }

    pub(crate) fn infos() -> Vec<&'static KernelInfo> {
        entries().iter().map(|e| &e.info).collect()
    }

    /// One kernel of the family, with its packing.
    #[derive(Clone, Copy)]
    pub struct Kernel(pub(crate) &'static Entry);

    impl core::fmt::Debug for Kernel {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_tuple("Kernel").field(&self.0.info.name).finish()
        }
    }

    impl Kernel {
        u8_kernel_common!(entries);

        /// `dst = lhs · wᵀ + biases`: `dst` is `m x n`, rows `n` apart.
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            dst: &mut [i32],
            par: Parallelism,
        ) -> Result<()> {
            let (m, n) = (lhs.layout().rows, rhs.layout().rows);
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            self.0.run(lhs, rhs, bias, Stage::I32, SendPtr(dst.as_mut_ptr().cast()), par)
        }

        /// Packs the dense `m x k` LHS and runs: the one-call form.
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[u8],
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            dst: &mut [i32],
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, bias, dst, par)
        }
    }

    /// Weight row `row` of a packed RHS of this family, as f32 (exact).
    pub fn unpack_rhs_row(rhs: &PackedRhs, row: usize, out: &mut [f32]) -> Result<()> {
        shared::unpack_rhs_row(rhs, row, out)
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;
    use crate::par::Parallelism;
    use crate::testing;
    use shared::tests::{cases, check_unpack, each_thread_count};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let (t, _, _) = kernel.0.tiles().map_err(|e| (0, e.to_string()))?;
            let mut count = 0;
            for c in cases(t.mr, t.m_step, t.nr, t.n_step) {
                let w = U8Weights { n: c.n, k: c.k, order: c.order, data: &c.rhs };
                let bias = AccBias { per_row: c.bias_m.as_deref(), per_col: c.bias_n.as_deref() };
                let mut want = vec![0i32; c.m * c.n];
                reference(c.m, &c.lhs, &w, &bias, &mut want).map_err(|e| (count, e.to_string()))?;
                let packed = kernel.pack_rhs(&w).map_err(|e| (count, e.to_string()))?;
                let got = each_thread_count(&c, |par, scratch| {
                    let mut dst = vec![i32::MIN; c.m * c.n];
                    kernel.pack_lhs_into(c.m, c.k, &c.lhs, c.k, par, scratch).map_err(|e| e.to_string())?;
                    kernel.run(scratch, &packed, &bias, &mut dst, par).map_err(|e| e.to_string())?;
                    Ok(dst.iter().map(|x| *x as u32).collect())
                })
                .map_err(|e| (count, e))?;
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i] as u32) {
                    return Err((
                        count,
                        format!("m={} n={} k={}: element {i}: {} != {}", c.m, c.n, c.k, got[i] as i32, want[i]),
                    ));
                }
                check_unpack(info, &c, &packed).map_err(|e| (count, e))?;
                count += 1;
            }
            Ok((count, 0.0))
        });
    }

    #[test]
    fn mixing_layouts_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(4, &f) else {
            return;
        };
        let w = U8Weights { n: 3, k: 8, order: crate::formats::Order::NxK, data: &[1; 24] };
        let packed = kern.pack_rhs(&w).unwrap();
        let seq = Parallelism::Sequential;
        let lhs = kern.pack_lhs(2, 12, &[1; 24], 12, seq).unwrap();
        let mut dst = [0i32; 6];
        let r = kern.run(&lhs, &packed, &AccBias::default(), &mut dst, seq);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
        // A packed LHS is not a packed RHS of the other family's format
        // unless the bytes agree: the same kernel accepts its own.
        let lhs = kern.pack_lhs(2, 8, &[1; 16], 8, seq).unwrap();
        kern.run(&lhs, &packed, &AccBias::default(), &mut dst, seq).unwrap();
        assert_eq!(dst, [8; 6]);
    }

    #[test]
    fn bad_input_is_an_error() {
        let f = crate::cpu::Features::current();
        let Some(kern) = Kernel::select(1, &f) else {
            return;
        };
        let w = U8Weights { n: 3, k: 8, order: crate::formats::Order::KxN, data: &[1; 24] };
        let packed = kern.pack_rhs(&w).unwrap();
        let seq = Parallelism::Sequential;
        let none = AccBias::default();
        let mut dst = [0i32; 3];
        assert!(kern.matmul(1, &[0; 7], &packed, &none, &mut dst, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0; 8], &packed, &none, &mut dst[..2], seq).is_err(), "short dst");
        assert!(kern.matmul(0, &[], &packed, &none, &mut dst, seq).is_err(), "m = 0");
        let short = AccBias { per_col: Some(&[1, 2]), ..none };
        assert!(kern.matmul(1, &[0; 8], &packed, &short, &mut dst, seq).is_err(), "short bias");
        assert!(kern.pack_rhs(&U8Weights { data: &[1; 23], ..w }).is_err(), "short weights");
        assert!(kern.pack_rhs(&U8Weights { n: 0, ..w }).is_err(), "n = 0");
        assert!(kern.pack_rhs(&U8Weights { n: usize::MAX, ..w }).is_err(), "overflow");
        assert!(kern.pack_lhs(usize::MAX, 8, &[0; 8], 8, seq).is_err(), "overflowing m");
        assert!(kern.pack_lhs(1, 8, &[0; 8], 7, seq).is_err(), "stride < k");
        let mut r = [0f32; 8];
        assert!(unpack_rhs_row(&packed, 3, &mut r).is_err());
        kern.matmul(1, &[1; 8], &packed, &none, &mut dst, seq).unwrap();
        assert_eq!(dst, [8; 3]);
    }
}
