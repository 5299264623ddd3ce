//! The `qsi8d32` scheme: symmetric int8 per block of `bl` values along K,
//! computed on the fly, with an f16 scale per block.

use super::Rounding;
use half::f16;

/// One LHS row quantised the `qsi8d32` way: `x[p] ≈ q[p] * scales[p / bl]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Qsi8d32Row {
    /// Quantised values, one per input.
    pub q: Vec<i8>,
    /// One scale per block, as the packers store it (f16).
    pub scales: Vec<f16>,
}

/// Quantises `row` (a whole number of blocks of `bl`) exactly like upstream's
/// `kai_lhs_quant_pack_qsi8d32p*_f32*` packers: per block, `amax` = largest
/// `|x|`, scale `amax / 127` (f32, stored rounded to f16), values
/// `x * (1 / scale)` (0 when the block is all zero) rounded with `rounding`
/// (`HalfAwayFromZero` for `kai_lhs_quant_pack_qsi8d32p_f32` and `_neon`,
/// `HalfToEven` for `kai_lhs_quant_pack_qsi8d32p4x8sb_f32_neon`). Note the
/// values are scaled with the f32 reciprocal, not the rounded f16 scale.
///
/// ```
/// use kleidiai::quant::{Rounding, qsi8d32_row};
/// let row: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
/// let r = qsi8d32_row(&row, 32, Rounding::HalfAwayFromZero);
/// assert_eq!(r.q[0], -127);
/// assert_eq!(r.scales[0].to_f32(), half::f16::from_f32(16.0 / 127.0).to_f32());
/// ```
///
/// # Panics
/// If `bl` is 0 or does not divide `row.len()`.
pub fn qsi8d32_row(row: &[f32], bl: usize, rounding: Rounding) -> Qsi8d32Row {
    assert!(bl > 0 && row.len() % bl == 0, "qsi8d32: {} values are not whole blocks of {bl}", row.len());
    let mut q = Vec::with_capacity(row.len());
    let mut scales = Vec::with_capacity(row.len() / bl);
    for block in row.chunks(bl) {
        let mut amax = 0f32;
        for &x in block {
            // KAI_MAX(amax, |x|) as upstream writes it.
            let a = x.abs();
            amax = if amax > a { amax } else { a };
        }
        let scale = amax / 127.0;
        let recip = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        scales.push(f16::from_f32(scale));
        q.extend(block.iter().map(|&x| rounding.round(x * recip) as i32 as i8));
    }
    Qsi8d32Row { q, scales }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_rounding() {
        let mut row = vec![0f32; 64];
        row[0] = 1.27; // scale 0.01
        row[1] = 0.025; // 2.5 before rounding (up to float error)
        let away = qsi8d32_row(&row, 32, Rounding::HalfAwayFromZero);
        assert_eq!(away.q[0], 127);
        assert_eq!(away.scales[1].to_f32(), 0.0, "all-zero block");
        assert!(away.q[32..].iter().all(|&q| q == 0));
        // An exact tie: amax 127 gives scale 1, so 2.5 stays 2.5.
        let mut tie = vec![0f32; 32];
        tie[0] = 127.0;
        tie[1] = 2.5;
        tie[2] = -3.5;
        let a = qsi8d32_row(&tie, 32, Rounding::HalfAwayFromZero);
        let e = qsi8d32_row(&tie, 32, Rounding::HalfToEven);
        assert_eq!((a.q[1], a.q[2]), (3, -4));
        assert_eq!((e.q[1], e.q[2]), (2, -4));
    }
}
