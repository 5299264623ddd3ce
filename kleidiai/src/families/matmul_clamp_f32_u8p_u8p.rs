//! `matmul_clamp_f32_u8p_u8p`: `dst (f32, m x n) = clamp(f32(acc) * scale +
//! out_bias[j])` with `acc = lhs (u8, m x k) · wᵀ (u8) + per_row[i] +
//! per_col[j]` in int32 (wrapping, as in `matmul_i32_u8p_u8p`), one global
//! f32 scale, and the multiply-add fused (one rounding).
//!
//! Kernel (1 upstream, `kai_matmul_uker_api`):
//! `kai_matmul_clamp_f32_u8p4vsx4_u8p4vsx4_i32_i32_f32_f32_8vsx8vs_sme2_mopa`
//! (SME2 UMOPA, then SCVTF, FMAD and FCLAMP, read from its source). Packing
//! as `matmul_i32_u8p_u8p` (same packers, same packed format `u8p4vsx4`).
//!
//! Tolerance of the conformance test: none. The reference performs the same
//! operations in the same order (exact int32, one int-to-f32 rounding, one
//! fused multiply-add, clamp): results must be bit-identical.

use super::u8p_u8p as shared;
use crate::error::{self, Result};
use crate::formats::U8Weights;
use crate::packed::Clamp;

pub use super::u8p_u8p::AccBias;

/// Upstream family directory.
pub const FAMILY: &str = "matmul_clamp_f32_u8p_u8p";

/// The float output stage: `acc * scale + bias[j]`.
#[derive(Clone, Copy, Debug)]
pub struct OutputStage<'a> {
    /// Global scale of the int32 accumulator.
    pub scale: f32,
    /// Optional f32 bias per output column (`n` values), added after scaling.
    pub bias: Option<&'a [f32]>,
}

/// The portable reference (test oracle and fallback): `lhs` is dense
/// `m x w.k`, `dst` dense `m x w.n`.
///
/// ```
/// use kleidiai::families::matmul_clamp_f32_u8p_u8p::{reference, AccBias, OutputStage};
/// use kleidiai::formats::{Order, U8Weights};
/// use kleidiai::Clamp;
/// let w = U8Weights { n: 1, k: 2, order: Order::NxK, data: &[3, 4] };
/// let out = OutputStage { scale: 0.5, bias: Some(&[1.0]) };
/// let mut y = [0f32];
/// reference(1, &[10, 20], &w, &AccBias::default(), &out, Clamp::NONE, &mut y).unwrap();
/// assert_eq!(y[0], 56.0);
/// ```
pub fn reference(
    m: usize,
    lhs: &[u8],
    w: &U8Weights<'_>,
    bias: &AccBias<'_>,
    out: &OutputStage<'_>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    clamp.check()?;
    let n = w.n;
    error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
    if let Some(b) = out.bias {
        error::at_least(b.len(), n, "output bias")?;
    }
    shared::accumulate(m, lhs, w, bias, |i, j, acc| {
        let y = (acc as f32).mul_add(out.scale, out.bias.map_or(0.0, |b| b[j]));
        dst[i * n + j] = y.max(clamp.min).min(clamp.max);
    })
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
        E.get_or_init(|| shared::build_entries(FAMILY, kleidiai_sys::interfaces::matmul_clamp_f32_u8p_u8p::API_KERNELS))
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

        /// `dst = clamp((lhs · wᵀ + biases) * scale + out_bias)`: `dst` is
        /// `m x n`, rows `n` apart.
        #[allow(clippy::too_many_arguments)]
        pub fn run(
            &self,
            lhs: &PackedLhs,
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            out: &OutputStage<'_>,
            clamp: Clamp,
            dst: &mut [f32],
            par: Parallelism,
        ) -> Result<()> {
            let (m, n) = (lhs.layout().rows, rhs.layout().rows);
            error::at_least(dst.len(), error::mul(m, n, "dst")?, "dst")?;
            let stage = Stage::F32 { scale: out.scale, bias: out.bias, clamp };
            self.0.run(lhs, rhs, bias, stage, SendPtr(dst.as_mut_ptr().cast()), par)
        }

        /// Packs the dense `m x k` LHS and runs: the one-call form.
        #[allow(clippy::too_many_arguments)]
        pub fn matmul(
            &self,
            m: usize,
            lhs: &[u8],
            rhs: &PackedRhs,
            bias: &AccBias<'_>,
            out: &OutputStage<'_>,
            clamp: Clamp,
            dst: &mut [f32],
            par: Parallelism,
        ) -> Result<()> {
            let k = rhs.layout().k;
            let packed = self.pack_lhs(m, k, lhs, k, par)?;
            self.run(&packed, rhs, bias, out, clamp, dst, par)
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
    use crate::testing::{self, Rng};
    use shared::tests::{cases, check_unpack, each_thread_count};

    #[test]
    fn conformance() {
        testing::conformance(FAMILY, |info| {
            let kernel = Kernel::by_name(info.name).unwrap();
            let (t, _, _) = kernel.0.tiles().map_err(|e| (0, e.to_string()))?;
            let mut rng = Rng::new(0xf3);
            let mut count = 0;
            for c in cases(t.mr, t.m_step, t.nr, t.n_step) {
                let w = U8Weights { n: c.n, k: c.k, order: c.order, data: &c.rhs };
                let bias = AccBias { per_row: c.bias_m.as_deref(), per_col: c.bias_n.as_deref() };
                let out_bias = rng.vec_f32(c.n);
                let out = OutputStage {
                    scale: 1e-4 * (1.5 + rng.f32()),
                    bias: if c.index % 3 == 0 { None } else { Some(&out_bias) },
                };
                let clamp = if c.index % 2 == 1 { Clamp { min: -50.0, max: 80.0 } } else { Clamp::NONE };
                let mut want = vec![0f32; c.m * c.n];
                reference(c.m, &c.lhs, &w, &bias, &out, clamp, &mut want).map_err(|e| (count, e.to_string()))?;
                let packed = kernel.pack_rhs(&w).map_err(|e| (count, e.to_string()))?;
                let got = each_thread_count(&c, |par, scratch| {
                    let mut dst = vec![f32::NAN; c.m * c.n];
                    kernel.pack_lhs_into(c.m, c.k, &c.lhs, c.k, par, scratch).map_err(|e| e.to_string())?;
                    kernel.run(scratch, &packed, &bias, &out, clamp, &mut dst, par).map_err(|e| e.to_string())?;
                    Ok(dst.iter().map(|x| x.to_bits()).collect())
                })
                .map_err(|e| (count, e))?;
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i].to_bits()) {
                    let g = f32::from_bits(got[i]);
                    return Err((count, format!("m={} n={} k={}: element {i}: {g} != {}", c.m, c.n, c.k, want[i])));
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
        let out = OutputStage { scale: 1.0, bias: None };
        let lhs = kern.pack_lhs(2, 12, &[1; 24], 12, seq).unwrap();
        let mut dst = [0f32; 6];
        let r = kern.run(&lhs, &packed, &AccBias::default(), &out, Clamp::NONE, &mut dst, seq);
        assert!(matches!(r, Err(crate::Error::LayoutMismatch { .. })), "{r:?}");
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
        let out = OutputStage { scale: 1.0, bias: None };
        let mut dst = [0f32; 3];
        let c = Clamp::NONE;
        assert!(kern.matmul(1, &[0; 7], &packed, &none, &out, c, &mut dst, seq).is_err(), "short lhs");
        assert!(kern.matmul(1, &[0; 8], &packed, &none, &out, c, &mut dst[..2], seq).is_err(), "short dst");
        let short = OutputStage { bias: Some(&[1.0, 2.0]), ..out };
        assert!(kern.matmul(1, &[0; 8], &packed, &none, &short, c, &mut dst, seq).is_err(), "short out bias");
        let nan = Clamp { min: 1.0, max: f32::NAN };
        assert!(kern.matmul(1, &[0; 8], &packed, &none, &out, nan, &mut dst, seq).is_err(), "NaN clamp");
        let empty = Clamp { min: 1.0, max: 0.0 };
        assert!(kern.matmul(1, &[0; 8], &packed, &none, &out, empty, &mut dst, seq).is_err(), "empty clamp");
        assert!(kern.pack_rhs(&U8Weights { data: &[1; 23], ..w }).is_err(), "short weights");
        let mut mut_dst = [0f32; 3];
        assert!(reference(1, &[0; 8], &w, &none, &short, c, &mut mut_dst).is_err());
    }
}
