//! The `qai8dx` scheme as upstream's half-precision LHS packers compute it
//! (`kai_lhs_quant_pack_qai8dxp_f16_neon`, `..._bf16_neon`).
//!
//! Scale and zero point are those of [`qai8dx_row`](super::qai8dx_row) (the
//! range of a row is exact in f32 whatever the input type), but the rounding
//! of `x * scale` to an integer depends on the code path of the packer a
//! value goes through:
//!
//! | packer | values of a row | rounding |
//! |---|---|---|
//! | bf16 | the first `8 * (k / 8)` (vector loop) | to nearest, ties to even |
//! | f16, blocks of 8 | the first `8 * (k / 8 - 1)` (vector loop) | to nearest, ties to even |
//! | f16, blocks of 4 | the first `4 * (k / 4 - 2)` (vector loop) | to nearest, ties to even |
//! | both | the rest (scalar tail) | to nearest, ties away from zero |
//!
//! The f16 rows are those of the packer's one-row path. Its four-rows-at-once
//! path (taken for `mr == 4` when a call covers whole groups of four rows)
//! truncates instead of rounding and, with blocks of 4, adds the zero point
//! of another row of the group to half the values (KleidiAI v1.30.0): this
//! crate calls the f16 packer one row at a time, so only the one-row path
//! runs and only the block length (`kr / sr` of the kernel) matters.

use super::qai8dx::{Qai8dxRow, qai8dx_params};
use half::{bf16, f16};

/// Values per block of `kai_lhs_quant_pack_qai8dxp_f16_neon` (the kernel's
/// `kr / sr`): where the packer's vector loop stops, hence how values round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Qai8dxF16Block {
    /// Blocks of 4 values.
    Four,
    /// Blocks of 8 values.
    #[default]
    Eight,
}

#[derive(Clone, Copy)]
enum Rounding {
    HalfAway,
    HalfEven,
}

fn quantize_row(x: &[f32], cut: usize, fast: Rounding) -> Qai8dxRow {
    let (mut max0, mut min0) = (-f32::MAX, f32::MAX);
    for &v in x {
        max0 = max0.max(v);
        min0 = min0.min(v);
    }
    let p = qai8dx_params(min0, max0);
    let q = x
        .iter()
        .enumerate()
        .map(|(j, &v)| {
            let y = v * p.scale;
            let r = match if j < cut { fast } else { Rounding::HalfAway } {
                Rounding::HalfAway => y.round(),
                Rounding::HalfEven => y.round_ties_even(),
            };
            p.quantize(r)
        })
        .collect();
    Qai8dxRow { q, zero_point: p.zero_point, recip_scale: p.recip_scale }
}

/// Quantises the `m x k` row-major `lhs` exactly like
/// `kai_lhs_quant_pack_qai8dxp_f16_neon` packing it one row at a time with
/// blocks of `block`. `lhs` must hold `m * k` values.
///
/// ```
/// use half::f16;
/// use kleidiai::quant::{Qai8dxF16Block, qai8dx_rows_f16};
/// let x: Vec<f16> = (0..16).map(|i| f16::from_f32(i as f32 * 0.25 - 2.0)).collect();
/// let rows = qai8dx_rows_f16(&x, 1, 16, Qai8dxF16Block::Eight);
/// let back = (rows[0].q[15] as i32 - rows[0].zero_point) as f32 * rows[0].recip_scale;
/// assert!((back - 1.75).abs() <= rows[0].recip_scale);
/// ```
pub fn qai8dx_rows_f16(lhs: &[f16], m: usize, k: usize, block: Qai8dxF16Block) -> Vec<Qai8dxRow> {
    let cut = match block {
        Qai8dxF16Block::Four => 4 * (k / 4).saturating_sub(2),
        Qai8dxF16Block::Eight => 8 * (k / 8).saturating_sub(1),
    };
    let mut x = vec![0f32; k];
    (0..m)
        .map(|i| {
            for (d, s) in x.iter_mut().zip(&lhs[i * k..(i + 1) * k]) {
                *d = s.to_f32();
            }
            quantize_row(&x, cut, Rounding::HalfEven)
        })
        .collect()
}

/// Quantises the `m x k` row-major `lhs` exactly like
/// `kai_lhs_quant_pack_qai8dxp_bf16_neon`. `lhs` must hold `m * k` values.
pub fn qai8dx_rows_bf16(lhs: &[bf16], m: usize, k: usize) -> Vec<Qai8dxRow> {
    let mut x = vec![0f32; k];
    (0..m)
        .map(|i| {
            for (d, s) in x.iter_mut().zip(&lhs[i * k..(i + 1) * k]) {
                *d = s.to_f32();
            }
            quantize_row(&x, 8 * (k / 8), Rounding::HalfEven)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::qai8dx_row;

    #[test]
    fn vector_loops_round_ties_to_even() {
        // Range [-255/128, 0] gives scale 128: odd multiples of 1/256 are ties.
        let mut v: Vec<f32> = (0..40).map(|j| -((2 * j + 1) as f32) / 256.0).collect();
        v[0] = -255.0 / 128.0;
        let away = qai8dx_row(&v);
        let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        let p = qai8dx_params(-255.0 / 128.0, 0.0);
        let even = |j: usize| p.quantize((v[j] * p.scale).round_ties_even());
        for (rows, cut) in [
            (qai8dx_rows_f16(&h, 1, 40, Qai8dxF16Block::Eight), 32),
            (qai8dx_rows_f16(&h, 1, 40, Qai8dxF16Block::Four), 32),
            (qai8dx_rows_bf16(&b, 1, 40), 40),
        ] {
            assert_eq!((rows[0].zero_point, rows[0].recip_scale), (away.zero_point, away.recip_scale));
            for j in 1..40 {
                let want = if j < cut { even(j) } else { away.q[j] };
                assert_eq!(rows[0].q[j], want, "{j} (cut {cut})");
            }
        }
        // Ties do differ between the two roundings.
        assert!((1..32).any(|j| even(j) != away.q[j]));
    }
}
