//! What the bf16 families share (`matmul_clamp_f32_bf16p_bf16p`,
//! `matmul_clamp_fp32_bf16p_bf16p`, `matmul_clamp_f16_bf16p_bf16p`): the
//! rounding to bf16 and the reference math, the `bf16p{nr}x{kr}` packed RHS
//! addressing, and the test helpers.

use crate::error::Result;
use crate::families::float_common::check_reference_operands;
use crate::formats::FloatWeights;
use crate::packed::Clamp;
use half::bf16;

/// `x` rounded to bf16 the way upstream's packers round it (`BFCVT`: to
/// nearest, ties to even), as f32.
pub(crate) fn round_bf16(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

/// Shared core of the bf16 references: `m x k` LHS rows `lhs_stride` apart,
/// already bf16-rounded weights `n x k`, bias `n`; f64 accumulation, one
/// rounding to f32 at the end, then the clamp.
pub(crate) fn bf16_core(m: usize, lhs: &[f32], k: usize, wq: &[f32], bias: &[f32], clamp: Clamp, dst: &mut [f32]) {
    let n = bias.len();
    let xq: Vec<f32> = lhs[..m * k].iter().map(|&x| round_bf16(x)).collect();
    for i in 0..m {
        let row = &xq[i * k..(i + 1) * k];
        for j in 0..n {
            let w = &wq[j * k..(j + 1) * k];
            let acc: f64 = bias[j] as f64 + row.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>();
            dst[i * n + j] = (acc as f32).max(clamp.min).min(clamp.max);
        }
    }
}

/// The f32 reference of the bf16 families: `dst = clamp(bf16(lhs) ·
/// bf16(w)ᵀ + bias)` for a dense `m x k` f32 LHS, `dst` `m x n`.
pub(crate) fn reference_f32(
    m: usize,
    lhs: &[f32],
    w: &FloatWeights<'_, f32>,
    clamp: Clamp,
    dst: &mut [f32],
) -> Result<()> {
    let (n, k) = check_reference_operands(w.validate().map(|()| (w.n, w.k)), clamp, m, lhs.len(), dst.len())?;
    let wq: Vec<f32> = w.to_nxk()?.into_iter().map(round_bf16).collect();
    let bias: Vec<f32> = (0..n).map(|j| w.bias_f32(j)).collect();
    bf16_core(m, lhs, k, &wq, &bias, clamp, dst);
    Ok(())
}

#[cfg(target_arch = "aarch64")]
pub(crate) use imp::*;

#[cfg(target_arch = "aarch64")]
mod imp {
    use crate::error::{self, Result};
    use crate::packed::PackedRhs;
    use half::bf16;

    /// Byte offset of weight `(row, kk)` in a `bf16p{nr}x{kr}bias{bias_bytes}`
    /// buffer: per block of nr channels, nr biases, then for each group of kr
    /// inputs, nr channels of kr bf16 values.
    pub(crate) fn bf16_rhs_offset(row: usize, kk: usize, k: usize, nr: usize, kr: usize, bias_bytes: usize) -> usize {
        let kp = k.div_ceil(kr) * kr;
        let block = nr * (bias_bytes + kp * 2);
        (row / nr) * block + nr * bias_bytes + (kk / kr) * nr * kr * 2 + (row % nr) * kr * 2 + (kk % kr) * 2
    }

    /// Zeroes the K padding of a packed `bf16p{nr}x{kr}` RHS (which the
    /// packers fill with copies of weight row 0).
    pub(crate) fn zero_k_padding_with_bias(bytes: &mut [u8], n: usize, k: usize, nr: usize, kr: usize, bias: usize) {
        if k % kr == 0 {
            return;
        }
        for row in 0..n.div_ceil(nr) * nr {
            for kk in k..k.div_ceil(kr) * kr {
                let at = bf16_rhs_offset(row, kk, k, nr, kr, bias);
                bytes[at..at + 2].fill(0);
            }
        }
    }

    /// Row `row` of a `bf16p{nr}x{kr}` packed RHS whose blocks start with nr
    /// biases of `bias_bytes` each.
    pub(crate) fn unpack_bf16_row(rhs: &PackedRhs, row: usize, out: &mut [f32], bias_bytes: usize) -> Result<()> {
        let l = *rhs.layout();
        if row >= l.rows {
            return Err(crate::Error::out_of_range("row", row, l.rows));
        }
        error::at_least(out.len(), l.k, "row output")?;
        let bytes = rhs.as_bytes();
        for (kk, o) in out.iter_mut().enumerate().take(l.k) {
            let at = bf16_rhs_offset(row, kk, l.k, l.r, l.kr, bias_bytes);
            *o = bf16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32();
        }
        Ok(())
    }
}

/// Test helpers shared by the bf16 families.
#[cfg(all(test, target_arch = "aarch64"))]
pub(crate) mod test_support {
    /// Per output: `Σ_k |x·w| + |bias|` with bf16-rounded operands (the scale
    /// the f32 accumulation error is relative to).
    pub(crate) fn magnitudes(m: usize, lhs: &[f32], k: usize, wq: &[f32], bias: &[f32]) -> Vec<f64> {
        let n = bias.len();
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 =
                    (0..k).map(|p| (super::round_bf16(lhs[i * k + p]) as f64 * wq[j * k + p] as f64).abs()).sum();
                out[i * n + j] = s + bias[j].abs() as f64;
            }
        }
        out
    }

    /// The documented bound `(2k + 4) · 2⁻²³ · magnitude`.
    pub(crate) fn bf16_tolerance(k: usize, mag: f64) -> f32 {
        ((2 * k + 4) as f64 * f64::powi(2.0, -23) * mag + 1e-30) as f32
    }
}
