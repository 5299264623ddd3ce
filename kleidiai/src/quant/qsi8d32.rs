//! The `qsi8d32` scheme: symmetric int8 per block of K values, computed on
//! the fly, with an f32 scale per block (`kai_lhs_quant_pack_qsi8d32pscalef32_*`).

use half::f16;

/// What quantising one block yields besides the values: `x ≈ q * recip_scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qsi8d32Block {
    /// `1 / scale` in f32 (`absmax / 127`, 0 for an all-zero block), as the
    /// packer stores it.
    pub recip_scale: f32,
    /// Sum of the quantised values (the packer stores `sum * recip_scale`).
    pub sum: i32,
}

/// Quantises one f32 block exactly like `kai_lhs_quant_pack_qsi8d32pscalef32_f32_neon`:
/// scale `127 / max|x|` in f32, values rounded to nearest, ties to even.
/// Writes `x.len()` values to `q`. Inputs must be finite.
pub fn qsi8d32_block(x: &[f32], q: &mut [i8]) -> Qsi8d32Block {
    let absmax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = if absmax == 0.0 { 0.0 } else { i8::MAX as f32 / absmax };
    finish(x.iter().map(|v| (v * scale).round_ties_even()), scale, q)
}

/// Quantises one f16 block exactly like `kai_lhs_quant_pack_qsi8d32pscalef32_f16_neon`:
/// the maximum taken in f16, scale and products in f32, values rounded to
/// nearest, ties away from zero. Inputs must be finite.
pub fn qsi8d32_block_f16(x: &[f16], q: &mut [i8]) -> Qsi8d32Block {
    let absmax = x.iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
    let scale = if absmax == 0.0 { 0.0 } else { i8::MAX as f32 / absmax };
    finish(x.iter().map(|v| (v.to_f32() * scale).round()), scale, q)
}

fn finish(rounded: impl Iterator<Item = f32>, scale: f32, q: &mut [i8]) -> Qsi8d32Block {
    let mut sum = 0i32;
    for (r, out) in rounded.zip(q.iter_mut()) {
        // `as` saturates like the packers' conversions; then the int8 clamp.
        let v = (r as i32).clamp(i8::MIN as i32, i8::MAX as i32);
        sum += v;
        *out = v as i8;
    }
    Qsi8d32Block { recip_scale: if scale != 0.0 { 1.0 / scale } else { 0.0 }, sum }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qsi8d32_basics() {
        let mut q = [0i8; 4];
        let b = qsi8d32_block(&[0.0; 4], &mut q);
        assert_eq!((b.recip_scale, b.sum, q), (0.0, 0, [0; 4]));
        let b = qsi8d32_block(&[-2.0, 1.0, 0.5, 2.0], &mut q);
        assert_eq!(q, [-127, 64, 32, 127]); // 63.5 and 31.75 round to even / nearest
        assert_eq!(b.sum, 96);
        assert!((b.recip_scale - 2.0 / 127.0).abs() < 1e-9);
        // Ties: 0.5 * 127 / 127 ... use an exact tie: x * scale = 0.5.
        let b16 = qsi8d32_block_f16(&[f16::from_f32(-2.0), f16::from_f32(1.0), f16::ZERO, f16::from_f32(2.0)], &mut q);
        assert_eq!(q, [-127, 64, 0, 127]);
        assert_eq!(b16.sum, 64);
    }

    #[test]
    fn rounding_modes_differ_on_ties() {
        // absmax 127 makes the scale 1: x = 2.5 is a tie.
        let mut q = [0i8; 2];
        qsi8d32_block(&[127.0, 2.5], &mut q);
        assert_eq!(q[1], 2, "f32 packer rounds ties to even");
        qsi8d32_block_f16(&[f16::from_f32(127.0), f16::from_f32(2.5)], &mut q);
        assert_eq!(q[1], 3, "f16 packer rounds ties away from zero");
    }
}
