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

    shared::u8_kernel! {
        interface: matmul_clamp_f32_u8p_u8p,
        out: f32,
        /// `dst = clamp((lhs · wᵀ + biases) * scale + out_bias)`: `dst` is
        /// `m x n`, rows `n` apart.
        stage: (out: &OutputStage<'_>, clamp: Clamp) => shared::Stage::F32 { scale: out.scale, bias: out.bias, clamp },
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests {
    use super::*;

    /// One run's output stage and clamp, owned.
    struct Args {
        scale: f32,
        bias: Option<Vec<f32>>,
        clamp: Clamp,
    }

    shared::tests::u8_tests! {
        out: f32,
        args: Args,
        draw: |c, rng| {
            let out_bias = rng.vec_f32(c.n);
            Args {
                scale: 1e-4 * (1.5 + rng.f32()),
                bias: if c.index % 3 == 0 { None } else { Some(out_bias) },
                clamp: if c.index % 2 == 1 { Clamp { min: -50.0, max: 80.0 } } else { Clamp::NONE },
            }
        },
        plain: Args { scale: 1.0, bias: None, clamp: Clamp::NONE },
        bad: |n| vec![
            (Args { bias: Some(vec![1.0; n - 1]), ..Self::plain() }, "short out bias"),
            (Args { clamp: Clamp { min: 1.0, max: f32::NAN }, ..Self::plain() }, "NaN clamp"),
            (Args { clamp: Clamp { min: 1.0, max: 0.0 }, ..Self::plain() }, "empty clamp"),
        ],
        pass: |a| (&OutputStage { scale: a.scale, bias: a.bias.as_deref() }, a.clamp),
    }
}
